// Finding the `oi-lsp` executable: the setting, else next to the selected Python interpreter,
// else on PATH. Pure (file system and environment are passed in) so it is unit tested.
import * as path from 'node:path';

export interface LookupEnv {
    /** Is this path an executable file? */
    isExecutable(file: string): boolean;
    platform: NodeJS.Platform;
    /** The PATH variable. */
    pathVar: string | undefined;
}

export interface ServerCommand {
    command: string;
    args: string[];
    /** Where it was found, for the log. */
    source: 'setting' | 'interpreter' | 'path';
}

export type Lookup = { ok: true; server: ServerCommand } | { ok: false; message: string };

function exeNames(platform: NodeJS.Platform): string[] {
    return platform === 'win32' ? ['oi-lsp.exe', 'oi-lsp.cmd', 'oi-lsp'] : ['oi-lsp'];
}

/** `oi-lsp` in the folder of a Python executable (a venv's bin/ or Scripts/). */
export function besideInterpreter(python: string, env: LookupEnv): string | undefined {
    const dir = path.dirname(python);
    return exeNames(env.platform).map((n) => path.join(dir, n)).find((f) => env.isExecutable(f));
}

export function onPath(env: LookupEnv): string | undefined {
    const sep = env.platform === 'win32' ? ';' : ':';
    for (const dir of (env.pathVar ?? '').split(sep)) {
        if (!dir) continue;
        const found = exeNames(env.platform).map((n) => path.join(dir, n)).find((f) => env.isExecutable(f));
        if (found) return found;
    }
    return undefined;
}

export function findServer(
    setting: { command: string; args: string[] } | undefined,
    interpreter: string | undefined,
    extraArgs: string[],
    env: LookupEnv,
): Lookup {
    if (setting) {
        return { ok: true, server: { command: setting.command, args: setting.args, source: 'setting' } };
    }
    if (interpreter) {
        const beside = besideInterpreter(interpreter, env);
        if (beside) return { ok: true, server: { command: beside, args: extraArgs, source: 'interpreter' } };
    }
    const found = onPath(env);
    if (found) return { ok: true, server: { command: found, args: extraArgs, source: 'path' } };
    const where = interpreter ? `the selected Python interpreter (${interpreter}) or on PATH` : 'PATH';
    return {
        ok: false,
        message: `oi-lsp was not found in ${where}. Install it (pip install oi-lsp) into your Python ` +
            'environment, or set "oi.serverPath" to the oi-lsp executable.',
    };
}
