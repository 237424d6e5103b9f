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


def log_failure(what: str) -> Any:
    """A done callback that logs the task's exception (`what` failed), if it raised one."""

    def check(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: %s", what, task.exception())

    return check
