"""A local kernel's channels: every message to the run whose request it answers, read straight
from the sockets; housekeeping cells; and the pacing of the kernel's output."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import struct
import tempfile
from typing import Any

import anyio

from .messages import Cell, Message

log = logging.getLogger(__name__)


class Channels:
    def __init__(self) -> None:
        self.routes: dict[str, asyncio.Queue[Message]] = {}  # request msg_id -> its queue
        self.pacing = Pacing()  # how much of the kernel's output the server has read
        self._readers: asyncio.Task[None] | None = None  # the REPL's task group's host

    def start(self, kc: Any) -> None:
        self.stop()
        self._readers = asyncio.create_task(self._read_all(kc))

    def stop(self) -> None:
        if self._readers is not None:
            self._readers.cancel()  # its task group ends every reader
            self._readers = None

    async def _read_all(self, kc: Any) -> None:
        """The REPL's readers in one task group: they end together, and one that fails ends
        the others (its error logged) rather than leave the kernel half read."""
        try:
            async with anyio.create_task_group() as readers:
                readers.start_soon(self._read, kc, kc.iopub_channel, "iopub")
                readers.start_soon(self._read, kc, kc.shell_channel, "shell")
                readers.start_soon(self._read, kc, kc.stdin_channel, "stdin")
        except Exception:
            log.exception("a kernel channel reader failed")

    async def _read(self, kc: Any, channel: Any, name: str) -> None:
        """Route every message to the run that sent its parent request. Straight from the
        socket: get_msg() awaits a poll before each receive, a second wake-up per message."""
        socket, session = channel.socket, kc.session
        while True:
            _, parts = session.feed_identities(await socket.recv_multipart())
            msg = session.deserialize(parts)
            route = self.routes.get(msg["parent_header"].get("msg_id", ""))
            if route is not None:
                route.put_nowait((name, msg))
            elif msg["msg_type"] == "stream":  # nobody's: dropped, so read as far as pacing goes
                self.pacing.read(len(msg["content"].get("text", "")))

    async def silent(self, kc: Any, code: str) -> None:
        """Run housekeeping code that is no cell of the user's: no output, no history."""
        cell = Cell()
        msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        self.routes[msg_id] = cell.queue
        try:
            async with asyncio.timeout(30):
                while not cell.done:
                    await cell.next()
        finally:
            del self.routes[msg_id]
        if cell.reply is not None and cell.reply.get("status") != "ok":
            log.warning("kernel setup code failed: %s", cell.reply.get("evalue"))


class Pacing:
    """The characters of a kernel's output the server has read, in a file both map: the
    kernel waits while it is far ahead (drivers/ipython_output.py), so a flood waits in the
    kernel, not in the server's memory."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._path: str | None = None
        self._count = 0

    def open(self) -> str:
        """The shared counter's path (created once; blocking)."""
        if self._path is None:
            fd, self._path = tempfile.mkstemp(prefix="oi-lsp-read-")
            try:
                os.write(fd, bytes(8))
                self._map = mmap.mmap(fd, 8)
            finally:
                os.close(fd)
        return self._path

    def read(self, size: int) -> None:
        self._count += size
        if self._map is not None:
            struct.pack_into("Q", self._map, 0, self._count)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
            self._path = None
        self._count = 0
