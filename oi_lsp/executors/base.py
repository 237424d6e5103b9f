"""The interface every executor (Jupyter kernel, subprocess REPL, ...) implements."""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Literal

import anyio

from ..protocol import RunStatus, SandboxState
from .sandbox.policy import Sandbox

ChunkKind = Literal["console", "image", "code"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


# What is left of control characters once escape sequences are gone: C0 but tab, newline,
# carriage return (progress bars) and STX/ETX (they frame active-line markers, which the line
# filter takes out after this; a terminal does nothing with them), DEL and C1. Removed one by
# one, so no sequence can be rebuilt from the pieces, nor across two chunks of output.
_CONTROLS = dict.fromkeys([0x00, 0x01, *range(0x04, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20),
                           0x7f, *range(0x80, 0xa0)])


def strip_ansi(text: str) -> str:
    """Remove terminal escapes and control characters: neither the model nor a chat buffer
    can use them, and a terminal must not obey them."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.translate(_CONTROLS)


def prefix_overlap(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a start of `marker`: what a reader of a
    stream must hold back, since the next read may complete the marker."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


@functools.cache
def driver(name: str) -> str:
    """The source of a REPL driver, a file of drivers/ (package data): code in the REPL's own
    language, read once."""
    return resources.files(__package__).joinpath("drivers", name).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of output of a run: console text, an image, or displayed HTML."""

    type: ChunkKind
    format: str
    content: str


@dataclass(frozen=True, slots=True)
class RunResult:
    status: RunStatus
    error: str | None = None
    exit_code: int | None = None
    blocked: str | None = None  # what the sandbox refused (a line of the output), if anything


Emit = Callable[[Chunk], None]
# (prompt, password) -> the line the user typed, or None: the read ends as at end of input.
ReadInput = Callable[[str, bool], Awaitable[str | None]]


class Executor(ABC):
    """One persistent REPL of one language in one workspace.

    Contract: `run` is cancellation-safe. A cancelled run interrupts its code and leaves the REPL
    ready for the next run before the CancelledError propagates, so stop and timeout are both
    plain task cancellation for the caller.
    """

    language: str
    keep: bool = False  # left running when the server stops, for the next one (keepKernel)
    # Set by the session before a run (setting activeLine): executors that can tell which line
    # runs (Python kernels, bash) then emit `console`/`active_line` chunks; others ignore it.
    active_line: bool = False
    # Start with the server's key variables in the environment (setting passKeysToRepls).
    pass_keys: bool = False
    env: dict[str, str] = {}  # noqa: RUF012 -- replaced, never changed: more of its environment
    # What the REPL may do (settings sandbox, sandboxNetwork), for its next (re)start.
    sandbox: Sandbox = Sandbox()
    # The sandbox its running process was started with (None: not started, or not ours).
    started_sandbox: Sandbox | None = None

    def sandbox_state(self) -> SandboxState | None:
        """The sandbox mode of the running REPL, for oi/status: None before it starts."""
        return None if self.started_sandbox is None else self.started_sandbox.mode

    # Set by the session before a run: how a program of the run that reads input is answered
    # (Python kernels: input_request; shells: reads of their terminal). None: reads fail.
    read_input: ReadInput | None = None

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def run(self, code: str, emit: Emit) -> RunResult:
        """Run `code`, calling `emit` for every piece of output as it arrives."""

    @abstractmethod
    async def interrupt(self) -> None: ...

    @abstractmethod
    async def restart(self) -> None: ...

    @abstractmethod
    async def shutdown(self) -> None: ...

    @abstractmethod
    async def is_alive(self) -> bool: ...

    @property
    @abstractmethod
    def pid(self) -> int | None: ...

    async def execute(self, code: str, emit: Emit, timeout: float | None = None) -> RunResult:
        """`run` with an optional time limit; on expiry the code is interrupted."""
        if timeout is None:
            return await self.run(code, emit)
        with anyio.move_on_after(timeout):  # a cancel scope: the run's cleanup is shielded
            return await self.run(code, emit)
        emit(Chunk("console", "output", f"\n[timed out after {timeout:g} s; interrupted]\n"))
        return RunResult("timeout", f"timed out after {timeout:g} s")
