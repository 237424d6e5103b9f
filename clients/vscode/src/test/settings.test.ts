import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { autoRunAllowed, type ConfigReader, configuredServer, folderUpdate, serverSettings, settingsUpdate } from '../settings';

function config(values: Record<string, unknown>): ConfigReader {
    return { get: <T>(key: string) => values[key] as T | undefined };
}

test('the oi settings reach the server with the API key, empty values left out', () => {
    const settings = serverSettings(config({
        model: ' openai/scripted ', apiBase: 'http://127.0.0.1:9/v1', autoRun: true, executionTimeout: 30,
        serverPath: '/x/oi-lsp', python: ' .venv/bin/python ',
    }), true, 'sk-secret');
    assert.deepEqual(settings, {
        model: 'openai/scripted', apiBase: 'http://127.0.0.1:9/v1', autoRun: true, executionTimeout: 30,
        apiKey: 'sk-secret', trusted: true, python: '.venv/bin/python',
    });
    assert.deepEqual(serverSettings(config({ model: '', apiBase: '   ', executionTimeout: null }), true),
        { autoRun: false, trusted: true });
});

test('approval rules reach the server as they are (it checks them); none, nothing sent', () => {
    const rules = [{ language: 'shell', pattern: '^git status$', action: 'allow' }, { pattern: 'rm', action: 'deny' }];
    assert.deepEqual(serverSettings(config({ autoRunRules: rules }), true).autoRunRules, rules);
    assert.equal('autoRunRules' in serverSettings(config({ autoRunRules: [] }), true), false);
    assert.equal('autoRunRules' in serverSettings(config({ autoRunRules: 'x' }), true), false);
});

test('oi.vision: on and off are sent, auto is the server\'s default (left out)', () => {
    assert.equal(serverSettings(config({ vision: 'on' }), true).vision, true);
    assert.equal(serverSettings(config({ vision: 'off' }), true).vision, false);
    assert.equal('vision' in serverSettings(config({ vision: 'auto' }), true), false);
    assert.equal('vision' in serverSettings(config({ vision: 'yes' }), true), false);
});

test('an untrusted workspace says so and never auto-runs', () => {
    assert.deepEqual(serverSettings(config({ autoRun: true }), false), { autoRun: false, trusted: false });
    assert.equal(autoRunAllowed(false), false);
    assert.equal(autoRunAllowed(true), true);
});

test('a wrong type in settings.json is not passed on (the server would refuse it)', () => {
    const settings = serverSettings(config({ model: 42, autoRun: 'yes', executionTimeout: -1 }), true);
    assert.deepEqual(settings, { autoRun: false, trusted: true });
});

test('a cleared setting is sent as null so the server forgets it; keys never sent stay absent', () => {
    const first = settingsUpdate(undefined, serverSettings(config({ model: 'm', apiBase: 'http://a' }), true, 'k'));
    assert.deepEqual(first, { model: 'm', apiBase: 'http://a', apiKey: 'k', autoRun: false, trusted: true });
    const second = settingsUpdate(first, serverSettings(config({ model: 'm' }), true));
    assert.deepEqual(second, { model: 'm', apiBase: null, apiKey: null, autoRun: false, trusted: true });
    assert.equal('executionTimeout' in second, false);
});

test('the server command from settings, with its arguments', () => {
    assert.equal(configuredServer(config({ serverPath: '  ' })), undefined);
    assert.deepEqual(configuredServer(config({ serverPath: '/venv/bin/oi-lsp', serverArgs: ['--log-level', 'debug', 3] })),
        { command: '/venv/bin/oi-lsp', args: ['--log-level', 'debug'] });
});

test('a folder sends only what it sets; what it stops setting falls back to what it sees now', () => {
    const reader = (values: Record<string, unknown>) => ({ get: <T>(key: string) => values[key] as T | undefined });
    const first = folderUpdate(reader({ model: 'openai/a' }), reader({ model: 'openai/a', apiBase: 'http://x' }), true, undefined);
    assert.deepEqual(first, { model: 'openai/a' }); // no trusted (oi/configure refuses it), no autoRun unset
    const cleared = folderUpdate(reader({}), reader({ model: 'gpt-4o-mini' }), true, first);
    assert.deepEqual(cleared, { model: 'gpt-4o-mini' });
    const gone = folderUpdate(reader({}), reader({}), true, first);
    assert.deepEqual(gone, { model: null });
    assert.deepEqual(folderUpdate(reader({ autoRun: true }), reader({ autoRun: true }), false, undefined), { autoRun: false });
});

test('model settings: reasoning effort, litellm options, caching on/off, retries; defaults left out', () => {
    const sent = serverSettings(config({
        reasoningEffort: 'high', modelOptions: { top_p: 0.9, extra_headers: { 'X-Team': 'data' } },
        promptCaching: 'off', modelRetries: 0,
    }), true);
    assert.equal(sent.reasoningEffort, 'high');
    assert.deepEqual(sent.modelOptions, { top_p: 0.9, extra_headers: { 'X-Team': 'data' } });
    assert.equal(sent.promptCaching, false);
    assert.equal(sent.modelRetries, 0);
    assert.equal(serverSettings(config({ promptCaching: 'on' }), true).promptCaching, true);
    const defaults = serverSettings(config({ reasoningEffort: 'default', modelOptions: {}, promptCaching: 'auto' }), true);
    assert.deepEqual(defaults, { autoRun: false, trusted: true });
    assert.equal('modelOptions' in serverSettings(config({ modelOptions: ['top_p'] }), true), false);
});

test('MCP servers reach the server as settings.json gives them; none or a wrong type, nothing sent', () => {
    const servers = {
        filesystem: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/w'], env: { DEBUG: '1' } },
        search: { type: 'http', url: 'https://mcp.example.com/mcp', headers: { Authorization: 'Bearer t' }, confirm: 'always', timeout: 20 },
    };
    assert.deepEqual(serverSettings(config({ mcpServers: servers }), true).mcpServers, servers);
    for (const value of [{}, [], null, 'filesystem', undefined]) {
        assert.equal('mcpServers' in serverSettings(config({ mcpServers: value }), true), false, String(value));
    }
    // Removed from settings.json: sent as null, so the server stops using them.
    const first = settingsUpdate(undefined, serverSettings(config({ mcpServers: servers }), true));
    assert.equal(settingsUpdate(first, serverSettings(config({}), true)).mcpServers, null);
    // A folder of a multi-root workspace may set its own.
    assert.deepEqual(folderUpdate(config({ mcpServers: servers }), config({}), true, undefined), { mcpServers: servers });
});
