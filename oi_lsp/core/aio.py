"""Small asyncio helpers the core shares."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


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
