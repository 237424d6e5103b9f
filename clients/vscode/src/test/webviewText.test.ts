import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextLabel, outcomeNote, withoutDisplayNotes } from '../webview/history';
import { runLabel } from '../webview/status';
import { usageText } from '../webview/usage';
import { outputRuns } from '../webview/output';

test('a selection\'s context reads file:lines', () => {
    const range = (a: number, b: number, endChar = 5) => ({ start: { line: a, character: 0 }, end: { line: b, character: endChar } });
    assert.equal(contextLabel({ uri: 'file:///w/p/numbers.py', range: range(0, 1) }), 'numbers.py:1-2');
    assert.equal(contextLabel({ uri: 'file:///w/p/numbers.py', range: range(3, 3) }), 'numbers.py:4');
    // A selection that ends at the start of a line does not take that line.
    assert.equal(contextLabel({ uri: 'file:///w/p/a%20b.py', range: range(0, 2, 0) }), 'a b.py:1-2');
    assert.equal(contextLabel({ uri: 'file:///w/p/numbers.py' }), 'numbers.py');
    assert.equal(contextLabel({ language: 'python' }), undefined);
    assert.equal(contextLabel(undefined), undefined);
});

test('every outcome has the note the live view ends with', () => {
    assert.deepEqual(['ran', 'edited', 'autoRan', 'skipped', 'stopped', 'timedOut', 'error', 'expired', undefined].map(outcomeNote),
        ['ran', 'ran, edited', 'auto-run', 'skipped', 'stopped', 'timed out', 'ran, failed', 'ended', 'proposed']);
});

test('saved output loses the mentions of displays the view draws itself', () => {
    assert.equal(withoutDisplayNotes('drawing\n\n[an image was displayed to the user]\n'), 'drawing\n');
    assert.equal(withoutDisplayNotes('[html was displayed to the user]\nafter\n'), 'after\n');
    assert.equal(withoutDisplayNotes('a [note] stays\n'), 'a [note] stays\n');
});

test('a run reads "python · 12 s · 98% CPU · 512 MB"', () => {
    assert.equal(runLabel('python', 12.4, { cpuPercent: 98.2, rss: 512 * 1024 * 1024 }), 'python · 12 s · 98% CPU · 512 MB');
    assert.equal(runLabel('shell', 1.6), 'shell · 2 s');
    assert.equal(runLabel('', 0, { cpuPercent: 0 }), 'code · 0 s · 0% CPU');
});

test('the usage line: cached and reasoning tokens and the cache\'s saving when the provider reports them', () => {
    const base = { promptTokens: 1200, completionTokens: 56, calls: 1 };
    assert.equal(usageText({ ...base, cost: 0.0021 }), '1,256 tokens (1,200 in, 56 out) · $0.0021');
    assert.equal(usageText({ ...base, calls: 2, cost: 0.0021, cachedTokens: 1000, reasoningTokens: 40, cacheSaved: 0.003 }),
        '1,256 tokens (1,200 in, 1,000 cached; 56 out, 40 reasoning) · 2 model calls · $0.0021 (cache saved $0.0030)');
    // A write that cost more than it saved is not a saving.
    assert.equal(usageText({ ...base, cost: 0.05, cacheWriteTokens: 1200, cacheSaved: -0.001 }), '1,256 tokens (1,200 in, 56 out) · $0.05');
});

test('an output\'s MCP tool-call lines are runs of their own, the text unchanged', () => {
    const text = 'listing\n⚙ filesystem.list_directory(path=\'/w\') · 0.12 s\n⚙ filesystem.write_file(path=\'/w/n.md\', content=\'x\') · 0.03 s\n3 entries, 1 written\nnot ⚙ a call\n';
    const runs = outputRuns(text);
    assert.deepEqual(runs.map((r) => r.tool), [false, true, false]);
    assert.equal(runs[1].text.split('\n').filter(Boolean).length, 2);
    assert.equal(runs.map((r) => r.text).join(''), text);
    // A call line streamed without its newline yet, and output with no calls at all.
    assert.deepEqual(outputRuns('a\n⚙ memory.read_graph()'), [{ text: 'a\n', tool: false }, { text: '⚙ memory.read_graph()', tool: true }]);
    assert.deepEqual(outputRuns('plain\n'), [{ text: 'plain\n', tool: false }]);
    assert.deepEqual(outputRuns(''), []);
});
