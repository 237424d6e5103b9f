// What the chat's code blocks and outputs offer beside Run: copy, insert at the cursor, open in
// an editor, and open or save an image a run displayed.
import * as vscode from 'vscode';
import { languageId } from './editTab';
import type { CodeAction } from './router';

function imageBytes(data: string, format: string): { bytes: Uint8Array; ext: string } {
    if (format === 'svg') return { bytes: new TextEncoder().encode(data), ext: 'svg' };
    return { bytes: Buffer.from(data, 'base64'), ext: format === 'base64.jpeg' ? 'jpg' : 'png' };
}

let opened = 0;

export async function runCodeAction(action: CodeAction, storage: vscode.Uri): Promise<void> {
    switch (action.type) {
        case 'copy':
            await vscode.env.clipboard.writeText(action.text);
            void vscode.window.setStatusBarMessage('Open Interpreter: copied', 2000);
            return;
        case 'insert': {
            const editor = vscode.window.visibleTextEditors.find((e) => e === vscode.window.activeTextEditor) ?? vscode.window.visibleTextEditors[0];
            if (!editor) {
                void vscode.window.showInformationMessage('Open Interpreter: open an editor to insert the code into.');
                return;
            }
            await editor.edit((edit) => edit.replace(editor.selection, action.text));
            return;
        }
        case 'openCode': {
            const doc = await vscode.workspace.openTextDocument({ language: languageId(action.language), content: action.text });
            await vscode.window.showTextDocument(doc, { preview: false });
            return;
        }
        case 'openImage': {
            const { bytes, ext } = imageBytes(action.data, action.format);
            const dir = vscode.Uri.joinPath(storage, 'images');
            await vscode.workspace.fs.createDirectory(dir);
            const file = vscode.Uri.joinPath(dir, `image-${Date.now()}-${++opened}.${ext}`);
            await vscode.workspace.fs.writeFile(file, bytes);
            await vscode.commands.executeCommand('vscode.open', file);
            return;
        }
        case 'saveImage': {
            const { bytes, ext } = imageBytes(action.data, action.format);
            const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
            const target = await vscode.window.showSaveDialog({
                title: 'Save the image', filters: { Image: [ext] },
                ...(folder ? { defaultUri: vscode.Uri.joinPath(folder, `image.${ext}`) } : {}),
            });
            if (target) await vscode.workspace.fs.writeFile(target, bytes);
            return;
        }
    }
}
