// The status bar: what the current folder's session is doing, and a Stop button while it works.
import * as vscode from 'vscode';
import type { Status } from './router';

export class StatusBar implements vscode.Disposable {
    private readonly activity = vscode.window.createStatusBarItem('oi.status', vscode.StatusBarAlignment.Left, 100);
    private readonly stop = vscode.window.createStatusBarItem('oi.stop', vscode.StatusBarAlignment.Left, 99);

    constructor() {
        this.activity.name = 'Open Interpreter';
        this.activity.command = 'oi.openChat';
        this.stop.name = 'Open Interpreter: Stop';
        this.stop.text = '$(debug-stop) Stop';
        this.stop.tooltip = 'Stop the model and the running code (Open Interpreter)';
        this.stop.command = 'oi.stop';
    }

    show(status: Status): void {
        if (status === 'idle') {
            this.activity.hide();
            this.stop.hide();
            return;
        }
        this.activity.text = status === 'thinking' ? '$(loading~spin) Open Interpreter: model thinking'
            : status === 'waiting' ? '$(question) Open Interpreter: a proposal waits for you' : '$(sync~spin) Open Interpreter: running';
        this.activity.tooltip = 'Open the chat';
        this.activity.show();
        // A waiting proposal is answered in the chat, not stopped.
        if (status === 'waiting') this.stop.hide();
        else this.stop.show();
    }

    dispose(): void {
        this.activity.dispose();
        this.stop.dispose();
    }
}
