"""A Jupyter kernel as a persistent REPL, through jupyter_client's async manager and client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from . import active_line
from .base import Chunk, Emit, Executor, RunResult
from .jupyter import Cell, settle

log = logging.getLogger(__name__)

# How often a run that hears nothing checks that the kernel process is still there.
_LIVENESS_INTERVAL = 1.0


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
        self._line_token = active_line.new_token()
        self._line_on = False  # whether the kernel reports active lines now

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
        # A kernel's first cell pays for setup the next ones do not (profiled: the first run
        # in a new workspace took 2.5x a warm one). Pay it here, while the workspace opens.
        with contextlib.suppress(TimeoutError):  # only an optimisation: never fail a start
            await self._silent("pass")
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
            self._line_on = False
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
            if self.language == "python" and self.active_line != self._line_on:
                await self._silent(active_line.python_setup(self.active_line, self._line_token))
                self._line_on = self.active_line
            if self._line_on:
                emit = active_line.LineFilter(emit, self._line_token)
            cell = Cell()
            msg_id = self._kc.execute(code, store_history=True, allow_stdin=False)
            self._routes[msg_id] = cell.queue
            try:
                return await self._collect(cell, emit)
            except asyncio.CancelledError:
                await settle(cell, self.interrupt, self._restart_unresponsive)
                raise
            finally:
                del self._routes[msg_id]
                if isinstance(emit, active_line.LineFilter):
                    emit.flush()

    async def _silent(self, code: str) -> None:
        """Run housekeeping code that is no cell of the user's: no output, no history."""
        cell = Cell()
        msg_id = self._kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        self._routes[msg_id] = cell.queue
        try:
            async with asyncio.timeout(30):
                while not cell.done:
                    await cell.next()
        finally:
            del self._routes[msg_id]
        if cell.reply is not None and cell.reply.get("status") != "ok":
            log.warning("kernel setup code failed: %s", cell.reply.get("evalue"))

    async def _collect(self, cell: Cell, emit: Emit) -> RunResult:
        while not cell.done:
            try:
                async with asyncio.timeout(_LIVENESS_INTERVAL):
                    channel, msg = await cell.next()
            except TimeoutError:
                if not await self.is_alive():
                    emit(Chunk("console", "output", "\n[the kernel died during this run]\n"))
                    return RunResult("error", "the kernel died")
                continue
            if channel == "iopub":
                cell.output(msg, emit)
        return cell.result()

    async def _restart_unresponsive(self) -> None:
        log.warning("kernel ignored the interrupt; restarting it")
        await self.restart()
