"""Running code under watch: busy flags, figures for oi/status, oi/resources notifications
during long runs, and the memory limit (tell the user; restart when agreed or configured)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.to_thread

from ..executors.base import Executor, RunResult
from ..executors.monitor import Figures, Monitor
from ..protocol import ReplStatus
from .link import Tell
from .settings import Settings

log = logging.getLogger(__name__)

MB = 1024 * 1024
WATCH_EVERY = 1.0  # seconds between samples while code runs
STATUS_AFTER = 3.0  # a run this long gets oi/resources notifications ...
STATUS_EVERY = 2.0  # ... this often

# (the REPL's figures, seconds the run has taken) -> oi/resources for the running turn
Report = Callable[[ReplStatus, float], None]


class MemoryRestart(Exception):
    """The run was stopped because its REPL went past kernelMemoryLimitMB and was restarted."""


class Watch:
    """Runs code while watching its REPL: busy flags, figures for oi/status, oi/resources
    during long runs, and the memory limit (tell the user; restart when agreed or configured)."""

    def __init__(self, settings: Callable[[], Settings], tell: Tell) -> None:
        self.monitor = Monitor()
        self._settings = settings
        self._tell = tell
        self._busy: Counter[Executor] = Counter()
        # Each REPL's run now: its scope (a restart for memory cancels it) and its end.
        self._runs: dict[Executor, tuple[anyio.CancelScope, anyio.Event]] = {}
        self._over: set[Executor] = set()  # past the limit, the user already told
        self._restarts: dict[Executor, asyncio.Task[None]] = {}
        self._alarms: set[asyncio.Task[None]] = set()

    async def run(self, language: str, executor: Executor, work: Awaitable[RunResult],
                  report: Report) -> RunResult:
        """Await `work` (the executor's run) with its watcher beside it: the watcher ends with
        the run, however it ends. Cancelling this cancels the run, as before; a restart for
        memory cancels the run's own scope: MemoryRestart.

        The watcher is a task of its own started when its first sample is due, not a task
        group's: a short run then starts no task and yields to the loop nowhere (a task
        group's exit yields even with no task in it: an iteration of every round trip)."""
        pending = self._restarts.get(executor)
        if pending is not None:  # code never runs into a REPL that is being restarted
            await asyncio.wait([pending])
        scope, ended = self._runs[executor] = (anyio.CancelScope(), anyio.Event())
        self._busy[executor] += 1
        result: RunResult | None = None
        watching: list[asyncio.Task[None]] = []
        started = time.monotonic()
        timer = asyncio.get_running_loop().call_later(WATCH_EVERY, lambda: watching.append(
            asyncio.create_task(self._watch(language, executor, report, started))))
        try:
            with scope:
                result = await work
        finally:
            timer.cancel()
            try:
                if watching:
                    await _ended(watching[0])
            finally:  # even when a second native cancel cuts that wait short
                ended.set()
                self._busy[executor] -= 1
                if self._runs.get(executor) == (scope, ended):
                    del self._runs[executor]
                if self._settings().kernel_memory_limit_mb is not None:
                    # A short run can grow the REPL too. Only with a limit: sampling walks
                    # every process of the machine (children), a few ms as each result is
                    # being sent.
                    self._spawn(self._check_once(language, executor))
        if result is None:  # its scope was cancelled: restarted for memory
            restart = self._restarts.get(executor)
            if restart is not None:
                await asyncio.wait([restart])
            raise MemoryRestart(f"the {language} REPL went past kernelMemoryLimitMB and was "
                                "restarted; its variables are gone")
        return result

    async def _watch(self, language: str, executor: Executor, report: Report,
                     started: float) -> None:
        last = started
        while True:
            pid = executor.pid
            figures = await _sample(self.monitor, pid) if pid else None
            if figures is not None:
                self._check(language, executor, figures)
                now = time.monotonic()
                if now - started >= STATUS_AFTER and now - last >= STATUS_EVERY:
                    last = now
                    report(self._status(language, executor, True, figures),
                           round(now - started, 1))
            await asyncio.sleep(WATCH_EVERY)

    async def _check_once(self, language: str, executor: Executor) -> None:
        pid = executor.pid
        figures = await _sample(self.monitor, pid) if pid else None
        if figures is not None:
            self._check(language, executor, figures)

    def _check(self, language: str, executor: Executor, figures: Figures) -> None:
        limit = self._settings().kernel_memory_limit_mb
        if limit is None or figures.rss <= limit * MB:
            self._over.discard(executor)  # back under: the next crossing is told again
            return
        if executor not in self._over:
            self._over.add(executor)
            self._spawn(self._exceeded(language, executor, figures.rss, limit))

    async def _exceeded(self, language: str, executor: Executor, rss: int, limit: int) -> None:
        text = (f"The {language} REPL uses {rss / MB:.0f} MB, past kernelMemoryLimitMB "
                f"({limit} MB).")
        if self._settings().kernel_memory_limit_action == "restart":
            await self._tell(f"{text} It is restarted now (kernelMemoryLimitAction: restart); "
                             "its variables are gone.", [])
        elif await self._tell(f"{text} Restart it? Its variables will be lost.",
                              [RESTART, KEEP]) != RESTART:
            return
        if executor not in self._restarts:
            restart = self._restarts[executor] = asyncio.create_task(self._restart(executor))
            restart.add_done_callback(lambda _: self._restarts.pop(executor, None))
        await asyncio.wait([self._restarts[executor]])

    async def _restart(self, executor: Executor) -> None:
        running = self._runs.get(executor)
        if running is not None:
            scope, ended = running
            scope.cancel()  # interrupts the code; the REPL is ready again when it is done
            await ended.wait()
        try:
            await executor.restart()
        finally:
            self._over.discard(executor)

    async def status(self, executors: dict[str, Executor]) -> list[ReplStatus]:
        out = []
        for language, executor in list(executors.items()):
            pid = executor.pid
            figures = await _sample(self.monitor, pid) if pid else None
            if figures is not None:
                self._check(language, executor, figures)
            out.append(self._status(language, executor, await _alive(executor), figures))
        return out

    def _status(self, language: str, executor: Executor, alive: bool,
                figures: Figures | None) -> ReplStatus:
        return ReplStatus(language=language, pid=executor.pid, alive=alive,
                          busy=self._busy[executor] > 0,
                          cpu_percent=figures.cpu_percent if figures else None,
                          rss=figures.rss if figures else None,
                          uptime=figures.uptime if figures else None,
                          sandbox=executor.sandbox_state(),
                          sandbox_network=_network(executor))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._alarms.add(task)
        task.add_done_callback(self._alarms.discard)
        task.add_done_callback(_done)

    def close(self) -> None:
        for task in list(self._alarms):
            task.cancel()


RESTART = "Restart"
KEEP = "Keep running"


def _done(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("memory check failed: %s", task.exception())


def _network(executor: Executor) -> bool | None:
    started = executor.started_sandbox
    return None if started is None else started.network


async def _alive(executor: Executor) -> bool:
    try:
        async with asyncio.timeout(5):
            return await executor.is_alive()
    except Exception:
        return False


async def _ended(watcher: asyncio.Task[None]) -> None:
    """Cancel a run's watcher and wait for it to end (shielded: the run's own end, even a
    cancelled one, waits for it); its failure is logged, never the run's."""
    watcher.cancel()
    with anyio.CancelScope(shield=True):
        await asyncio.wait([watcher])
    if not watcher.cancelled() and watcher.exception() is not None:
        log.error("a run's watcher failed", exc_info=watcher.exception())


async def _sample(monitor: Monitor, pid: int) -> Figures | None:
    """The REPL's figures, read in a thread (walking the processes takes a few ms); a stop
    does not wait for it."""
    return await anyio.to_thread.run_sync(monitor.sample, pid, abandon_on_cancel=True)
