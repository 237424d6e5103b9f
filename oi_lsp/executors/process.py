"""What every subprocess-backed executor shares: a process group, merged output, a real stop."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import psutil

from .base import Chunk, Emit, strip_ansi

# How long interrupted code may take to stop before the group gets SIGTERM, then SIGKILL;
# SIGINT is repeated meanwhile (a signal landing between two commands is easily lost).
INTERRUPT_GRACE = 2.0
TERM_GRACE = 1.0
REINTERRUPT = 0.3
READ_SIZE = 65536


async def spawn(argv: Sequence[str], cwd: Path, *, stdin_pipe: bool,
                env: dict[str, str] | None = None,
                pass_fds: Sequence[int] = ()) -> asyncio.subprocess.Process:
    """Start `argv` in its own session (so its whole tree can be signalled), stderr merged into
    stdout (one stream, in the order it was written), stdin a pipe or /dev/null."""
    return await asyncio.create_subprocess_exec(
        *argv, cwd=str(cwd),
        stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True, env={**os.environ, **(env or {})}, pass_fds=tuple(pass_fds))


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int, exclude: int | None = None) -> list[psutil.Process]:
    """Processes of group `pgid` (orphans included, which a walk of children would miss)."""
    members = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != exclude and os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


async def kill_members(pgid: int, exclude: int | None = None) -> None:
    """SIGTERM what a stopped run left behind in the group, SIGKILL what survives the grace."""
    members = await asyncio.to_thread(group_members, pgid, exclude)
    if not members:
        return
    for proc in members:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = await asyncio.to_thread(psutil.wait_procs, members, TERM_GRACE)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if alive:
        await asyncio.to_thread(psutil.wait_procs, alive, TERM_GRACE)


async def end_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the whole group, SIGKILL it after a grace period; returns when the leader is gone."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(TERM_GRACE):
            await proc.wait()
    except TimeoutError:
        signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()
    await kill_members(proc.pid)


class OutputReader:
    """Decodes a process's merged output and emits it as it comes, up to an end marker.

    Text that could be the start of the marker is held back until the next read tells; all
    else is emitted at once, so output streams without any fixed delay.
    """

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""  # read past the previous run's marker (background output)

    async def until_marker(self, marker: str, emit: Emit) -> int | None:
        """Emit output until `marker<status>\\n`; the status, or None at end of stream."""
        buf, self.pending = self.pending, ""
        while True:
            at = buf.find(marker)
            if at >= 0:
                newline = buf.find("\n", at)
                if newline >= 0:
                    _emit(emit, buf[:at])
                    self.pending = buf[newline + 1:]
                    digits = buf[at + len(marker):newline].strip()
                    return int(digits) if digits.lstrip("-").isdigit() else 1
                keep = len(buf) - at
            else:
                keep = _prefix_overlap(buf, marker)
            _emit(emit, buf[:len(buf) - keep])
            buf = buf[len(buf) - keep:]
            data = await self.stream.read(READ_SIZE)
            if not data:
                _emit(emit, buf + self.decoder.decode(b"", final=True))
                return None
            buf += self.decoder.decode(data)

    async def until_eof(self, emit: Emit) -> None:
        if self.pending:
            _emit(emit, self.pending)
            self.pending = ""
        while data := await self.stream.read(READ_SIZE):
            _emit(emit, self.decoder.decode(data))
        _emit(emit, self.decoder.decode(b"", final=True))


def _emit(emit: Emit, text: str) -> None:
    if text:
        emit(Chunk("console", "output", strip_ansi(text)))


def _prefix_overlap(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a start of `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
