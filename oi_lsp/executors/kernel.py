"""A Jupyter kernel as a persistent REPL, through jupyter_client's async manager and client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from .base import Chunk, Emit, Executor, RunResult, strip_ansi

log = logging.getLogger(__name__)

# How often a run that hears nothing checks that the kernel process is still there.
_LIVENESS_INTERVAL = 1.0
# How long an interrupted cell may take to answer before the kernel is restarted instead,
# and how often the interrupt is repeated meanwhile (code may catch KeyboardInterrupt).
_INTERRUPT_GRACE = 5.0
_REINTERRUPT = 0.5

_PLACEHOLDER_PREFIX = "<IPython.core.display."


class KernelExecutor(Executor):
    """One kernel (ipykernel by default) started in the workspace folder."""

    def __init__(self, language: str, kernel_name: str, cwd: Path) -> None:
        self.language = language
        self.kernel_name = kernel_name
        self.cwd = cwd
        self._km: AsyncKernelManager | None = None
        self._kc: Any = None
        self._ready: asyncio.Task[None] | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._routes: dict[str, asyncio.Queue[tuple[str, dict[str, Any]]]] = {}
        self._lock = asyncio.Lock()

    # Lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the kernel once; concurrent callers wait for the same start. A start that
        failed is tried again by the next caller."""
        if self._ready is None or (self._ready.done() and (self._ready.cancelled()
                                                            or self._ready.exception())):
            self._ready = asyncio.create_task(self._start())
        await asyncio.shield(self._ready)

    async def _start(self) -> None:
        km = AsyncKernelManager(kernel_name=self.kernel_name)
        await km.start_kernel(cwd=str(self.cwd))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
        except RuntimeError:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
            raise
        self._km, self._kc = km, kc
        self._start_readers()
        log.info("kernel %s started (pid %s) in %s", self.kernel_name, self.pid, self.cwd)

    def _start_readers(self) -> None:
        self._readers = [
            asyncio.create_task(self._read(self._kc.get_iopub_msg, "iopub")),
            asyncio.create_task(self._read(self._kc.get_shell_msg, "shell")),
        ]

    def _stop_readers(self) -> None:
        for task in self._readers:
            task.cancel()
        self._readers = []

    async def _read(self, get: Any, channel: str) -> None:
        """Route every message to the run that sent its parent request."""
        while True:
            msg = await get()
            route = self._routes.get(msg["parent_header"].get("msg_id", ""))
            if route is not None:
                route.put_nowait((channel, msg))

    async def interrupt(self) -> None:
        if self._km is not None:
            await self._km.interrupt_kernel()

    async def restart(self) -> None:
        await self.start()
        assert self._km is not None
        # wait_for_ready reads the channels itself: the readers must not take its replies.
        self._stop_readers()
        try:
            await self._km.restart_kernel(now=True)
            await self._kc.wait_for_ready(timeout=60)
        finally:
            self._start_readers()

    async def shutdown(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
        self._stop_readers()
        if self._kc is not None:
            self._kc.stop_channels()
        if self._km is not None:
            with contextlib.suppress(Exception):
                await self._km.shutdown_kernel(now=True)
        self._km = self._kc = None

    async def is_alive(self) -> bool:
        return self._km is not None and bool(await self._km.is_alive())

    @property
    def pid(self) -> int | None:
        provisioner = self._km.provisioner if self._km is not None else None
        pid = getattr(provisioner, "pid", None)
        return pid if isinstance(pid, int) else None

    # Running -------------------------------------------------------------------------------

    async def run(self, code: str, emit: Emit) -> RunResult:
        await self.start()
        async with self._lock:
            if not await self.is_alive():
                await self.restart()
                emit(Chunk("console", "output", "[the kernel had stopped; restarted, "
                           "earlier variables are gone]\n"))
            cell = _Cell()
            msg_id = self._kc.execute(code, store_history=True, allow_stdin=False)
            self._routes[msg_id] = cell.queue
            try:
                return await self._collect(cell, emit)
            except asyncio.CancelledError:
                await self._settle(cell)
                raise
            finally:
                del self._routes[msg_id]

    async def _collect(self, cell: _Cell, emit: Emit) -> RunResult:
        error: str | None = None
        while not (cell.idle and cell.reply is not None):
            try:
                async with asyncio.timeout(_LIVENESS_INTERVAL):
                    channel, msg = await cell.next()
            except TimeoutError:
                if not await self.is_alive():
                    emit(Chunk("console", "output", "\n[the kernel died during this run]\n"))
                    return RunResult("error", "the kernel died")
                continue
            if channel != "iopub":
                continue
            kind = msg["msg_type"]
            content = msg["content"]
            if kind == "stream":
                emit(Chunk("console", "output", strip_ansi(content.get("text", ""))))
            elif kind in ("execute_result", "display_data"):
                chunk = _rich_chunk(content.get("data", {}))
                if chunk is not None:
                    emit(chunk)
            elif kind == "error":
                error = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
                emit(Chunk("console", "output",
                           strip_ansi("\n".join(content.get("traceback", []))) + "\n"))
        reply = cell.reply
        status = reply.get("status", "ok")
        if status == "ok":
            return RunResult("ok")
        if reply.get("ename") == "KeyboardInterrupt":
            return RunResult("stopped", "interrupted")
        return RunResult("error", error or f"{reply.get('ename')}: {reply.get('evalue')}")

    async def _settle(self, cell: _Cell) -> None:
        """After a cancelled run: interrupt the cell and wait until the kernel is idle again.

        ipykernel drops a SIGINT that lands outside user code (the cell not started yet, or
        between statements) and may then send no reply at all: so interrupt only once the
        cell is busy, repeat while it stays busy, and take `idle` as the end. A kernel that
        will not come back is restarted (its state is lost; the log says so).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _INTERRUPT_GRACE
        next_interrupt = 0.0
        while not cell.idle:
            now = loop.time()
            if now >= deadline:
                log.warning("kernel ignored the interrupt; restarting it")
                await self.restart()
                return
            if cell.busy and now >= next_interrupt:
                await self.interrupt()
                next_interrupt = now + _REINTERRUPT
            try:
                async with asyncio.timeout(0.05):
                    await cell.next()
            except TimeoutError:
                pass
        if cell.reply is None:  # the reply, when there is one, can trail idle a little
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    while cell.reply is None:
                        await cell.next()


class _Cell:
    """What is known of one execute request: its messages and how far it got."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.busy = False
        self.idle = False
        self.reply: dict[str, Any] | None = None

    async def next(self) -> tuple[str, dict[str, Any]]:
        channel, msg = await self.queue.get()
        if channel == "shell":
            if msg["msg_type"] == "execute_reply":
                self.reply = msg["content"]
        elif msg["msg_type"] == "status":
            state = msg["content"].get("execution_state")
            self.busy = self.busy or state == "busy"
            self.idle = self.idle or state == "idle"
        return channel, msg


def _rich_chunk(data: dict[str, Any]) -> Chunk | None:
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
