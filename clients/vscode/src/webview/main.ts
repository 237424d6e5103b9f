// The chat page. It only renders what the extension posts (docs/protocol.md's notifications and
// oi/history) and posts the user's actions back; it never talks to the server itself.
import DOMPurify from 'dompurify';
import { highlight, renderMarkdown } from './highlight';
import { thoughtBlock, thoughtEnded } from './reasoning';
import { type Context, EXPIRED_NOTICE, type Message, contextLabel, outcomeNote, withoutDisplayNotes } from './history';
import { type Activity, type Figures, StatusLine } from './status';
import { errorBox } from './errors';
import { showModel, welcome } from './header';
import { showUsage, type Usage } from './usage';
import { outputRuns } from './output';

interface VsCodeApi { postMessage(message: unknown): void }
declare function acquireVsCodeApi(): VsCodeApi;

type Chunk = { turnId?: string; role?: string; type?: string; format?: string; content?: string; start?: boolean; end?: boolean };
type Risk = { level: 'low' | 'medium' | 'high'; reasons: string[] };
type Proposal = { turnId: string; proposalId: string; language: string; code: string; autoRun?: boolean; risk?: Risk; sandboxBlocked?: string; command?: string };

const vscode = acquireVsCodeApi();
const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
// Where messages are drawn: the view's log, or (while an earlier page is drawn) a detached one.
let log = $<HTMLElement>('oi-log');
const shownLog = log;
const input = $<HTMLTextAreaElement>('oi-input');
const folderSelect = $<HTMLSelectElement>('oi-folder');
const sendButton = $<HTMLButtonElement>('oi-send');
const status = new StatusLine($('oi-status'), $('oi-status-text'), $('oi-stop'), sendButton, input);

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
}

function scrollDown(): void {
    log.scrollTop = log.scrollHeight;
}

// Streaming state ---------------------------------------------------------------------------

interface Block { kind: string; node: HTMLElement; text: string }
/** The open block (one at a time per the protocol, keyed to be safe). */
const open = new Map<string, Block>();
/** The code block console output and images attach to: the last proposal or confirmation. */
let lastCode: HTMLElement | undefined;
/** Answered proposals waiting for the confirmation chunk of what ran, by turn. */
const awaitingRun = new Map<string, HTMLElement>();
// The current folder is trusted: only then can "always for this command" save its rule.
let trustedFolder = true;
const pendingRender = new Set<Block>();
let renderTimer: number | undefined;

function key(c: Chunk): string {
    return `${c.turnId ?? ''}|${c.role ?? ''}|${c.type ?? ''}|${c.format ?? ''}`;
}

/** Re-render streamed markdown at most every 30 ms (a chunk can be a single token). */
function scheduleRender(block: Block): void {
    pendingRender.add(block);
    renderTimer ??= window.setTimeout(() => {
        renderTimer = undefined;
        for (const b of pendingRender) b.node.innerHTML = renderMarkdown(b.text);
        pendingRender.clear();
        scrollDown();
    }, 30);
}

function codeBlock(language: string, code: string, cls: string, turnId?: string): HTMLElement {
    const box = el('div', `oi-code ${cls}`);
    box.dataset.language = language;
    if (turnId) box.dataset.turnId = turnId;
    const head = el('div', 'oi-code-head');
    head.append(el('span', 'oi-lang', language), codeTools(box));
    box.append(head);
    const pre = el('pre', 'oi-source');
    pre.append(el('code', `hljs language-${language}`));
    box.append(pre);
    setCode(box, code);
    log.append(box);
    lastCode = box;
    return box;
}

/** A code block's own actions: copy, insert at the cursor, open in a new editor. */
function codeTools(box: HTMLElement): HTMLElement {
    const tools = el('span', 'oi-tools');
    const code = (): string => codeOf(box) ?? '';
    tools.append(
        tool('oi-copy', 'Copy', 'Copy the code', () => vscode.postMessage({ type: 'copy', text: code() })),
        tool('oi-insert', 'Insert', 'Insert the code at the cursor of the active editor', () => vscode.postMessage({ type: 'insert', text: code() })),
        tool('oi-open', 'Open', 'Open the code in a new editor', () => vscode.postMessage({ type: 'openCode', text: code(), language: box.dataset.language ?? 'plaintext' })),
    );
    return tools;
}

