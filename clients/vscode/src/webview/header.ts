// The header's model button (the model in use; a click opens Select Model), the session's
// cost, and the welcome shown while the conversation is empty.
import type { Post } from './errors';

function header(): HTMLElement | null {
    return document.getElementById('oi-header');
}

function part(id: string, tag: 'button' | 'span'): HTMLElement | undefined {
    const head = header();
    if (!head) return undefined;
    let node = document.getElementById(id);
    if (!node) {
        node = document.createElement(tag);
        node.id = id;
        head.append(node);
    }
    return node;
}

/** The model in use (the folder's effective `model`), or a prompt to pick one. */
export function showModel(model: string | undefined, post: Post): void {
    const button = part('oi-model', 'button') as HTMLButtonElement | undefined;
    if (!button) return;
    button.type = 'button';
    button.textContent = model ? `Model: ${model}` : 'Select a model';
    button.title = 'The model this folder uses: click to change it (Select Model)';
    button.classList.toggle('oi-model-missing', !model);
    button.onclick = () => post({ type: 'command', command: 'oi.selectModel' });
    for (const node of document.querySelectorAll('.oi-welcome-model')) node.textContent = model ?? 'none yet';
    currentModel = model;
}

let currentModel: string | undefined;

/** The session's cost so far in USD, when litellm knows the model's price. */
export function showSessionCost(cost: number | undefined): void {
    const span = part('oi-session-cost', 'span');
    if (!span) return;
    span.textContent = cost === undefined ? '' : `Session: ${usd(cost)}`;
    span.title = 'Estimated cost of this session\'s model calls (litellm\'s price list)';
}

export function usd(cost: number): string {
    return cost === 0 ? '$0' : cost < 0.01 ? `$${cost.toFixed(4)}` : `$${cost.toFixed(2)}`;
}

function actionButton(label: string, command: string, post: Post, secondary = false): HTMLButtonElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = label;
    if (secondary) b.className = 'oi-secondary';
    b.addEventListener('click', () => post({ type: 'command', command }));
    return b;
}

/** What the chat does and how to start: shown only while the log holds nothing else (CSS). */
export function welcome(post: Post): HTMLElement {
    const box = document.createElement('section');
    box.className = 'oi-welcome';
    const title = document.createElement('h2');
    title.textContent = 'Open Interpreter';
    const what = document.createElement('p');
    what.textContent = 'Ask for something in plain words. The model proposes code; you read it and choose ' +
        'Run, Skip or Edit; it runs in this folder\'s own Python session, so variables stay between runs.';
    const model = document.createElement('p');
    model.append('Model: ');
    const name = document.createElement('strong');
    name.className = 'oi-welcome-model';
    name.textContent = currentModel ?? 'none yet';
    model.append(name);
    const actions = document.createElement('div');
    actions.className = 'oi-welcome-actions';
    actions.append(
        actionButton('Select Model', 'oi.selectModel', post),
        actionButton('Set API Key', 'oi.setApiKey', post),
        actionButton('Read the Docs', 'oi.openDocs', post, true),
    );
    const tip = document.createElement('p');
    tip.className = 'oi-welcome-tip';
    tip.textContent = 'Tip: select code in an editor, right-click it and choose "Run Selection as Instruction". ' +
        'Past conversations: the Conversations button in this view\'s title bar.';
    box.append(title, what, model, actions, tip);
    return box;
}
