import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { errorAction, plainError, VIEW_COMMANDS } from '../errors';

test('each kind a user can fix gets the one button that fixes it', () => {
    assert.equal(errorAction('noApiKey')?.label, 'Set API Key');
    assert.equal(errorAction('authFailed')?.command, 'oi.setApiKey');
    assert.equal(errorAction('noModel')?.label, 'Select Model');
    assert.equal(errorAction('unreachable')?.label, 'Open Settings');
    assert.equal(errorAction('contextTooLong')?.command, 'oi.newConversation');
    assert.equal(errorAction('rateLimited'), undefined); // waiting is the fix
    assert.equal(errorAction(undefined), undefined);
    assert.equal(errorAction('toString'), undefined); // not a key of the prototype
});

test('the view may run only the buttons\' commands', () => {
    for (const kind of ['noApiKey', 'noModel', 'unreachable', 'contextTooLong']) {
        assert.ok(VIEW_COMMANDS.has(errorAction(kind)!.command));
    }
    assert.ok(!VIEW_COMMANDS.has('workbench.action.terminal.sendSequence'));
});

test('plain words: no backticks, no library class prefixes', () => {
    assert.equal(plainError('litellm.AuthenticationError: AuthenticationError: OpenAIException - bad `key`'),
        'bad key');
    assert.equal(plainError('No API key is set for the model gpt-4o.'), 'No API key is set for the model gpt-4o.');
});