function tool(cls: string, label: string, title: string, onClick: () => void): HTMLButtonElement {
    const b = button(`oi-tool ${cls}`, label, onClick);
    b.title = title;
    return b;
}

function setCode(box: HTMLElement, code: string): void {
    const codeEl = box.querySelector<HTMLElement>('.oi-source code');
    if (!codeEl) return;
    codeEl.innerHTML = DOMPurify.sanitize(highlight(code, box.dataset.language ?? 'plaintext'));
    codeEl.dataset.code = code;
}

/** The code a block shows, as text. */
function codeOf(box: HTMLElement | undefined): string | undefined {
    return box?.querySelector<HTMLElement>('.oi-source code')?.dataset.code;
}

function outputOf(box: HTMLElement | undefined): HTMLPreElement {
    const host = box ?? log;
    let pre = host.querySelector<HTMLPreElement>(':scope > details.oi-output > pre');
    if (!pre) {
        const details = el('details', 'oi-output');
        details.open = true;
        const summary = el('summary', undefined, 'Output');
        const lines = el('span', 'oi-lines');
        const output = el('pre');
        summary.append(lines, tool('oi-copy-output', 'Copy', 'Copy the output', () => vscode.postMessage({ type: 'copy', text: output.textContent ?? '' })));
        details.append(summary, output);
        host.append(details);
        pre = output;
    }
    return pre;
}

/** Sets what an output shows, and its line count in the summary. */
function setOutput(pre: HTMLPreElement, text: string): void {
    // The lines MCP tool calls printed are quieter (.oi-tool-call), a box each so that a long
    // call wraps under itself; the text stays as it ran.
    pre.replaceChildren(...outputRuns(text).flatMap((run): Node[] => run.tool
        ? run.text.split(/(?<=\n)/).map((line) => el('span', 'oi-tool-call', line))
        : [document.createTextNode(run.text)]));
    const n = text.replace(/\n$/, '').split('\n').length;
    const lines = pre.parentElement?.querySelector('.oi-lines');
    if (lines) lines.textContent = text ? ` · ${n} line${n === 1 ? '' : 's'}` : '';
}

function imageSrc(format: string | undefined, data: string): string {
    if (format === 'svg') return `data:image/svg+xml;base64,${btoa(unescape(encodeURIComponent(data)))}`;
    return `data:image/${format === 'base64.jpeg' ? 'jpeg' : 'png'};base64,${data.replace(/\s+/g, '')}`;
}

/** An image a run displayed, with Open (an editor tab) and Save. */
function addImage(format: string | undefined, data: string): void {
    const figure = el('figure', 'oi-figure');
    const img = el('img', 'oi-image');
    img.alt = 'image output';
    img.src = imageSrc(format, data);
    img.title = 'Open the image in an editor tab';
    const open = (): void => vscode.postMessage({ type: 'openImage', data, format: format ?? 'base64.png' });
    img.addEventListener('click', open);
    const tools = el('figcaption', 'oi-tools');
    tools.append(tool('oi-open-image', 'Open', 'Open the image in an editor tab', open),
        tool('oi-save-image', 'Save…', 'Save the image to a file', () => vscode.postMessage({ type: 'saveImage', data, format: format ?? 'base64.png' })));
    figure.append(img, tools);
    (lastCode ?? log).append(figure);
}

function addHtml(html: string): void {
    const box = el('div', 'oi-html');
    box.innerHTML = DOMPurify.sanitize(html);
    (lastCode ?? log).append(box);
}

/**
 * Where a turn's output goes: its code block, or (output of no code, as a % command's answer)
 * a block of its own, never the output of an earlier turn's code.
 */
function ownerOf(turnId: string | undefined): HTMLElement | undefined {
    if (!turnId || !lastCode || lastCode.dataset.turnId === turnId) return lastCode;
    const own = log.lastElementChild as HTMLElement | null;
    if (own?.classList.contains('oi-magic') && own.dataset.turnId === turnId) return own;
    const box = el('div', 'oi-magic');
    box.dataset.turnId = turnId;
    log.append(box);
    return box;
}

