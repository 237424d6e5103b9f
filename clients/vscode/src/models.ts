// Select Model: a QuickPick fed by oi/models (the models local servers serve, the user's
// profiles) with a free-text entry; it sets `oi.model` for the chat's folder.
import * as vscode from 'vscode';

export interface LocalServer { name: string; url: string; up: boolean; models: string[]; error?: string }
export interface ModelsResult { local: LocalServer[]; model?: string; profiles: string[] }

/** What a pick sets: `oi.model` (and `oi.apiBase` for a local server's model), or `oi.profile`. */
export type Choice = { model: string; apiBase?: string } | { profile: string };

type Item = vscode.QuickPickItem & { choice?: Choice };

/** The items of the picker, from oi/models; `typed` is what the user wrote in the box. */
export function modelItems(result: ModelsResult, typed: string): Item[] {
    const items: Item[] = [];
    const text = typed.trim();
    if (text) items.push({ label: `$(edit) ${text}`, description: 'use this litellm model string', alwaysShow: true, choice: { model: text } });
    if (result.model) items.push({ label: `$(check) ${result.model}`, description: 'in use', choice: { model: result.model } });
    for (const server of result.local.filter((s) => s.up)) {
        items.push({ label: `${server.name} (${server.url})`, kind: vscode.QuickPickItemKind.Separator });
        for (const model of server.models) items.push({ label: model, description: server.name, choice: { model, apiBase: server.url } });
    }
    if (result.profiles.length) {
        items.push({ label: 'Profiles', kind: vscode.QuickPickItemKind.Separator });
        for (const profile of result.profiles) items.push({ label: `$(file) ${profile}`, description: 'profile', choice: { profile } });
    }
    items.push({ label: 'Hosted models', kind: vscode.QuickPickItemKind.Separator });
    for (const model of ['gpt-4o-mini', 'gpt-4o', 'claude-3-5-sonnet-latest', 'gemini/gemini-1.5-pro']) {
        items.push({ label: model, description: 'needs an API key (Set API Key)', choice: { model } });
    }
    const down = result.local.filter((s) => !s.up);
    if (down.length) items.push({ label: 'Local servers not running', kind: vscode.QuickPickItemKind.Separator });
    // Said, so the user knows where the picker looked; nothing to pick.
    for (const server of down) items.push({ label: `$(circle-slash) ${server.name}`, description: `not running at ${server.url}` });
    return items;
}

/** Shows the picker; resolves to the choice, or undefined when dismissed. */
export async function pickModel(fetch: Promise<ModelsResult>, current: string | undefined): Promise<Choice | undefined> {
    const qp = vscode.window.createQuickPick<Item>();
    qp.title = 'Open Interpreter: model';
    qp.placeholder = 'Pick a model, or type a litellm model string (gpt-4o-mini, ollama/llama3.1, openai/<name>)';
    qp.busy = true;
    let result: ModelsResult = { local: [], model: current, profiles: [] };
    qp.items = modelItems(result, '');
    qp.onDidChangeValue((value) => { qp.items = modelItems(result, value); });
    fetch.then((r) => {
        result = { ...r, model: r.model ?? current };
        qp.items = modelItems(result, qp.value);
    }, () => { /* no server: the free text and the hosted models still work */ }).finally(() => { qp.busy = false; });
    const choice = await new Promise<Choice | undefined>((resolve) => {
        qp.onDidAccept(() => {
            const item = qp.selectedItems[0];
            if (item && !item.choice) return; // a server that is not running: nothing to pick
            resolve(item?.choice ?? (qp.value.trim() ? { model: qp.value.trim() } : undefined));
        });
        qp.onDidHide(() => resolve(undefined));
        qp.show();
    });
    qp.dispose();
    return choice;
}

/** Saves a choice for the folder (the workspace's settings when no folder is open). */
export async function saveChoice(choice: Choice, folder: vscode.Uri | undefined): Promise<void> {
    const config = vscode.workspace.getConfiguration('oi', folder);
    const target = folder ? vscode.ConfigurationTarget.WorkspaceFolder : vscode.ConfigurationTarget.Global;
    if ('profile' in choice) {
        await config.update('profile', choice.profile, target);
        return;
    }
    await config.update('model', choice.model, target);
    // A local server's model needs its address; another model the default one.
    if (choice.apiBase || config.inspect('apiBase')?.workspaceFolderValue !== undefined) {
        await config.update('apiBase', choice.apiBase, target);
    }
}
