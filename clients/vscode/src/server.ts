// The oi-lsp server's lifecycle: find it, start it over stdio, route its notifications, stop it.
import * as fs from 'node:fs';
import * as vscode from 'vscode';
import {
    LanguageClient, type LanguageClientOptions, type ServerOptions, State, TransportKind,
    type StaticFeature, type ClientCapabilities, type FeatureState,
    MessageType, ShowMessageNotification, type ShowMessageParams,
} from 'vscode-languageclient/node';
import { pythonEnvironments, selectedInterpreter } from './python';
import { type PythonFolder, PythonSync } from './pythonSetting';
import { ANSWERED, INPUT, type InputParams, PROPOSAL, RESOURCES, STREAM, TURN } from './router';
import { configuredServer, folderUpdate, serverSettings, settingsUpdate } from './settings';
import { installServer, venvDir } from './install';
import { findServer, type LookupEnv } from './serverPath';

export const API_KEY_SECRET = 'oi.apiKey';

/** Announces `experimental.oi`: this client renders oi/stream and oi/proposal itself; and
 * `experimental.oiInput`: it answers oi/input. */
class OiFeature implements StaticFeature {
    getState(): FeatureState { return { kind: 'static' }; }
    fillClientCapabilities(capabilities: ClientCapabilities): void {
        capabilities.experimental = { ...(capabilities.experimental as object | undefined), oi: true, oiInput: true };
    }
    initialize(): void { /* nothing to set up: the capability is all */ }
    clear(): void { /* nothing to undo */ }
}

function pythonFolders(): PythonFolder[] {
    if (!vscode.workspace.isTrusted) return [];
    return (vscode.workspace.workspaceFolders ?? []).map((folder) => {
        const configured = vscode.workspace.getConfiguration('oi', folder.uri).get<string>('python')?.trim();
        return { uri: folder.uri.toString(), resource: folder.uri, configured: configured || undefined };
    });
}

function isExecutable(file: string): boolean {
    try {
        fs.accessSync(file, fs.constants.X_OK);
        return fs.statSync(file).isFile();
    } catch {
        return false;
    }
}

export class Server implements vscode.Disposable {
    private client: LanguageClient | undefined;
    private starting: Promise<LanguageClient | undefined> | undefined;
    readonly output: vscode.LogOutputChannel;
    private readonly listeners: Array<(method: string, params: unknown) => void> = [];
    /** The settings the running server last got: a key missing now is sent as null. */
    private sent: Record<string, unknown> | undefined;
    /** Turn errors the chat showed lately (as the server's messages word them): the server's
     * window/showMessage copy of each is not shown again as a notification. */
    private readonly turnErrors = new Set<string>();
    /** What each folder of a multi-root workspace last sent with oi/configure, by folder URI. */
    private folderSent = new Map<string, Record<string, unknown>>();
    /** Each folder's Python for the server, and the client it goes to. */
    private pythons: Promise<PythonSync> | undefined;
    private pythonClient: LanguageClient | undefined;

    constructor(private readonly context: vscode.ExtensionContext) {
        this.output = vscode.window.createOutputChannel('Open Interpreter', { log: true });
    }

    onNotification(listener: (method: string, params: unknown) => void): void {
        this.listeners.push(listener);
    }

    /** The `oi` settings for the server, with the API key from SecretStorage (never settings.json). */
    async settings(): Promise<Record<string, unknown>> {
        const apiKey = await this.context.secrets.get(API_KEY_SECRET);
        const update = settingsUpdate(this.sent,
            serverSettings(vscode.workspace.getConfiguration('oi'), vscode.workspace.isTrusted, apiKey));
        this.sent = update;
        return update;
    }

    /** The running client, started on first use. Undefined when the server cannot start. */
    async get(): Promise<LanguageClient | undefined> {
        if (this.client?.state === State.Running) return this.client;
        this.starting ??= this.start().finally(() => { this.starting = undefined; });
        return this.starting;
    }

