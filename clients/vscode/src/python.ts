// The Python interpreter selected in the Python extension (ms-python.python), when installed.
import * as vscode from 'vscode';
import type { PythonEnvironments } from './pythonSetting';

interface PythonApi {
    environments?: {
        getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined;
        resolveEnvironment(env: { path: string } | string): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
        onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
    };
}

async function api(): Promise<PythonApi | undefined> {
    const ext = vscode.extensions.getExtension<PythonApi>('ms-python.python');
    if (!ext) return undefined;
    try {
        return ext.isActive ? ext.exports : await ext.activate();
    } catch {
        return undefined;
    }
}

/** The selected interpreter's executable for a folder, or undefined without the Python extension. */
export async function selectedInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
    const envs = (await api())?.environments;
    if (!envs) return undefined;
    try {
        const active = envs.getActiveEnvironmentPath(resource);
        if (!active) return undefined;
        const resolved = await envs.resolveEnvironment(active);
        return resolved?.executable?.uri?.fsPath ?? active.path;
    } catch {
        return undefined;
    }
}

/** Fires when the user selects another interpreter (the server then restarts). */
export async function onInterpreterChange(listener: () => void): Promise<vscode.Disposable | undefined> {
    const event = (await api())?.environments?.onDidChangeActiveEnvironmentPath;
    return event ? event(listener) : undefined;
}

/** The Python extension's environments API (for each folder's `python`), when installed. */
export async function pythonEnvironments(): Promise<PythonEnvironments | undefined> {
    return (await api())?.environments as PythonEnvironments | undefined;
}
