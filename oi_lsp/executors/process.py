"""What every subprocess-backed executor shares: a process group, merged output, a real stop."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.to_thread
import psutil

from ..common.keys import is_key
from .base import Chunk, Emit, prefix_overlap, strip_ansi

# How long interrupted code may take to stop before the group gets SIGTERM, then SIGKILL;
# SIGINT is repeated meanwhile (a signal landing between two commands is easily lost).
PROCESS_INTERRUPT_GRACE = 2.0
TERM_GRACE = 1.0
PROCESS_REINTERRUPT = 0.3
READ_SIZE = 65536


def repl_environ(pass_keys: bool = False) -> dict[str, str]:
    """The environment a REPL starts with: the server's, without the keys it reads (unless
    asked): code the model writes, and output that goes back to it, must not see them."""
    if pass_keys:
        return dict(os.environ)
    return {name: value for name, value in os.environ.items() if not is_key(name)}


def no_input() -> int:
    """/dev/null opened for writing only, to be a program's stdin: reading it fails at once
    (EBADF) in every language, where an empty stdin would hang nothing but pass silently."""
    return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


async def spawn(argv: Sequence[str], cwd: Path, *, stdin_pipe: bool,
                env: dict[str, str] | None = None, pass_keys: bool = False,
                pass_fds: Sequence[int] = ()) -> asyncio.subprocess.Process:
    """Start `argv` in its own session (so its whole tree can be signalled), stderr merged into
    stdout (one stream, in the order it was written), stdin a pipe or `no_input()`; its
    environment is repl_environ() with `env` on top."""
    stdin = asyncio.subprocess.PIPE if stdin_pipe else no_input()
    try:
        return await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), stdin=stdin,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, env={**repl_environ(pass_keys), **(env or {})},
            pass_fds=tuple(pass_fds))
    finally:
        if stdin != asyncio.subprocess.PIPE:
            os.close(stdin)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int, exclude: int | None = None,
                  since: float = 0.0) -> list[psutil.Process]:
    """Processes of group `pgid` (orphans included, which a walk of children would miss),
    started at `since` (time.time()) or later. `exclude` is a REPL's launcher: it and the
    REPL it started (its oldest child) are never members."""
    members = []
    spared = {exclude, repl_of(exclude)} if exclude is not None else set()
    for proc in psutil.process_iter(["create_time"]):
        try:
            if (proc.pid not in spared and os.getpgid(proc.pid) == pgid
                    and (proc.info["create_time"] or 0.0) >= since):
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def repl_of(pid: int) -> int | None:
    """The REPL a launcher started (its oldest child; later ones are orphans it adopted),
    None before the launcher has forked it, or after it ended."""
    try:
        children = psutil.Process(pid).children()
        return min(children, key=lambda p: (p.create_time(), p.pid)).pid if children else None
    except psutil.Error:
        return None


def run_start() -> float:
    """Now, on the clock of psutil's create_time: boot time + time since boot. (On Linux that
    boot time is whole seconds, so time.time() can be a second off.) A little early, as start
    times are counted in clock ticks."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return time.time() - 0.05
    return _boot_time() + time.clock_gettime(boottime) - 0.02


@functools.cache
def _boot_time() -> float:
    return psutil.boot_time()  # reads /proc/stat: once, not at every run


async def kill_members(pgid: int, exclude: int | None = None, since: float = 0.0) -> None:
    """SIGTERM what a stopped run left behind in the group, SIGKILL what survives the grace.
    With `since`, only what started during the run: a server an earlier run put in the
    background keeps running. Shielded: a cancellation never leaves it half done."""
    with anyio.CancelScope(shield=True):
        members = await anyio.to_thread.run_sync(group_members, pgid, exclude, since)
        if not members:
            return
        for proc in members:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = await anyio.to_thread.run_sync(psutil.wait_procs, members, TERM_GRACE)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if alive:
            await anyio.to_thread.run_sync(psutil.wait_procs, alive, TERM_GRACE)


async def end_launcher(pid: int | None) -> None:
    """SIGTERM a REPL's launcher (sandbox/launch.py), which then kills everything the REPL
    started, daemons out of its group included; returns when it is gone (or a zombie), or
    after the grace. Before a SIGKILL of its group, which it could not clean up after.
    Shielded, as kill_members."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(_wait_ended, pid, TERM_GRACE)


def _wait_ended(pid: int, grace: float) -> None:
    """Until `pid` is gone or a zombie (never reaped here: its parent does that)."""
    deadline = time.monotonic() + grace
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        while time.monotonic() < deadline and proc.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)


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
        self.begun = False  # the begin marker of the current run was seen

    async def until_marker(self, marker: str, emit: Emit, begin: str | None = None) -> int | None:
        """Emit output until `marker<status>\\n`; the status, or None at end of stream.

        With `begin`, the line `begin\\n` (the REPL saying it took the run) is taken out of
        the output and `begun` set: at end of stream, `begun` tells whether the REPL died
        before the run or during it.
        """
        buf, self.pending = self.pending, ""
        while True:
            if begin is not None and not self.begun:
                at = buf.find(begin + "\n")
                if at >= 0:
                    _emit(emit, buf[:at])
                    buf = buf[at + len(begin) + 1:]
                    self.begun = True
            if begin is not None and not self.begun:
                keep = prefix_overlap(buf, begin + "\n")
            elif (at := buf.find(marker)) >= 0:
                newline = buf.find("\n", at)
                if newline >= 0:
                    _emit(emit, buf[:at])
                    self.pending = buf[newline + 1:]
                    digits = buf[at + len(marker):newline].strip()
                    return int(digits) if digits.lstrip("-").isdigit() else 1
                keep = len(buf) - at
            else:
                keep = prefix_overlap(buf, marker)
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

