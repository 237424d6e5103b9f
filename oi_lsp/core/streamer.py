"""Turns a workspace's output into `oi/stream` notifications: blocks, in order, coalesced.

At most one block is open at a time: content of another kind closes the open block (`end`) and
opens a new one (`start`), so a client only ever appends to the block it opened last.
The first piece after a quiet spell goes out at once (a model token reaches the editor with no
added delay); during a flood, content is gathered and flushed once per INTERVAL. When the client
falls BEHIND (what was sent and it has not read yet), a run's output is not sent but counted
until it catches up, then a note says how much it did not get: memory stays bounded however
fast a run prints (the run's result and its spill file still have it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from .. import protocol

Send = Callable[[str, dict[str, Any]], None]
Key = tuple[str, protocol.Role, protocol.ChunkType, str | None]

INTERVAL = 0.02  # at most one content notification per 20 ms ...
MAX_BYTES = 64 * 1024  # ... unless this much is waiting
BEHIND = 4 * 1024 * 1024  # bytes the client has not read: past this, output is skipped ...
CAUGHT_UP = 1024 * 1024  # ... until it is down to this
QUIET = 0.1  # seconds without output that make a run's output settled (settled()) ...
SETTLE = 1.0  # ... waited for at most this long


class Streamer:
    def __init__(self, send: Send, workspace: str,
                 backlog: Callable[[], int] = lambda: 0) -> None:
        self._send = send
        self._workspace = workspace
        self._backlog = backlog  # bytes sent that the client has not read yet
        self._skipped = 0  # characters of the open block not sent (the client was behind)
        self._open: Key | None = None
        self._parts: list[str] = []
        self._size = 0
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._line: tuple[str, str] | None = None  # (turn, line number) not sent yet
        self._latest = 0.0  # time.monotonic() of the latest content

    def content(self, turn_id: str, role: protocol.Role, type_: protocol.ChunkType,
                format_: str | None, text: str) -> None:
        """Append text to the block of this kind, opening it if another kind is open."""
        if not text:
            return
        key = (turn_id, role, type_, format_)
        if key != self._open:
            self.close()
            self._open = key
            self._emit(key, start=True)
        if role == "computer" and type_ == "console" and self._behind(len(text)):
            return
        self._parts.append(text)
        self._size += len(text)
        now = self._latest = time.monotonic()
        if self._size >= MAX_BYTES or now - self._last >= INTERVAL:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                INTERVAL - (now - self._last), self.flush)

    def _behind(self, size: int) -> bool:
        """Whether to skip this text because the client is behind; once it caught up, the
        note saying what it missed goes first."""
        if self._skipped:
            if self._backlog() > CAUGHT_UP:
                self._skipped += size
                return True
            self._note_skipped()
            return False
        if self._backlog() > BEHIND:
            self._skipped = size
            return True
        return False

    def _note_skipped(self) -> None:
        self._parts.append(f"\n[... {self._skipped:,} characters not shown here: the output "
                           "came faster than the editor could take it ...]\n")
        self._size += len(self._parts[-1])
        self._skipped = 0

    def whole(self, turn_id: str, role: protocol.Role, type_: protocol.ChunkType,
              format_: str | None, content: str) -> None:
        """A block that arrives complete (an image, the code about to run): start, content, end."""
        self.close()
        key = (turn_id, role, type_, format_)
        self._emit(key, start=True)
        self._emit(key, content=content)
        self._emit(key, end=True)

    def line(self, turn_id: str, number: str) -> None:
        """The line a run executes now: not a block (the open one stays open); coalesced like
        content, and only the latest line of a flush interval is sent."""
        self._line = (turn_id, number)
        now = time.monotonic()
        if now - self._last >= INTERVAL:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                INTERVAL - (now - self._last), self.flush)

    def status(self, turn_id: str, state: str, text: str | None = None) -> None:
        """What the workspace is doing; not a block, so it leaves the open block open."""
        self.flush()
        self._emit((turn_id, "computer", "status", state), content=text)

    def resources(self, turn_id: str, repl: protocol.ReplStatus, elapsed: float) -> None:
        """A REPL's figures during a long run: oi/resources, not a block (after what is
        waiting to go out, so the order stays)."""
        self.flush()
        self._send(protocol.RESOURCES, protocol.Resources(
            workspace=self._workspace, turn_id=turn_id, repl=repl, elapsed=elapsed).wire())

    def close(self) -> None:
        """End the open block, after sending what it still holds."""
        if self._skipped:
            self._note_skipped()
        self.flush()
        if self._open is not None:
            key, self._open = self._open, None
            self._emit(key, end=True)

    async def settled(self) -> None:
        """Once output has been quiet for QUIET seconds (SETTLE at most), with what came sent.
        A question a run asks (an MCP call's) goes after what the code printed before it: that
        comes from the kernel another way (iopub), and may still be on its way."""
        start = time.monotonic()
        # It waits for no event to come (an Event cannot say that): each sleep till the quiet
        # spell would end, if nothing comes meanwhile.
        while (wait := min(max(start, self._latest) + QUIET,  # noqa: ASYNC110
                           start + SETTLE) - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        self.flush()

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._parts and self._open is not None:
            text = "".join(self._parts)
            self._parts.clear()
            self._size = 0
            self._last = time.monotonic()  # only content counts toward the rate limit
            self._emit(self._open, content=text)
        if self._line is not None:
            (turn_id, number), self._line = self._line, None
            self._last = time.monotonic()
            self._emit((turn_id, "computer", "console", "active_line"), content=number)

    def _emit(self, key: Key, *, content: str | None = None, start: bool = False,
              end: bool = False) -> None:
        turn_id, role, type_, format_ = key
        chunk = protocol.StreamChunk(turn_id=turn_id, workspace=self._workspace, role=role,
                                     type=type_, format=format_, content=content,
                                     start=start or None, end=end or None)
        self._send(protocol.STREAM, chunk.wire())
