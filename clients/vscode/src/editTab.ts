// Edit a proposal in a real VS Code editor: an untitled tab with the proposal's code and
// "Run edited" in its title bar (the `oi.editingProposal` context key: an editor/title menu).
import * as vscode from 'vscode';

const CONTEXT_KEY = 'oi.editingProposal';

/** VS Code's language id for a language oi-lsp runs. */
export function languageId(language: string): string {
    const ids: Record<string, string> = {
        bash: 'shellscript', sh: 'shellscript', shell: 'shellscript', zsh: 'shellscript',
        js: 'javascript', node: 'javascript', pwsh: 'powershell',
    };
    return ids[language] ?? language;
}

export class EditTabs implements vscode.Disposable {
    /** Proposal ids by the untitled document that edits them. */
    private readonly tabs = new Map<string, string>();
    /** The code each proposal's tab opened with: an unchanged tab may close by itself. */
    private readonly proposed = new Map<string, string>();
    private readonly listener: vscode.Disposable;

    constructor(private readonly run: (proposalId: string, code: string) => Promise<void>) {
        this.listener = vscode.window.onDidChangeActiveTextEditor((e) => this.updateContext(e));
    }

    async open(proposalId: string, language: string, code: string): Promise<void> {
        for (const [uri, id] of this.tabs) {
            if (id !== proposalId) continue;
            const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
            if (doc) return void await vscode.window.showTextDocument(doc, { preview: false });
        }
        const doc = await vscode.workspace.openTextDocument({ language: languageId(language), content: code });
        this.tabs.set(doc.uri.toString(), proposalId);
        this.proposed.set(proposalId, code);
        this.updateContext(await vscode.window.showTextDocument(doc, { preview: false }));
    }

    /** "Run edited" from the tab's title bar: runs what the active tab holds, then closes it. */
    async runActive(): Promise<void> {
        const editor = vscode.window.activeTextEditor;
        const id = editor && this.tabs.get(editor.document.uri.toString());
        if (!editor || !id) {
            void vscode.window.showInformationMessage('Open Interpreter: this editor does not edit a proposal.');
            return;
        }
        await this.runDocument(editor.document, id);
    }

    /** "Run edited" in the chat: runs what the proposal's tab holds. */
    async runProposal(proposalId: string): Promise<void> {
        const uri = [...this.tabs].find(([, id]) => id === proposalId)?.[0];
        const doc = uri && vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
        if (!doc) throw new Error('the editor tab of this proposal was closed: press Edit again');
        await this.runDocument(doc, proposalId);
    }

    /** The proposal was answered (here or in another client): its tab runs nothing any more.
     * Closed when the user left it unchanged; else it stays, an untitled file with their edit. */
    async forget(proposalId: string): Promise<void> {
        const code = this.proposed.get(proposalId);
        this.proposed.delete(proposalId);
        for (const [uri, id] of [...this.tabs]) {
            if (id !== proposalId) continue;
            this.tabs.delete(uri);
            const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
            if (doc && !doc.isClosed && doc.getText() === code) await this.close(doc);
        }
        this.updateContext(vscode.window.activeTextEditor);
    }

    private async close(doc: vscode.TextDocument): Promise<void> {
        const tab = vscode.window.tabGroups.all.flatMap((g) => g.tabs).find((t) =>
            t.input instanceof vscode.TabInputText && t.input.uri.toString() === doc.uri.toString());
        // An untitled document: revert first, so closing it does not ask to save it.
        const editor = await vscode.window.showTextDocument(doc, { preview: false });
        if (editor.document === doc) await vscode.commands.executeCommand('workbench.action.revertAndCloseActiveEditor');
        else if (tab) await vscode.window.tabGroups.close(tab);
    }

    private async runDocument(doc: vscode.TextDocument, proposalId: string): Promise<void> {
        this.tabs.delete(doc.uri.toString());
        this.proposed.delete(proposalId);
        await this.run(proposalId, doc.getText());
        // The untitled copy served its purpose: close it without asking to save it.
        const editor = await vscode.window.showTextDocument(doc, { preview: false });
        if (editor.document === doc) await vscode.commands.executeCommand('workbench.action.revertAndCloseActiveEditor');
        this.updateContext(vscode.window.activeTextEditor);
    }

    private updateContext(editor: vscode.TextEditor | undefined): void {
        void vscode.commands.executeCommand('setContext', CONTEXT_KEY, !!editor && this.tabs.has(editor.document.uri.toString()));
    }

    dispose(): void {
        this.listener.dispose();
    }
}
