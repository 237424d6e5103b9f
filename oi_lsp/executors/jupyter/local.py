"""A Jupyter kernel as a persistent REPL, through jupyter_client's async manager and client."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from .. import active_line, interpreter, kernelspecs
from ..base import Chunk, Emit, Executor, RunResult, driver
from ..process import (
    end_launcher,
    kill_members,
    no_input,
    repl_environ,
    repl_of,
    run_start,
)
from ..sandbox.policy import private_dir
from . import compat, records
from .channels import Channels
from .messages import Answers, Cell, Gone, Notice, NotTaken, collect, settle

compat.keep_dates_as_text()

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


class _Manager(AsyncKernelManager):
    """A kernel manager whose kernel command goes through the sandbox's launcher."""

    launch: Callable[[list[str], str], list[str]] = staticmethod(lambda cmd, _: cmd)
    python: interpreter.Interpreter = interpreter.OWN  # the workspace's Python, for ipykernel

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = interpreter.kernel_command(super().format_kernel_cmd(extra_arguments), self.python)
        if interpreter.is_ipykernel(cmd):
            cmd = [*cmd, *compat.IPYKERNEL_OPTIONS]
        return self.launch(cmd, self.connection_file)


class KernelExecutor(Executor):
    """One kernel (ipykernel by default) started in the workspace folder.

    Every kernel is recorded under the data folder (records.py). With `keep`
    (keepKernel) it is started independent of the server and left running when the server
    stops, and the next server's executor for the same folder reattaches to it.
    """

    def __init__(self, language: str, kernel_name: str, cwd: Path, keep: bool = False,
                 python: interpreter.Interpreter = interpreter.OWN) -> None:
        self.language = language
        self.python = python
        self.kernel_name = kernel_name
        self.cwd = cwd
        self.keep = keep
        self.record_path = records.path_for(cwd, language)
        self._adopted: records.KernelRecord | None = None  # started by an earlier server
        self._notice = Notice()
        self._km: AsyncKernelManager | None = None
        self._kc: Any = None
        self._ready: asyncio.Task[None] | None = None
        self._channels = Channels()  # its messages, to the run each answers
        self._lock = asyncio.Lock()
        self._line_token = active_line.new_token()
        self._line_on = self._prepared = False  # active lines reported now; _prepare ran
        self._private_base: Path | None = None

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
        try:
            choosing = await asyncio.to_thread(records.choosing, self.cwd, self.language)
            await asyncio.to_thread(choosing.acquire)
        except OSError as exc:  # no data folder to lock in: nothing recorded to reattach to
            log.warning("cannot lock the kernel records of %s: %s", self.cwd, exc)
            choosing = None
        try:
            reattached = await self._reattached()
        finally:
            if choosing is not None:
                await asyncio.to_thread(choosing.release)
        if reattached:
            self._channels.start(self._kc)
            return
        await self._launch()
        self._channels.start(self._kc)
        # A kernel's first cell pays for setup the next ones do not (profiled: the first run
        # in a new workspace took 2.5x a warm one). Pay it here, while the workspace opens.
        with contextlib.suppress(TimeoutError):  # only an optimisation: never fail a start
            await self._prepare()
        log.info("kernel %s started (pid %s) in %s", self.kernel_name, self.pid, self.cwd)

    async def _reattached(self) -> bool:
        """Reattach to a kernel a gone server kept (with keep), ending the others that gone
        servers left; another live server's kernel is left be. True when reattached."""
        for path in await asyncio.to_thread(records.of, self.cwd, self.language):
            record = await asyncio.to_thread(records.load, path)
            if record is None:
                continue
            # Ours too: a kept kernel of a folder this server closed and opens again.
            if not record.owned_by_us() and record.server_alive():
                continue  # another editor's server serves this folder with it
            if self.keep and record.kernel_alive() and await self._reattach(record):
                if path != self.record_path:
                    await asyncio.to_thread(records.forget, path)  # recorded anew as ours
                return True
            if record.keep and not record.kernel_alive():
                self._notice.replaced("the kernel kept from the last session is gone")
            await asyncio.to_thread(records.kill, record)
            if path != self.record_path:
                await asyncio.to_thread(records.forget, path)
        return False

    async def _launch(self) -> None:
        sandbox = self.sandbox
        sandbox.check()  # refuse before anything starts
        await interpreter.check(self.python)
        private = await asyncio.to_thread(self._private)
        km = _Manager(kernel_name=self.kernel_name, kernel_spec_manager=kernelspecs.spec_manager())
        km.python = self.python
        km.launch = lambda cmd, connection: sandbox.command(
            cmd, self.cwd, private, follow_parent=not self.keep, ports_from=connection)
        env = {**repl_environ(self.pass_keys), **self.env, **sandbox.environ(private)}
        await _start_kernel(km, self.cwd, self.keep, records.log_path(self.cwd, self.language),
                            env)
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
        except RuntimeError:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
            raise
        self._km, self._kc = km, kc
        self.started_sandbox = sandbox
        await self._record()

    def _private(self) -> Path:
        """The kernel's private temporary folder (kept for a kept kernel, as it is)."""
        if self._private_base is None:
            self._private_base = Path(tempfile.mkdtemp(prefix=f"oi-{self.language}-"))
        return private_dir(self._private_base)

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
        if pid is None:
            return
        connection = (dict(self._km.get_connection_info()) if self._km is not None
                      else self._adopted.connection if self._adopted is not None else {})
        record = records.new(self.cwd, self.language, self.kernel_name, pid, self.keep,
                             connection)
        if self._adopted is not None:
            self._adopted = record
        await asyncio.to_thread(records.save, record, self.record_path)

    async def interrupt(self) -> None:
        if self._km is not None:
            await self._km.interrupt_kernel()
        elif self._adopted is not None:  # as jupyter_client does: the whole process group
            try:
                os.killpg(os.getpgid(self._adopted.pid), signal.SIGINT)
            except OSError:
                with contextlib.suppress(OSError):
                    os.kill(self._adopted.pid, signal.SIGINT)

    async def restart(self) -> None:
        await self.start()
        # wait_for_ready reads the channels itself: the readers must not take its replies.
        self._channels.stop()
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
                await end_launcher(_launcher(self._km))  # with all the kernel started
                await self._km.shutdown_kernel(now=True)
                await self._launch()  # records the new pid
        finally:
            self._line_on = self._prepared = False
            self._channels.start(self._kc)

    async def shutdown(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
        self._channels.stop()
        if self._kc is not None:
            self._kc.stop_channels()
        started = self._km is not None or self._adopted is not None
        if self.keep and started:  # left running; the record tells the next server where
            log.info("leaving kernel %s of %s running (keepKernel)", self.pid, self.cwd)
        else:
            if self._km is not None:
                await end_launcher(_launcher(self._km))  # with all the kernel started
                with contextlib.suppress(Exception):
                    await self._km.shutdown_kernel(now=True)
            elif self._adopted is not None:
                await asyncio.to_thread(records.kill, self._adopted)
            if started:
                await asyncio.to_thread(records.forget, self.record_path)
        self._channels.pacing.close()
        self._km = self._kc = self._adopted = None
        if self._private_base is not None and not (self.keep and started):
            base, self._private_base = self._private_base, None
            await asyncio.to_thread(shutil.rmtree, base, True)

    async def is_alive(self) -> bool:
        if self._adopted is not None:
            return self._adopted.kernel_alive()
        return self._km is not None and bool(await self._km.is_alive())

    @property
    def pid(self) -> int | None:
        """The kernel's (not its launcher's: sandbox/launch.py)."""
        if self._adopted is not None:
            return self._adopted.pid
        launcher = _launcher(self._km)
        return None if launcher is None else repl_of(launcher) or launcher

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
                    if not self._prepared:
                        await self._prepare()
                    if self.language == "python" and self.active_line != self._line_on:
                        await self._channels.silent(self._kc, active_line.python_setup(
                            self.active_line, self._line_token))
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
        cell = Cell(self._channels.pacing.read)
        since = run_start()  # before the send: the kernel may start a process at once
        # With a way to answer, the code may read input (input(), getpass): each request
        # goes to the user; without, ipykernel's StdinNotImplementedError says why it fails.
        msg_id = self._kc.execute(code, store_history=True,
                                  allow_stdin=self.read_input is not None)
        self._channels.routes[msg_id] = cell.queue
        answers = Answers(self.read_input, self._kc.input, emit)
        try:
            return await collect(cell, emit, lambda: self._quiet(cell), stdin=answers.request)
        except NotTaken:
            return None
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):  # the kernel is idle again first
                await _stopped(self, cell, since)
            raise
        finally:
            answers.close()
            del self._channels.routes[msg_id]

    async def _prepare(self) -> None:
        """Set up a new kernel (Python: long writes go out in pieces, drivers/ipython_output.py);
        the first cell also pays for setup the next ones do not."""
        self._prepared = True
        code = "pass"
        if self.language == "python":
            path = await asyncio.to_thread(self._channels.pacing.open)
            code = f"exec({driver('ipython_output.py')!r}, {{'ACK': {path!r}}})"
        await self._channels.silent(self._kc, code)

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


