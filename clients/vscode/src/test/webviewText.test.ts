import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { contextLabel, outcomeNote, withoutDisplayNotes } from '../webview/history';
import { runLabel } from '../webview/status';

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
