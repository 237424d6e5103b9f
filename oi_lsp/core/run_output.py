"""A run's output: what the model sees of it (the start and the end, within a character
budget; the whole of a longer output goes to a spill file the model is told about), and what
oi/execute returns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from ..executors.base import Chunk, RunResult
from ..protocol import CodeOutcome, Output
from .aio import to_disk

log = logging.getLogger(__name__)

# Characters of a run's text kept in memory from each end: oi/execute's result shows them
# (the client saw the whole as it streamed), the model sees less (`maxOutput`).
KEEP = 500_000
SPILL_BUDGET = 512 * 1024 * 1024  # bytes of spill files per workspace; the oldest go first


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


class RunOutput:
    """What a run printed and displayed, in bounded memory: its output in order up to 2 KEEP
    characters; past that the start and the last KEEP characters, and the displays. Once the
    text is longer than `spill_from`, the whole of it also goes to the `spill` file as it
    comes (written in a thread), for the model and the user to read."""

    def __init__(self, spill: Path | None = None, spill_from: int = 0,
                 keep: int = KEEP) -> None:
        self.spill = spill
        self._spill_from = min(spill_from, 2 * keep)  # past 2 keep, text leaves memory
        self._keep = keep
        self.size = 0  # characters of console text printed in all
        self._head: list[Chunk] = []  # in order, until it holds 2 keep characters of text
        self._head_size = 0
        self._tail: deque[str] = deque()  # the text after the head: its last `keep` characters
        self._tail_size = 0
        self._late: list[Chunk] = []  # displays after the head filled
        self._writer: _SpillWriter | None = None

    @property
    def over(self) -> bool:
        """Whether some text is no longer in memory (only in the spill file, if any)."""
        return self.size > self._head_size + self._tail_size

    def append(self, chunk: Chunk) -> None:
        if chunk.type != "console":
            (self._late if self._tail else self._head).append(chunk)
            return
        text = chunk.content
        self.size += len(text)
        if self._writer is not None:
            self._writer.write(text)
        elif self.spill is not None and self.size > self._spill_from:
            self._writer = _SpillWriter(self.spill)
            self._writer.write("".join(c.content for c in self._head if c.type == "console")
                               + text)
        if not self._tail and self._head_size + len(text) <= 2 * self._keep:
            self._head.append(chunk)
            self._head_size += len(text)
            return
        if not self._tail:  # the head is full: top it up to `keep`, the rest is the tail
            room = max(0, self._keep - self._head_size)
            if room:
                self._head.append(Chunk("console", chunk.format, text[:room]))
                self._head_size += room
                text = text[room:]
        self._tail.append(text)
        self._tail_size += len(text)
        while self._tail_size - len(self._tail[0]) >= self._keep:
            self._tail_size -= len(self._tail.popleft())
        if self._tail_size > self._keep and len(self._tail) == 1:
            self._tail[0] = self._tail[0][-self._keep:]
            self._tail_size = self._keep

    async def finish(self) -> None:
        """Wait until the spill file holds everything (then keep the spill folder within its
        budget)."""
        if self._writer is not None:
            await self._writer.close()

    def displays(self) -> list[Chunk]:
        return [c for c in (*self._head, *self._late) if c.type != "console"]

    def _omitted(self) -> str:
        where = f"; the whole output is in the file {self.spill}" if self._writer else ""
        missing = self.size - self._head_size - self._tail_size
        return f"\n[... {missing} characters omitted{where} ...]\n"

    def chunks(self) -> list[Chunk]:
        """What is kept, in order (with a note where text was left out)."""
        if not self._tail:
            return list(self._head)
        middle = [Chunk("console", "output", self._omitted())] if self.over else []
        return [*self._head, *middle, *self._late, Chunk("console", "output",
                                                         "".join(self._tail))]

    def text(self, limit: int) -> tuple[str, bool]:
        """The output as text within `limit` characters (start and end), and whether it was
        trimmed."""
        if not self.over:
            whole = as_text(self.chunks())
            return trim(whole, limit), len(whole) > limit
        head = as_text(self._head)[:limit // 2]
        tail = ("".join(self._tail) + as_text(self._late))[-(limit - limit // 2):]
        omitted = self.size - len(head) - len(tail)
        return f"{head}\n[... {max(omitted, 0)} characters omitted ...]\n{tail}", True


class _SpillWriter:
    """Appends a run's text to its spill file in a thread, in order, as it comes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._failed = False

    def write(self, text: str) -> None:
        self._pending.append(text)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending and not self._failed:
            batch, self._pending = self._pending, []
            try:
                await to_disk(self._append, batch)
            except OSError as exc:
                self._failed = True
                log.warning("could not write the spill file %s: %s", self.path, exc)
        self._pending.clear()

    def _append(self, batch: list[str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8", errors="replace") as out:
            out.writelines(batch)

    async def close(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        await to_disk(prune, self.path.parent.parent)


def prune(folder: Path, budget: int = SPILL_BUDGET) -> None:
    """Keep a workspace's spill files (every `*.outputs/` folder under it) within `budget`
    bytes: the oldest go first."""
    try:
        files = [(p.stat(), p) for p in folder.glob("*.outputs/*.txt")]
    except OSError:
        return
    total = sum(st.st_size for st, _ in files)
    for st, path in sorted(files, key=lambda f: f[0].st_mtime):
        if total <= budget:
            break
        with contextlib.suppress(OSError):
            path.unlink()
            total -= st.st_size


NO_OUTPUT = "(no output)"  # what the model is told of a run that printed nothing


def model_view(result: RunResult, output: RunOutput, limit: int) -> str:
    """A run's output as the model gets it: text trimmed head and tail, images named; when
    trimmed, where the whole output is (its spill file)."""
    text, trimmed = output.text(limit)
    text = text.strip()
    if trimmed and output.spill is not None:
        text += f"\n[the whole output, {output.size} characters, is in the file {output.spill}]"
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
