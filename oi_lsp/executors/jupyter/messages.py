"""The Jupyter messaging protocol as both kernel executors (local and gateway) use it: one
execute request's messages, what they mean for the chat, how to wait for them while watching
that the kernel is still there, and how to stop it cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..base import Chunk, Emit, ReadInput, RunResult, strip_ansi
from ..stopping import interrupt_until_ended

# How long an interrupted cell may take to answer before the kernel is restarted instead,
# and how often the interrupt is repeated meanwhile (code may catch KeyboardInterrupt).
KERNEL_INTERRUPT_GRACE = 5.0
KERNEL_REINTERRUPT = 0.5
# How often a run that hears nothing checks that its kernel is still there.
LIVENESS_INTERVAL = 1.0

_PLACEHOLDER_PREFIX = "<IPython.core.display."
# A traceback's frame in the installed ipykernel's own code (the input() it provides, which
# raises EOFError when no answer came): a dozen lines that are never the user's mistake, left
# out of the output. (Someone working on ipykernel's own source has it outside site-packages.)
_KERNEL_FRAME = re.compile(
    r"File [^\n]*[/\\](?:site|dist)-packages[/\\]ipykernel[/\\][^/\\\n]+\.py:\d+, in ")

Message = tuple[str, dict[str, Any]]  # (channel, Jupyter message)


class Cell:
    """What is known of one execute request: its messages and how far it got."""

    def __init__(self, read: Callable[[int], None] = lambda size: None) -> None:
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self._read = read  # told the size of each stream text handled (the kernel's pacing)
        self.busy = False
        self.idle = False
        self.reply: dict[str, Any] | None = None
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self.idle and self.reply is not None

    async def next(self) -> Message:
        channel, msg = await self.queue.get()
        if channel == "shell":
            if msg["msg_type"] == "execute_reply":
                self.reply = msg["content"]
        elif msg["msg_type"] == "status":
            state = msg["content"].get("execution_state")
            self.busy = self.busy or state == "busy"
            self.idle = self.idle or state == "idle"
        return channel, msg

    def output(self, msg: dict[str, Any], emit: Emit) -> None:
        """Emit what an iopub message shows the user: text, a display, a traceback."""
        kind = msg["msg_type"]
        content = msg["content"]
        if kind == "stream":
            text = content.get("text", "")
            self._read(len(text))
            emit(Chunk("console", "output", strip_ansi(text)))
        elif kind in ("execute_result", "display_data"):
            chunk = rich_chunk(content.get("data", {}))
            if chunk is not None:
                emit(chunk)
        elif kind == "error":
            self.error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
            shown = [strip_ansi(entry) for entry in content.get("traceback", [])]
            emit(Chunk("console", "output",
                       "\n".join(e for e in shown if not _KERNEL_FRAME.match(e)) + "\n"))

    def result(self) -> RunResult:
        reply = self.reply or {}
        if reply.get("status", "ok") == "ok":
            return RunResult("ok")
        if reply.get("ename") == "KeyboardInterrupt":
            return RunResult("stopped", "interrupted")
        return RunResult("error", self.error or f"{reply.get('ename')}: {reply.get('evalue')}")


@dataclass(frozen=True, slots=True)
class Gone:
    """Why a cell will get no reply: `error` is the run's, `said` (if other) what its output
    says."""

    error: str
    said: str | None = None


class NotTaken(Exception):
    """The kernel never took the cell (it died first, or the request was lost with its
    connection): none of it ran, it may be sent again."""


class Answers:
    """The cell's input requests (stdin channel), each answered in a task of its own through
    `read_input`, so output keeps streaming meanwhile; no answer is sent as end of input."""

    def __init__(self, read_input: ReadInput | None,
                 send: Callable[[str], Awaitable[None] | None], emit: Emit) -> None:
        self._read_input = read_input
        self._send = send
        self._emit = emit
        self._tasks: set[asyncio.Task[None]] = set()

    def request(self, msg: dict[str, Any]) -> None:
        if msg["msg_type"] != "input_request":
            return
        content = msg["content"]
        task = asyncio.create_task(self._answer(str(content.get("prompt", "")),
                                                bool(content.get("password"))))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, prompt: str, password: bool) -> None:
        # The prompt is no stream output: shown here, then the answer, as a terminal would
        # (a password never is).
        if prompt:
            self._emit(Chunk("console", "output", strip_ansi(prompt)))
        value = None if self._read_input is None else await self._read_input(prompt, password)
        shown = "" if value is None or password else value
        self._emit(Chunk("console", "output", strip_ansi(f"{shown}\n")))
        sent = self._send("\x04" if value is None else value)  # ipykernel: "\x04" is EOF
        if sent is not None:
            await sent

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()


async def collect(cell: Cell, emit: Emit, quiet: Callable[[], Awaitable[Gone | None]],
                  other: Callable[[str, dict[str, Any]], Gone | None] = lambda *_: None,
                  stdin: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Emit the cell's output until its reply; the run's result. Whenever nothing came for
    LIVENESS_INTERVAL, `quiet()` checks the kernel; input requests go to `stdin`, and a
    message on another channel to `other` (the gateway client's own notices): a Gone from
    either ends the run. `quiet` and `other` may raise NotTaken."""
    while not cell.done:
        try:
            async with asyncio.timeout(LIVENESS_INTERVAL):
                channel, msg = await cell.next()
        except TimeoutError:
            gone = await quiet()
        else:
            if channel == "iopub":
                cell.output(msg, emit)
                continue
            if channel == "stdin" and stdin is not None:
                stdin(msg)
                continue
            gone = other(channel, msg)
        if gone is not None:
            emit(Chunk("console", "output", f"\n[{gone.said or gone.error}]\n"))
            return RunResult("error", gone.error)
    return cell.result()


