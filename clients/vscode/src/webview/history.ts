// What oi/history's messages say, in the words the view shows live: the fate of each code
// message (its `outcome`) and where a selection came from (a user message's `context`).
import type { Usage } from './usage';

/** A message of oi/history (docs/protocol.md). */
export type Message = {
    role: string; type: string; format?: string; content: string; turnId?: string;
    outcome?: string; editedCode?: string; risk?: { level: 'low' | 'medium' | 'high'; reasons: string[] };
    context?: Context; errorKind?: string; usage?: Usage; stopped?: boolean;
};

/** What the editor added to a message: the file, the lines, the language, the selection. */
export type Context = {
    uri?: string; language?: string; text?: string;
    range?: { start: { line: number; character: number }; end: { line: number; character: number } };
};

/** The note a code block's head shows for an outcome, as the live view ends up showing it. */
export function outcomeNote(outcome: string | undefined): string {
    switch (outcome) {
        case 'ran': return 'ran';
        case 'edited': return 'ran, edited';
        case 'autoRan': return 'auto-run';
        case 'skipped': return 'skipped';
        case 'stopped': return 'stopped';
        case 'timedOut': return 'timed out';
        case 'error': return 'ran, failed';
        case 'expired': return 'ended';
        default: return 'proposed';
    }
}

/** Said under a proposal the server's restart ended (a reload stops the server with the window). */
export const EXPIRED_NOTICE = 'This turn ended while the proposal waited: oi-lsp stopped (the window reloaded or the '
    + 'server restarted), so it can no longer run. Python state was reset: variables and imports from before are gone.';

/** "numbers.py:1-2" for a context with a file and lines ("numbers.py" without lines). */
export function contextLabel(context: Context | undefined): string | undefined {
    if (!context?.uri) return undefined;
    let name = context.uri;
    try {
        name = decodeURIComponent(new URL(context.uri).pathname);
    } catch { /* not a URL: the text as it is */ }
    name = name.replace(/\/+$/, '').split('/').pop() ?? name;
    const r = context.range;
    if (!r) return name;
    // A selection that ends at the start of a line does not take that line.
    const last = r.end.line > r.start.line && r.end.character === 0 ? r.end.line - 1 : r.end.line;
    return last > r.start.line ? `${name}:${r.start.line + 1}-${last + 1}` : `${name}:${r.start.line + 1}`;
}

/** A run's saved output less the mentions of its displays the model got in their place
 * ("[an image was displayed to the user]"): the view draws the displays themselves. */
export function withoutDisplayNotes(text: string): string {
    return text.replace(/\n?\[(?:an image|[\w.+-]+) was displayed to the user\]\n?/g, '');
}
