"""YAML profiles (as in Open Interpreter): a user profile chosen by name, and a workspace's
own `.oi/profile.yaml` (once the user trusts it: trust.py), turned into settings layers.

A profile may set any setting (snake_case or camelCase) and Open Interpreter's own keys: an
`llm:` block, `custom_instructions`, `version`. Keys of Open Interpreter that mean nothing here
(`offline`, `computer`, ...) are ignored with a warning; any other key is an error naming it.
Reading files is blocking: callers run `layers` in a thread.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from . import trust
from .settings import Settings, SettingsError, field_name, unknown_key

log = logging.getLogger(__name__)

# Open Interpreter profile keys with no meaning in oi-lsp: accepted, ignored.
_IGNORED = {"version", "offline", "verbose", "os", "computer", "disable_telemetry",
            "anonymous_telemetry", "multi_line", "speak_messages", "plain_text_display",
            "highlight_active_line", "import_computer_api", "skills_path", "import_skills",
            "in_terminal_interface", "conversation_history", "conversation_filename",
            "shrink_images", "sync_computer", "display_markdown_messages", "messages"}
# OI's `llm:` block: its keys, and the setting each one is.
_LLM = {"model": "model", "api_base": "api_base", "api_key": "api_key",
        "temperature": "temperature", "context_window": "context_window",
        "max_tokens": "max_tokens", "supports_functions": "tool_calls",
        "max_output": "max_output", "execution_instructions": None, "supports_vision": "vision",
        "api_version": None}
# Settings a profile may not set: the editor's trust, and the choice of profile itself.
_FORBIDDEN = {"trusted", "profile"}
MAX_PROFILE = trust.MAX_FILE  # bytes; a settings file is a few lines


class ProfileError(SettingsError):
    """A profile that is missing, not YAML, or has a bad key; the message names the key."""


def config_dir() -> Path:
    """$OI_LSP_CONFIG_DIR, else the platform's user config folder for oi-lsp."""
    return Path(os.environ.get("OI_LSP_CONFIG_DIR") or platformdirs.user_config_dir("oi-lsp"))


def profiles_dir() -> Path:
    return config_dir() / "profiles"


def user_profile_path(name: str) -> Path:
    if not re.fullmatch(r"[\w.-]+", name) or name.startswith("."):
        raise ProfileError(f"setting 'profile': {name!r} is not a profile name")
    folder = profiles_dir()
    for suffix in (".yaml", ".yml"):
        if (folder / f"{name}{suffix}").is_file():
            return folder / f"{name}{suffix}"
    raise ProfileError(f"setting 'profile': no profile {name!r} in {folder} "
                       f"(expected {folder / (name + '.yaml')})")


def load(path: Path) -> dict[str, Any]:
    """One profile file as a settings layer; ProfileError names the file and the bad key."""
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"profile {path}: cannot read it: {exc}") from None
    return parse(body, path)


def parse(body: bytes, path: Path) -> dict[str, Any]:
    """A profile's content (read already) as a settings layer; `path` names it in errors."""
    if len(body) > MAX_PROFILE:
        raise ProfileError(f"profile {path}: larger than {MAX_PROFILE} bytes")
    import yaml  # lazy: only when a file is read or written (~8 ms of the server's start)

    try:
        data = yaml.safe_load(body.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProfileError(f"profile {path}: cannot read it: {exc}") from None
    return layer_of(data, path)


def layer_of(data: Any, path: Path) -> dict[str, Any]:
    """A profile's parsed YAML as a settings layer; ProfileError names the file and key."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping of keys to values")
    try:
        return _layer(data)
    except ProfileError as exc:
        raise ProfileError(f"profile {path}: {exc}") from None


def _layer(data: dict[Any, Any]) -> dict[str, Any]:
    entries: list[tuple[str, str, Any]] = []  # (key as written, setting name, value)
    instructions: str | None = None
    for key, value in data.items():
        key = str(key)
        if key == "llm":
            if not isinstance(value, dict):
                raise ProfileError("key 'llm': expected a mapping")
            for sub, sub_value in value.items():
                if str(sub) not in _LLM:
                    raise ProfileError(f"key 'llm.{sub}': unknown key")
                if (name := _LLM[str(sub)]) is not None:
                    entries.append((f"llm.{sub}", name, sub_value))
        elif key == "custom_instructions":
            if not isinstance(value, str):
                raise ProfileError(f"key {key!r}: expected a string")
            instructions = value
        elif key in _IGNORED:
            log.warning("profile key %r has no meaning in oi-lsp; ignored", key)
        elif (name := field_name(key)) is None:
            raise ProfileError(unknown_key(key))
        elif name in _FORBIDDEN:
            raise ProfileError(f"key {key!r}: not allowed in a profile")
        else:
            entries.append((key, name, value))
    layer: dict[str, Any] = {}
    for written, name, value in entries:
        try:
            Settings.model_validate({name: value})
        except ValidationError as exc:
            secret = name in ("api_key", "kernel_gateway")  # never echo a key's value
            error = exc.errors()[0]
            msg = "invalid value" if secret else error["msg"]
            where = ".".join([written, *(str(p) for p in error["loc"][1:])])  # nested: named
            raise ProfileError(f"key {where!r}: {msg}") from None
        layer[name] = value
    if instructions:
        # OI's custom instructions add to the system message, as in Open Interpreter.
        layer["system_message"] = "\n\n".join(
            p for p in (layer.get("system_message"), instructions) if p)
    return layer


def wanted_changes(layer: dict[str, Any]) -> list[str]:
    """What a profile layer changes, in words, the settings that matter most first (for the
    question whether to trust it); values shown only where they say where things go."""
    shown = {"api_base": "the model server (where your API key is sent)",
             "api_key": "the API key", "model": "the model", "auto_run": "run code unasked",
             "kernel_gateway": "where code runs (a kernel gateway)",
             "pass_keys_to_repls": "give your API keys to the code it runs"}
    out = []
    for name in sorted(layer, key=lambda n: (n not in shown, n)):
        value = layer[name]
        if name in ("api_base", "model"):
            out.append(f"{shown[name]}: {str(value)[:80]!r}")
        elif name == "kernel_gateway" and isinstance(value, dict):
            out.append(f"{shown[name]}: {str(value.get('url'))[:80]!r}")
        elif name in ("auto_run", "pass_keys_to_repls"):
            if value is True:
                out.append(shown[name])
        else:
            out.append(shown.get(name, name))
    return out


def available() -> list[str]:
    """The names of the user's profiles."""
    folder = profiles_dir()
    if not folder.is_dir():
        return []
    return sorted({p.stem for p in folder.iterdir()
                   if p.suffix in (".yaml", ".yml") and not p.name.startswith(".")})
