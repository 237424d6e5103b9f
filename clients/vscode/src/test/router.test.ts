import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { folderOf, Router, sameFolder, selectionChat } from '../router';

const A = 'file:///work/a';
const B = 'file:///work/b';
const folders = [{ uri: A, name: 'a' }, { uri: B, name: 'b' }];

test('notifications of the current folder reach the view; other folders only update status', () => {
    const router = new Router(folders);
    assert.equal(router.current, A);
    const chunk = { turnId: 't1', workspace: A + '/', role: 'assistant', type: 'message', content: 'hi' };
    assert.deepEqual(router.notification('oi/stream', chunk), { type: 'stream', chunk });
    assert.equal(router.notification('oi/stream', { ...chunk, workspace: B }), undefined);
    assert.equal(router.notification('oi/turn', { turnId: 't2', workspace: B, kind: 'execute', status: 'running' }), undefined);
    assert.equal(router.status(), 'idle');
    router.switchTo(B);
    assert.equal(router.status(), 'running');
    assert.equal(router.notification('oi/other', chunk), undefined);
    assert.equal(router.notification('oi/stream', null), undefined);
});

test('status follows oi/turn and the status chunks', () => {
    const router = new Router(folders);
    router.notification('oi/turn', { turnId: 't', workspace: A, kind: 'chat', status: 'running' });
    assert.equal(router.status(), 'thinking');
    router.notification('oi/stream', { turnId: 't', workspace: A, role: 'computer', type: 'status', format: 'running' });
    assert.equal(router.status(), 'running');
    router.notification('oi/turn', { turnId: 't', workspace: A, kind: 'chat', status: 'done' });
    assert.equal(router.status(), 'idle');
});

test('view actions become oi/* requests for the current folder', () => {
    const router = new Router(folders);
    assert.deepEqual(router.request({ type: 'send', text: '  hello \n' }), { method: 'oi/chat', params: { message: 'hello', workspace: A } });
    assert.equal(router.request({ type: 'send', text: '  \n' }), undefined);
    const image = { data: 'iVBORw0KGgo=', mimeType: 'image/png' };
    assert.deepEqual(router.request({ type: 'send', text: 'what is it?', attachments: [image] }),
        { method: 'oi/chat', params: { message: 'what is it?', attachments: [image], workspace: A } });
    assert.deepEqual(router.request({ type: 'send', text: 'none', attachments: [] }),
        { method: 'oi/chat', params: { message: 'none', workspace: A } });
    assert.deepEqual(router.request({ type: 'approve', proposalId: 'p', decision: 'edit', code: 'x = 2' }),
        { method: 'oi/approve', params: { proposalId: 'p', decision: 'edit', code: 'x = 2', workspace: A } });
    assert.deepEqual(router.request({ type: 'approve', proposalId: 'p', decision: 'run' }),
        { method: 'oi/approve', params: { proposalId: 'p', decision: 'run', workspace: A } });
    assert.deepEqual(router.request({ type: 'approve', proposalId: 'p', decision: 'run', always: 'command' }),
        { method: 'oi/approve', params: { proposalId: 'p', decision: 'run', always: 'command', workspace: A } });
    router.switchTo(B);
    assert.deepEqual(router.request({ type: 'stop' }), { method: 'oi/stop', params: { workspace: B } });
    assert.deepEqual(router.request({ type: 'reset' }), { method: 'oi/reset', params: { workspace: B } });
    assert.deepEqual(new Router([]).request({ type: 'stop' }), { method: 'oi/stop', params: {} });
});

