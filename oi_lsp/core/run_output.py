"""A run's output: what the model sees of it (the start and the end, within a character
budget; the whole of a longer output goes to a spill file the model is told about), and what
oi/execute returns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from ..executors.base import Chunk, RunResult
from ..protocol import CodeOutcome, Output

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


NO_OUTPUT = "(no output)"  # what the model is told of a run that printed nothing


def model_view(result: RunResult, chunks: list[Chunk], limit: int,
               spill: Path | None = None) -> str:
    """A run's output as the model gets it: text trimmed head and tail, images named; when
    trimmed, where the whole output is (`spill`)."""
    whole = as_text(chunks)
    text = trim(whole, limit).strip()
    if spill is not None and len(whole) > limit:
        text += f"\n[the whole output, {len(whole)} characters, is in the file {spill}]"
    if result.status == "stopped":
        text += "\n[the user stopped this run]"
    elif result.status == "error" and result.error and result.error not in text:
        text += f"\n[{result.error}]"
    return text.strip() or NO_OUTPUT


_OUTCOMES: dict[str, CodeOutcome] = {"ok": "ran", "error": "error", "stopped": "stopped",
                                     "timeout": "timedOut"}


def outcome_of(result: RunResult) -> CodeOutcome:
    """What became of code, by how its run ended (a proposal that ran fine may say more:
    edited, autoRan)."""
    return _OUTCOMES[result.status]


def merge_outputs(chunks: list[Chunk]) -> list[Output]:
    """A run's result for oi/execute: consecutive console text as one output; images and HTML
    as they came."""
    groups: list[tuple[Chunk, list[str]]] = []
    for chunk in chunks:
        if groups and chunk.type == "console" and groups[-1][0].type == "console":
            groups[-1][1].append(chunk.content)
        else:
            groups.append((chunk, [chunk.content]))
    return [Output(type=first.type, format=first.format, content="".join(parts))
            for first, parts in groups]
