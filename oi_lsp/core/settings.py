"""The settings model and how layers of values (env, client, workspace) combine."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ..common import keys
from ..protocol import AutoRunRule
from . import model_presets
from .mcp_config import McpServer, check_names

log = logging.getLogger(__name__)


# Open Interpreter's loop mode: the prompt that keeps the model going, and the phrases that end it.
LOOP_MESSAGE = (
    "Proceed. You CAN run code on my machine. If the entire task I asked for is done, say "
    "exactly 'The task is done.' If you need some specific information (like username or "
    "password) say EXACTLY 'Please provide more information.' If it's impossible, say 'The "
    "task is impossible.' (If I haven't provided a task, say exactly 'Let me know what you'd "
    "like to do next.') Otherwise keep going.")
LOOP_BREAKERS = ["The task is done.", "The task is impossible.",
                 "Let me know what you'd like to do next.", "Please provide more information."]


# litellm arguments modelOptions may not set: oi-lsp sets them (the setting to use instead).
RESERVED_OPTIONS = {"model": "model", "messages": "", "stream": "", "tools": "toolCalls",
                    "api_base": "apiBase", "base_url": "apiBase", "api_key": "apiKey",
                    "stream_options": "", "max_retries": "modelRetries",
                    "num_retries": "modelRetries", "reasoning_effort": "reasoningEffort",
                    "temperature": "temperature", "max_tokens": "maxTokens"}


class KernelGateway(BaseModel):
    """A Jupyter Kernel Gateway / Enterprise Gateway that runs the workspace's kernels."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              strict=True)

    url: str = Field(pattern=r"^https?://")
    token: SecretStr | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    validate_cert: bool = True
    kernel_name: str | None = None
    request_timeout: float = Field(default=30.0, gt=0)


