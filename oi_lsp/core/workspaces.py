"""The registry: workspace folder URI → its Workspace."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio

from ..common.uris import from_fs_path, to_fs_path
from .workspace import Workspace

log = logging.getLogger(__name__)


class NotAWorkspace(ValueError):
    """A workspace URI that does not name a folder that may be a workspace."""


MAX_URI = 4096  # longer than any path the system takes (PATH_MAX)
# System trees: never a workspace, whoever runs the server (root can write them).
SYSTEM = tuple(Path(p) for p in ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                                 "/boot", "/dev", "/proc", "/sys"))


def folder_of(uri: str) -> Path:
    """The folder a workspace URI names. Raises NotAWorkspace, saying why, for a URI too long,
    not file:, malformed or not an existing folder, and for folders that are no project: the
    filesystem root and the folders in it, system trees, folders the user cannot write."""
    shown = uri if len(uri) <= 200 else uri[:200] + "…"  # a client may send megabytes
    if len(uri) > MAX_URI:
        raise NotAWorkspace(f"workspace URI is {len(uri)} characters long (at most {MAX_URI})")
    path = to_fs_path(uri) if uri.startswith("file:") else None
    if not path:
        raise NotAWorkspace(f"workspace {shown!r} is not a file:// URI")
    try:
        folder = Path(path).resolve()
        exists = folder.is_dir()
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long, a loop of links
        raise NotAWorkspace(f"workspace {shown!r} is not a usable path: {exc}") from None
    if not exists:
        raise NotAWorkspace(f"workspace {shown!r} is not a file:// URI of an existing folder")
    why = _not_a_project(folder)
    if why:
        raise NotAWorkspace(f"workspace {str(folder)!r} {why}: open a project folder")
    return folder


def _not_a_project(folder: Path) -> str | None:
    if folder == folder.parent:
        return "is the filesystem root"
    if folder.parent == folder.parent.parent:
        return "is a top-level system folder"
    if any(folder.is_relative_to(system) for system in SYSTEM):
        return "is a system folder"
    if not os.access(folder, os.W_OK):
        return "is not writable by you"
    return None


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
        workspace = self.get(uri, start=True)
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

    def get(self, uri: str, *, start: bool = False) -> Workspace:
        """The workspace of a folder. `start`: it is used now (the client's folders, a chat,
        a run), so its kernel starts and its own settings are asked about; a request that
        only reads or changes records (oi/history, oi/status, ...) starts nothing."""
        key = self._keys.get(uri)
        workspace = self._workspaces.get(key) if key is not None else None
        if workspace is None or not workspace.folder.is_dir():
            key = normalize(uri)
            if len(self._keys) > 10_000:  # spellings a client may vary without end
                self._keys.clear()
            self._keys[uri] = key
            workspace = self._workspaces.get(key)
            if workspace is None:
                workspace = self._workspaces[key] = self._factory(key, folder_of(key))
        if start and not workspace.opened:
            workspace.open()
        return workspace

    def find(self, uri: str) -> Workspace | None:
        """The open workspace of a normalized URI, if it is open (never opens one)."""
        return self._workspaces.get(uri)

    def resolve(self, workspace: str | None, hint: str | None = None, *,
                start: bool = False) -> Workspace:
        """The workspace a request means: its workspace, else the folder holding `hint`
        (a document URI), else the first folder, else the server's working directory."""
        if workspace:
            return self.get(workspace, start=start)
        if hint and hint.startswith("file:"):
            path = to_fs_path(hint) or ""
            holders = [f for f in self.folders
                       if path.startswith((to_fs_path(f) or "\0").rstrip("/") + "/")]
            if holders:
                return self.get(max(holders, key=len), start=start)
        if self.folders:
            return self.get(self.folders[0], start=start)
        if start:
            return self.add_folder(from_fs_path(os.getcwd()))
        return self.get(from_fs_path(os.getcwd()))

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

    async def stop_all(self) -> None:
        """Stop every workspace's turn and runs at once, each saved and reported as it ended
        (the client went away: a proposal left waiting has expired)."""
        async with anyio.create_task_group() as stopping:
            for workspace in list(self._workspaces.values()):
                stopping.start_soon(workspace.stop, "expired")

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
