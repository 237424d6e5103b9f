"""YAML profiles (as in Open Interpreter): a user profile chosen by name, and a workspace's
own `.oi/profile.yaml` (trusted workspaces only), turned into settings layers."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import platformdirs
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .settings import SettingsError

WORKSPACE_PROFILE = Path(".oi") / "profile.yaml"


class ProfileError(SettingsError):
    """A profile that is missing, not YAML, or has a bad key; the message names the key."""


class _LLM(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    api_base: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0, le=2)


class Profile(_LLM):
    """The keys a profile may set. Open Interpreter's nested `llm:` block works too."""

    llm: _LLM | None = None
    auto_run: bool | None = None
    system_message: str | None = None
    custom_instructions: str | None = None
    safe_mode: Literal["off", "ask", "auto"] | None = None
    loop: bool | None = None
    max_budget: float | None = Field(default=None, gt=0)

    def layer(self) -> dict[str, Any]:
        """The settings this profile sets (snake_case names, unset keys left out)."""
        data = self.model_dump(exclude_none=True, exclude={"llm", "custom_instructions"})
        if self.llm is not None:
            data.update(self.llm.model_dump(exclude_none=True))
        if self.custom_instructions:
            data["system_message"] = "\n\n".join(
                p for p in (self.system_message, self.custom_instructions) if p)
        return data


def config_dir() -> Path:
    """$OI_LSP_CONFIG_DIR, else the platform's user config folder for oi-lsp."""
    return Path(os.environ.get("OI_LSP_CONFIG_DIR") or platformdirs.user_config_dir("oi-lsp"))


def user_profile_path(name: str) -> Path:
    if not re.fullmatch(r"[\w.-]+", name) or name.startswith("."):
        raise ProfileError(f"setting 'profile': {name!r} is not a profile name")
    folder = config_dir() / "profiles"
    for suffix in (".yaml", ".yml"):
        if (folder / f"{name}{suffix}").is_file():
            return folder / f"{name}{suffix}"
    raise ProfileError(f"setting 'profile': no profile {name!r} in {folder}")


def load(path: Path) -> dict[str, Any]:
    """One profile file as a settings layer; ProfileError names the file and the bad key."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"profile {path}: cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping of keys to values")
    data.pop("version", None)  # Open Interpreter profiles carry one
    try:
        return Profile.model_validate(data).layer()
    except ValidationError as exc:
        problems = [f"key {'.'.join(str(p) for p in e['loc'])!r}: {e['msg']}"
                    for e in exc.errors()]
        raise ProfileError(f"profile {path}: " + "; ".join(problems)) from None


def layers(name: str | None, folder: Path, trusted: bool) -> list[dict[str, Any]]:
    """The user profile `name` (if any), then the workspace's own (it wins), as layers."""
    out = []
    if name:
        out.append(load(user_profile_path(name)))
    if trusted and (folder / WORKSPACE_PROFILE).is_file():
        out.append(load(folder / WORKSPACE_PROFILE))
    return out
