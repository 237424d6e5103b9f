import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { chatHtml } from '../page';

test('the page allows only its own resources and the nonced script', () => {
    const html = chatHtml({ cspSource: 'vscode-resource:', nonce: 'abc123', script: 'vscode-resource:/dist/webview.js', style: 'vscode-resource:/media/chat.css' });
    const csp = /http-equiv="Content-Security-Policy" content="([^"]*)"/.exec(html)?.[1] ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'nonce-abc123'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
    assert.match(html, /<script nonce="abc123" src="vscode-resource:\/dist\/webview.js"><\/script>/);
    assert.equal((html.match(/<script/g) ?? []).length, 1);
});
