// The model's reasoning (a `reasoning` chunk, or an assistant/reasoning message of oi/history):
// a collapsed block above the answer. "Thinking…" while it streams (open it to watch), then
// "Thought"; drawn from history as it ended live.
import { renderMarkdown } from './highlight';

export const THINKING = 'Thinking…';
export const THOUGHT = 'Thought';

/** A closed <details> with its summary; the body is where the reasoning's markdown goes. */
export function thoughtBlock(text = '', streaming = false): { details: HTMLDetailsElement; body: HTMLElement } {
    const details = document.createElement('details');
    details.className = 'oi-thought';
    const summary = document.createElement('summary');
    summary.textContent = streaming ? THINKING : THOUGHT;
    details.classList.toggle('oi-thinking', streaming);
    const body = document.createElement('div');
    body.className = 'oi-thought-body oi-md';
    if (text) body.innerHTML = renderMarkdown(text);
    details.append(summary, body);
    return { details, body };
}

/** The reasoning ended (its end chunk, or the answer began): the summary says so. */
export function thoughtEnded(body: HTMLElement): void {
    const details = body.closest('details.oi-thought');
    if (!details?.classList.contains('oi-thinking')) return;
    details.classList.remove('oi-thinking');
    const summary = details.querySelector('summary');
    if (summary) summary.textContent = THOUGHT;
}
