"""Asking the user whether a workspace's own settings may apply (the store is trust.py).

When the editor says nothing about trust (Neovim, Emacs, `oi-lsp chat`, any LSP client), a
workspace whose `.oi/profile.yaml` nobody trusted is asked about once per content and server:
when it opens, and again before a turn or oi/configure when the file changed. Until the user
answers Trust, the file is ignored; a turn waits for the answer so it never starts on settings
the user is about to change. Through LSP the question is a window/showMessageRequest.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from . import profiles, trust
from .aio import log_failure, to_disk
from .layers import SettingsLayers
from .link import Tell

log = logging.getLogger(__name__)

TRUST, NOT_NOW = "Trust", "Not now"


class TrustPrompt:
    def __init__(self, folder: Path, layers: SettingsLayers, tell: Tell) -> None:
        self.folder = folder
        self.layers = layers
        self.tell = tell
        self._lock = asyncio.Lock()  # one read-and-ask at a time: a turn waits for the answer
        self._asked: set[str] = set()  # digests asked about: each content is asked once
        self._opening: asyncio.Task[None] | None = None
        # Set once the files were first read: until then `trusted` reads false, and what
        # depends on it (the sandbox a REPL starts in) waits for this.
        self.read = asyncio.Event()

    def start(self) -> None:
        """The workspace opened: read its settings files and ask now, in the background."""
        self._opening = asyncio.ensure_future(self.check())
        self._opening.add_done_callback(log_failure("reading the workspace's settings"))

    async def check(self) -> None:
        """Read the settings files again; when they are untrusted and not asked about yet, ask
        and wait for the answer. Trust goes into the store and the profile applies at once.
        Raises ProfileError for a bad profile that applies."""
        async with self._lock:
            try:
                state = await self.layers.load_profiles()
            finally:
                self.read.set()
            files = state.files
            if state.trusted or state.by_client or files.digest in self._asked:
                return
            self._asked.add(files.digest)
            choice = await self.tell(question(files), [TRUST, NOT_NOW])
            if choice != TRUST:
                log.info("workspace settings of %s left untrusted", self.folder)
                return
            await to_disk(trust.allow, self.folder, files.digest)
            await self.layers.load_profiles()


def question(files: trust.WorkspaceFiles) -> str:
    name = trust.WORKSPACE_PROFILE
    try:
        layer = profiles.parse(files.profile or b"", files.folder / name)
        wants = "; ".join(profiles.wanted_changes(layer)) or "nothing"
    except profiles.ProfileError as exc:
        wants = f"(it is not a valid profile: {exc})"
    return (f"The workspace {files.folder} has a {name} that wants to change your settings: "
            f"{wants}. It is ignored unless you trust it (`oi-lsp trust {files.folder}` also "
            "does; editing it asks again). Trust it?")
