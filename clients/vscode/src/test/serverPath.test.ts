import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { findServer, type LookupEnv } from '../serverPath';

function env(executables: string[], pathVar: string | undefined, platform: NodeJS.Platform = 'linux'): LookupEnv {
    return { isExecutable: (f) => executables.includes(f), platform, pathVar };
}

test('the setting wins over the interpreter and PATH', () => {
    const found = findServer({ command: '/opt/oi-lsp', args: ['-v'] }, '/venv/bin/python', ['--x'],
        env(['/venv/bin/oi-lsp', '/usr/bin/oi-lsp'], '/usr/bin'));
    assert.deepEqual(found, { ok: true, server: { command: '/opt/oi-lsp', args: ['-v'], source: 'setting' } });
});

test('the oi-lsp beside the selected Python interpreter comes next', () => {
    const found = findServer(undefined, '/venv/bin/python', ['--x'], env(['/venv/bin/oi-lsp', '/usr/bin/oi-lsp'], '/usr/bin'));
    assert.deepEqual(found, { ok: true, server: { command: '/venv/bin/oi-lsp', args: ['--x'], source: 'interpreter' } });
});

test('then PATH, in its order, skipping empty entries', () => {
    const found = findServer(undefined, '/venv/bin/python', [], env(['/b/oi-lsp', '/c/oi-lsp'], ':/a:/b:/c'));
    assert.deepEqual(found, { ok: true, server: { command: '/b/oi-lsp', args: [], source: 'path' } });
});

test('Windows: Scripts\\oi-lsp.exe and ; in PATH', () => {
    const found = findServer(undefined, undefined, [], env(['C:\\py\\Scripts/oi-lsp.exe'], 'C:\\tools;C:\\py\\Scripts', 'win32'));
    assert.equal(found.ok, true);
    assert.equal(found.ok && found.server.source, 'path');
});

test('neither: a message that says where it looked and what to do', () => {
    const found = findServer(undefined, '/venv/bin/python', [], env([], '/usr/bin'));
    assert.equal(found.ok, false);
    assert.match(!found.ok ? found.message : '', /selected Python interpreter \(\/venv\/bin\/python\) or on PATH/);
    assert.match(!found.ok ? found.message : '', /oi\.serverPath/);
    const noPython = findServer(undefined, undefined, [], env([], undefined));
    assert.match(!noPython.ok ? noPython.message : '', /not found on PATH/);
    assert.equal(!noPython.ok && noPython.canInstall, false);
});

test('after Install oi-lsp: the one in the extension\'s environment, last', () => {
    const venv = '/storage/venv';
    const found = findServer(undefined, undefined, [], env(['/storage/venv/bin/oi-lsp'], '/usr/bin'), venv);
    assert.equal(found.ok && found.server.command, '/storage/venv/bin/oi-lsp');
    assert.equal(found.ok && found.server.source, 'installed');
    const onPathFirst = findServer(undefined, undefined, [], env(['/storage/venv/bin/oi-lsp', '/usr/bin/oi-lsp'], '/usr/bin'), venv);
    assert.equal(onPathFirst.ok && onPathFirst.server.source, 'path');
    const none = findServer(undefined, undefined, [], env([], '/usr/bin'), venv);
    assert.equal(!none.ok && none.canInstall, true);
    assert.match(!none.ok ? none.message : '', /Install it here/);
});
