// The workspace's own Python (docs/protocol.md, the `python` setting): each folder's `oi.python`,
// else the interpreter the Python extension (ms-python.python) selected for it, sent to the
// server per folder and sent again when the user selects another. Pure: no `vscode` import, so
// the unit tests drive it with a fake of the Python extension's API.

/** The part of the Python extension's `environments` API this uses. */
export interface PythonEnvironments {
    getActiveEnvironmentPath(resource?: unknown): { path: string } | undefined;
    resolveEnvironment?(env: { path: string } | string): Promise<{ executable?: { uri?: { fsPath: string } } } | undefined>;
    onDidChangeActiveEnvironmentPath?(listener: (event: unknown) => unknown): { dispose(): unknown };
}

/** A workspace folder: its URI as the server knows it, the resource the Python extension
 * takes, and the `oi.python` the user set for it (which wins). */
export interface PythonFolder { uri: string; resource: unknown; configured?: string }

/** The executable of the folder's selected environment (a venv folder resolves to its python). */
export async function selectedPython(envs: PythonEnvironments, resource: unknown): Promise<string | undefined> {
    try {
        const active = envs.getActiveEnvironmentPath(resource);
        if (!active?.path) return undefined;
        const resolved = await envs.resolveEnvironment?.(active);
        return resolved?.executable?.uri?.fsPath ?? active.path;
    } catch {
        return undefined; // the Python extension failed: the server's own choice stays
    }
}

export class PythonSync {
    /** What each folder was last sent, so only a change is sent again. */
    private readonly sent = new Map<string, string>();

    constructor(
        private readonly envs: PythonEnvironments | undefined,
        private readonly folders: () => PythonFolder[],
        private readonly send: (workspace: string, python: string) => Promise<void>,
    ) {}

    /** Sends each folder's Python where it changed since it was last sent. */
    async sync(): Promise<void> {
        for (const folder of this.folders()) {
            const python = folder.configured
                ?? (this.envs ? await selectedPython(this.envs, folder.resource) : undefined);
            if (!python || this.sent.get(folder.uri) === python) continue;
            await this.send(folder.uri, python);
            this.sent.set(folder.uri, python);
        }
    }

    /** Another interpreter selected in the Python extension: send it. */
    watch(): { dispose(): unknown } | undefined {
        return this.envs?.onDidChangeActiveEnvironmentPath?.(() => void this.sync().catch(() => undefined));
    }

    /** A new server knows nothing sent to the old one. */
    reset(): void {
        this.sent.clear();
    }
}
