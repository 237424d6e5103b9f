// Message routing between the server's oi/* notifications, the chat webview and oi/* requests.
// Pure: no `vscode` import, so the unit tests run it in plain node.
import { fileURLToPath } from 'node:url';

/** Server → client notifications of docs/protocol.md. */
export const STREAM = 'oi/stream';
export const PROPOSAL = 'oi/proposal';
export const TURN = 'oi/turn';
/** A long run's REPL figures (CPU, memory, seconds), every 2 s after its first 3 s. */
export const RESOURCES = 'oi/resources';
/** The shared daemon: a proposal was answered, by this client or another one. */
export const ANSWERED = 'oi/answered';
/** Server → client request: a running program reads a line. */
export const INPUT = 'oi/input';

export interface InputParams { workspace: string; turnId: string; prompt: string; password?: boolean }

export interface Folder { uri: string; name: string }

/** An image pasted or dropped into the chat's input, sent with the next message (oi/chat). */
export interface Attachment { data: string; mimeType: string }

/** Messages the extension posts to the webview. */
export type ToWebview =
    | { type: 'folders'; folders: Folder[]; current: string | undefined; trusted: boolean; autoRun: boolean }
    | { type: 'history'; workspace: string; messages: unknown[]; start: number }
    /** The page of oi/history before the oldest message shown (asked by `earlier`). */
    | { type: 'earlierPage'; workspace: string; messages: unknown[]; start: number }
    | { type: 'stream'; chunk: Record<string, unknown> }
    | { type: 'proposal'; proposal: Record<string, unknown> }
    | { type: 'turn'; turn: Record<string, unknown> }
    | { type: 'user'; text: string; context?: Record<string, unknown> }
    | { type: 'resources'; repl: Record<string, unknown>; elapsed?: number }
    | { type: 'run'; language: string; code: string }
    | { type: 'error'; message: string; errorKind?: string }
    | { type: 'approved'; proposalId: string; code: string }
    /** oi/answered: the first answer to a proposal, maybe given in another client. */
    | { type: 'answered'; proposalId: string; decision: string }
    | { type: 'cleared' }
    /** The folder's effective model, for the header and the welcome. */
    | { type: 'model'; model?: string }
    /** Put the cursor in the input (Open Chat). */
    | { type: 'focus' };

/** A code block's or an output's own action (copy, insert, open, an image's open or save). */
export type CodeAction =
    | { type: 'copy'; text: string }
    | { type: 'insert'; text: string }
    | { type: 'openCode'; text: string; language: string }
    | { type: 'openImage'; data: string; format: string }
    | { type: 'saveImage'; data: string; format: string };

export function isCodeAction(m: { type: string }): m is CodeAction {
    return ['copy', 'insert', 'openCode', 'openImage', 'saveImage'].includes(m.type);
}

/** Messages the webview posts to the extension. */
export type FromWebview =
    | CodeAction
    | { type: 'ready' }
    | { type: 'send'; text: string; attachments?: Attachment[] }
    | { type: 'approve'; proposalId: string; decision: 'run' | 'skip' | 'edit' | 'outside'; code?: string; always?: 'command' }
    | { type: 'stop' }
    | { type: 'reset' }
    | { type: 'editInEditor'; proposalId: string; language: string; code: string }
    | { type: 'runEdited'; proposalId: string }
    | { type: 'switchFolder'; uri: string }
    /** Scrolled to the top with older messages not shown: the page before index `before`. */
    | { type: 'earlier'; before: number }
    /** A button in the view (Set API Key, Select Model, ...): one of errors.ts's VIEW_COMMANDS. */
    | { type: 'command'; command: string };

export type Status = 'idle' | 'thinking' | 'waiting' | 'running';

/** Compare folder URIs by path: the server normalizes them (pygls) differently from VS Code. */
export function sameFolder(a: string | undefined, b: string | undefined): boolean {
    if (a === undefined || b === undefined) return false;
    if (a === b) return true;
    try {
        return fileURLToPath(a).replace(/\/+$/, '') === fileURLToPath(b).replace(/\/+$/, '');
    } catch {
        return false;
    }
}

/** The folder holding a document, the deepest one when folders nest. */
export function folderOf(document: string, folders: Folder[]): Folder | undefined {
    let doc: string;
    try {
        doc = fileURLToPath(document);
    } catch {
        return undefined;
    }
    let best: Folder | undefined;
    for (const folder of folders) {
        let dir: string;
        try {
            dir = fileURLToPath(folder.uri).replace(/\/+$/, '');
        } catch {
            continue;
        }
        if ((doc === dir || doc.startsWith(dir + '/')) && (!best || dir.length > fileURLToPath(best.uri).length)) {
            best = folder;
        }
    }
    return best;
}

