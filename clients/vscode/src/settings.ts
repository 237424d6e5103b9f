// The `oi.*` settings and what of them reaches the server. Pure: no `vscode` import, so the
// unit tests run it in plain node.

/** What the extension reads from the `oi` configuration section. */
export interface ConfigReader {
    get<T>(key: string): T | undefined;
}

/** The `oi` section as the server takes it (docs/protocol.md, Settings). */
export interface ServerSettings {
    model?: string;
    apiBase?: string;
    apiKey?: string;
    autoRun: boolean;
    /** docs/protocol.md, Approval rules: checked by the server, which names a bad rule. */
    autoRunRules?: unknown[];
    executionTimeout?: number;
    /** Whether the model sees images; absent: "auto" (when litellm says it can). */
    vision?: boolean;
    /** False in a workspace the user has not trusted: the server then never auto-runs. */
    trusted: boolean;
    /** A profile of the user's config folder (docs/protocol.md, Profiles). */
    profile?: string;
    /** The interpreter the Python kernel runs in (`oi.python`; the Python extension's per folder
     * is sent with oi/configure, see pythonSetting.ts). */
    python?: string;
    /** docs/protocol.md, Settings: a reasoning model's effort, further litellm arguments,
     * prompt caching, retries of a refused model call. Checked by the server. */
    reasoningEffort?: 'low' | 'medium' | 'high';
    modelOptions?: Record<string, unknown>;
    promptCaching?: boolean | 'auto';
    modelRetries?: number;
    /** The user's MCP servers, each a module of the Python kernel (`from oi_mcp import <name>`):
     * name -> {command, args, env, cwd} or {type: "http", url, headers}, with confirm/timeout.
     * Checked by the server. */
    mcpServers?: Record<string, unknown>;
}

function nonEmpty(value: unknown): string | undefined {
    return typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined;
}

/** A JSON object with at least one key (not an array, not null), as settings.json gives it. */
function filledObject(value: unknown): Record<string, unknown> | undefined {
    return value && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0
        ? value as Record<string, unknown> : undefined;
}

/**
 * The settings sent with `initialize` and `workspace/didChangeConfiguration`. Empty strings and
 * nulls are left out (the server refuses a wrong type); an untrusted workspace never auto-runs.
 */
export function serverSettings(config: ConfigReader, trusted: boolean, apiKey?: string): ServerSettings {
    const settings: ServerSettings = { autoRun: trusted && config.get<boolean>('autoRun') === true, trusted };
    const model = nonEmpty(config.get('model'));
    if (model) settings.model = model;
    const apiBase = nonEmpty(config.get('apiBase'));
    if (apiBase) settings.apiBase = apiBase;
    const timeout = config.get<unknown>('executionTimeout');
    if (typeof timeout === 'number' && Number.isFinite(timeout) && timeout > 0) {
        settings.executionTimeout = timeout;
    }
    const rules = config.get<unknown>('autoRunRules');
    if (Array.isArray(rules) && rules.length > 0) settings.autoRunRules = rules;
    const vision = config.get<unknown>('vision');
    if (vision === 'on' || vision === 'off') settings.vision = vision === 'on';
    const profile = nonEmpty(config.get('profile'));
    if (profile) settings.profile = profile;
    const python = nonEmpty(config.get('python'));
    if (python) settings.python = python;
    const effort = config.get<unknown>('reasoningEffort');
    if (effort === 'low' || effort === 'medium' || effort === 'high') settings.reasoningEffort = effort;
    const options = filledObject(config.get<unknown>('modelOptions'));
    if (options) settings.modelOptions = options;
    const caching = config.get<unknown>('promptCaching');
    if (caching === 'on' || caching === 'off') settings.promptCaching = caching === 'on';
    // 'auto' is the server's default: left out.
    const retries = config.get<unknown>('modelRetries');
    if (typeof retries === 'number' && Number.isInteger(retries)) settings.modelRetries = retries;
    const mcpServers = filledObject(config.get<unknown>('mcpServers'));
    if (mcpServers) settings.mcpServers = mcpServers;
    if (apiKey) settings.apiKey = apiKey;
    return settings;
}

/**
 * What one folder of a multi-root workspace sets for itself (`oi.*` in its .vscode/settings.json),
 * for `oi/configure` with that folder: only the keys set at folder level, so the server's own
 * layers (profiles) still apply to the rest. A key the folder stopped setting gets the value the
 * folder sees now (the workspace's or the user's), or null when none sets it.
 */
export function folderUpdate(
    folderValues: ConfigReader, effective: ConfigReader, trusted: boolean,
    previous: Readonly<Record<string, unknown>> | undefined,
): Record<string, unknown> {
    const own: Record<string, unknown> = { ...serverSettings(folderValues, trusted) };
    delete own.trusted; // only initialize sets it; oi/configure refuses it
    if (folderValues.get('autoRun') === undefined) delete own.autoRun;
    const fallback: Record<string, unknown> = { ...serverSettings(effective, trusted) };
    const update = { ...own };
    for (const key of Object.keys(previous ?? {})) {
        if (!(key in update)) update[key] = fallback[key] ?? null;
    }
    return update;
}

/**
 * The settings to push after `previous` was sent: a key the user cleared is sent as null, so the
 * server drops the old value (the server keeps client values key by key). A key never sent stays
 * absent, so the server's environment defaults (OI_MODEL, ...) still apply.
 */
export function settingsUpdate(
    previous: Readonly<Record<string, unknown>> | undefined, next: ServerSettings,
): Record<string, unknown> {
    const update: Record<string, unknown> = { ...next };
    for (const key of Object.keys(previous ?? {})) {
        if (!(key in update)) update[key] = null;
    }
    return update;
}

/** Whether a toggle of auto-run may turn it on: never in an untrusted workspace. */
export function autoRunAllowed(trusted: boolean): boolean {
    return trusted;
}

/** The explicit server command from settings, if any. */
export function configuredServer(config: ConfigReader): { command: string; args: string[] } | undefined {
    const command = nonEmpty(config.get('serverPath'));
    if (!command) return undefined;
    const args = config.get<unknown>('serverArgs');
    return { command, args: Array.isArray(args) ? args.filter((a): a is string => typeof a === 'string') : [] };
}
