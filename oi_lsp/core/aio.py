"""Small asyncio helpers the core shares."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import anyio.to_thread

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`func` in one of anyio's worker threads. A cancellation does not wait for it (a read or
    a computation: its result is dropped, the thread ends on its own)."""
    return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs),
                                          abandon_on_cancel=True)


async def to_disk(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`func`, a write, in one of anyio's worker threads: a cancellation waits until it is
    done, so no file is left half written nor a temporary file behind."""
    return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs))


def cancelling() -> bool:
    """True when the current task itself is being cancelled (not just what it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def live_tasks(skip: asyncio.Task[Any] | None = None) -> list[str]:
    """What runs on this loop now, one name per task (its coroutine's qualified name), sorted:
    a test compares it before and after a turn (the test-only oi/debug/tasks)."""
    names = []
    for task in asyncio.all_tasks():
        if task is skip:
            continue
        coro = task.get_coro()
        names.append(getattr(coro, "__qualname__", None) or task.get_name())
    return sorted(names)


def log_failure(what: str) -> Any:
    """A done callback that logs the task's exception (`what` failed), if it raised one."""

    def check(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: %s", what, task.exception())

    return check


class Soon:
    """`func(*args)` once: when the calling task first waits (the loop's next iteration), or at
    now() if that comes first. A notice of work about to start goes out while the work runs:
    for a warm REPL, once its code is sent, instead of before."""

    def __init__(self, func: Callable[..., None], *args: Any) -> None:
        self._call: Callable[[], None] | None = functools.partial(func, *args)
        self._handle = asyncio.get_running_loop().call_soon(self.now)

    def now(self) -> None:
        """Make the call now, if it was not made yet (before any later notice, so the order
        stays)."""
        call, self._call = self._call, None
        if call is not None:
            self._handle.cancel()
            call()