/**
 * Tracks the folder the chat talks to and turns notifications into webview messages (only the
 * current folder's; the others reload from oi/history when the user switches) and statuses.
 */
export class Router {
    current: string | undefined;
    private statuses = new Map<string, Status>();
    /** Unanswered proposals by id, so a view that reloads can still answer them. */
    private pending = new Map<string, Record<string, unknown>>();

    constructor(public folders: Folder[] = []) {
        this.current = folders[0]?.uri;
    }

    setFolders(folders: Folder[]): void {
        this.folders = folders;
        if (!folders.some((f) => sameFolder(f.uri, this.current))) this.current = folders[0]?.uri;
    }

    switchTo(uri: string): boolean {
        const folder = this.folders.find((f) => sameFolder(f.uri, uri));
        if (!folder) return false;
        this.current = folder.uri;
        return true;
    }

    /** The status of the current folder's session. */
    status(): Status {
        for (const [ws, status] of this.statuses) if (sameFolder(ws, this.current)) return status;
        return 'idle';
    }

    /** A notification from the server: the webview message to post, if it is for the view. */
    notification(method: string, params: unknown): ToWebview | undefined {
        if (typeof params !== 'object' || params === null) return undefined;
        const p = params as Record<string, unknown>;
        const workspace = typeof p.workspace === 'string' ? p.workspace : undefined;
        if (method === STREAM && p.type === 'status' && workspace && typeof p.format === 'string') {
            this.statuses.set(workspace, p.format as Status);
        }
        if (method === TURN && workspace) {
            this.statuses.set(workspace, p.status === 'running' ? (p.kind === 'execute' ? 'running' : 'thinking') : 'idle');
            if (p.status !== 'running') {
                for (const [id, proposal] of this.pending) if (proposal.turnId === p.turnId) this.pending.delete(id);
            }
        }
        if (method === PROPOSAL && p.autoRun !== true && typeof p.proposalId === 'string') {
            this.pending.set(p.proposalId, p);
        }
        // Answered (here or in another client): a reloaded view must not offer it again.
        if (method === ANSWERED && typeof p.proposalId === 'string') this.pending.delete(p.proposalId);
        // With no folder open the server uses its working directory: show everything then.
        if (this.current !== undefined && !sameFolder(workspace, this.current)) return undefined;
        switch (method) {
            case STREAM: return { type: 'stream', chunk: p };
            case PROPOSAL: return { type: 'proposal', proposal: p };
            case TURN: return { type: 'turn', turn: p };
            case ANSWERED: return typeof p.proposalId === 'string'
                ? { type: 'answered', proposalId: p.proposalId, decision: String(p.decision ?? '') } : undefined;
            case RESOURCES: return {
                type: 'resources', repl: (typeof p.repl === 'object' && p.repl !== null ? p.repl : {}) as Record<string, unknown>,
                ...(typeof p.elapsed === 'number' ? { elapsed: p.elapsed } : {}),
            };
            default: return undefined;
        }
    }

    /** The current folder's proposals still waiting for an answer. */
    pendingProposals(): Record<string, unknown>[] {
        return [...this.pending.values()].filter((p) => this.current === undefined || sameFolder(p.workspace as string, this.current));
    }

    /** A webview message that is an oi/* request: its method and params (with the folder). */
    request(message: FromWebview): { method: string; params: Record<string, unknown> } | undefined {
        const workspace = this.current ? { workspace: this.current } : {};
        switch (message.type) {
            case 'send': {
                const text = message.text.trim();
                if (!text) return undefined;
                const attachments = message.attachments?.length ? { attachments: message.attachments } : {};
                return { method: 'oi/chat', params: { message: text, ...attachments, ...workspace } };
            }
            case 'approve': {
                this.pending.delete(message.proposalId);
                const params: Record<string, unknown> = { proposalId: message.proposalId, decision: message.decision, ...workspace };
                if (message.decision === 'edit') params.code = message.code ?? '';
                if (message.decision === 'run' && message.always === 'command') params.always = 'command';
                return { method: 'oi/approve', params };
            }
            case 'stop': return { method: 'oi/stop', params: workspace };
            case 'reset': return { method: 'oi/reset', params: workspace };
            default: return undefined;
        }
    }
}

/** The oi/chat params of "Run Selection as Instruction". */
export function selectionChat(
    text: string,
    doc: { uri: string; language: string },
    range: { start: { line: number; character: number }; end: { line: number; character: number } },
    workspace: string | undefined,
): Record<string, unknown> {
    return {
        message: text,
        ...(workspace ? { workspace } : {}),
        // The selection is the instruction; where it comes from is the context (no copy of it).
        context: { uri: doc.uri, language: doc.language, range },
    };
}