class Settings(BaseModel):
    """Effective settings of one workspace. camelCase on the wire (see docs/protocol.md).
    Read only once made: a workspace hands the same object out until its layers change."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              strict=True)

    model: str | None = None
    api_base: str | None = None
    api_key: SecretStr | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    # litellm's reasoning_effort, which it maps to each provider's own (Anthropic's thinking
    # budget, Gemini's thinking config, OpenAI's reasoning.effort).
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    # Further litellm keyword arguments (extra_headers, top_p, thinking, ...), as given.
    model_options: dict[str, Any] | None = None
    # Mark the system message and the conversation's stable prefix cacheable (core/caching):
    # auto is where litellm says the model supports prompt caching.
    prompt_caching: bool | Literal["auto"] = "auto"
    # A call refused as rate limited or overloaded before it answered is tried again this
    # many times, with a growing delay.
    model_retries: int = Field(default=3, ge=0, le=10)
    context_window: int | None = Field(default=None, gt=0)
    auto_run: bool = False
    # First match wins: allow runs without asking, ask waits, deny refuses (core/rules.py).
    # None (a client that cleared it sends null) is no rules.
    auto_run_rules: list[AutoRunRule] | None = None
    system_message: str | None = None
    max_output: int = Field(default=2800, gt=0)
    execution_timeout: float | None = Field(default=None, gt=0)
    # Seconds a program's read waits for the user's answer (oi/input) before it fails.
    input_timeout: float = Field(default=300.0, gt=0)
    active_line: bool = False  # stream which line runs (Python, bash); see executors/active_line
    max_steps: int = Field(default=30, gt=0)
    tool_calls: bool = True
    # The model sees the images runs display and the user attaches: auto is when litellm says
    # it takes images (core/vision.py).
    vision: bool | Literal["auto"] = "auto"
    kernel_name: str = "python3"
    # The interpreter (or virtual environment folder) whose ipykernel runs the Python kernel;
    # None: $VIRTUAL_ENV, else the workspace's .venv / venv, else oi-lsp's own (interpreter.py).
    python: str | None = None
    # Whether the workspace is trusted: its .oi/profile.yaml applies and it may auto-run. The
    # editor's word when it sends one (VS Code's Workspace Trust, initializationOptions), else
    # the user's trust store (trust.py): true for a folder with no settings file of its own, or
    # whose file's content the user trusted. SettingsLayers always sets it.
    trusted: bool = True
    kernel_gateway: KernelGateway | None = None  # run kernels on a Jupyter gateway
    keep_kernel: bool = False  # leave the kernel running when the workspace closes
    # The shared daemon: seconds the REPLs outlive the workspace's last client (None: the
    # daemon's --grace, default 600).
    kernel_grace: float | None = Field(default=None, ge=0)
    # REPLs start with the server's key variables (OI_API_KEY, *_API_KEY, ...) in their
    # environment; off, code the model writes cannot read them.
    pass_keys_to_repls: bool = False
    # The client's own provider key variables (OPENAI_API_KEY, ...) by name. The shared daemon
    # sets them from each connection's relay, so each editor uses the keys of its own
    # environment, not those of the editor that started the daemon. None: the process's
    # environment, which litellm reads itself (a standalone server).
    provider_keys: dict[str, SecretStr] | None = None
    verbose: bool = False  # log every model request (%verbose)
    # Past this resident memory (MB) a REPL is restarted, when the user agrees ("ask") or at once.
    kernel_memory_limit_mb: int | None = Field(default=None, gt=0, alias="kernelMemoryLimitMB")
    kernel_memory_limit_action: Literal["ask", "restart"] = "ask"
    # Safe mode: semgrep scans proposals; paths outside the workspace are flagged.
    safe_mode: Literal["off", "ask", "auto"] = "off"
    restrict_to_workspace: bool | None = None  # None: on exactly when the workspace is untrusted
    # The OS sandbox of the REPLs (executors/sandbox). None: workspace-write where the
    # workspace is untrusted, autoRun is on or sandboxAlways is set; off otherwise.
    sandbox: Literal["off", "workspace-write", "read-only"] | None = None
    sandbox_network: bool = True  # False: the REPLs cannot open TCP connections nor bind ports
    sandbox_always: bool = False  # a user's choice: the default is workspace-write everywhere
    max_budget: float | None = Field(default=None, gt=0)  # USD since the workspace opened
    loop: bool = False  # keep prompting the model until it says a loop breaker
    loop_message: str = Field(default=LOOP_MESSAGE, min_length=1)
    loop_breakers: list[str] = Field(default_factory=lambda: list(LOOP_BREAKERS))
    profile: str | None = None  # a YAML profile in the user config folder (profiles.py)
    local: Literal["ollama", "lmstudio", "llamafile", "jan"] | None = None  # local.py's presets
    # MCP servers by name, as Claude Desktop's and VS Code's mcp.json give them: modules of
    # the Python kernel (core/mcp_servers.py).
    mcp_servers: dict[str, McpServer] | None = None

    @field_validator("mcp_servers", mode="after")
    @classmethod
    def _server_names(cls, value: dict[str, McpServer] | None) -> dict[str, McpServer] | None:
        if value is not None:
            check_names(value)
        return value

    @field_validator("model_options", mode="after")
    @classmethod
    def _options_are_litellm_arguments(cls, value: dict[str, Any] | None,
                                       ) -> dict[str, Any] | None:
        if value is None:
            return None
        for key in value:
            if not key.isidentifier():
                raise ValueError(f"{key!r} is not a litellm argument name")
            if key in RESERVED_OPTIONS:
                raise ValueError(f"{key!r} is set by oi-lsp itself" + (
                    f": use the setting {RESERVED_OPTIONS[key]} instead"
                    if RESERVED_OPTIONS[key] else ""))
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not plain JSON: {exc}") from None
        return value

    @model_validator(mode="after")
    def _untrusted_never_auto_runs(self) -> Settings:
        # Whatever layer turned autoRun on (a client setting, oi/configure), an untrusted
        # workspace does not auto-run; the effective value says so to every reader.
        if self.sandbox is None:
            confine = not self.trusted or self.auto_run or self.sandbox_always
            self.sandbox = "workspace-write" if confine else "off"
        if not self.trusted:
            self.auto_run = False
        if self.restrict_to_workspace is None:
            self.restrict_to_workspace = not self.trusted
        return self

    def public(self) -> dict[str, Any]:
        """The settings as shown to clients: never the key itself."""
        data = self.model_dump(by_alias=True, exclude={"api_key", "provider_keys"}, mode="json")
        data["apiKeySet"] = self.api_key is not None
        if self.provider_keys is not None:  # which variables, never their values
            data["providerKeys"] = sorted(self.provider_keys)
        if self.kernel_gateway is not None:  # headers may carry credentials too
            gateway = data["kernelGateway"]
            gateway.pop("token", None)
            gateway["tokenSet"] = self.kernel_gateway.token is not None
            gateway["headers"] = dict.fromkeys(gateway["headers"], "********")
        for server in (data.get("mcpServers") or {}).values():  # may carry credentials
            for name in ("env", "headers"):
                server[name] = dict.fromkeys(server[name], "********")
        options = data.get("modelOptions") or {}
        for name in ("extra_headers", "headers"):  # may carry credentials
            if isinstance(options.get(name), dict):
                options[name] = dict.fromkeys(options[name], "********")
        return data


_FIELDS = {f.alias or name: name for name, f in Settings.model_fields.items()}
_KNOWN = set(_FIELDS) | set(_FIELDS.values())


class SettingsError(ValueError):
    """A value of the wrong type; the message names the key (never the value of apiKey)."""


def env_layer(environ: Mapping[str, str] | None = None,
              provider_keys: bool = False) -> dict[str, Any]:
    """Defaults from the environment, for editors without a settings UI. `provider_keys`:
    the environment is another process's (a relay's), whose provider keys are to be used."""
    environ = os.environ if environ is None else environ
    layer: dict[str, Any] = {}
    if provider_keys:
        layer["providerKeys"] = {k: v for k, v in environ.items()
                                 if keys.is_key(k) and not k.startswith("OI_") and v}
    for var, key in (("OI_MODEL", "model"), ("OI_API_BASE", "apiBase"), ("OI_API_KEY", "apiKey")):
        if environ.get(var):
            layer[key] = environ[var]
    if environ.get("OI_KERNEL_GATEWAY_URL"):
        # The token alone (without the URL) is also read by executors/gateway/config.py.
        layer["kernelGateway"] = {"url": environ["OI_KERNEL_GATEWAY_URL"]}
        if environ.get("OI_KERNEL_GATEWAY_TOKEN"):
            layer["kernelGateway"]["token"] = environ["OI_KERNEL_GATEWAY_TOKEN"]
    return layer


def split_known(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Keep the keys Settings knows; return the others' names so they can be reported."""
    known = {k: v for k, v in values.items() if k in _KNOWN}
    unknown = sorted(k for k in values if k not in _KNOWN)
    for key in unknown:
        log.warning("ignoring unknown setting %r", key)
    return known, unknown


