"""A Jupyter kernel as a persistent REPL, through jupyter_client's async manager and client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import weakref
from pathlib import Path
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from .. import active_line
from ..base import Chunk, Emit, Executor, RunResult
from ..process import kill_members, no_input, repl_environ, run_start
from . import records
from .messages import Answers, Cell, Gone, Message, Notice, NotTaken, collect, settle

log = logging.getLogger(__name__)

_REATTACH_TIMEOUT = 10.0
# One sweep of kernels left by dead servers per event loop (so per server), before any start.
_sweeps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[int]] = (
    weakref.WeakKeyDictionary())


async def _swept() -> None:
    loop = asyncio.get_running_loop()
    task = _sweeps.get(loop)
    if task is None:
        task = _sweeps[loop] = loop.create_task(asyncio.to_thread(records.sweep))
    with contextlib.suppress(Exception):
        await asyncio.shield(task)


class KernelExecutor(Executor):
    """One kernel (ipykernel by default) started in the workspace folder.

    Every kernel is recorded under the data folder (records.py). With `keep`
    (keepKernel) it is started independent of the server and left running when the server
    stops, and the next server's executor for the same folder reattaches to it.
    """

    def __init__(self, language: str, kernel_name: str, cwd: Path, keep: bool = False) -> None:
        self.language = language
        self.kernel_name = kernel_name
        self.cwd = cwd
        self.keep = keep
        self.record_path = records.path_for(cwd, language)
        self._recording = True  # False when another live server has this folder's record
        self._adopted: records.KernelRecord | None = None  # started by an earlier server
        self._notice = Notice()
        self._km: AsyncKernelManager | None = None
        self._kc: Any = None
        self._ready: asyncio.Task[None] | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._routes: dict[str, asyncio.Queue[Message]] = {}  # request msg_id -> its queue
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
        await _swept()
        record = await asyncio.to_thread(records.load, self.record_path)
        if record is not None:
            # Ours too: a kept kernel of a folder this server closed and opens again.
            if not record.owned_by_us() and record.server_alive():
                # another server serves this folder: leave its kernel be
                log.warning("kernel %s of %s belongs to server %s; starting one of our own",
                            record.pid, self.cwd, record.server_pid)
                self._recording = False
            elif self.keep and record.kernel_alive() and await self._reattach(record):
                self._start_readers()
                return
            else:
                if record.keep and not record.kernel_alive():
                    self._notice.replaced("the kernel kept from the last session is gone")
                await asyncio.to_thread(records.kill, record)
        await self._launch()
        self._start_readers()
        # A kernel's first cell pays for setup the next ones do not (profiled: the first run
        # in a new workspace took 2.5x a warm one). Pay it here, while the workspace opens.
        with contextlib.suppress(TimeoutError):  # only an optimisation: never fail a start
            await self._silent("pass")
        log.info("kernel %s started (pid %s) in %s", self.kernel_name, self.pid, self.cwd)

    async def _launch(self) -> None:
        km = AsyncKernelManager(kernel_name=self.kernel_name)
        # Not jupyter_client's default stdin pipe, which nobody writes: a program the code
        # starts that reads input would wait forever; this way its read fails at once.
        stdin = no_input()
        # The kernel's own output (its warnings, a crash's last words, and what programs the
        # code starts write to fds 1 and 2) goes to a file, not to our stderr: a background
        # process the code started would hold that pipe open after we are gone, and an editor
        # (or asyncio's Process.wait() on Python 3.11) waits for its end.
        log_path = self.record_path.with_suffix(".log")
        try:
            await asyncio.to_thread(_prepare_log, log_path)
            with open(log_path, "ab") as out:  # noqa: ASYNC230 (opening is instant)
                # keep: independent, no JPY_PARENT_PID, so the kernel outlives this server.
                await km.start_kernel(cwd=str(self.cwd), independent=self.keep, stdin=stdin,
                                      stdout=out, stderr=out,
                                      env=repl_environ(self.pass_keys))
        finally:
            os.close(stdin)
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
        except RuntimeError:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
            raise
        self._km, self._kc = km, kc
        await self._record()

    async def _reattach(self, record: records.KernelRecord) -> bool:
        """Connect to a kernel an earlier server kept; False when it does not answer."""
        kc = AsyncKernelClient()
        kc.load_connection_info(record.connection)  # type: ignore[arg-type]
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=_REATTACH_TIMEOUT)
        except (RuntimeError, TimeoutError) as exc:
            log.warning("kept kernel %s of %s does not answer (%s)", record.pid, self.cwd, exc)
            kc.stop_channels()
            return False
        self._kc, self._adopted = kc, record
        await self._record()
        log.info("reattached to kernel %s (pid %s) in %s", self.kernel_name, record.pid,
                 self.cwd)
        return True

    async def _record(self) -> None:
        pid = self.pid
        if not self._recording or pid is None:
            return
        connection = (dict(self._km.get_connection_info()) if self._km is not None
                      else self._adopted.connection if self._adopted is not None else {})
        record = records.new(self.cwd, self.language, self.kernel_name, pid, self.keep,
                             connection)
        if self._adopted is not None:
            self._adopted = record
        await asyncio.to_thread(records.save, record, self.record_path)

    def _start_readers(self) -> None:
        self._readers = [
            asyncio.create_task(self._read(self._kc.iopub_channel, "iopub")),
            asyncio.create_task(self._read(self._kc.shell_channel, "shell")),
            asyncio.create_task(self._read(self._kc.stdin_channel, "stdin")),
        ]

    def _stop_readers(self) -> None:
        for task in self._readers:
            task.cancel()
        self._readers = []

    async def _read(self, channel: Any, name: str) -> None:
        """Route every message to the run that sent its parent request. Straight from the
        socket: get_msg() awaits a poll before each receive, a second wake-up per message."""
        socket, session = channel.socket, self._kc.session
        while True:
            _, parts = session.feed_identities(await socket.recv_multipart())
            msg = session.deserialize(parts)
            route = self._routes.get(msg["parent_header"].get("msg_id", ""))
            if route is not None:
                route.put_nowait((name, msg))

    async def interrupt(self) -> None:
        if self._km is not None:
            await self._km.interrupt_kernel()
        elif self._adopted is not None:  # as jupyter_client does: the whole process group
            try:
                os.killpg(self._adopted.pid, signal.SIGINT)
            except OSError:
                with contextlib.suppress(OSError):
                    os.kill(self._adopted.pid, signal.SIGINT)

    async def restart(self) -> None:
        await self.start()
        # wait_for_ready reads the channels itself: the readers must not take its replies.
        self._stop_readers()
        try:
            if self._km is None:  # a reattached kernel has no manager here: start anew
                adopted, self._adopted = self._adopted, None
                self._kc.stop_channels()
                if adopted is not None:
                    await asyncio.to_thread(records.kill, adopted)
                await self._launch()
            else:
                # Not km.restart_kernel: it launches again with the first start's arguments,
                # whose stdin fd (and kept kernel's log file) were closed after that start.
                # New sockets too: a request queued for a kernel that had died (zmq keeps it
                # for the reconnect) must not run in the new kernel as well.
                self._kc.stop_channels()
                await self._km.shutdown_kernel(now=True)
                await self._launch()  # records the new pid
        finally:
            self._line_on = False
            self._start_readers()

    async def shutdown(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
        self._stop_readers()
        if self._kc is not None:
            self._kc.stop_channels()
        started = self._km is not None or self._adopted is not None
        if self.keep and started:  # left running; the record tells the next server where
            log.info("leaving kernel %s of %s running (keepKernel)", self.pid, self.cwd)
        else:
            if self._km is not None:
                with contextlib.suppress(Exception):
                    await self._km.shutdown_kernel(now=True)
            elif self._adopted is not None:
                await asyncio.to_thread(records.kill, self._adopted)
            if started and self._recording:
                await asyncio.to_thread(records.forget, self.record_path)
        self._km = self._kc = self._adopted = None

    async def is_alive(self) -> bool:
        if self._adopted is not None:
            return self._adopted.kernel_alive()
        return self._km is not None and bool(await self._km.is_alive())

    @property
    def pid(self) -> int | None:
        if self._adopted is not None:
            return self._adopted.pid
        provisioner = self._km.provisioner if self._km is not None else None
        pid = getattr(provisioner, "pid", None)
        return pid if isinstance(pid, int) else None

    # Running -------------------------------------------------------------------------------

    async def run(self, code: str, emit: Emit) -> RunResult:
        await self.start()
        async with self._lock:
            lines = active_line.LineFilter(emit, self._line_token)
            self._notice.tell(emit)
            try:
                # A kernel killed since the last run may still look alive until it is reaped:
                # when it dies before taking the cell, start a new one and send the cell again.
                for _attempt in (1, 2):
                    if not await self.is_alive():
                        await self.restart()
                        emit(Chunk("console", "output", "[the kernel had stopped; restarted, "
                                   "earlier variables are gone]\n"))
                    if self.language == "python" and self.active_line != self._line_on:
                        await self._silent(active_line.python_setup(self.active_line,
                                                                    self._line_token))
                        self._line_on = self.active_line
                    result = await self._run_cell(code, lines if self._line_on else emit)
                    if result is not None:
                        return result
                emit(Chunk("console", "output", "\n[the kernel died before running this]\n"))
                return RunResult("error", "the kernel died")
            finally:
                lines.flush()

    async def _run_cell(self, code: str, emit: Emit) -> RunResult | None:
        """One execute request; None when the kernel died before it started the cell."""
        cell = Cell()
        # With a way to answer, the code may read input (input(), getpass): each request
        # goes to the user; without, ipykernel's StdinNotImplementedError says why it fails.
        msg_id = self._kc.execute(code, store_history=True,
                                  allow_stdin=self.read_input is not None)
        self._routes[msg_id] = cell.queue
        since = run_start()
        answers = Answers(self.read_input, self._kc.input, emit)
        try:
            return await collect(cell, emit, lambda: self._quiet(cell), stdin=answers.request)
        except NotTaken:
            return None
        except asyncio.CancelledError:
            await settle(cell, self.interrupt, self._restart_unresponsive)
            # The interrupt reached the whole process group, but what ignores SIGINT
            # (a shell's background job) is still there: end what this run started.
            if (pid := self.pid) is not None:
                await kill_members(pid, exclude=pid, since=since)
            raise
        finally:
            answers.close()
            del self._routes[msg_id]

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

    async def _quiet(self, cell: Cell) -> Gone | None:
        """A run heard nothing for a while: is its kernel still there?"""
        if await self.is_alive():
            return None
        if not cell.busy:
            raise NotTaken
        return Gone("the kernel died", "the kernel died during this run")

    async def _restart_unresponsive(self) -> None:
        log.warning("kernel ignored the interrupt; restarting it")
        await self.restart()


_LOG_LIMIT = 1 << 20  # bytes; a longer kernel log is moved to <name>.log.1 at the next start


def _prepare_log(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if path.stat().st_size > _LOG_LIMIT:
            os.replace(path, path.with_suffix(".log.1"))
