// The chat page. It only renders what the extension posts (docs/protocol.md's notifications and
// oi/history) and posts the user's actions back; it never talks to the server itself.
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import css from 'highlight.js/lib/languages/css';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import plaintext from 'highlight.js/lib/languages/plaintext';
import powershell from 'highlight.js/lib/languages/powershell';
import python from 'highlight.js/lib/languages/python';
import r from 'highlight.js/lib/languages/r';
import ruby from 'highlight.js/lib/languages/ruby';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';
import { Marked } from 'marked';
import { markedHighlight } from 'marked-highlight';
import { errorBox } from './errors';
import { showModel, welcome } from './header';
import { showUsage, type Usage } from './usage';

interface VsCodeApi { postMessage(message: unknown): void }
declare function acquireVsCodeApi(): VsCodeApi;

type Chunk = { turnId?: string; role?: string; type?: string; format?: string; content?: string; start?: boolean; end?: boolean };
type Risk = { level: 'low' | 'medium' | 'high'; reasons: string[] };
type Proposal = { turnId: string; proposalId: string; language: string; code: string; autoRun?: boolean; risk?: Risk; sandboxBlocked?: string; command?: string };
type Message = { role: string; type: string; format?: string; content: string; turnId?: string };

const vscode = acquireVsCodeApi();
const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const log = $<HTMLElement>('oi-log');
const input = $<HTMLTextAreaElement>('oi-input');
const folderSelect = $<HTMLSelectElement>('oi-folder');
const statusBox = $<HTMLElement>('oi-status');
const statusText = $<HTMLElement>('oi-status-text');

// The languages oi-lsp runs (and a few that models write about); others show as plain text.
for (const [name, lang] of Object.entries({
    bash, css, java, javascript, json, markdown, plaintext, powershell, python, r, ruby, shell, sql, typescript, xml, yaml,
})) hljs.registerLanguage(name, lang);
hljs.registerAliases(['pwsh', 'ps1'], { languageName: 'powershell' });
hljs.registerAliases(['node'], { languageName: 'javascript' });

/** Highlighted HTML of code (highlight.js escapes the code itself). */
function highlight(code: string, language: string): string {
    const known = hljs.getLanguage(language) ? language : 'plaintext';
    return hljs.highlight(code, { language: known, ignoreIllegals: true }).value;
}

const markdownParser = new Marked(
    { gfm: true, breaks: false },
    markedHighlight({ emptyLangClass: 'hljs', langPrefix: 'hljs language-', highlight }),
);

/** Markdown to safe HTML: scripts, event handlers and javascript: URLs are removed. */
export function renderMarkdown(text: string): string {
    return DOMPurify.sanitize(markdownParser.parse(text, { async: false }));
}

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

function codeBlock(language: string, code: string, cls: string): HTMLElement {
    const box = el('div', `oi-code ${cls}`);
    box.dataset.language = language;
    const head = el('div', 'oi-code-head');
    head.append(el('span', 'oi-lang', language));
    box.append(head);
    const pre = el('pre', 'oi-source');
    pre.append(el('code', `hljs language-${language}`));
    box.append(pre);
    setCode(box, code);
    log.append(box);
    lastCode = box;
    return box;
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
        details.append(el('summary', undefined, 'Output'));
        pre = el('pre');
        details.append(pre);
        host.append(details);
    }
    return pre;
}

function imageSrc(format: string | undefined, data: string): string {
    if (format === 'svg') return `data:image/svg+xml;base64,${btoa(unescape(encodeURIComponent(data)))}`;
    return `data:image/${format === 'base64.jpeg' ? 'jpeg' : 'png'};base64,${data.replace(/\s+/g, '')}`;
}

function addImage(format: string | undefined, data: string): void {
    const img = el('img', 'oi-image');
    img.alt = 'image output';
    img.src = imageSrc(format, data);
    (lastCode ?? log).append(img);
}