function openBlock(c: Chunk): Block {
    if (c.type === 'reasoning') {
        const { details, body } = thoughtBlock('', true);
        log.append(details);
        return { kind: 'reasoning', node: body, text: '' };
    }
    if (c.type === 'message') {
        const node = el('div', 'oi-assistant oi-md');
        log.append(node);
        return { kind: 'message', node, text: '' };
    }
    if (c.type === 'confirmation') {
        // The code that runs: it belongs to the proposal the user answered, if there is one.
        const answered = c.turnId ? awaitingRun.get(c.turnId) : undefined;
        if (answered) {
            awaitingRun.delete(c.turnId ?? '');
            lastCode = answered;
            return { kind: 'confirmation', node: answered, text: '' };
        }
        return { kind: 'confirmation', node: codeBlock(c.format ?? 'text', '', 'oi-ran', c.turnId), text: '' };
    }
    if (c.type === 'console') {
        // Output after an image goes on from what the block showed, never replaces it.
        const pre = outputOf(ownerOf(c.turnId));
        return { kind: 'console', node: pre, text: pre.textContent ?? '' };
    }
    return { kind: c.type ?? 'unknown', node: el('div'), text: '' };
}

/** The line of the running code that executes now (setting activeLine): shown in its head. */
function activeLine(line: string | undefined): void {
    const head = lastCode?.querySelector('.oi-code-head');
    if (!head) return;
    let mark = head.querySelector<HTMLElement>('.oi-active-line');
    if (!mark) {
        mark = el('span', 'oi-active-line');
        head.append(mark);
    }
    mark.textContent = line ? `line ${line}` : '';
}

function stream(c: Chunk): void {
    if (c.type === 'status') {
        if (c.format === 'retrying') return status.retrying(c.content ?? '');
        if (c.format === 'idle') log.querySelectorAll('.oi-active-line').forEach((m) => m.remove());
        if (ACTIVITIES.includes(c.format as Activity)) status.set(c.format as Activity);
        return;
    }
    if (c.type === 'confirmation' && c.start) status.running(c.format ?? '');
    status.retrying(''); // the call answered: the retry notice has done its work
    // Whatever follows the reasoning ends it (a stop may cut it before its end chunk).
    if (c.type !== 'reasoning') log.querySelectorAll<HTMLElement>('.oi-thinking .oi-thought-body').forEach(thoughtEnded);
    // Not a block and not output: never joins the open console block.
    if (c.type === 'console' && c.format === 'active_line') return activeLine(c.content);
    const k = key(c);
    if (c.start) {
        open.set(k, openBlock(c));
        return;
    }
    let block = open.get(k);
    if (!block && c.content !== undefined) {
        // A chunk without its start (the view opened mid-block): open one.
        block = openBlock(c);
        open.set(k, block);
    }
    if (block && c.content !== undefined) {
        block.text += c.content;
        if (block.kind === 'message' || block.kind === 'reasoning') scheduleRender(block);
        else if (block.kind === 'console') {
            setOutput(block.node as HTMLPreElement, block.text);
            scrollDown();
        } else if (block.kind === 'confirmation') setCode(block.node, block.text);
    }
    if (c.end && block) {
        open.delete(k);
        if (block.kind === 'image') addImage(c.format, block.text);
        else if (block.kind === 'code' && c.format === 'html') addHtml(block.text);
        else if (block.kind === 'message') scheduleRender(block);
        else if (block.kind === 'reasoning') {
            scheduleRender(block);
            thoughtEnded(block.node);
        }
        scrollDown();
    }
}

// Proposals ---------------------------------------------------------------------------------

function button(cls: string, label: string, onClick: () => void): HTMLButtonElement {
    const b = el('button', cls, label);
    b.type = 'button';
    b.addEventListener('click', onClick);
    return b;
}

/** The server's risk check: its level, always; high risk with a warning sign. */
function showRisk(box: HTMLElement, risk: Risk | undefined): void {
    if (!risk) return;
    const reasons = risk.reasons.length ? ` (${risk.reasons.join('; ')})` : '';
    const badge = el('div', `oi-risk oi-risk-${risk.level}`, `${risk.level === 'high' ? '⚠ ' : ''}Risk: ${risk.level}${reasons}`);
    badge.title = risk.level === 'high' ? 'This code can do lasting damage: read it before you run it.' : `The server's risk check rates this code ${risk.level}.`;
    box.append(badge);
}

