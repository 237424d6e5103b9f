"""Persistent subprocess REPLs (shell, node, ruby, R, PowerShell) driven by end markers.

Each run's code goes to a file; the REPL is told to run that file and then print a marker made
of a per-run random token and the exit status. Output (stdout and stderr merged, in order)
streams until the marker. The marker is assembled at run time, so a REPL that echoes or traces
its commands (`set -x`) never prints it early. Code runs with stdin on /dev/null.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shlex
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil

from ..common import languages
from . import active_line, terminal_input
from .base import Chunk, Emit, Executor, RunResult, driver
from .process import (
    PROCESS_INTERRUPT_GRACE,
    PROCESS_REINTERRUPT,
    OutputReader,
    end_group,
    kill_members,
    repl_of,
    run_start,
    signal_group,
    spawn,
)
from .sandbox.policy import private_dir
from .stopping import interrupt_until_ended

log = logging.getLogger(__name__)

# Spelled out in drivers/ too (node.js, ruby.rb, r.R): change them together.
MARKER_PREFIX = "__oi_end_"
BEGIN_PREFIX = "__oi_begin_"  # + token: the REPL took the run (see ReplExecutor.run)


@dataclass(frozen=True, slots=True)
class ReplSpec:
    """How to drive one interpreter.

    `argv` starts it; `setup` is sent once after start; `command(file, token)` is the line that
    prints BEGIN_PREFIX + token, runs a file and prints MARKER_PREFIX + token + "__" + status.
    With `channel == "stdin"` the commands go to the REPL's stdin (and the command itself puts
    the code's stdin on /dev/null); with "fd" they go to a pipe whose number is in $OI_CMD_FD,
    and stdin is /dev/null (write-only: reading input fails at once) outright.
    `line_command`, when the language has one, is `command` reporting active lines.
    """

    language: str
    argv: tuple[str, ...]
    command: Callable[[str, str], str]
    channel: str = "fd"
    setup: str = ""
    line_command: Callable[[str, str, str], str] | None = None  # (file, token, line token)
    # The code reads a terminal of its own (terminal_input.py): its commands say NO_INPUT.
    terminal: bool = False

    @property
    def suffix(self) -> str:
        """Of the file a run's code goes to."""
        return languages.suffix(self.language)


def _q(path: str) -> str:
    return shlex.quote(path)


# Shells: SIGINT ends the sourced file with status 130 and leaves the shell itself alive.
# The code's stdin is /dev/null opened for writing: a read fails at once (bad file descriptor);
# with a terminal (terminal_input.py), the terminal instead.
NO_INPUT = "0>/dev/null"
TERMINAL = f"0<&{terminal_input.FD}"


# Bash and zsh keep a copy of the REPL's output at this fd, should the code close both 1 and 2
# (`exec >&- 2>&-`); other sh-like shells (dash knows fds 0-9 only) reopen one from the other.
SPARE_FD = 17  # (18: the terminal of terminal_input; 19: active-line reports)


def _reopened(spare: str) -> str:
    """Run after the code: an output it closed (`exec >&-`) is opened again, saying so, so that
    the marker and the next runs' output reach the server."""
    # A copy to fd 3 fails on a closed fd (`>&1` onto itself would not); `true`, not `:`, as a
    # failed redirection of a special builtin ends a POSIX shell. With fd 2 closed, its own
    # error goes nowhere.
    return ("{ true 3>&1; } 2>/dev/null || { exec 1>&" + spare + "; printf '\\n[the code closed "
            "the shell'\\''s standard output; it is open again]\\n'; }; "
            "true 3>&2 || { exec 2>&1; printf '\\n[the code closed the shell'\\''s standard "
            "error; it is open again]\\n'; }; ")


def _posix_command(spare: str) -> Callable[[str, str], str]:
    def command(path: str, token: str) -> str:
        return (f"printf '{BEGIN_PREFIX}%s\\n' {token}; . {_q(path)} {NO_INPUT}; __oi_s=$?; "
                f"{_reopened(spare)}printf '{MARKER_PREFIX}%s__%d\\n' {token} \"$__oi_s\"\n")

    return command


