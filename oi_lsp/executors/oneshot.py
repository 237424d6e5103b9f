"""Languages run one file per run in a fresh process (Java, AppleScript), and HTML (shown only)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio

from ..common import languages
from .base import Chunk, Emit, Executor, RunResult
from .process import (
    PROCESS_INTERRUPT_GRACE,
    PROCESS_REINTERRUPT,
    OutputReader,
    end_group,
    signal_group,
    spawn,
)
from .sandbox.policy import private_dir
from .stopping import interrupt_until_ended

# (the file of a run) -> the argv that runs it
Argv = Callable[[Path], list[str]]

_JAVA_TYPE = re.compile(r"^\s*(?:public\s+|final\s+|abstract\s+)*(?:class|interface|record|enum)\s",
                        re.MULTILINE)
_JAVA_IMPORT = re.compile(r"^\s*import\s+[\w.*\s]+;\s*$", re.MULTILINE)


def java_source(code: str) -> str:
    """Code with a class as it is; bare statements wrapped in a main method (imports kept on
    top), as a model often writes them."""
    if _JAVA_TYPE.search(code):
        return code
    imports = "\n".join(m.group(0).strip() for m in _JAVA_IMPORT.finditer(code))
    body = _JAVA_IMPORT.sub("", code)
    return (f"{imports}\npublic class Main {{\n    public static void main(String[] args) "
            f"throws Exception {{\n{body}\n    }}\n}}\n")


class OneShotExecutor(Executor):
    """A fresh process per run: nothing persists between runs (the language has no REPL)."""

    def __init__(self, language: str, command: Argv, cwd: Path,
                 prepare: Callable[[str], str] = lambda code: code) -> None:
        self.language = language
        self.suffix = languages.suffix(language)
        self.command = command
        self.prepare = prepare
        self.cwd = cwd
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        return None

    async def run(self, code: str, emit: Emit) -> RunResult:
        async with self._lock:
            with tempfile.TemporaryDirectory(prefix=f"oi-{self.language}-") as folder:
                path = Path(folder) / f"Main{self.suffix}"
                path.write_text(self.prepare(code), encoding="utf-8")
                private = private_dir(Path(folder))
                argv = self.sandbox.command(self.command(path), self.cwd, private)
                self.started_sandbox = self.sandbox
                proc = self._proc = await spawn(argv, self.cwd, stdin_pipe=False,
                                                pass_keys=self.pass_keys,
                                                env=self.sandbox.environ(private))
                assert proc.stdout is not None
                reader = OutputReader(proc.stdout)
                try:
                    await reader.until_eof(emit)
                    status = await proc.wait()
                except asyncio.CancelledError:
                    with anyio.CancelScope(shield=True):  # the stop must finish
                        await self._stop(proc)
                    raise
                finally:
                    self._proc = None
        if status == 0:
            return RunResult("ok", exit_code=0)
        return RunResult("error", f"exit status {status}", exit_code=status)

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """SIGINT the group until the program exits, within the grace; then end the group
        either way (what the program started may still run)."""

        async def sigint() -> None:
            signal_group(proc.pid, signal.SIGINT)

        async def exit_or(to_interrupt: float, _to_deadline: float) -> None:
            # Not cut at the end of the grace: the last SIGINT too gets its whole interval.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(to_interrupt):
                    await proc.wait()

        await interrupt_until_ended(lambda: proc.returncode is not None, sigint, exit_or,
                                    grace=PROCESS_INTERRUPT_GRACE, every=PROCESS_REINTERRUPT)
        await end_group(proc)

    async def interrupt(self) -> None:
        if self._proc is not None:
            signal_group(self._proc.pid, signal.SIGINT)

    async def restart(self) -> None:
        return None

    async def shutdown(self) -> None:
        if self._proc is not None:
            await end_group(self._proc)

    async def is_alive(self) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        return None  # no process between runs


class HtmlExecutor(Executor):
    """HTML is never executed: it goes back as a `code`/`html` chunk for the client to show."""

    language = "html"

    async def start(self) -> None:
        return None

    async def run(self, code: str, emit: Emit) -> RunResult:
        emit(Chunk("code", "html", code))
        return RunResult("ok")

    async def interrupt(self) -> None:
        return None

    async def restart(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def is_alive(self) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        return None
