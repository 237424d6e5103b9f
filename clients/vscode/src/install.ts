// "Install oi-lsp": a virtual environment in the extension's global storage with oi-lsp
// pip-installed into it, with progress; the server lookup then finds it (serverPath.ts).
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { managedServer, onPath, type LookupEnv } from './serverPath';

/** What pip installs: `oi-lsp`, or the arguments in OI_LSP_INSTALL_SPEC (a wheel, a checkout,
 * `--no-deps ...`: for offline machines and tests). */
export function installArgs(env: NodeJS.ProcessEnv = process.env): string[] {
    const spec = env.OI_LSP_INSTALL_SPEC?.trim();
    return spec ? spec.split(/\s+/) : ['oi-lsp'];
}

/** The folder of the extension's own environment. */
export function venvDir(storage: vscode.Uri): string {
    return path.join(storage.fsPath, 'venv');
}

/** A Python 3 to create the environment with: the selected interpreter, else python3/python on PATH. */
function basePython(interpreter: string | undefined, env: LookupEnv): string | undefined {
    if (interpreter) return interpreter;
    return onPath(env, env.platform === 'win32' ? ['python.exe', 'py.exe'] : ['python3', 'python']);
}

/** Runs a program; each output line goes to the log and to `line`; rejects with the last lines. */
function exec(command: string, args: string[], log: vscode.LogOutputChannel, token: vscode.CancellationToken,
    line: (text: string) => void): Promise<void> {
    return new Promise((resolve, reject) => {
        log.info(`$ ${command} ${args.join(' ')}`);
        // Without PYTHONPATH: what it lists is not in the new environment, and pip would take
        // a package found there as installed already.
        const env = { ...process.env };
        delete env.PYTHONPATH;
        const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
        const tail: string[] = [];
        const take = (chunk: Buffer): void => {
            for (const text of chunk.toString().split(/\r?\n/)) {
                if (!text.trim()) continue;
                log.info(text);
                tail.push(text);
                if (tail.length > 5) tail.shift();
                line(text);
            }
        };
        child.stdout.on('data', take);
        child.stderr.on('data', take);
        const cancel = token.onCancellationRequested(() => child.kill());
        child.on('error', (err) => { cancel.dispose(); reject(err); });
        child.on('close', (code) => {
            cancel.dispose();
            if (code === 0) resolve();
            else reject(new Error(token.isCancellationRequested ? 'cancelled' : `${path.basename(command)} exited with ${code}: ${tail.join(' | ')}`));
        });
    });
}

/**
 * Creates the environment (when missing) and pip-installs oi-lsp into it, showing pip's steps.
 * Resolves to the oi-lsp executable, or undefined when cancelled; throws what went wrong.
 */
export async function installServer(storage: vscode.Uri, interpreter: string | undefined,
    env: LookupEnv, log: vscode.LogOutputChannel): Promise<string | undefined> {
    const python = basePython(interpreter, env);
    if (!python) throw new Error('no Python 3 was found (python3 on PATH, or the Python extension\'s interpreter): install Python 3.11 or newer first');
    const venv = venvDir(storage);
    const bin = path.join(venv, env.platform === 'win32' ? 'Scripts' : 'bin');
    const venvPython = path.join(bin, env.platform === 'win32' ? 'python.exe' : 'python');
    return vscode.window.withProgress({
        location: vscode.ProgressLocation.Notification, title: 'Installing oi-lsp', cancellable: true,
    }, async (progress, token) => {
        await fs.promises.mkdir(storage.fsPath, { recursive: true });
        if (!fs.existsSync(venvPython)) {
            progress.report({ message: `creating a virtual environment with ${python}` });
            await exec(python, ['-m', 'venv', venv], log, token, () => undefined);
        }
        progress.report({ message: 'pip install oi-lsp' });
        await exec(venvPython, ['-m', 'pip', 'install', '--disable-pip-version-check', '--upgrade', ...installArgs()], log, token,
            (text) => {
                if (/^(Collecting|Downloading|Installing|Building|Successfully)/.test(text)) progress.report({ message: text.slice(0, 80) });
            });
        if (token.isCancellationRequested) return undefined;
        const found = managedServer(venv, env);
        if (!found) throw new Error(`pip finished but ${bin} holds no oi-lsp`);
        return found;
    });
}
