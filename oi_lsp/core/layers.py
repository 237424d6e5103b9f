"""A workspace's settings: the layers they are made of (environment, editor, profiles,
oi/configure), combined again only when a layer changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol import AlwaysScope, AutoRunRule
from . import profiles, rules, trust
from .aio import in_thread, to_disk
from .settings import Settings, SettingsError, check, combine, split_known, unknown_error


@dataclass(frozen=True)
class WorkspaceTrust:
    """The workspace's settings files as last read, and whether they apply."""

    files: trust.WorkspaceFiles
    trusted: bool
    by_client: bool  # the editor decided (VS Code's Workspace Trust): the store is not asked


class SettingsLayers:
    def __init__(self, folder: Path, base: Callable[[], list[dict[str, Any]]]) -> None:
        self.folder = folder
        self.base = base  # the server-wide layers: environment, then the editor's settings
        self.overrides: dict[str, Any] = {}  # oi/configure for this workspace
        self.profile_layers: list[dict[str, Any]] = []  # user profile, then .oi/profile.yaml
        # None until the folder's files are read: untrusted until then.
        self.workspace: WorkspaceTrust | None = None
        self._layers: list[dict[str, Any]] | None = None  # what self._settings was made of
        self._settings: Settings | None = None

    def _client_trust(self) -> bool | None:
        """`trusted` as the editor sent it (VS Code), None when it sent nothing."""
        said = [layer["trusted"] for layer in self.base() if "trusted" in layer]
        return bool(said[-1]) if said else None

    def settings(self) -> Settings:
        base = self.base()
        # Without the editor's word, the workspace is trusted when its files are: none that
        # change settings, or the content the user trusted (trust.py).
        decided = [] if any("trusted" in layer for layer in base) else [
            {"trusted": self.workspace is not None and self.workspace.trusted}]
        layers = [*base, *decided, *self.profile_layers, self.overrides]
        if layers != self._layers:  # comparing a few small dicts costs less than validating
            self._settings = combine(*layers)
            self._layers = [dict(layer) for layer in layers]
        assert self._settings is not None
        return self._settings

    def _read_profiles(self, overrides: dict[str, Any],
                       ) -> tuple[list[dict[str, Any]], WorkspaceTrust]:
        """The user profile these overrides select, then the workspace's own if it is
        trusted (it wins), as layers (blocking: files)."""
        name = combine(*self.base(), overrides).profile
        out = [profiles.load(profiles.user_profile_path(name))] if name else []
        files = trust.read(self.folder)
        client = self._client_trust()
        trusted = client if client is not None else (
            not files.bodies or trust.allowed(self.folder, files.digest))
        if trusted and files.profile is not None:
            out.append(profiles.parse(files.profile, self.folder / trust.WORKSPACE_PROFILE))
        return out, WorkspaceTrust(files, trusted, client is not None)

    async def load_profiles(self) -> WorkspaceTrust:
        """Read the selected profile and the workspace's own again (they may have changed);
        raises ProfileError naming the file and the key, and keeps the old layers then."""
        self.profile_layers, workspace = await in_thread(self._read_profiles,
                                                                 self.overrides)
        self.workspace = workspace
        return workspace

    async def configure(self, values: dict[str, Any]) -> tuple[Settings, list[str]]:
        """Apply settings to this workspace only; raises SettingsError and changes nothing
        when a value has the wrong type or the profile it selects is bad."""
        known, unknown = split_known(values)
        if unknown:  # a typo answered with success would do nothing, silently
            raise unknown_error(unknown)
        if "trusted" in known:
            raise SettingsError("setting 'trusted': only the editor sets it, at initialize")
        check(known)
        candidate = {**self.overrides, **known}
        layers, workspace = await in_thread(self._read_profiles, candidate)
        combine(*self.base(), *layers, candidate)  # the merged result must be valid too
        self.overrides = candidate
        self.profile_layers, self.workspace = layers, workspace
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
        path = await to_disk(rules.save, self.folder, rule)
        if self.workspace is not None and not self.workspace.by_client:
            # The user's own edit of a profile they trusted (or of none): still trusted.
            files = await in_thread(trust.read, self.folder)
            await to_disk(trust.allow, self.folder, files.digest)
        await self.load_profiles()
        return rule, path
