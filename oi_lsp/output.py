"""What the model sees of a run's output: the start and the end, within a character budget;
the whole of a longer output goes to a spill file the model is told about."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from .executors.base import Chunk

log = logging.getLogger(__name__)

_writes: set[asyncio.Task[None]] = set()  # spill writes in flight (a task needs a reference)


def trim(text: str, limit: int) -> str:
    """Keep the first and last parts of `text` within `limit` characters, saying what was cut."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def as_text(chunks: Sequence[Chunk]) -> str:
    """A run's output as text: console output as it came, displays named."""
    pieces = []
    for chunk in chunks:
        if chunk.type == "console":
            pieces.append(chunk.content)
        elif chunk.type == "image":
            pieces.append("\n[an image was displayed to the user]\n")
        else:
            pieces.append(f"\n[{chunk.format} was displayed to the user]\n")
    return "".join(pieces)


def spill(path: Path, text: str) -> None:
    """Write the whole output to `path` in a thread (never on the event loop)."""

    def write() -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError:
            log.exception("could not write the spill file %s", path)

    task = asyncio.get_running_loop().create_task(asyncio.to_thread(write))
    _writes.add(task)
    task.add_done_callback(_writes.discard)


async def flush() -> None:
    """Wait for the spill files being written."""
    if _writes:
        await asyncio.wait(list(_writes))
