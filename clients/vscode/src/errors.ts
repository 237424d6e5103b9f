// What a failed turn offers the user, by the server's `errorKind` (docs/protocol.md, oi/chat).
// Pure: no `vscode` import, so the webview bundles it and the unit tests run it in plain node.

/** The one button an error message gets: a command of this extension. */
export interface ErrorAction { label: string; command: string }

const SET_KEY: ErrorAction = { label: 'Set API Key', command: 'oi.setApiKey' };
const SELECT_MODEL: ErrorAction = { label: 'Select Model', command: 'oi.selectModel' };
const OPEN_SETTINGS: ErrorAction = { label: 'Open Settings', command: 'oi.openSettings' };
const NEW_CONVERSATION: ErrorAction = { label: 'New Conversation', command: 'oi.newConversation' };

const ACTIONS: Readonly<Record<string, ErrorAction>> = {
    noModel: SELECT_MODEL,
    noApiKey: SET_KEY,
    authFailed: SET_KEY,
    unreachable: OPEN_SETTINGS,
    modelError: SELECT_MODEL,
    contextTooLong: NEW_CONVERSATION,
    budget: OPEN_SETTINGS,
    maxSteps: OPEN_SETTINGS,
};

/** The button for an error of this kind, if one helps (a rate limit only needs waiting). */
export function errorAction(kind: string | undefined): ErrorAction | undefined {
    return kind !== undefined && Object.hasOwn(ACTIONS, kind) ? ACTIONS[kind] : undefined;
}

/** The commands a button in the view may run: only these, whatever the page posts. */
export const VIEW_COMMANDS: ReadonlySet<string> = new Set([
    ...Object.values(ACTIONS).map((a) => a.command), 'oi.openDocs', 'oi.conversations',
]);

/** An error as a person reads it: no markdown backticks, no library class prefixes. */
export function plainError(text: string): string {
    return text
        .replace(/^(?:litellm\.)?\w+(?:Error|Exception): (?:\w+(?:Error|Exception)(?: - |: ))*/, '')
        .replace(/`/g, '')
        .trim();
}