    private async start(): Promise<LanguageClient | undefined> {
        const config = vscode.workspace.getConfiguration('oi');
        const extraArgs = config.get<string[]>('serverArgs') ?? [];
        const interpreter = await selectedInterpreter(vscode.workspace.workspaceFolders?.[0]?.uri);
        const found = findServer(configuredServer(config), interpreter, extraArgs, this.lookupEnv(),
            venvDir(this.context.globalStorageUri));
        if (!found.ok) {
            this.output.error(found.message);
            if (this.offering) return undefined; // every request tries to start: one offer at a time
            this.offering = true;
            const actions = found.canInstall ? ['Install oi-lsp', 'Open Settings'] : ['Open Settings'];
            void vscode.window.showErrorMessage(found.message, ...actions).then((choice) => {
                this.offering = false;
                if (choice === 'Install oi-lsp') void this.install(interpreter);
                else if (choice) void vscode.commands.executeCommand('workbench.action.openSettings', 'oi.serverPath');
            });
            return undefined;
        }
        this.output.info(`starting ${found.server.command} ${found.server.args.join(' ')} (from ${found.server.source})`);
        const serverOptions: ServerOptions = {
            command: found.server.command,
            args: found.server.args,
            transport: TransportKind.stdio,
        };
        const clientOptions: LanguageClientOptions = {
            // No documentSelector: oi-lsp serves the workspace, not documents.
            documentSelector: [],
            outputChannel: this.output,
            initializationOptions: { oi: await this.freshSettings() },
            middleware: {
                workspace: {
                    // A pull of the `oi` section gets what a push sends: the API key from
                    // SecretStorage, auto-run off in an untrusted workspace.
                    configuration: async (params, token, next) => {
                        if (!params.items.some((item) => item.section === 'oi')) return next(params, token);
                        const settings = await this.settings();
                        return params.items.map((item) => (item.section === 'oi' ? settings : null));
                    },
                },
            },
        };
        const client = new LanguageClient('oi', 'Open Interpreter', serverOptions, clientOptions);
        client.registerFeature(new OiFeature());
        // A running program reads input: an input box (masked for a password); undefined
        // (Escape, or the request cancelled) answers null, and the read fails.
        client.onRequest(INPUT, async (params: InputParams, token: vscode.CancellationToken) => {
            const value = await vscode.window.showInputBox({
                title: 'Open Interpreter: the program asks for input',
                prompt: params.prompt || 'input', password: !!params.password, ignoreFocusOut: true,
            }, token);
            return value === undefined ? null : { value };
        });
        for (const method of [STREAM, PROPOSAL, TURN, RESOURCES, ANSWERED]) {
            client.onNotification(method, (params: unknown) => {
                if (method === TURN) this.noteTurnError(params);
                for (const listener of this.listeners) listener(method, params);
            });
        }
        try {
            await client.start();
            // Replaces the client's own handler: the chat shows a turn's error with its button.
            client.onNotification(ShowMessageNotification.type, (params) => this.showMessage(params));
            await this.pushFolders(client);
        } catch (err) {
            this.output.error(`oi-lsp did not start: ${String(err)}`);
            void vscode.window.showErrorMessage(`Open Interpreter: oi-lsp did not start (${String(err)}). See "Show Server Output".`);
            return undefined;
        }
        this.client = client;
        return client;
    }

    private noteTurnError(params: unknown): void {
        const error = (params as { error?: unknown } | null)?.error;
        if (typeof error !== 'string') return;
        const text = `oi-lsp: ${error}`;
        this.turnErrors.add(text);
        setTimeout(() => this.turnErrors.delete(text), 10_000);
    }

    /**
     * window/showMessage as the client would show it, except a turn's error: the server says it
     * just before the turn ends (oi/turn), so an error waits a moment to see if the chat has it.
     */
    private showMessage(params: ShowMessageParams): void {
        const show = (): void => {
            if (params.type === MessageType.Error) void vscode.window.showErrorMessage(params.message);
            else if (params.type === MessageType.Warning) void vscode.window.showWarningMessage(params.message);
            else void vscode.window.showInformationMessage(params.message);
        };
        if (params.type !== MessageType.Error) return show();
        setTimeout(() => {
            if (!this.turnErrors.has(params.message)) show();
        }, 1500);
    }

    private lookupEnv(): LookupEnv {
        return { isExecutable, platform: process.platform, pathVar: process.env.PATH };
    }

