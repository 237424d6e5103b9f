// The chat: a WebviewView in the "Open Interpreter" activity-bar container.
import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import { VIEW_COMMANDS } from './errors';
import { type Folder, type FromWebview, isCodeAction, Router, type ToWebview } from './router';
import * as os from 'node:os';
import { runCodeAction } from './codeActions';
import { EditTabs } from './editTab';
import { chatHtml } from './page';
import type { Server } from './server';

export const VIEW_ID = 'oi.chat';
/** Messages of a saved conversation asked for at once: the last page when the view loads, the
 * one before it when the user scrolls to the top (oi/history's `limit`). */
export const HISTORY_PAGE = 200;

interface HistoryPage { workspace: string; messages: unknown[]; start?: number }

export function folders(): Folder[] {
    return (vscode.workspace.workspaceFolders ?? []).map((f) => ({ uri: f.uri.toString(), name: f.name }));
}

export class ChatView implements vscode.WebviewViewProvider {
    private view: vscode.WebviewView | undefined;
    private refreshing: Promise<void> = Promise.resolve();
    readonly router = new Router(folders());
    /** Proposals edited in editor tabs ("Run edited" in their title bar). */
    readonly edits = new EditTabs((proposalId, code) => this.runEdited(proposalId, code));
    /** Open Chat asked for the input's focus: given again once the page is ready. */
    private wantFocus = false;

    constructor(private readonly extensionUri: vscode.Uri, private readonly server: Server,
        private readonly storage: vscode.Uri = vscode.Uri.file(os.tmpdir())) {
        server.onNotification((method, params) => {
            const message = this.router.notification(method, params);
            if (message?.type === 'answered') void this.edits.forget(message.proposalId);
            if (message) this.post(message);
        });
    }

    resolveWebviewView(view: vscode.WebviewView): void {
        this.view = view;
        const media = vscode.Uri.joinPath(this.extensionUri, 'dist');
        view.webview.options = { enableScripts: true, localResourceRoots: [media, vscode.Uri.joinPath(this.extensionUri, 'media')] };
        view.webview.html = this.html(view.webview);
        view.webview.onDidReceiveMessage((m: FromWebview) => void this.receive(m));
        view.onDidDispose(() => { this.view = undefined; });
    }

    post(message: ToWebview): void {
        void this.view?.webview.postMessage(message);
    }

    /** Reveal the view (Open Chat, Run Selection as Instruction). */
    async reveal(): Promise<void> {
        await vscode.commands.executeCommand(`${VIEW_ID}.focus`);
    }

    /** Reveal the view with the cursor in its input (Open Chat). */
    async focusInput(): Promise<void> {
        this.wantFocus = true;
        await this.reveal();
        this.post({ type: 'focus' });
        setTimeout(() => { this.wantFocus = false; }, 5000);
    }

    /** The header's model: the folder's effective one (settings, profiles, OI_MODEL). */
    async showModel(): Promise<void> {
        try {
            const result = await this.server.request<{ settings: { model?: string } }>(
                'oi/configure', this.router.current ? { workspace: this.router.current } : {});
            this.post({ type: 'model', model: result.settings.model });
        } catch {
            this.post({ type: 'model' });
        }
    }

    /** The folders, the current one, trust and auto-run, for the view's header. */
    updateHeader(): void {
        this.router.setFolders(folders());
        this.post({
            type: 'folders', folders: this.router.folders, current: this.router.current,
            trusted: vscode.workspace.isTrusted,
            autoRun: vscode.workspace.isTrusted && vscode.workspace.getConfiguration('oi').get<boolean>('autoRun') === true,
        });
    }

    /**
     * The header, then the current folder's conversation from the server (oi/history). A chat
     * sent meanwhile waits for it, so the history never replaces what the user just sent.
     */
    refresh(): Promise<void> {
        const previous = this.refreshing;
        this.refreshing = previous.then(() => this.loadHistory());
        return this.refreshing;
    }