test('unanswered proposals are kept for a reloaded view until answered or the turn ends', () => {
    const router = new Router(folders);
    const p1 = { turnId: 't1', workspace: A, proposalId: 'p1', language: 'python', code: '1', autoRun: false };
    const p2 = { turnId: 't2', workspace: B, proposalId: 'p2', language: 'python', code: '2', autoRun: false };
    const auto = { turnId: 't1', workspace: A, proposalId: 'auto-1', language: 'python', code: '3', autoRun: true };
    for (const p of [p1, p2, auto]) router.notification('oi/proposal', p);
    assert.deepEqual(router.pendingProposals(), [p1]);
    router.request({ type: 'approve', proposalId: 'p1', decision: 'skip' });
    assert.deepEqual(router.pendingProposals(), []);
    router.switchTo(B);
    assert.deepEqual(router.pendingProposals(), [p2]);
    router.notification('oi/turn', { turnId: 't2', workspace: B, kind: 'chat', status: 'stopped' });
    assert.deepEqual(router.pendingProposals(), []);
});

test('switching folders: only to a known folder; a removed current folder falls back to the first', () => {
    const router = new Router(folders);
    assert.equal(router.switchTo('file:///elsewhere'), false);
    assert.equal(router.switchTo(B + '/'), true);
    assert.equal(router.current, B);
    router.setFolders([folders[0]]);
    assert.equal(router.current, A);
});

test('folder URIs compare by path; a document belongs to the deepest folder holding it', () => {
    assert.equal(sameFolder('file:///work/a%20b/', 'file:///work/a b'), true);
    assert.equal(sameFolder('file:///work/a', 'file:///work/ab'), false);
    assert.equal(sameFolder(undefined, A), false);
    const nested = [...folders, { uri: 'file:///work/a/inner', name: 'inner' }];
    assert.equal(folderOf('file:///work/a/inner/x.py', nested)?.name, 'inner');
    assert.equal(folderOf('file:///work/a/x.py', nested)?.name, 'a');
    assert.equal(folderOf('file:///work/abc/x.py', nested), undefined);
    assert.equal(folderOf('untitled:Untitled-1', nested), undefined);
});

test('Run Selection as Instruction: the selection is the message, the file, language and range the context', () => {
    const range = { start: { line: 2, character: 0 }, end: { line: 4, character: 3 } };
    assert.deepEqual(selectionChat('sum the column', { uri: A + '/x.py', language: 'python' }, range, A), {
        message: 'sum the column', workspace: A,
        context: { uri: A + '/x.py', language: 'python', range },
    });
});

test('a long run\'s figures (oi/resources) reach the view; a waiting proposal is a status of its own', () => {
    const router = new Router(folders);
    const repl = { language: 'python', pid: 7, alive: true, busy: true, cpuPercent: 98.2, rss: 536870912, uptime: 30 };
    assert.deepEqual(router.notification('oi/resources', { workspace: A, turnId: 't', repl, elapsed: 12.4 }),
        { type: 'resources', repl, elapsed: 12.4 });
    assert.equal(router.notification('oi/resources', { workspace: B, turnId: 't', repl, elapsed: 1 }), undefined);
    assert.deepEqual(router.notification('oi/resources', { workspace: A, repl: 'bad' }), { type: 'resources', repl: {} });
    router.notification('oi/stream', { turnId: 't', workspace: A, role: 'computer', type: 'status', format: 'waiting' });
    assert.equal(router.status(), 'waiting');
});

test('oi/answered reaches the view and the proposal is no longer offered after a reload', () => {
    const router = new Router(folders);
    const p = { workspace: A, turnId: 't', proposalId: 'p1', language: 'python', code: '1' };
    router.notification('oi/proposal', p);
    assert.deepEqual(router.pendingProposals(), [p]);
    const answer = { workspace: A, turnId: 't', proposalId: 'p1', decision: 'skip' };
    assert.deepEqual(router.notification('oi/answered', answer), { type: 'answered', proposalId: 'p1', decision: 'skip' });
    assert.deepEqual(router.pendingProposals(), []);
    assert.equal(router.notification('oi/answered', { ...answer, workspace: B }), undefined);
    assert.equal(router.notification('oi/answered', { workspace: A, decision: 'run' }), undefined);
});
