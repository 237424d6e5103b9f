"""A terminal for what a shell runs to read from: a pty whose slave is the code's stdin and the
shell's controlling terminal (so /dev/tty opens: getpass, sudo, ssh). A read of it is seen from
outside (Linux: /proc/<pid>/syscall of the shell and its children), its prompt is the output
since the last newline, and the user's answer is typed into it; no answer is end of input.

Programs that cannot be inspected (setuid ones, as sudo) are taken to read when the terminal's
echo is off after a prompt written to the terminal itself, which is what password prompts do.
"""

from __future__ import annotations

import array
import asyncio
import codecs
import contextlib
import fcntl
import os
import platform
import shlex
import stat
import termios
from collections.abc import Callable

import psutil

from .base import Chunk, Emit, ReadInput, strip_ansi

POLL = 0.2  # seconds between two looks at whether a program of the run reads the terminal
FD = 18  # the shell's descriptor of the terminal; the code runs with `0<&18`
_TTY = os.makedev(5, 0)  # /dev/tty, the controlling terminal: ours, in the shell's session

# Syscalls that wait for input: reads of a descriptor (its number is the first argument), and
# waits for several (taken as a read of stdin when stdin is the terminal).
_READS = {"x86_64": {0, 17, 19, 295}, "aarch64": {63, 65, 67, 69}}
_WAITS = {"x86_64": {7, 23, 232, 270, 271, 281}, "aarch64": {22, 72, 73}}


class TerminalInput:
    def __init__(self) -> None:
        self.master, self._slave = os.openpty()  # the slave stays open here: see _queued
        self.path = os.ttyname(self._slave)
        self._device = os.fstat(self._slave).st_rdev
        os.set_blocking(self.master, False)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._emit: Emit | None = None
        self.tail = ""  # the run's output since its last newline: a read's prompt
        self._prompted = False  # the terminal itself was written a prompt (no newline after)
        asyncio.get_running_loop().add_reader(self.master, self._on_output)

    def setup(self) -> str:
        """The shell command that opens the terminal (and makes it the shell's own)."""
        return f"exec {FD}<>{shlex.quote(self.path)}\n"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.master)
        for fd in (self.master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    def tracking(self, emit: Emit) -> Emit:
        """`emit` for one run, keeping the tail of what it shows (the next read's prompt)."""

        def track(chunk: Chunk) -> None:
            if chunk.type == "console" and chunk.format == "output" and chunk.content:
                last = chunk.content.rsplit("\n", 1)
                self.tail = last[-1] if len(last) > 1 else self.tail + last[0]
                self._prompted = False
            emit(chunk)

        self._emit = track
        self.tail = ""
        return track

    def _on_output(self) -> None:
        """What was written to the terminal itself: echoed answers, /dev/tty prompts."""
        try:
            data = os.read(self.master, 65536)
        except OSError:  # no slave open (cannot be while we hold one); nothing to read
            return
        text = strip_ansi(self._decoder.decode(data).replace("\r\n", "\n"))
        if self._emit is not None and text:
            self._emit(Chunk("console", "output", text))
            self._prompted = not text.endswith("\n")

    async def serve(self, shell: Callable[[], int | None], read_input: ReadInput) -> None:
        """While a run lasts (cancel this at its end): answer each read of the terminal."""
        try:
            while True:
                await asyncio.sleep(POLL)
                pid = shell()
                if pid is None or self._queued() or not await asyncio.to_thread(
                        self._reading, pid):
                    continue
                echo = bool(termios.tcgetattr(self._slave)[3] & termios.ECHO)
                value = await read_input(self.tail.strip(), not echo)
                self.tail = ""
                self._prompted = False
                # Canonical mode: a line, or ^D alone, which a read takes as end of input.
                os.write(self.master, b"\x04" if value is None else value.encode() + b"\n")
        finally:
            self._emit = None
            with contextlib.suppress(termios.error):
                termios.tcflush(self._slave, termios.TCIFLUSH)  # typed but never read

    def _queued(self) -> bool:
        """Input typed that no program has read yet (a read then is no new question)."""
        try:
            return bool(termios.tcgetattr(self._slave)[3] & termios.ICANON) and bool(
                _inq(self._slave))
        except termios.error:
            return False

    def _reading(self, shell: int) -> bool:
        try:
            procs = [psutil.Process(shell), *psutil.Process(shell).children(recursive=True)]
        except psutil.Error:
            return False
        arch = platform.machine()
        for proc in procs:
            seen = _syscall(proc.pid)
            if seen is None:
                continue
            number, fd = seen
            if number in _READS.get(arch, ()) and self._is_terminal(proc.pid, fd):
                return True
            if number in _WAITS.get(arch, ()) and self._is_terminal(proc.pid, 0):
                return True
        # A program that cannot be inspected (setuid): a password prompt on the terminal.
        echo = bool(termios.tcgetattr(self._slave)[3] & termios.ECHO)
        return self._prompted and not echo

    def _is_terminal(self, pid: int, fd: int) -> bool:
        try:
            info = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            return False
        return stat.S_ISCHR(info.st_mode) and info.st_rdev in (self._device, _TTY)


def _syscall(pid: int) -> tuple[int, int] | None:
    """(syscall number, first argument) of a process blocked in a syscall; None otherwise or
    when it cannot be read (another user's, or gone)."""
    try:
        with open(f"/proc/{pid}/syscall") as file:
            fields = file.read().split()
    except OSError:
        return None
    if len(fields) < 2 or not fields[0].isdigit():
        return None  # "running"
    return int(fields[0]), int(fields[1], 16)


def _inq(fd: int) -> int:
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def supported() -> bool:
    """Whether reads can be watched here (Linux's /proc)."""
    return os.path.exists("/proc/self/syscall")