    private async loadHistory(): Promise<void> {
        this.updateHeader();
        try {
            const history = await this.server.request<HistoryPage>(
                'oi/history', { limit: HISTORY_PAGE, ...this.workspace() });
            this.post({ type: 'history', workspace: history.workspace, messages: history.messages, start: history.start ?? 0 });
            void this.showModel();
            // A proposal asked before the view (re)loaded can still be answered.
            for (const proposal of this.router.pendingProposals()) this.post({ type: 'proposal', proposal });
        } catch (err) {
            this.post({ type: 'error', message: `Could not load the conversation: ${errorText(err)}` });
        }
    }

    /** Sends a chat turn. Its end (and error) arrives as oi/turn; a refused request shows here. */
    async chat(params: Record<string, unknown>, shown: string): Promise<void> {
        await this.refreshing;
        const context = params.context as Record<string, unknown> | undefined;
        this.post(context ? { type: 'user', text: shown, context } : { type: 'user', text: shown });
        try {
            await this.server.request('oi/chat', params);
        } catch (err) {
            this.post({ type: 'error', message: errorText(err) });
        }
    }

    private workspace(): { workspace?: string } {
        return this.router.current ? { workspace: this.router.current } : {};
    }

    /** The page before the oldest message the view shows, for the view to put above it. */
    private async earlier(before: number): Promise<void> {
        try {
            const page = await this.server.request<HistoryPage>(
                'oi/history', { before, limit: HISTORY_PAGE, ...this.workspace() });
            this.post({ type: 'earlierPage', workspace: page.workspace, messages: page.messages, start: page.start ?? 0 });
        } catch (err) {
            this.post({ type: 'error', message: `Could not load the earlier messages: ${errorText(err)}` });
        }
    }

    private async receive(message: FromWebview): Promise<void> {
        if (message.type === 'ready') {
            if (this.wantFocus) this.post({ type: 'focus' });
            return this.refresh();
        }
        if (message.type === 'earlier') return this.earlier(message.before);
        if (message.type === 'command') {
            if (VIEW_COMMANDS.has(message.command)) await vscode.commands.executeCommand(message.command);
            return;
        }
        if (message.type === 'editInEditor') return this.edits.open(message.proposalId, message.language, message.code);
        if (message.type === 'runEdited') {
            return this.edits.runProposal(message.proposalId).catch((err: unknown) => this.post({ type: 'error', message: errorText(err) }));
        }
        if (isCodeAction(message)) {
            return runCodeAction(message, this.storage).catch((err: unknown) =>
                this.post({ type: 'error', message: errorText(err) }));
        }
        if (message.type === 'switchFolder') {
            if (this.router.switchTo(message.uri)) await this.refresh();
            return;
        }
        const request = this.router.request(message);
        if (!request) return;
        if (request.method === 'oi/chat') return this.chat(request.params, String(request.params.message));
        try {
            await this.server.request(request.method, request.params);
            if (request.method === 'oi/reset') this.post({ type: 'cleared' });
        } catch (err) {
            this.post({ type: 'error', message: errorText(err) });
        }
    }

    /** Runs a proposal's edited code; the view shows it as edited at once. */
    private async runEdited(proposalId: string, code: string): Promise<void> {
        const request = this.router.request({ type: 'approve', proposalId, decision: 'edit', code });
        if (!request) return;
        this.post({ type: 'approved', proposalId, code });
        try {
            await this.server.request(request.method, request.params);
        } catch (err) {
            this.post({ type: 'error', message: errorText(err) });
        }
    }

    private html(webview: vscode.Webview): string {
        const nonce = crypto.randomBytes(16).toString('base64');
        const script = webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview.js'));
        const style = webview.asWebviewUri(vscode.Uri.joinPath(this.extensionUri, 'media', 'chat.css'));
        return chatHtml({ cspSource: webview.cspSource, nonce, script: script.toString(), style: style.toString() });
    }
}

export function errorText(err: unknown): string {
    return err instanceof Error ? err.message : String(err);
}