def _bash_line_command(path: str, token: str, line_token: str) -> str:
    """bash with active lines: a DEBUG trap (inherited into the sourced file by `set -T`)
    reports each simple command's line of that file. It writes to fd 19, a copy of the REPL's
    stdout, so a command substitution or a redirection in the code never captures a marker."""
    report = (f"[[ ${{BASH_SOURCE[0]-}} == {_q(path)} ]] && "
              f"printf '\\002{line_token}:%d\\003' \"$LINENO\" >&19")
    return (f"printf '{BEGIN_PREFIX}%s\\n' {token}; set -T; trap {_q(report)} DEBUG; "
            f". {_q(path)} {NO_INPUT} 19>&1; __oi_s=$?; trap - DEBUG; set +T; "
            f"{_reopened(str(SPARE_FD))}printf '{MARKER_PREFIX}%s__%d\\n' {token} \"$__oi_s\"\n")


def _fish_command(path: str, token: str) -> str:
    return (f"printf '{BEGIN_PREFIX}%s\\n' {token}; source {_q(path)} </dev/null; "
            f"printf '{MARKER_PREFIX}%s__%d\\n' {token} $status\n")


_POSIX_SETUP = "trap 'return 130 2>/dev/null' INT\n"


def _json_command(path: str, token: str) -> str:
    return json.dumps({"file": path, "token": token}) + "\n"


def _tab_command(path: str, token: str) -> str:
    return f"{path}\t{token}\n"


def _pwsh_command(path: str, token: str) -> str:
    quoted = path.replace("'", "''")
    return (f"[Console]::Out.Write('{BEGIN_PREFIX}{token}`n'); "
            f"$global:LASTEXITCODE = 0; $__oi_ok = $true; "
            f"try {{ . '{quoted}' }} catch {{ $__oi_ok = $false; Write-Error $_ }}; "
            f"$__oi_s = if (-not $__oi_ok -or -not $?) {{ 1 }} else {{ $LASTEXITCODE }}; "
            f"[Console]::Out.Write('{MARKER_PREFIX}' + '{token}' + '__' + $__oi_s + \"`n\")\n")


def shell_spec(language: str, program: str) -> ReplSpec:
    """bash, zsh, sh-like shells and fish: a non-interactive shell reading commands."""
    name = Path(program).name
    if name == "fish":
        return ReplSpec(language, (program, "--no-config"), _fish_command, "stdin")
    argv: tuple[str, ...] = (program, "--noprofile", "--norc") if name == "bash" else (
        (program, "-f") if name == "zsh" else (program,))
    spare = name in ("bash", "zsh")
    return ReplSpec(language, argv, _posix_command(str(SPARE_FD) if spare else "2"), "stdin",
                    _POSIX_SETUP + (f"exec {SPARE_FD}>&1\n" if spare else ""),
                    _bash_line_command if name == "bash" else None,
                    terminal=name in ("bash", "zsh") and terminal_input.supported())


def node_spec(program: str) -> ReplSpec:
    return ReplSpec("javascript", (program, "-e", driver("node.js")), _json_command)


def ruby_spec(program: str) -> ReplSpec:
    return ReplSpec("ruby", (program, "-e", driver("ruby.rb")), _tab_command)


def r_spec(program: str) -> ReplSpec:
    return ReplSpec("r", (program, "--quiet", "--no-save", "--no-restore", "--no-echo", "-e",
                          driver("r.R")), _tab_command)


def pwsh_spec(program: str) -> ReplSpec:
    return ReplSpec("powershell", (program, "-NoLogo", "-NoProfile", "-NonInteractive",
                                   "-Command", "-"), _pwsh_command, "stdin")