async def _start_kernel(km: AsyncKernelManager, cwd: Path, keep: bool, log_path: Path,
                        env: dict[str, str]) -> None:
    # Not jupyter_client's default stdin pipe, which nobody writes: a program the code
    # starts that reads input would wait forever; this way its read fails at once.
    stdin = no_input()
    # The kernel's own output (its warnings, a crash's last words, and what programs the
    # code starts write to fds 1 and 2) goes to a file, not to our stderr: a background
    # process the code started would hold that pipe open after we are gone, and an editor
    # (or asyncio's Process.wait() on Python 3.11) waits for its end.
    try:
        await asyncio.to_thread(_prepare_log, log_path)
        with open(log_path, "ab") as out:  # noqa: ASYNC230 (opening is instant)
            # keep: independent, no JPY_PARENT_PID, so the kernel outlives this server.
            await km.start_kernel(cwd=str(cwd), independent=keep, stdin=stdin, stdout=out,
                                  stderr=out, env=env)
    finally:
        os.close(stdin)


def _launcher(km: AsyncKernelManager | None) -> int | None:
    """The pid of the process jupyter_client started: the sandbox's launcher."""
    provisioner = km.provisioner if km is not None else None
    pid = getattr(provisioner, "pid", None)
    return pid if isinstance(pid, int) else None


_LOG_LIMIT = 1 << 20  # bytes; a longer kernel log is moved to <name>.log.1 at the next start


def _prepare_log(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        if path.stat().st_size > _LOG_LIMIT:
            os.replace(path, path.with_suffix(".log.1"))


async def _stopped(executor: KernelExecutor, cell: Cell, since: float) -> None:
    """A cancelled cell: interrupt until the kernel is idle (else restart it). The interrupt
    reached the whole process group, but what ignores SIGINT (a shell's background job) is
    still there: end what this run started."""
    await settle(cell, executor.interrupt, executor._restart_unresponsive)
    if (pid := executor.pid) is not None:
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)  # its launcher's
            await kill_members(group, exclude=group, since=since)
