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
    source: 'setting' | 'interpreter' | 'path' | 'installed';
}

export type Lookup = { ok: true; server: ServerCommand } | { ok: false; message: string; canInstall: boolean };

function exeNames(platform: NodeJS.Platform): string[] {
    return platform === 'win32' ? ['oi-lsp.exe', 'oi-lsp.cmd', 'oi-lsp'] : ['oi-lsp'];
}

/** `oi-lsp` in the folder of a Python executable (a venv's bin/ or Scripts/). */
export function besideInterpreter(python: string, env: LookupEnv): string | undefined {
    const dir = path.dirname(python);
    return exeNames(env.platform).map((n) => path.join(dir, n)).find((f) => env.isExecutable(f));
}

/** The first of `names` (default: oi-lsp's) in a folder of PATH. */
export function onPath(env: LookupEnv, names = exeNames(env.platform)): string | undefined {
    const sep = env.platform === 'win32' ? ';' : ':';
    for (const dir of (env.pathVar ?? '').split(sep)) {
        if (!dir) continue;
        const found = names.map((n) => path.join(dir, n)).find((f) => env.isExecutable(f));
        if (found) return found;
    }
    return undefined;
}

/** `oi-lsp` in the virtual environment "Install oi-lsp" made (`venv` is its folder). */
export function managedServer(venv: string, env: LookupEnv): string | undefined {
    return besideInterpreter(path.join(venv, env.platform === 'win32' ? 'Scripts' : 'bin', 'python'), env);
}

export function findServer(
    setting: { command: string; args: string[] } | undefined,
    interpreter: string | undefined,
    extraArgs: string[],
    env: LookupEnv,
    installedVenv?: string,
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
    const installed = installedVenv ? managedServer(installedVenv, env) : undefined;
    if (installed) return { ok: true, server: { command: installed, args: extraArgs, source: 'installed' } };
    const where = interpreter ? `beside the selected Python interpreter (${interpreter}) or on PATH` : 'on PATH';
    return {
        ok: false,
        canInstall: installedVenv !== undefined,
        message: `Open Interpreter needs oi-lsp, which was not found ${where}. Install it here (a ` +
            'virtual environment of its own), pip install oi-lsp into your Python environment, or set ' +
            '"oi.serverPath" to the oi-lsp executable.',
    };
}