    /** The "oi-lsp was not found" message is showing. */
    private offering = false;
    /** Listeners told when a server started after Install oi-lsp (the chat reloads). */
    readonly installed: Array<() => void> = [];

    /** Install oi-lsp into the extension's own environment, then start it. */
    async install(interpreter: string | undefined): Promise<void> {
        try {
            const server = await installServer(this.context.globalStorageUri, interpreter, this.lookupEnv(), this.output);
            if (!server) return;
            this.output.info(`installed ${server}`);
            if (await this.get()) {
                void vscode.window.showInformationMessage('Open Interpreter: oi-lsp is installed and running.');
                for (const listener of this.installed) listener();
            }
        } catch (err) {
            this.output.error(`install: ${String(err)}`);
            const choice = await vscode.window.showErrorMessage(
                `Open Interpreter: installing oi-lsp failed: ${err instanceof Error ? err.message : String(err)}`,
                'Show Output', 'Try Again');
            if (choice === 'Show Output') this.output.show();
            else if (choice === 'Try Again') await this.install(interpreter);
        }
    }

    /** The settings for a server that has had none yet. */
    private async freshSettings(): Promise<Record<string, unknown>> {
        this.sent = undefined;
        this.folderSent = new Map();
        (await this.pythonSync()).reset();
        return this.settings();
    }

    /** Sends the current settings (after a settings change or a new API key). */
    async pushSettings(): Promise<void> {
        const client = this.client;
        if (client?.state !== State.Running) return;
        await client.sendNotification('workspace/didChangeConfiguration', { settings: { oi: await this.settings() } });
        await this.pushFolders(client);
    }

    /**
     * Each folder's own `oi.*` (multi-root workspaces; with one folder its settings are the
     * window's, sent above), as oi/configure for that folder: the server does not ask per folder.
     */
    private async pushFolders(client: LanguageClient): Promise<void> {
        await this.pushPython(client);
        if (!vscode.workspace.workspaceFile) return;
        for (const folder of vscode.workspace.workspaceFolders ?? []) {
            const config = vscode.workspace.getConfiguration('oi', folder.uri);
            const own = { get: <T>(key: string): T | undefined => config.inspect<T>(key)?.workspaceFolderValue };
            const uri = folder.uri.toString();
            const update = folderUpdate(own, config, vscode.workspace.isTrusted, this.folderSent.get(uri));
            if (Object.keys(update).length === 0) continue;
            try {
                await client.sendRequest('oi/configure', { workspace: uri, ...update });
                this.folderSent.set(uri, update);
            } catch (err) {
                this.output.error(`settings of folder ${folder.name}: ${String(err)}`);
                void vscode.window.showErrorMessage(`Open Interpreter: the settings of folder ${folder.name} were refused: ${err instanceof Error ? err.message : String(err)}`);
            }
        }
    }

    /** Each folder's Python: `oi.python`, else the interpreter the Python extension selected
     * for it (sent again when the user selects another); nothing in an untrusted workspace. */
    private pythonSync(): Promise<PythonSync> {
        this.pythons ??= pythonEnvironments().then((envs) => {
            const sync = new PythonSync(envs, pythonFolders, async (workspace, python) => {
                await this.pythonClient?.sendRequest('oi/configure', { workspace, python });
                this.output.info(`python of ${workspace}: ${python}`);
            });
            const watching = sync.watch();
            if (watching) this.context.subscriptions.push(watching as vscode.Disposable);
            return sync;
        });
        return this.pythons;
    }

    private async pushPython(client: LanguageClient): Promise<void> {
        this.pythonClient = client;
        try {
            await (await this.pythonSync()).sync();
        } catch (err) {
            this.output.error(`the folders' Python: ${String(err)}`);
        }
    }

    async request<T>(method: string, params: Record<string, unknown>): Promise<T> {
        const client = await this.get();
        if (!client) throw new Error('oi-lsp is not running');
        return client.sendRequest<T>(method, params);
    }

    async stop(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        if (client) await client.stop(5000).catch((err) => this.output.warn(`stop: ${String(err)}`));
    }

    async restart(): Promise<void> {
        await this.stop();
        await this.get();
    }

    dispose(): void {
        void this.stop();
        this.output.dispose();
    }
}