class ReplExecutor(Executor):
    """One long-lived interpreter process for one language in one workspace."""

    def __init__(self, spec: ReplSpec, cwd: Path) -> None:
        self.spec = spec
        self.language = spec.language
        self.cwd = cwd
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: OutputReader | None = None
        self._cmd_fd: int | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._lock = asyncio.Lock()
        self._runs = 0
        self._lost: str | None = None  # why the previous REPL ended, told on the next run
        self._line_token = active_line.new_token()
        self._terminal: terminal_input.TerminalInput | None = None

    @property
    def name(self) -> str:
        return Path(self.spec.argv[0]).name

    # Lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._proc is None:
            await self._spawn()

    async def _spawn(self) -> None:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix=f"oi-{self.spec.language}-")
        sandbox, private = self.sandbox, private_dir(Path(self._dir.name))
        terminal = self._new_terminal()
        try:  # the terminal is a device the confined shell must open for writing
            argv = sandbox.command(self.spec.argv, self.cwd, private,
                                   write_files=() if terminal is None else (terminal.path,))
        except BaseException:  # refused: nothing stays opened
            if terminal is not None:
                terminal.close()
            raise
        read_fd = None
        env = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "NO_COLOR": "1",
               **sandbox.environ(private)}
        if self.spec.channel == "fd":
            read_fd, self._cmd_fd = os.pipe()
            os.set_inheritable(read_fd, True)
            env["OI_CMD_FD"] = str(read_fd)
        try:
            self._proc = await spawn(argv, self.cwd, env=env, pass_keys=self.pass_keys,
                                     stdin_pipe=self.spec.channel == "stdin",
                                     pass_fds=() if read_fd is None else (read_fd,))
        except BaseException:
            self._close_fd()
            raise
        finally:
            if read_fd is not None:
                os.close(read_fd)
        self.started_sandbox = sandbox
        assert self._proc.stdout is not None
        self._reader = OutputReader(self._proc.stdout)
        if self.spec.setup:
            self._send(self.spec.setup)
        if terminal is not None:
            self._terminal = terminal
            self._send(terminal.setup())
        log.info("%s REPL started (pid %s) in %s", self.name, self._proc.pid, self.cwd)

    def _new_terminal(self) -> terminal_input.TerminalInput | None:
        if not self.spec.terminal:
            return None
        try:
            return terminal_input.TerminalInput()
        except OSError as exc:  # no pseudo-terminals here: reads fail, as without one
            log.warning("no terminal for the %s REPL's input: %s", self.name, exc)
            return None

    def _send(self, text: str) -> None:
        data = text.encode()
        if self.spec.channel == "stdin":
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(data)
        else:
            assert self._cmd_fd is not None
            os.write(self._cmd_fd, data)  # one short line: a pipe takes it at once

    def _close_fd(self) -> None:
        if self._cmd_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._cmd_fd)
            self._cmd_fd = None

    async def interrupt(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            signal_group(self._proc.pid, signal.SIGINT)

    async def restart(self) -> None:
        async with self._lock:
            await self._stop_process()
            self._lost = None
            await self._spawn()

    async def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        self._close_fd()
        if self._terminal is not None:
            self._terminal.close()
            self._terminal = None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        await end_group(proc)
        self._reader = None

    async def shutdown(self) -> None:
        await self._stop_process()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def is_alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        """The interpreter's (the launcher's, until it has started the interpreter)."""
        if self._proc is None:
            return None
        return repl_of(self._proc.pid) or self._proc.pid

    # Running -------------------------------------------------------------------------------

    async def run(self, code: str, emit: Emit) -> RunResult:
        async with self._lock:
            self._runs += 1
            if self._dir is None:
                self._dir = tempfile.TemporaryDirectory(prefix=f"oi-{self.spec.language}-")
            path = Path(self._dir.name) / f"run{self._runs}{self.spec.suffix}"
            path.write_text(code if code.endswith("\n") else code + "\n", encoding="utf-8")
            lines = self.active_line and self.spec.line_command is not None
            if lines:
                emit = active_line.LineFilter(emit, self._line_token)
            try:
                # A REPL that died since the last run may look alive until the kernel has
                # reaped it: when its output ends before it took the run, start a new one and
                # send the run again (once).
                for attempt in (1, 2):
                    status = await self._run_file(path, emit, lines)
                    assert self._reader is not None
                    if status is not None or self._reader.begun or attempt == 2:
                        break
                    proc = self._proc
                    await self._stop_process()
                    if proc is not None:
                        self._lost = self._lost or f"it exited ({_exit_text(proc.returncode)})"
            finally:
                path.unlink(missing_ok=True)
                if isinstance(emit, active_line.LineFilter):
                    emit.flush()
            if status is None:
                return await self._died(emit)
            if status == 0:
                return RunResult("ok", exit_code=0)
            if status == 130:
                return RunResult("stopped", "interrupted", exit_code=status)
            return RunResult("error", f"exit status {status}", exit_code=status)

    async def _run_file(self, path: Path, emit: Emit, lines: bool) -> int | None:
        """Send one run to the REPL and stream its output: its status, or None when the output
        ended without it (the reader's `begun` says whether the REPL had taken the run)."""
        await self._ensure(emit)
        assert self._reader is not None and self._proc is not None
        token = secrets.token_hex(8)
        marker, begin = f"{MARKER_PREFIX}{token}__", f"{BEGIN_PREFIX}{token}"
        command = (self.spec.line_command(str(path), token, self._line_token)
                   if lines and self.spec.line_command is not None
                   else self.spec.command(str(path), token))
        serving = None
        if self._terminal is not None:
            command = command.replace(NO_INPUT, TERMINAL, 1)
            emit = self._terminal.tracking(emit)
            serving = self._serve_input(self._terminal)
        self._reader.begun = False
        since = run_start()
        try:
            self._send(command)
            return await self._reader.until_marker(marker, emit, begin)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):  # the REPL is ready again before we go on
                await self._settle(marker, begin, since, emit)
            raise
        except (BrokenPipeError, ConnectionResetError):
            return None
        finally:
            if serving is not None:
                serving.cancel()
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([serving])  # its terminal is quiet before the next run

    def _serve_input(self, terminal: terminal_input.TerminalInput) -> asyncio.Task[None]:
        """Answer the run's reads of the terminal (end of input when nobody can answer)."""

        async def no_answer(prompt: str, password: bool) -> str | None:
            return None

        return asyncio.create_task(terminal.serve(lambda: self.pid,
                                                  self.read_input or no_answer))

    async def _ensure(self, emit: Emit) -> None:
        """A REPL to run in: started on first use, started anew (saying so) after it died."""
        proc = self._proc
        if proc is not None and proc.returncode is None and _zombie(proc.pid):
            await proc.wait()  # it died since the last run; asyncio may not have reaped it yet
        if proc is not None and proc.returncode is not None:
            self._lost = self._lost or f"it exited ({_exit_text(proc.returncode)})"
            await self._stop_process()
        if self._proc is None:
            await self._spawn()
            if self._lost is not None:
                emit(Chunk("console", "output", f"[the {self.name} REPL had stopped: "
                           f"{self._lost}; started a new one, earlier state is lost]\n"))
                self._lost = None

    async def _died(self, emit: Emit) -> RunResult:
        """The output ended without a marker: the REPL exited during the run."""
        assert self._proc is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PROCESS_INTERRUPT_GRACE):
                await self._proc.wait()
        why = _exit_text(self._proc.returncode)
        if self._proc.returncode is None:  # alive, but nothing it writes can reach us
            why = "it closed its output, so it could not be heard; ended"
        emit(Chunk("console", "output", f"\n[the {self.name} REPL exited during this run "
                   f"({why}); the next run starts a new one]\n"))
        self._lost = f"it exited ({why})"
        await self._stop_process()
        return RunResult("error", f"the {self.name} REPL exited ({why})")

    async def _settle(self, marker: str, begin: str, since: float, emit: Emit) -> None:
        """After a cancelled run: SIGINT the group until the marker comes; if it does not come
        within the grace, end the group (the next run starts a new REPL). Either way, what the
        run left in the group (background jobs) is killed too."""
        proc, reader = self._proc, self._reader
        assert proc is not None and reader is not None
        wait = asyncio.create_task(reader.until_marker(marker, emit, begin))

        async def sigint() -> None:
            signal_group(proc.pid, signal.SIGINT)

        async def marker_or(to_interrupt: float, to_deadline: float) -> None:
            await asyncio.wait([wait], timeout=min(to_interrupt, to_deadline))

        try:
            await interrupt_until_ended(wait.done, sigint, marker_or,
                                        grace=PROCESS_INTERRUPT_GRACE, every=PROCESS_REINTERRUPT)
        finally:
            if not wait.done():
                wait.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await wait
        if wait.cancelled() or wait.exception() is not None or wait.result() is None:
            log.warning("%s REPL did not stop on SIGINT; ending it", self.name)
            self._lost = "it was killed to stop a run"
            await self._stop_process()
            return
        await kill_members(proc.pid, exclude=proc.pid, since=since)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"
