import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { type PythonEnvironments, PythonSync } from '../pythonSetting';

/** A stand-in for ms-python.python's `exports.environments`: one environment per folder. */
function fakePythonExtension(active: Record<string, string>) {
    const listeners: ((event: unknown) => unknown)[] = [];
    const envs: PythonEnvironments = {
        getActiveEnvironmentPath: (resource) => ({ path: active[String(resource)] }),
        resolveEnvironment: async (env) => {
            const path = typeof env === 'string' ? env : env.path;
            // A venv folder resolves to the interpreter inside it.
            return { executable: { uri: { fsPath: path.endsWith('/bin/python') ? path : `${path}/bin/python` } } };
        },
        onDidChangeActiveEnvironmentPath: (listener) => {
            listeners.push(listener);
            return { dispose: () => listeners.splice(listeners.indexOf(listener), 1) };
        },
    };
    const select = (folder: string, path: string) => {
        active[folder] = path;
        for (const l of [...listeners]) l({ path, resource: folder });
    };
    return { envs, select, listeners };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 10));

test("each folder gets the Python extension's interpreter, again when another is selected", async () => {
    const ext = fakePythonExtension({ A: '/a/.venv', B: '/usr/bin/python' });
    const sent: [string, string][] = [];
    const sync = new PythonSync(ext.envs, () => [{ uri: 'file:///a', resource: 'A' }, { uri: 'file:///b', resource: 'B' }],
        async (ws, python) => { sent.push([ws, python]); });
    await sync.sync();
    assert.deepEqual(sent, [['file:///a', '/a/.venv/bin/python'], ['file:///b', '/usr/bin/python']]);
    await sync.sync();
    assert.equal(sent.length, 2); // nothing changed, nothing sent
    const watching = sync.watch();
    ext.select('B', '/b/venv');
    await settle();
    assert.deepEqual(sent.slice(2), [['file:///b', '/b/venv/bin/python']]);
    watching?.dispose();
    assert.equal(ext.listeners.length, 0);
    sync.reset(); // a restarted server is sent all of them again
    await sync.sync();
    assert.equal(sent.length, 5);
});

test('oi.python wins over the Python extension; without the extension only oi.python is sent', async () => {
    const ext = fakePythonExtension({ A: '/a/.venv' });
    const sent: [string, string][] = [];
    let configured: string | undefined = '/opt/py/bin/python3';
    const folders = () => [{ uri: 'file:///a', resource: 'A', configured }];
    const sync = new PythonSync(ext.envs, folders, async (ws, python) => { sent.push([ws, python]); });
    await sync.sync();
    assert.deepEqual(sent, [['file:///a', '/opt/py/bin/python3']]);
    configured = undefined; // the user cleared oi.python: the selected interpreter again
    await sync.sync();
    assert.deepEqual(sent[1], ['file:///a', '/a/.venv/bin/python']);

    const none: [string, string][] = [];
    const alone = new PythonSync(undefined, () => [{ uri: 'file:///a', resource: 'A' }], async (ws, p) => { none.push([ws, p]); });
    await alone.sync();
    assert.equal(none.length, 0);
    assert.equal(alone.watch(), undefined);
    const set = new PythonSync(undefined, () => [{ uri: 'file:///a', resource: 'A', configured: 'py' }], async (ws, p) => { none.push([ws, p]); });
    await set.sync();
    assert.deepEqual(none, [["file:///a", "py"]] as [string, string][]);
});

test('a failing Python extension leaves the server its own choice', async () => {
    const envs: PythonEnvironments = { getActiveEnvironmentPath: () => { throw new Error('not ready'); } };
    const sent: string[] = [];
    await new PythonSync(envs, () => [{ uri: 'file:///a', resource: 'A' }], async (_ws, p) => { sent.push(p); }).sync();
    assert.deepEqual(sent, []);
});