function addHtml(html: string): void {
    const box = el('div', 'oi-html');
    box.innerHTML = DOMPurify.sanitize(html);
    (lastCode ?? log).append(box);
}

function openBlock(c: Chunk): Block {
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
        return { kind: 'confirmation', node: codeBlock(c.format ?? 'text', '', 'oi-ran'), text: '' };
    }
    if (c.type === 'console') return { kind: 'console', node: outputOf(lastCode), text: '' };
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
        if (c.format === 'idle') log.querySelectorAll('.oi-active-line').forEach((m) => m.remove());
        return setStatus(c.format ?? 'idle');
    }
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
        if (block.kind === 'message') scheduleRender(block);
        else if (block.kind === 'console') {
            block.node.textContent = block.text;
            scrollDown();
        } else if (block.kind === 'confirmation') setCode(block.node, block.text);
    }
    if (c.end && block) {
        open.delete(k);
        if (block.kind === 'image') addImage(c.format, block.text);
        else if (block.kind === 'code' && c.format === 'html') addHtml(block.text);
        else if (block.kind === 'message') scheduleRender(block);
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
    const box = codeBlock(p.language, p.code, 'oi-proposal');
    box.dataset.proposalId = p.proposalId;
    box.dataset.turnId = p.turnId;
    if (p.risk && p.risk.level !== 'low') { // the server's risk check: always shown
        box.append(el('div', `oi-risk oi-risk-${p.risk.level}`,
            `Risk: ${p.risk.level} (${p.risk.reasons.join('; ')})`));
    }
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
    const decide = (decision: 'run' | 'skip' | 'edit' | 'outside', code?: string, remember?: 'command'): void => {
        vscode.postMessage({ type: 'approve', proposalId: p.proposalId, decision, code, ...(remember ? { always: remember } : {}) });
        if (decision === 'skip') {
            box.classList.add('oi-skipped');
            answered(box, 'skipped');
        } else {
            if (code !== undefined) {
                box.querySelector('.oi-edit-area')?.remove();
                setCode(box, code);
                box.querySelector<HTMLElement>('.oi-source')!.hidden = false;
            }
            answered(box, decision === 'edit' ? 'edited, running'
                : decision === 'outside' ? 'running outside the sandbox' : 'running');
            if (remember) {
                box.append(el('div', 'oi-always-note', p.command
                    ? `From now on \`${p.command}\` commands run here without asking.`
                    : 'From now on this exact code runs here without asking.'));
            }
            awaitingRun.set(p.turnId, box);
        }
    };
    const edit = (): void => {
        const area = el('textarea', 'oi-edit-area');
        area.value = p.code;
        area.rows = Math.min(20, p.code.split('\n').length + 1);
        area.spellcheck = false;
        const pre = box.querySelector<HTMLElement>('.oi-source')!;
        pre.hidden = true;
        pre.after(area);
        actions.replaceChildren(
            button('oi-run-edited', 'Run edited', () => decide('edit', area.value)),
            button('oi-skip', 'Skip', () => decide('skip')),
        );
        area.focus();
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
    actions.append(
        button('oi-run', 'Run', () => decide('run')),
        button('oi-skip', 'Skip', () => decide('skip')),
        button('oi-edit', 'Edit', edit),
    );
    if (trustedFolder) {
        const b = button('oi-always', always, () => decide('run', undefined, 'command'));
        b.title = p.command
            ? `Run it, and from now on run \`${p.command} ...\` commands in this folder without asking (a rule in .oi/profile.yaml)`
            : 'Run it, and from now on run this exact code in this folder without asking (a rule in .oi/profile.yaml)';
        actions.append(b);
    }
    box.append(actions);
    scrollDown();
}

/** A turn ended: its unanswered proposals can no longer be answered; what ran says so. */
function expire(turnId: string, status: string): void {
    const ended: Record<string, string> = status === 'stopped'
        ? { 'running': 'stopped', 'edited, running': 'edited, stopped' }
        : { 'running': 'ran', 'edited, running': 'ran, edited' };
    for (const box of log.querySelectorAll<HTMLElement>('.oi-proposal')) {
        if (box.dataset.turnId !== turnId) continue;
        if (box.querySelector('.oi-actions')) answered(box, 'expired');
        const note = box.querySelector('.oi-note');
        if (note?.textContent && ended[note.textContent]) note.textContent = ended[note.textContent];
    }
    awaitingRun.delete(turnId);
}

// Status, turns, errors -----------------------------------------------------------------------

function setStatus(status: string): void {
    statusBox.hidden = status === 'idle';
    statusText.textContent = status === 'thinking' ? 'Model thinking…' : status === 'running' ? 'Running…'
        : status === 'waiting' ? 'Waiting for your answer…' : '';
}

function turn(t: { turnId: string; kind?: string; status: string; error?: string; errorKind?: string; usage?: Usage }): void {
    if (t.status === 'running') return setStatus(t.kind === 'execute' ? 'running' : 'thinking');
    setStatus('idle');
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

function addUser(text: string): void {
    log.append(el('div', 'oi-user', text));
    scrollDown();
}

/** Code the user ran directly (Run Selection in Session): its output streams under it. */
function userRun(language: string, code: string): void {
    answered(codeBlock(language, code, 'oi-ran oi-user-run'), 'your run');
    scrollDown();
}

function clear(): void {
    log.replaceChildren();
    open.clear();
    awaitingRun.clear();
    lastCode = undefined;
}

/** The saved conversation (oi/history), rendered as the stream would have. */
function history(messages: Message[]): void {
    clear();
    for (const m of messages) {
        if (m.role === 'user' && m.type === 'message') addUser(m.content);
        else if (m.role === 'assistant' && m.type === 'message') {
            const node = el('div', 'oi-assistant oi-md');
            node.innerHTML = renderMarkdown(m.content);
            log.append(node);
        } else if (m.role === 'assistant' && m.type === 'code') {
            answered(codeBlock(m.format ?? 'text', m.content, 'oi-proposal oi-past'), 'proposed');
        } else if (m.role === 'computer' && m.type === 'confirmation') {
            // It belongs to the proposal just before it, if that one is not matched yet.
            const note = lastCode?.querySelector('.oi-note');
            const code = note?.textContent === 'proposed' ? codeOf(lastCode) : undefined;
            if (lastCode && code === m.content) lastCode.querySelector('.oi-note')!.textContent = 'ran';
            else if (lastCode && code !== undefined) {
                setCode(lastCode, m.content);
                lastCode.querySelector('.oi-note')!.textContent = 'ran, edited';
            } else answered(codeBlock(m.format ?? 'text', m.content, 'oi-ran'), 'ran');
        } else if (m.role === 'computer' && m.type === 'console') {
            const pre = outputOf(lastCode);
            pre.textContent = (pre.textContent ?? '') + m.content;
        } else if (m.role === 'computer' && m.type === 'image') addImage(m.format, m.content);
        else if (m.role === 'computer' && m.type === 'code' && m.format === 'html') addHtml(m.content);
    }
    if (!messages.length) log.append(welcome((x) => vscode.postMessage(x)));
    scrollDown();
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
        case 'history': return history(m.messages as Message[]);
        case 'user': return addUser(String(m.text));
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
input.addEventListener('keydown', (e: KeyboardEvent) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        const text = input.value;
        if (!text.trim()) return;
        const attachments = attached.map(({ data, mimeType }) => ({ data, mimeType }));
        attached = [];
        showAttached();
        vscode.postMessage(attachments.length ? { type: 'send', text, attachments } : { type: 'send', text });
        sent.push(text);
        cursor = sent.length;
        input.value = '';
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
folderSelect.addEventListener('change', () => vscode.postMessage({ type: 'switchFolder', uri: folderSelect.value }));
vscode.postMessage({ type: 'ready' });
