"""The registry: workspace folder URI → its Workspace."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from ..uris import from_fs_path, to_fs_path
from .workspace import Workspace

log = logging.getLogger(__name__)


class NotAWorkspace(ValueError):
    """A workspace URI that does not name an existing folder."""


def folder_of(uri: str) -> Path:
    path = to_fs_path(uri) if uri.startswith("file:") else None
    if not path or not Path(path).is_dir():
        shown = uri if len(uri) <= 200 else uri[:200] + "…"  # a client may send megabytes
        raise NotAWorkspace(f"workspace {shown!r} is not a file:// URI of an existing folder")
    return Path(path).resolve()


def normalize(uri: str) -> str:
    """One spelling per folder, whatever trailing slash or escaping the client used."""
    return from_fs_path(str(folder_of(uri)))


class Workspaces:
    def __init__(self, factory: Callable[[str, Path], Workspace]) -> None:
        self._factory = factory
        self._workspaces: dict[str, Workspace] = {}
        # URI as a client spelled it → its normalized key: resolving a path costs a stat of
        # every component, and most requests name the same few workspaces again and again.
        self._keys: dict[str, str] = {}
        self.folders: list[str] = []  # the editor's workspace folders, in its order

    def add_folder(self, uri: str) -> Workspace:
        """A workspace folder the editor opened: its workspace starts its kernel now."""
        workspace = self.get(uri)
        if workspace.uri not in self.folders:
            self.folders.append(workspace.uri)
        return workspace

    async def settings_changed(self) -> None:
        for workspace in list(self._workspaces.values()):
            await workspace.settings_changed()

    def opening(self) -> list[asyncio.Task[None]]:
        """The kernel starts that opening workspaces began and that still run."""
        return [s.repls.opening for s in self._workspaces.values()
                if s.repls.opening is not None and not s.repls.opening.done()]

    def get(self, uri: str) -> Workspace:
        key = self._keys.get(uri)
        workspace = self._workspaces.get(key) if key is not None else None
        if workspace is not None and workspace.folder.is_dir():
            return workspace
        key = self._keys[uri] = normalize(uri)
        workspace = self._workspaces.get(key)
        if workspace is None:
            workspace = self._workspaces[key] = self._factory(key, folder_of(key))
            workspace.open()
        return workspace

    def find(self, uri: str) -> Workspace | None:
        """The open workspace of a normalized URI, if it is open (never opens one)."""
        return self._workspaces.get(uri)

    def resolve(self, workspace: str | None, hint: str | None = None) -> Workspace:
        """The workspace a request means: its workspace, else the folder holding `hint`
        (a document URI), else the first folder, else the server's working directory."""
        if workspace:
            return self.get(workspace)
        if hint and hint.startswith("file:"):
            path = to_fs_path(hint) or ""
            holders = [f for f in self.folders
                       if path.startswith((to_fs_path(f) or "\0").rstrip("/") + "/")]
            if holders:
                return self.get(max(holders, key=len))
        if self.folders:
            return self.get(self.folders[0])
        return self.add_folder(from_fs_path(os.getcwd()))

    async def remove_folder(self, uri: str) -> None:
        try:
            key = normalize(uri)
        except NotAWorkspace:  # the folder may be gone already
            key = uri
        if key in self.folders:
            self.folders.remove(key)
        workspace = self._workspaces.pop(key, None)
        if workspace is not None:
            await workspace.close()

    async def close_all(self) -> None:
        for key in list(self._workspaces):
            # A folder removal still closing may have taken it meanwhile.
            workspace = self._workspaces.pop(key, None)
            if workspace is not None:
                await workspace.close()

    def kill_all(self) -> None:
        """Last resort when the loop is gone (client vanished): no kernel outlives us, nor
        what it started (kernels lead a process group of their own)."""
        for workspace in self._workspaces.values():
            for pid in workspace.repls.pids():
                try:
                    if os.getpgid(pid) == pid:
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                except OSError as exc:
                    log.warning("could not kill %s: %s", pid, exc)