/** The second question before high-risk code runs. */
function confirmRisky(actions: HTMLElement, risk: Risk, run: () => void): void {
    const previous = [...actions.children];
    const sure = el('span', 'oi-risk-confirm', `Really run it? ${risk.reasons.join('; ') || 'It is rated high risk'}.`);
    actions.replaceChildren(
        sure,
        button('oi-run-anyway', 'Run anyway', run),
        button('oi-cancel', 'Cancel', () => actions.replaceChildren(...previous)),
    );
    scrollDown();
}

function answered(box: HTMLElement, note: string): void {
    box.querySelector('.oi-actions')?.remove();
    box.classList.add('oi-answered');
    box.querySelector('.oi-code-head')?.append(el('span', 'oi-note', note));
}

function proposal(p: Proposal): void {
    if (log.querySelector(`[data-proposal-id="${CSS.escape(p.proposalId)}"]`)) return;
    // A view reloaded while the proposal waits: oi/history already showed its code as proposed.
    const past = log.lastElementChild as HTMLElement | null;
    if (past?.classList.contains('oi-past') && codeOf(past) === p.code) past.remove();
    const box = codeBlock(p.language, p.code, 'oi-proposal', p.turnId);
    box.dataset.proposalId = p.proposalId;
    showRisk(box, p.risk);
    if (p.autoRun) {
        answered(box, 'auto-run');
        awaitingRun.set(p.turnId, box);
        scrollDown();
        return;
    }
    const actions = el('div', 'oi-actions');
    // "Always for this command": the server saves an allow rule for its first word (else for
    // this exact code) in the folder's .oi/profile.yaml, and runs it.
    const always = p.command ? `Always \`${p.command}\`` : 'Always this code';
    const decide = (decision: 'run' | 'skip' | 'outside', remember?: 'command'): void => {
        vscode.postMessage({ type: 'approve', proposalId: p.proposalId, decision, ...(remember ? { always: remember } : {}) });
        applyDecision(box, decision, undefined, remember ? p.command ?? '' : undefined);
    };
    // Edit in a real editor tab; "Run edited" is in its title bar, and here.
    const edit = (): void => {
        vscode.postMessage({ type: 'editInEditor', proposalId: p.proposalId, language: p.language, code: p.code });
        box.querySelector('.oi-edit-hint')?.remove();
        actions.before(el('div', 'oi-edit-hint', 'Editing in an editor tab: run it with ▶ Run edited in the tab\'s title bar, or here.'));
        actions.replaceChildren(
            button('oi-run-edited', 'Run edited', () => vscode.postMessage({ type: 'runEdited', proposalId: p.proposalId })),
            button('oi-edit', 'Show the editor', edit),
            button('oi-skip', 'Skip', () => decide('skip')),
        );
    };
    if (p.sandboxBlocked) { // it just ran, confined, and was blocked: only the user lets it out
        box.classList.add('oi-blocked');
        actions.append(
            button('oi-outside', 'Run outside the sandbox', () => decide('outside')),
            button('oi-skip', 'Skip', () => decide('skip')),
        );
        box.append(actions);
        scrollDown();
        return;
    }
    const high = p.risk?.level === 'high';
    // High risk: Run is not the primary button, and it asks a second time.
    const run = high ? button('oi-run oi-run-risky', '⚠ Run…', () => confirmRisky(actions, p.risk!, () => decide('run')))
        : button('oi-run', 'Run', () => decide('run'));
    actions.append(
        run,
        button('oi-skip', 'Skip', () => decide('skip')),
        button('oi-edit', 'Edit', edit),
    );
    if (trustedFolder && !high) { // high-risk code always asks: no rule would spare the question
        const b = button('oi-always', always, () => decide('run', 'command'));
        b.title = p.command
            ? `Run it, and from now on run \`${p.command} ...\` commands in this folder without asking (a rule in .oi/profile.yaml)`
            : 'Run it, and from now on run this exact code in this folder without asking (a rule in .oi/profile.yaml)';
        actions.append(b);
    }
    box.append(actions);
    scrollDown();
}