def unknown_key(key: str) -> str:
    """'unknown setting 'x'', with the setting it is probably a typo of when there is one
    (either spelling: a profile's keys may be snake_case)."""
    import difflib

    names = _FIELDS if "_" not in key else {v: v for v in _FIELDS.values()}
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.75)
    return f"unknown setting {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def unknown_error(unknown: list[str]) -> SettingsError:
    """Unknown keys, each with the setting it is probably a typo of."""
    return SettingsError("; ".join(unknown_key(k) for k in unknown) + ": nothing was changed")


def check(layer: Mapping[str, Any]) -> None:
    """Raise SettingsError naming every key of `layer` whose value has the wrong type."""
    try:
        Settings.model_validate(dict(layer))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            # Pydantic's message can echo the input; for the key, name the problem only.
            # apiKey, providerKeys.*, kernelGateway.token / .headers.*
            secret = key.split(".")[0] in ("apiKey", "api_key", "providerKeys") or any(
                part in ("token", "headers") for part in key.split(".")[1:2])
            msg = "expected a string" if secret else err["msg"]
            problems.append(f"setting {key!r}: {msg}")
        raise SettingsError("; ".join(problems)) from None


def field_name(key: str) -> str | None:
    """The snake_case name of a setting given either spelling, or None when there is none."""
    return _FIELDS.get(key) or (key if key in _KNOWN else None)


def combine(*layers: Mapping[str, Any]) -> Settings:
    """Later layers win key by key; each layer must already have passed check(). A local
    preset then fills in its URL and the small-context defaults where nothing set them."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            merged[_FIELDS.get(key, key)] = value
    return Settings.model_validate(model_presets.apply_preset(merged))


def client_section(raw: Any) -> dict[str, Any]:
    """The `oi` section of initializationOptions or didChangeConfiguration settings."""
    if not isinstance(raw, Mapping):
        return {}
    section = raw.get("oi", raw)
    return dict(section) if isinstance(section, Mapping) else {}
