// Conversations: the folder's saved conversations (oi/sessions) in a QuickPick with New, Open
// and Export (JSON, Markdown, Notebook through oi/session/export, opened in an editor).
import * as vscode from 'vscode';
import type { ChatView } from './chatView';
import type { Server } from './server';

interface SessionInfo { id: string; title: string; created: string; updated: string; messageCount: number; current: boolean }
interface Export { id: string; format: string; title: string; content: string }

type Item = vscode.QuickPickItem & { run?: () => Promise<void> };

/** "3 minutes ago" style, from an ISO 8601 time. */
export function ago(iso: string, now = Date.now()): string {
    const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
    if (!Number.isFinite(seconds)) return '';
    for (const [unit, size] of [['day', 86400], ['hour', 3600], ['minute', 60]] as const) {
        const n = Math.floor(seconds / size);
        if (n >= 1) return `${n} ${unit}${n > 1 ? 's' : ''} ago`;
    }
    return 'just now';
}

export class Conversations {
    constructor(private readonly server: Server, private readonly chat: ChatView, private readonly storage: vscode.Uri) {}

    private get workspace(): Record<string, unknown> {
        return this.chat.router.current ? { workspace: this.chat.router.current } : {};
    }

    /** The list: New, Export the open one, then every saved conversation (Open). */
    async pick(): Promise<void> {
        const list = await this.server.request<{ current: string; sessions: SessionInfo[] }>('oi/sessions', this.workspace);
        const items: Item[] = [
            { label: '$(add) New Conversation', description: 'the open one stays saved here', run: () => this.create() },
            { label: '$(export) Export the Open Conversation…', description: 'JSON, Markdown or Notebook', run: () => this.export(list.current) },
            { label: 'Saved conversations', kind: vscode.QuickPickItemKind.Separator },
            ...list.sessions.map((s): Item => ({
                label: `${s.current ? '$(comment-discussion) ' : ''}${s.title || '(empty)'}`,
                description: `${s.messageCount} message${s.messageCount === 1 ? '' : 's'} · ${ago(s.updated)}${s.current ? ' · open' : ''}`,
                run: () => this.open(s.id),
                buttons: [{ iconPath: new vscode.ThemeIcon('export'), tooltip: 'Export' }],
            })),
        ];
        const qp = vscode.window.createQuickPick<Item>();
        qp.title = 'Open Interpreter: Conversations';
        qp.placeholder = 'Open a saved conversation, start a new one, or export one';
        qp.items = items;
        const chosen = await new Promise<(() => Promise<void>) | undefined>((resolve) => {
            qp.onDidAccept(() => resolve(qp.selectedItems[0]?.run));
            qp.onDidTriggerItemButton((e) => {
                const id = list.sessions[items.indexOf(e.item) - 3]?.id;
                resolve(id ? () => this.export(id) : undefined);
            });
            qp.onDidHide(() => resolve(undefined));
            qp.show();
        });
        qp.dispose();
        await chosen?.();
    }

    async create(): Promise<void> {
        await this.server.request('oi/session/new', this.workspace);
        await this.chat.refresh();
    }

    async open(id: string): Promise<void> {
        await this.server.request('oi/session/open', { id, ...this.workspace });
        await this.chat.refresh();
    }

    /** Asks the format, then opens the export: Markdown and JSON as new untitled editors, a
     * notebook as a file in the extension's storage (so the notebook editor opens it). */
    async export(id: string | undefined): Promise<void> {
        const formats = [
            { label: 'Markdown', format: 'markdown', language: 'markdown' },
            { label: 'Notebook (.ipynb)', format: 'ipynb', language: 'json' },
            { label: 'JSON', format: 'json', language: 'json' },
        ];
        const format = await vscode.window.showQuickPick(formats, { title: 'Open Interpreter: export as' });
        if (!format) return;
        const result = await this.server.request<Export>('oi/session/export', {
            format: format.format, ...(id ? { id } : {}), ...this.workspace,
        });
        if (format.format === 'ipynb') {
            const name = `${(result.title || 'conversation').replace(/[^\w .-]+/g, '_').slice(0, 60)}.ipynb`;
            const file = vscode.Uri.joinPath(this.storage, 'exports', name);
            await vscode.workspace.fs.writeFile(file, new TextEncoder().encode(result.content));
            await vscode.commands.executeCommand('vscode.open', file);
            return;
        }
        const doc = await vscode.workspace.openTextDocument({ content: result.content, language: format.language });
        await vscode.window.showTextDocument(doc);
    }
}