/** What the view shows once a proposal is answered (here, or "Run edited" in an editor tab). */
function applyDecision(box: HTMLElement, decision: 'run' | 'skip' | 'edit' | 'outside', code?: string, command?: string): void {
    box.querySelector('.oi-edit-hint')?.remove();
    if (decision === 'skip') {
        box.classList.add('oi-skipped');
        answered(box, 'skipped');
        return;
    }
    if (code !== undefined) setCode(box, code);
    answered(box, decision === 'edit' ? 'edited, running' : decision === 'outside' ? 'running outside the sandbox' : 'running');
    if (command !== undefined) {
        box.append(el('div', 'oi-always-note', command
            ? `From now on \`${command}\` commands run here without asking.`
            : 'From now on this exact code runs here without asking.'));
    }
    awaitingRun.set(box.dataset.turnId ?? '', box);
}

/** A proposal answered by "Run edited" in its editor tab. */
function approvedElsewhere(proposalId: string, code: string): void {
    const box = log.querySelector<HTMLElement>(`[data-proposal-id="${CSS.escape(proposalId)}"]`);
    if (box?.querySelector('.oi-actions')) applyDecision(box, 'edit', code);
}

const DECISIONS: Record<string, string> = {
    run: 'run', skip: 'skipped', edit: 'run edited', outside: 'run outside the sandbox',
};

/** oi/answered: the first answer won. Our own answer already took the buttons away; one given
 * in another client (a second editor, the terminal) takes them away here, and says so. */
function answeredElsewhere(proposalId: string, decision: string): void {
    const box = log.querySelector<HTMLElement>(`[data-proposal-id="${CSS.escape(proposalId)}"]`);
    if (!box?.querySelector('.oi-actions')) return;
    const known = decision in DECISIONS ? decision as 'run' | 'skip' | 'edit' | 'outside' : 'run';
    applyDecision(box, known);
    box.append(el('div', 'oi-elsewhere', `Answered in another client: ${DECISIONS[known]}.`));
    scrollDown();
}

/** A turn ended: its unanswered proposals can no longer be answered; what ran says so. */
function expire(turnId: string, status: string): void {
    const ended: Record<string, string> = status === 'stopped'
        ? { 'running': 'stopped', 'edited, running': 'edited, stopped' }
        : { 'running': 'ran', 'edited, running': 'ran, edited' };
    for (const box of log.querySelectorAll<HTMLElement>('.oi-proposal')) {
        if (box.dataset.turnId !== turnId) continue;
        if (box.querySelector('.oi-actions')) answered(box, status === 'stopped' ? 'stopped' : 'ended');
        const note = box.querySelector('.oi-note');
        if (note?.textContent && ended[note.textContent]) note.textContent = ended[note.textContent];
    }
    awaitingRun.delete(turnId);
}

// Status, turns, errors -----------------------------------------------------------------------

const ACTIVITIES: Activity[] = ['idle', 'thinking', 'waiting', 'running'];

function turn(t: { turnId: string; kind?: string; status: string; error?: string; errorKind?: string; usage?: Usage }): void {
    if (t.status === 'running') {
        if (t.kind === 'execute') {
            // The user's own run was drawn before its turn had an id: its output goes under it.
            const mine = [...log.querySelectorAll<HTMLElement>('.oi-user-run:not([data-turn-id])')].pop();
            if (mine) {
                mine.dataset.turnId = t.turnId;
                status.running(mine.dataset.language ?? '');
            }
        }
        return status.set(t.kind === 'execute' ? 'running' : 'thinking');
    }
    status.set('idle');
    expire(t.turnId, t.status);
    if (t.status === 'stopped') log.append(el('div', 'oi-notice', 'Stopped.'));
    if (t.status === 'error') showError(t.error ?? 'the turn failed', t.errorKind);
    if (t.usage) showUsage(log, t.usage);
    scrollDown();
}

function showError(message: string, kind?: string): void {
    log.append(errorBox(message, kind, (m) => vscode.postMessage(m)));
    scrollDown();
}

