// Conversations: the folder's saved conversations (oi/sessions) in a QuickPick with New, Open
// and Export (JSON, Markdown, Notebook through oi/session/export, opened in an editor).
import * as vscode from 'vscode';
import type { ChatView } from './chatView';
import type { Server } from './server';

interface SessionInfo { id: string; title: string; created: string; updated: string; messageCount: number; current: boolean; snippet?: string }
interface Export { id: string; format: string; title: string; content: string }

type Item = vscode.QuickPickItem & { run?: () => Promise<void>; id?: string };

/** Typed this long, the words are searched in every conversation (oi/sessions' query). */
const SEARCH_FROM = 2;

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

    /** The list: New, Export the open one, then every saved conversation (Open). Typing
     * searches what was said in them (the server's index): the matches, with their words. */
    async pick(): Promise<void> {
        const list = await this.server.request<{ current: string; sessions: SessionInfo[] }>('oi/sessions', this.workspace);
        const fixed: Item[] = [
            { label: '$(add) New Conversation', description: 'the open one stays saved here', run: () => this.create() },
            { label: '$(export) Export the Open Conversation…', description: 'JSON, Markdown or Notebook', run: () => this.export(list.current) },
        ];
        const saved = (sessions: SessionInfo[], heading: string): Item[] => [
            { label: heading, kind: vscode.QuickPickItemKind.Separator },
            ...sessions.map((s): Item => ({
                label: `${s.current ? '$(comment-discussion) ' : ''}${s.title || '(empty)'}`,
                description: `${s.messageCount} message${s.messageCount === 1 ? '' : 's'} · ${ago(s.updated)}${s.current ? ' · open' : ''}`,
                detail: s.snippet,
                alwaysShow: s.snippet !== undefined, // found by the server: shown whatever the title
                id: s.id,
                run: () => this.open(s.id),
                buttons: [{ iconPath: new vscode.ThemeIcon('export'), tooltip: 'Export' }],
            })),
        ];
        const everything = [...fixed, ...saved(list.sessions, 'Saved conversations')];
        const qp = vscode.window.createQuickPick<Item>();
        qp.title = 'Open Interpreter: Conversations';
        qp.placeholder = 'Open a saved conversation, start a new one, export one, or type to search them';
        qp.items = everything;
        let asked = 0;
        let timer: NodeJS.Timeout | undefined;
        qp.onDidChangeValue((value) => {
            clearTimeout(timer);
            const query = value.trim();
            if (query.length < SEARCH_FROM) {
                qp.items = everything;
                return;
            }
            timer = setTimeout(() => {
                const mine = ++asked;
                qp.busy = true;
                this.server.request<{ sessions: SessionInfo[] }>('oi/sessions', { ...this.workspace, query }).then((found) => {
                    if (mine !== asked) return; // a later search answers for what is typed now
                    qp.items = [...fixed, ...saved(found.sessions, found.sessions.length
                        ? `Said in ${found.sessions.length} conversation${found.sessions.length === 1 ? '' : 's'}`
                        : `“${query}” was said in no conversation`)];
                }, () => undefined).finally(() => { if (mine === asked) qp.busy = false; });
            }, 250);
        });
        const chosen = await new Promise<(() => Promise<void>) | undefined>((resolve) => {
            qp.onDidAccept(() => resolve(qp.selectedItems[0]?.run));
            qp.onDidTriggerItemButton((e) => {
                const id = e.item.id;
                resolve(id ? () => this.export(id) : undefined);
            });
            qp.onDidHide(() => resolve(undefined));
            qp.show();
        });
        clearTimeout(timer);
        qp.dispose();
        await chosen?.();
    }

    async create(): Promise<void> {
        await this.server.request('oi/session/new', this.workspace);
        await this.chat.refresh();
    }

    async open(id: string): Promise<void> {
        // The view asks oi/history for its last page: this answer need not carry them all.
        await this.server.request('oi/session/open', { id, limit: 1, ...this.workspace });
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
