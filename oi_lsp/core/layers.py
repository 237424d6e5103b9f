"""A workspace's settings: the layers they are made of (environment, editor, profiles,
oi/configure), combined again only when a layer changes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..protocol import AlwaysScope, AutoRunRule
from . import profiles, rules
from .settings import Settings, SettingsError, check, combine, split_known


class SettingsLayers:
    def __init__(self, folder: Path, base: Callable[[], list[dict[str, Any]]]) -> None:
        self.folder = folder
        self.base = base  # the server-wide layers: environment, then the editor's settings
        self.overrides: dict[str, Any] = {}  # oi/configure for this workspace
        self.profile_layers: list[dict[str, Any]] = []  # user profile, then .oi/profile.yaml
        self._layers: list[dict[str, Any]] | None = None  # what self._settings was made of
        self._settings: Settings | None = None

    def settings(self) -> Settings:
        layers = [*self.base(), *self.profile_layers, self.overrides]
        if layers != self._layers:  # comparing a few small dicts costs less than validating
            self._settings = combine(*layers)
            self._layers = [dict(layer) for layer in layers]
        assert self._settings is not None
        return self._settings

    def _read_profiles(self, overrides: dict[str, Any]) -> list[dict[str, Any]]:
        """The profile layers these overrides select (blocking: YAML files)."""
        base = combine(*self.base(), overrides)
        return profiles.layers(base.profile, self.folder, base.trusted)

    async def load_profiles(self) -> None:
        """Read the selected profile and the workspace's own again (they may have changed);
        raises ProfileError naming the file and the key, and keeps the old layers then."""
        self.profile_layers = await asyncio.to_thread(self._read_profiles, self.overrides)

    async def configure(self, values: dict[str, Any]) -> tuple[Settings, list[str]]:
        """Apply settings to this workspace only; raises SettingsError and changes nothing
        when a value has the wrong type or the profile it selects is bad."""
        known, unknown = split_known(values)
        if "trusted" in known:
            raise SettingsError("setting 'trusted': only the editor sets it, at initialize")
        check(known)
        candidate = {**self.overrides, **known}
        layers = await asyncio.to_thread(self._read_profiles, candidate)
        combine(*self.base(), *layers, candidate)  # the merged result must be valid too
        self.overrides = candidate
        self.profile_layers = layers
        return self.settings(), unknown

    async def always(self, language: str, code: str,
                     scope: AlwaysScope) -> tuple[AutoRunRule, Path]:
        """An "always for this command" answer: an allow rule for code like this, saved at the
        end of the workspace's .oi/profile.yaml (where trusted workspaces keep their settings)
        and in effect at once. Raises SettingsError, saving nothing, in an untrusted
        workspace (it never reads that file) or when the file is broken."""
        if not self.settings().trusted:
            raise SettingsError("'always for this command' saves a rule in .oi/profile.yaml, "
                                "which an untrusted workspace does not read; trust the "
                                "workspace first")
        rule = rules.rule_for(language, code, scope)
        path = await asyncio.to_thread(rules.save, self.folder, rule)
        await self.load_profiles()
        return rule, path
