"""The shared "interrupt again until it ends, else escalate" loop of every executor."""

from __future__ import annotations

import asyncio

from oi_lsp.executors.stopping import interrupt_until_ended


async def test_repeats_until_ended() -> None:
    loop = asyncio.get_running_loop()
    sent: list[float] = []
    start = loop.time()

    async def interrupt() -> None:
        sent.append(loop.time() - start)

    async def wait(to_interrupt: float, to_deadline: float) -> None:
        await asyncio.sleep(min(to_interrupt, to_deadline))

    ended = await interrupt_until_ended(lambda: len(sent) >= 3, interrupt, wait,
                                        grace=5.0, every=0.1)
    assert ended and len(sent) == 3
    assert sent[0] < 0.5 and 0.09 < sent[1] - sent[0] < 1.0  # loose: a busy machine


async def test_grace_over_means_escalate() -> None:
    loop = asyncio.get_running_loop()
    sent = 0

    async def interrupt() -> None:
        nonlocal sent
        sent += 1

    async def wait(to_interrupt: float, to_deadline: float) -> None:
        await asyncio.sleep(min(to_interrupt, to_deadline))

    start = loop.time()
    ended = await interrupt_until_ended(lambda: False, interrupt, wait, grace=0.25, every=0.1)
    assert not ended and 0.24 < loop.time() - start < 2.0 and 1 <= sent <= 3


async def test_interrupts_only_when_ready() -> None:
    polls = 0
    sent = 0

    async def interrupt() -> None:
        nonlocal sent
        sent += 1

    async def wait(_to_interrupt: float, _to_deadline: float) -> None:
        nonlocal polls
        polls += 1
        await asyncio.sleep(0.01)

    ended = await interrupt_until_ended(lambda: polls >= 10, interrupt, wait, grace=5.0,
                                        every=0.0, ready=lambda: polls >= 5)
    assert ended and sent == 5  # polls 5..9, each one due (every=0)


async def test_already_ended_sends_nothing() -> None:
    async def interrupt() -> None:
        raise AssertionError("interrupted a run that had ended")

    async def wait(_to_interrupt: float, _to_deadline: float) -> None:
        raise AssertionError("waited for a run that had ended")

    assert await interrupt_until_ended(lambda: True, interrupt, wait, grace=1.0, every=0.1)
