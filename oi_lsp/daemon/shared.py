"""The daemon's one registry of workspaces, shared by every connection, and each connection's
view of it: the view attaches its connection to the workspaces it uses (so they fan out to
it) and, where a one-client server would close workspaces (shutdown, a folder removed, the
client gone), detaches it instead. A workspace nobody is attached to keeps its REPLs for a
grace period, so an editor restarted meanwhile finds its variables."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from ..common.uris import from_fs_path
from ..core.aio import log_failure
from ..core.approval import Approvals
from ..core.fanout import Fanout, Member
from ..core.store import Store
from ..core.workspace import Workspace
from ..core.workspaces import NotAWorkspace, Workspaces, normalize

log = logging.getLogger(__name__)


class SharedWorkspaces(Workspaces):
    """Every workspace of the daemon, each with the Fanout that is its Link."""

    def __init__(self, grace: float) -> None:
        super().__init__(self._new_workspace)
        self.grace = grace
        self.approvals = Approvals()
        self.store = Store()
        self.fanouts: dict[str, Fanout] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _new_workspace(self, uri: str, folder: Path) -> Workspace:
        fanout = self.fanouts[uri] = Fanout(lambda: self._unused(uri))
        return Workspace(uri, folder, fanout, self.approvals, self.store, fanout.settings_layers)

    def attach(self, workspace: Workspace, member: Member, plain: bool) -> None:
        timer = self._timers.pop(workspace.uri, None)
        if timer is not None:
            timer.cancel()
        self.fanouts[workspace.uri].attach(member)
        if plain:  # a plain client reads the transcript
            workspace.transcript.enabled = True

    def detach(self, uri: str, member: Member) -> None:
        fanout = self.fanouts.get(uri)
        if fanout is not None:
            fanout.detach(member)

    def _unused(self, uri: str) -> None:
        workspace = self._workspaces.get(uri)
        grace = self.grace
        if workspace is not None:
            try:
                own = workspace.settings().kernel_grace
            except ValueError as exc:  # settings that do not combine: the daemon's grace
                log.warning("%s: %s", uri, exc)
                own = None
            grace = grace if own is None else own
        log.info("nobody uses %s: its REPLs stay for %g s", uri, grace)
        self._timers[uri] = asyncio.get_running_loop().call_later(grace, self._expire, uri)

    def _expire(self, uri: str) -> None:
        self._timers.pop(uri, None)
        workspace = self._workspaces.pop(uri, None)
        self.fanouts.pop(uri, None)
        if workspace is not None:
            log.info("closing %s: unused for its grace period", uri)
            task = asyncio.ensure_future(workspace.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            task.add_done_callback(log_failure("closing an unused workspace"))

    async def close_all(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        await super().close_all()


class ConnectionWorkspaces(Workspaces):
    """One connection's view of the shared registry: its own folders, the same workspaces."""

    def __init__(self, shared: SharedWorkspaces, member: Member, plain: Any,
                 cwd: str | None = None) -> None:
        super().__init__(shared._new_workspace)
        self._workspaces = shared._workspaces  # the same dicts: one registry
        self._keys = shared._keys
        self.shared = shared
        self.member = member
        self._plain = plain  # -> bool: the client renders no oi/* (known after initialize)
        self.attached: set[str] = set()
        self.cwd = cwd  # the relay's: the workspace of a client that names no folder

    def resolve(self, workspace: str | None, hint: str | None = None, *,
                start: bool = False) -> Workspace:
        if not workspace and not self.folders and self.cwd:
            workspace = from_fs_path(self.cwd)  # not the daemon's own working directory
        return super().resolve(workspace, hint, start=start)

    def get(self, uri: str, *, start: bool = False) -> Workspace:
        workspace = super().get(uri, start=start)
        if workspace.uri not in self.attached:
            self.attached.add(workspace.uri)
            self.shared.attach(workspace, self.member, self._plain())
        return workspace

    async def settings_changed(self) -> None:
        for uri in list(self.attached):
            workspace = self.find(uri)
            if workspace is not None:
                await workspace.settings_changed()

    def opening(self) -> list[asyncio.Task[None]]:
        return [t for uri in self.attached if (w := self.find(uri)) is not None
                and (t := w.repls.opening) is not None and not t.done()]

    async def remove_folder(self, uri: str) -> None:
        try:
            key = normalize(uri)
        except NotAWorkspace:
            key = uri
        if key in self.folders:
            self.folders.remove(key)
        if key in self.attached:
            self.attached.discard(key)
            self.shared.detach(key, self.member)

    async def close_all(self) -> None:
        """This client is done: the workspaces stay for the others (and the grace period)."""
        self.folders.clear()
        for uri in list(self.attached):
            self.shared.detach(uri, self.member)
        self.attached.clear()

    def kill_all(self) -> None:
        """The daemon, not a connection, owns the REPLs."""
