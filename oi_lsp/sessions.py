"""The registry: workspace folder URI → its Session."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from pygls import uris

from .session import Session

log = logging.getLogger(__name__)


class NotAWorkspace(ValueError):
    """A workspace URI that does not name an existing folder."""


def folder_of(uri: str) -> Path:
    path = uris.to_fs_path(uri) if uri.startswith("file:") else None
    if not path or not Path(path).is_dir():
        shown = uri if len(uri) <= 200 else uri[:200] + "…"  # a client may send megabytes
        raise NotAWorkspace(f"workspace {shown!r} is not a file:// URI of an existing folder")
    return Path(path).resolve()


def normalize(uri: str) -> str:
    """One spelling per folder, whatever trailing slash or escaping the client used."""
    return uris.from_fs_path(str(folder_of(uri))) or uri


class Sessions:
    def __init__(self, factory: Callable[[str, Path], Session]) -> None:
        self._factory = factory
        self._sessions: dict[str, Session] = {}
        # URI as a client spelled it → its normalized key: resolving a path costs a stat of
        # every component, and most requests name the same few workspaces again and again.
        self._keys: dict[str, str] = {}
        self.folders: list[str] = []  # the editor's workspace folders, in its order

    def add_folder(self, uri: str) -> Session:
        """A workspace folder the editor opened: its session starts its kernel now."""
        session = self.get(uri)
        if session.workspace not in self.folders:
            self.folders.append(session.workspace)
        return session

    def opening(self) -> list[asyncio.Task[None]]:
        """The kernel starts that opening workspaces began and that still run."""
        return [s.opening for s in self._sessions.values()
                if s.opening is not None and not s.opening.done()]

    def get(self, uri: str) -> Session:
        key = self._keys.get(uri)
        session = self._sessions.get(key) if key is not None else None
        if session is not None and session.folder.is_dir():
            return session
        key = self._keys[uri] = normalize(uri)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self._factory(key, folder_of(key))
            session.open()
        return session

    def resolve(self, workspace: str | None, hint: str | None = None) -> Session:
        """The session a request means: its workspace, else the folder holding `hint`
        (a document URI), else the first folder, else the server's working directory."""
        if workspace:
            return self.get(workspace)
        if hint and hint.startswith("file:"):
            path = uris.to_fs_path(hint) or ""
            holders = [f for f in self.folders
                       if path.startswith((uris.to_fs_path(f) or "\0").rstrip("/") + "/")]
            if holders:
                return self.get(max(holders, key=len))
        if self.folders:
            return self.get(self.folders[0])
        return self.add_folder(uris.from_fs_path(os.getcwd()) or "file:///")

    async def remove_folder(self, uri: str) -> None:
        try:
            key = normalize(uri)
        except NotAWorkspace:  # the folder may be gone already
            key = uri
        if key in self.folders:
            self.folders.remove(key)
        session = self._sessions.pop(key, None)
        if session is not None:
            await session.close()

    async def close_all(self) -> None:
        for key in list(self._sessions):
            # A folder removal still closing may have taken it meanwhile.
            session = self._sessions.pop(key, None)
            if session is not None:
                await session.close()

    def kill_all(self) -> None:
        """Last resort when the loop is gone (client vanished): no kernel outlives us, nor
        what it started (kernels lead a process group of their own)."""
        for session in self._sessions.values():
            for pid in session.pids():
                try:
                    if os.getpgid(pid) == pid:
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                except OSError as exc:
                    log.warning("could not kill %s: %s", pid, exc)