/** The user's message, with a chip naming the file and lines a selection came from. */
function addUser(text: string, context?: Context): void {
    const box = el('div', 'oi-user');
    box.append(el('span', 'oi-user-text', text));
    const label = contextLabel(context);
    if (label) {
        const chip = el('span', 'oi-context', label);
        chip.title = context?.uri ? decodeURIComponent(context.uri.replace(/^file:\/\//, '')) : label;
        box.append(chip);
    }
    log.append(box);
    scrollDown();
}

/** Code the user ran directly (Run Selection in Session): its output streams under it. */
function userRun(language: string, code: string, turnId?: string): void {
    answered(codeBlock(language, code, 'oi-ran oi-user-run', turnId), 'your run');
    scrollDown();
}

function clear(): void {
    log.replaceChildren();
    earlier = 0;
    open.clear();
    awaitingRun.clear();
    lastCode = undefined;
}

/** The saved conversation (oi/history's last page), drawn as the live view showed it;
 * `start`: how many earlier messages are not shown yet. */
function history(workspace: string, messages: Message[], start: number): void {
    clear();
    shownWorkspace = workspace;
    for (const m of messages) redraw(m);
    if (!messages.length && !start) log.append(welcome((x) => vscode.postMessage(x)));
    setEarlier(start);
    scrollDown();
}

// Earlier pages: "▲ N earlier messages" at the top of the log; scrolled near it, the page
// before comes (the extension asks oi/history) and goes above, the view staying where it was.
let earlier = 0;
let loadingEarlier = false;
let shownWorkspace = '';  // whose conversation the log shows (a page of another's is dropped)
const earlierLine = el('button', 'oi-earlier');
earlierLine.type = 'button';
earlierLine.addEventListener('click', askEarlier);

function setEarlier(start: number): void {
    earlier = start;
    loadingEarlier = false;
    earlierLine.textContent = `▲ ${start.toLocaleString('en-US')} earlier message${start === 1 ? '' : 's'}: scroll up to show them`;
    earlierLine.title = earlierLine.textContent; // shortened to one line in a narrow view
    if (start > 0) shownLog.prepend(earlierLine);
    else earlierLine.remove();
}

function askEarlier(): void {
    if (!earlier || loadingEarlier) return;
    loadingEarlier = true;
    earlierLine.textContent = 'Loading earlier messages…';
    vscode.postMessage({ type: 'earlier', before: earlier });
}

shownLog.addEventListener('scroll', () => { if (shownLog.scrollTop < 200) askEarlier(); });

/** An earlier page, drawn as history draws one (apart: the live state stays the newest's),
 * then put above what is shown without moving it on the screen. */
function earlierPage(workspace: string, messages: Message[], start: number): void {
    if (workspace !== shownWorkspace || !earlier) return;
    const page = document.createElement('div');
    const newest = lastCode;
    log = page;
    lastCode = undefined;
    try {
        for (const m of messages) redraw(m);
    } finally {
        log = shownLog;
        lastCode = newest;
    }
    const height = shownLog.scrollHeight;
    const top = shownLog.scrollTop;
    earlierLine.after(...page.childNodes);
    setEarlier(start);
    shownLog.scrollTop = top + shownLog.scrollHeight - height;
}

/** A model's proposal with its fate: the note, the risk, the edited code, what ended it. */
function pastCode(m: Message): void {
    const box = codeBlock(m.format ?? 'text', m.outcome === 'edited' && m.editedCode !== undefined ? m.editedCode : m.content,
        'oi-proposal oi-past', m.turnId);
    showRisk(box, m.risk);
    if (m.outcome) box.dataset.outcome = m.outcome;
    if (m.outcome === 'skipped') box.classList.add('oi-skipped');
    answered(box, outcomeNote(m.outcome));
    if (m.outcome === 'stopped') log.append(el('div', 'oi-notice', 'Stopped.'));
    if (m.outcome === 'expired') log.append(el('div', 'oi-notice oi-expired', EXPIRED_NOTICE));
}

/** The code that ran: the proposal just before it when that one ran (or, in conversations
 * saved before outcomes were kept, when it is not matched yet), else a block of its own. */
function pastConfirmation(m: Message): void {
    const box = lastCode?.classList.contains('oi-past') || lastCode?.dataset.outcome ? lastCode : undefined;
    if (box?.dataset.outcome) {
        if (!box.dataset.confirmed && !['skipped', 'expired'].includes(box.dataset.outcome)) {
            box.dataset.confirmed = 'yes';
            return;
        }
    } else if (box && box.querySelector('.oi-note')?.textContent === 'proposed') {
        const edited = codeOf(box) !== m.content;
        if (edited) setCode(box, m.content);
        box.querySelector('.oi-note')!.textContent = edited ? 'ran, edited' : 'ran';
        return;
    }
    answered(codeBlock(m.format ?? 'text', m.content, 'oi-ran', m.turnId), 'ran');
}

function redraw(m: Message): void {
    const what = `${m.role}/${m.type}`;
    if (what === 'user/message') addUser(m.content, m.context);
    else if (what === 'user/code') {
        userRun(m.format ?? 'text', m.content, m.turnId);
        lastCode!.dataset.outcome = m.outcome ?? 'ran';
    }
    else if (what === 'assistant/message') {
        const node = el('div', 'oi-assistant oi-md');
        node.innerHTML = renderMarkdown(m.content);
        log.append(node);
    } else if (what === 'assistant/reasoning') {
        if (m.content) log.append(thoughtBlock(m.content).details);
    } else if (what === 'assistant/code') pastCode(m);
    else if (what === 'computer/confirmation') pastConfirmation(m);
    else if (what === 'computer/console') {
        const pre = outputOf(lastCode);
        // Saved as the model saw it: stripped at the end, where the live output had its newline.
        const saved = withoutDisplayNotes(m.content);
        const text = (pre.textContent ?? '') + (saved && !saved.endsWith('\n') ? `${saved}\n` : saved);
        if (text) setOutput(pre, text);
        else pre.closest('details')?.remove(); // only displays: no empty Output
    } else if (what === 'computer/image') addImage(m.format, m.content);
    else if (what === 'computer/code' && m.format === 'html') addHtml(m.content);
    else if (what === 'computer/error') showError(m.content, m.errorKind);
    if (m.stopped) log.append(el('div', 'oi-notice', 'Stopped.')); // as the turn's end showed it live
    if (m.usage) showUsage(log, m.usage); // the turn's last entry: its tokens, as oi/turn showed them
}

function folders(m: { folders: { uri: string; name: string }[]; current?: string; trusted: boolean; autoRun: boolean }): void {
    folderSelect.replaceChildren(...m.folders.map((f) => {
        const option = el('option', undefined, f.name);
        option.value = f.uri;
        option.selected = f.uri === m.current;
        return option;
    }));
    folderSelect.disabled = m.folders.length < 2;
    $('oi-header').hidden = m.folders.length === 0;
    trustedFolder = m.trusted;
    $('oi-trust').textContent = m.trusted ? (m.autoRun ? ' · auto-run on' : '') : ' · restricted mode: auto-run off';
}

// Wiring ------------------------------------------------------------------------------------

window.addEventListener('message', (event: MessageEvent) => {
    const m = event.data as { type: string } & Record<string, unknown>;
    switch (m.type) {
        case 'stream': return stream(m.chunk as Chunk);
        case 'proposal': return proposal(m.proposal as Proposal);
        case 'run': return userRun(String(m.language), String(m.code));
        case 'turn': return turn(m.turn as { turnId: string; status: string; error?: string });
        case 'history': return history(String(m.workspace), m.messages as Message[], Number(m.start ?? 0));
        case 'earlierPage': return earlierPage(String(m.workspace), m.messages as Message[], Number(m.start ?? 0));
        case 'approved': return approvedElsewhere(String(m.proposalId), String(m.code));
        case 'answered': return answeredElsewhere(String(m.proposalId), String(m.decision));
        case 'user': return addUser(String(m.text), m.context as Context | undefined);
        case 'resources': return status.resources((m.repl ?? {}) as Figures, m.elapsed as number | undefined);
        case 'error': return showError(String(m.message), typeof m.errorKind === 'string' ? m.errorKind : undefined);
        case 'cleared':
            clear();
            return void log.append(welcome((x) => vscode.postMessage(x)));
        case 'model': return showModel(typeof m.model === 'string' ? m.model : undefined, (x) => vscode.postMessage(x));
        case 'focus': return input.focus();
        case 'folders': return folders(m as unknown as Parameters<typeof folders>[0]);
    }
});

// Images pasted or dropped into the input go with the next message (what oi/chat takes).
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
const MAX_IMAGE = 10 * 1024 * 1024;
const attachedBox = $<HTMLElement>('oi-attached');
let attached: { name: string; data: string; mimeType: string }[] = [];

function showAttached(): void {
    attachedBox.replaceChildren(...attached.map((a, i) => {
        const chip = document.createElement('span');
        chip.className = 'oi-attachment';
        chip.textContent = a.name;
        const remove = document.createElement('button');
        remove.type = 'button';
        remove.textContent = '✕';
        remove.title = 'Remove';
        remove.addEventListener('click', () => { attached.splice(i, 1); showAttached(); });
        chip.append(remove);
        return chip;
    }));
    attachedBox.hidden = attached.length === 0;
}

function attach(files: Iterable<File>): boolean {
    let taken = false;
    for (const file of files) {
        if (!IMAGE_TYPES.includes(file.type)) continue;
        taken = true;
        if (file.size > MAX_IMAGE) {
            showError(`${file.name || 'the image'}: over the 10 MB an image may have`);
            continue;
        }
        const reader = new FileReader();
        reader.onload = () => {
            const url = String(reader.result);
            attached.push({ name: file.name || `image ${attached.length + 1}`, mimeType: file.type, data: url.slice(url.indexOf(',') + 1) });
            showAttached();
        };
        reader.readAsDataURL(file);
    }
    return taken;
}

input.addEventListener('paste', (e: ClipboardEvent) => {
    const files = [...(e.clipboardData?.items ?? [])].filter((i) => i.kind === 'file').map((i) => i.getAsFile()).filter((f): f is File => f !== null);
    if (attach(files)) e.preventDefault();
});
input.addEventListener('dragover', (e: DragEvent) => { if (e.dataTransfer?.types.includes('Files')) e.preventDefault(); });
input.addEventListener('drop', (e: DragEvent) => {
    if (attach(e.dataTransfer?.files ?? [])) e.preventDefault();
});

const sent: string[] = [];
let cursor = 0;

/** Send the message; a proposal that waits is skipped with it as feedback (the server does so). */
function send(): void {
    const text = input.value;
    if (!text.trim() || status.activity === 'thinking' || status.activity === 'running') return;
    const waiting = [...log.querySelectorAll<HTMLElement>('.oi-proposal')].filter((b) => b.querySelector('.oi-actions'));
    for (const box of waiting) {
        box.classList.add('oi-skipped');
        answered(box, 'skipped');
    }
    if (waiting.length) {
        log.append(el('div', 'oi-notice', 'Skipped the proposal above: your message goes to the model as feedback instead.'));
    }
    const attachments = attached.map(({ data, mimeType }) => ({ data, mimeType }));
    attached = [];
    showAttached();
    vscode.postMessage(attachments.length ? { type: 'send', text, attachments } : { type: 'send', text });
    sent.push(text);
    cursor = sent.length;
    input.value = '';
}

input.addEventListener('keydown', (e: KeyboardEvent) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send();
    } else if (e.key === 'ArrowUp' && input.selectionStart === 0 && input.selectionEnd === 0 && cursor > 0) {
        e.preventDefault();
        input.value = sent[--cursor];
    } else if (e.key === 'ArrowDown' && input.selectionStart === input.value.length && cursor < sent.length) {
        e.preventDefault();
        cursor++;
        input.value = cursor < sent.length ? sent[cursor] : '';
    }
});
$('oi-stop').addEventListener('click', () => vscode.postMessage({ type: 'stop' }));
// While the model answers or code runs, Send is Stop.
sendButton.addEventListener('click', () => {
    if (status.activity === 'thinking' || status.activity === 'running') vscode.postMessage({ type: 'stop' });
    else send();
});
folderSelect.addEventListener('change', () => vscode.postMessage({ type: 'switchFolder', uri: folderSelect.value }));
vscode.postMessage({ type: 'ready' });
