"""Lines typed in the terminal, read without blocking the event loop (for `oi-lsp chat`).

A daemon thread reads fd 0 in the terminal's own line mode (so backspace, Ctrl-U and Ctrl-W
work) and only while a prompt waits for a line: when no prompt waits, nothing reads the
terminal, so an editor started for `[e]dit` gets every key, and text typed during a turn stays
in the terminal's buffer for the next prompt. os.read (not sys.stdin) holds no lock, so the
process can exit while a read is pending. prompt() shows a prompt and reads one line.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .render import Renderer  # only a type: this module stays free of rich


class Interrupted(Exception):
    """The read was abandoned (Ctrl-C)."""


class LineReader:
    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int = 0) -> None:
        self.loop = loop
        self.fd = fd
        self._wanted = threading.Event()
        self._lines: list[str | None] = []  # None: end of input
        self._buffer = b""
        self._waiter: asyncio.Future[str | None] | None = None
        self._reading = False  # the thread was asked for data and has not delivered it yet
        threading.Thread(target=self._run, daemon=True, name="oi-chat-stdin").start()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            try:
                self.loop.call_soon_threadsafe(self._deliver, data)
            except RuntimeError:  # the loop is closed: we are exiting
                return
            if not data:
                return

    def _want(self) -> None:
        # Only the loop thread changes _reading, so one request means exactly one os.read.
        if not self._reading:
            self._reading = True
            self._wanted.set()

    def _deliver(self, data: bytes) -> None:
        self._reading = False
        if not data:
            if self._buffer:
                self._lines.append(self._buffer.decode(errors="replace"))
                self._buffer = b""
            self._lines.append(None)
        else:
            self._buffer += data
            *lines, self._buffer = self._buffer.split(b"\n")
            self._lines.extend(line.decode(errors="replace") for line in lines)
            if not lines and self._waiter is not None:
                self._want()  # a partial line (Ctrl-D mid-line): read on
        self._wake()

    def _wake(self) -> None:
        if self._lines and self._waiter is not None and not self._waiter.done():
            line = self._lines[0]
            if line is not None:  # the end of input stays, for every later read
                self._lines.pop(0)
            self._waiter.set_result(line)

    async def read(self) -> str | None:
        """The next line (without its newline), or None at the end of input (Ctrl-D).
        Raises Interrupted when interrupt() abandons it."""
        if self._waiter is not None and not self._waiter.done():
            raise RuntimeError("two reads of the terminal at once")
        waiter = self._waiter = self.loop.create_future()
        if not self._lines:
            self._want()
        self._wake()
        try:
            return await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    @property
    def waiting(self) -> bool:
        return self._waiter is not None and not self._waiter.done()

    def interrupt(self) -> None:
        """Abandon the pending read. A line being typed goes to the next read."""
        if self.waiting:
            assert self._waiter is not None
            self._waiter.set_exception(Interrupted())


async def prompt(reader: LineReader, ui: Renderer, text: str) -> str | None:
    """A line typed at the prompt `text`; None when the user leaves (Ctrl-D, or Ctrl-C)."""
    ui.newline()
    if text == "> ":
        ui.console.print()  # a blank line between exchanges
    ui.console.print(text, end="", style="bold green", markup=False)
    ui.console.file.flush()
    try:
        line = await reader.read()
    except Interrupted:
        line = None
    if line is None:  # the terminal echoed no newline for Ctrl-C or Ctrl-D
        ui.raw("\n")
    else:
        ui.at_line_start()  # the terminal echoed the Enter
    return line