class Notice:
    """Told at the start of the next run: its kernel is a new one, earlier state is gone."""

    def __init__(self) -> None:
        self._text: str | None = None

    def replaced(self, what: str) -> None:
        """`what` happened to the kernel (it is gone), and a new one was started."""
        self._text = f"[{what}; started a new one, earlier variables are gone]\n"

    def tell(self, emit: Emit) -> None:
        if self._text is not None:
            emit(Chunk("console", "output", self._text))
            self._text = None


async def settle(cell: Cell, interrupt: Callable[[], Awaitable[None]],
                 restart: Callable[[], Awaitable[None]],
                 gone: Callable[[], bool] = lambda: False) -> None:
    """After a cancelled run: interrupt the cell and wait until the kernel is idle again.

    ipykernel drops a SIGINT that lands outside user code (the cell not started yet, or
    between statements) and may then send no reply at all: so interrupt only once the cell
    is busy, repeat while it stays busy, and take `idle` as the end. A kernel that will not
    come back is restarted (its state is lost). `gone` ends the wait when the kernel can no
    longer answer at all.
    """

    async def poll(_to_interrupt: float, _to_deadline: float) -> None:
        # Short whatever the timing: `gone()` turning true is no message that would end it.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await cell.next()

    if not await interrupt_until_ended(lambda: cell.idle or gone(), interrupt, poll,
                                       grace=KERNEL_INTERRUPT_GRACE, every=KERNEL_REINTERRUPT,
                                       ready=lambda: cell.busy):
        await restart()
        return
    if cell.reply is None:  # the reply, when there is one, can trail idle a little
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.2):
                while cell.reply is None:
                    await cell.next()


def rich_chunk(data: dict[str, Any]) -> Chunk | None:
    """The best piece of a display bundle for a chat: an image, else text, else HTML."""
    if "image/png" in data:
        return Chunk("image", "base64.png", str(data["image/png"]).strip())
    if "image/jpeg" in data:
        return Chunk("image", "base64.jpeg", str(data["image/jpeg"]).strip())
    if "image/svg+xml" in data:
        return Chunk("image", "svg", str(data["image/svg+xml"]))
    text = data.get("text/plain")
    if "text/html" in data and (text is None or text.startswith(_PLACEHOLDER_PREFIX)):
        return Chunk("code", "html", str(data["text/html"]))
    if text is not None:
        return Chunk("console", "output", strip_ansi(str(text)) + "\n")
    return None
