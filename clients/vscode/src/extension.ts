// Entry point: wires the server, the chat view and the commands together.
import * as vscode from 'vscode';
import { ChatView, VIEW_ID, errorText } from './chatView';
import { Conversations } from './conversations';
import { pickModel, saveChoice, type ModelsResult } from './models';
import { onInterpreterChange, selectedInterpreter } from './python';
import { folderOf, selectionChat } from './router';
import { API_KEY_SECRET, Server } from './server';
import { autoRunAllowed } from './settings';
import { StatusBar } from './statusBar';

export const DOCS_URL = 'https://github.com/oi-lsp/oi-lsp/blob/main/clients/vscode/README.md';

let running: Server | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
    const server = running = new Server(context);
    const chat = new ChatView(context.extensionUri, server, context.globalStorageUri);
    const status = new StatusBar();
    context.subscriptions.push(server, status, chat.edits,
        // Kept while hidden; a reload redraws it from oi/history.
        vscode.window.registerWebviewViewProvider(VIEW_ID, chat, { webviewOptions: { retainContextWhenHidden: true } }));
    // The chat view's listener runs first (it was added first), so the router's status is current.
    // `oi.busy` shows the view title's Stop only while the model answers or code runs.
    let busy: boolean | undefined;
    server.onNotification(() => {
        const now = chat.router.status();
        status.show(now);
        if ((now === 'thinking' || now === 'running') !== busy) {
            busy = now === 'thinking' || now === 'running';
            void vscode.commands.executeCommand('setContext', 'oi.busy', busy);
        }
    });

    const command = (id: string, run: (...args: unknown[]) => unknown): void => {
        context.subscriptions.push(vscode.commands.registerCommand(id, async (...args: unknown[]) => {
            try {
                await run(...args);
            } catch (err) {
                void vscode.window.showErrorMessage(`Open Interpreter: ${errorText(err)}`);
            }
        }));
    };

    /** The selection (or the current line), the document and its folder, switching the chat to it. */
    const selection = (): { text: string; editor: vscode.TextEditor } | undefined => {
        const editor = vscode.window.activeTextEditor;
        if (!editor) {
            void vscode.window.showInformationMessage('Open Interpreter: no editor is active.');
            return undefined;
        }
        const range = editor.selection.isEmpty ? editor.document.lineAt(editor.selection.active.line).range : editor.selection;
        const text = editor.document.getText(range);
        const folder = folderOf(editor.document.uri.toString(), chat.router.folders);
        if (folder && chat.router.current !== folder.uri) {
            chat.router.switchTo(folder.uri);
            void chat.refresh();
            status.show(chat.router.status());
        }
        return text.trim() ? { text, editor } : undefined;
    };

    const conversations = new Conversations(server, chat, context.globalStorageUri);
    const workspace = (): Record<string, unknown> => (chat.router.current ? { workspace: chat.router.current } : {});

    server.installed.push(() => void chat.refresh());
    command('oi.openChat', () => chat.focusInput());
    command('oi.installServer', async () => {
        await server.install(await selectedInterpreter(vscode.workspace.workspaceFolders?.[0]?.uri));
    });
    command('oi.runSelectionAsInstruction', async () => {
        const sel = selection();
        if (!sel) return;
        const { editor } = sel;
        const r = editor.selection.isEmpty ? editor.document.lineAt(editor.selection.active.line).range : editor.selection;
        await chat.reveal();
        await chat.chat(selectionChat(sel.text, { uri: editor.document.uri.toString(), language: editor.document.languageId },
            { start: { line: r.start.line, character: r.start.character }, end: { line: r.end.line, character: r.end.character } },
            chat.router.current), sel.text);
    });
    command('oi.runSelectionInSession', async () => {
        const sel = selection();
        if (!sel) return;
        await chat.reveal();
        chat.post({ type: 'run', language: sel.editor.document.languageId, code: sel.text });
        await server.request('oi/execute', {
            language: sel.editor.document.languageId, code: sel.text,
            ...(chat.router.current ? { workspace: chat.router.current } : {}),
        });
    });
    command('oi.runEdited', () => chat.edits.runActive());
    command('oi.stop', () => server.request('oi/stop', chat.router.current ? { workspace: chat.router.current } : {}));
    command('oi.reset', async () => {
        const answer = await vscode.window.showWarningMessage('Reset the session?', {
            modal: true,
            detail: 'This starts a new conversation and restarts Python, so its variables are lost. ' +
                'The current conversation stays saved: open it again from Conversations.',
        }, 'Reset');
        if (answer !== 'Reset') return;
        await server.request('oi/reset', workspace());
        chat.post({ type: 'cleared' });
    });
    command('oi.conversations', () => conversations.pick());
    command('oi.newConversation', () => conversations.create());
    command('oi.exportConversation', () => conversations.export(undefined));
    command('oi.openSettings', () => vscode.commands.executeCommand('workbench.action.openSettings', '@ext:oi-lsp.oi-lsp'));
    command('oi.openDocs', () => vscode.env.openExternal(vscode.Uri.parse(DOCS_URL)));
    command('oi.toggleAutoRun', async () => {
        const config = vscode.workspace.getConfiguration('oi');
        const on = config.get<boolean>('autoRun') === true;
        if (!on && !autoRunAllowed(vscode.workspace.isTrusted)) {
            void vscode.window.showWarningMessage('Open Interpreter: auto-run cannot be turned on in an untrusted workspace.');
            return;
        }
        await config.update('autoRun', !on, vscode.ConfigurationTarget.Global);
        void vscode.window.showInformationMessage(`Open Interpreter: auto-run ${on ? 'off' : 'on'}.`);
    });
    command('oi.selectModel', async () => {
        const folder = chat.router.current ? vscode.Uri.parse(chat.router.current) : undefined;
        const current = vscode.workspace.getConfiguration('oi', folder).get<string>('model') || undefined;
        const choice = await pickModel(server.request<ModelsResult>('oi/models', workspace()), current);
        if (!choice) return;
        await saveChoice(choice, folder);
        await server.pushSettings();
        await chat.showModel();
    });
    command('oi.setApiKey', async () => {
        const key = await vscode.window.showInputBox({
            title: 'Open Interpreter: API key', password: true, ignoreFocusOut: true,
            prompt: 'Kept in VS Code\'s secret storage and passed to oi-lsp; empty removes it',
        });
        if (key === undefined) return;
        if (key.trim()) await context.secrets.store(API_KEY_SECRET, key.trim());
        else await context.secrets.delete(API_KEY_SECRET);
        await server.pushSettings();
        // Once oi-lsp has it: a chat sent after this message uses the new key.
        void vscode.window.showInformationMessage(key.trim()
            ? 'Open Interpreter: API key saved in secret storage and passed to oi-lsp.'
            : 'Open Interpreter: API key removed.');
    });
    command('oi.showServerOutput', () => server.output.show());
    command('oi.restartServer', async () => {
        await server.restart();
        await chat.refresh();
    });

    context.subscriptions.push(
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (e.affectsConfiguration('oi.serverPath') || e.affectsConfiguration('oi.serverArgs')) {
                void server.restart().then(() => chat.refresh());
            } else if (e.affectsConfiguration('oi')) {
                void server.pushSettings().then(() => chat.showModel());
                chat.updateHeader();
            }
        }),
        vscode.workspace.onDidChangeWorkspaceFolders(() => void server.pushSettings().then(() => chat.refresh())),
        vscode.workspace.onDidGrantWorkspaceTrust(() => {
            // The server learns the workspace is trusted now (it never auto-ran before).
            void server.pushSettings();
            chat.updateHeader();
        }),
    );
    const interpreter = await onInterpreterChange(() => {
        if (!vscode.workspace.getConfiguration('oi').get<string>('serverPath')) void server.restart();
    });
    if (interpreter) context.subscriptions.push(interpreter);
    void server.get();  // start now, so the first message does not wait for the kernel
}

export function deactivate(): Promise<void> | undefined {
    // Returned so VS Code waits for the shutdown: oi-lsp then stops its kernels.
    return running?.stop();
}
