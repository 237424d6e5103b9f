// A failed turn in the chat: what went wrong in plain words and the one button that fixes it.
import { errorAction, plainError } from '../errors';

export type Post = (message: unknown) => void;

/** The message box; its button asks the extension to run the command (Set API Key, ...). */
export function errorBox(message: string, kind: string | undefined, post: Post): HTMLElement {
    const box = document.createElement('div');
    box.className = 'oi-error';
    if (kind) box.dataset.errorKind = kind;
    const text = document.createElement('span');
    text.className = 'oi-error-text';
    text.textContent = plainError(message);
    box.append(text);
    const action = errorAction(kind);
    if (action) {
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'oi-error-action';
        button.textContent = action.label;
        button.addEventListener('click', () => post({ type: 'command', command: action.command }));
        box.append(button);
    }
    return box;
}
