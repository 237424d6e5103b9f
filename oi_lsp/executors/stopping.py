"""Stopping a run: interrupt it again and again until it ends, and escalate when it will not.

One interrupt is not enough: a SIGINT that lands between two commands, or before a kernel has
begun the cell, is dropped, and code may catch KeyboardInterrupt. So every executor repeats
its interrupt until the run ends or a grace period is over; then the caller escalates (ends
the process group, restarts the kernel).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

# (seconds until the interrupt is repeated, seconds left of the grace) -> returns once the run
# may have ended or made progress; each caller bounds its wait by its own timing.
Wait = Callable[[float, float], Awaitable[object]]


def _always() -> bool:
    return True


async def interrupt_until_ended(ended: Callable[[], bool], interrupt: Callable[[], Awaitable[None]],
                                wait: Wait, *, grace: float, every: float,
                                ready: Callable[[], bool] = _always) -> bool:
    """Call `interrupt` every `every` seconds (only while `ready()`) until `ended()`; True when
    the run ended, False when `grace` seconds passed first and the caller must escalate."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    next_interrupt = 0.0
    while not ended():
        now = loop.time()
        if now >= deadline:
            return False
        if ready() and now >= next_interrupt:
            await interrupt()
            next_interrupt = now + every
        # Measured from the clock, not counted per wait: a wait woken early repeats nothing.
        await wait(max(0.0, next_interrupt - now), deadline - now)
    return True
