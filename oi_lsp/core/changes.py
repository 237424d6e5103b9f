"""What changed in the open conversation since its record was last written: the batch the
next write appends (journal.py), or the whole record when it has none yet or its dead lines
call for a compaction. Kept on the event loop; the store writes each batch in a thread."""

from __future__ import annotations

from ..protocol import Message
from .store import Batch

# The record is rewritten as its messages alone once the lines that no longer count (replaced
# messages, dropped ones) are this many and more than the messages: a rewrite per so many
# changes, so a change costs the same at any length.
COMPACT_AFTER = 500


class Changes:
    def __init__(self) -> None:
        self.reset(0, 0, on_disk=False)

    def reset(self, written: int, dead: int, on_disk: bool) -> None:
        """The record as opened: `written` messages, `dead` lines that no longer count."""
        self.written = written if on_disk else 0  # messages the record holds
        self.dead = dead
        self.on_disk = on_disk  # the record exists (else the next write is all of it)
        self.touched: set[int] = set()  # indices of written messages that changed since
        self.cut: int | None = None  # %undo: keep only this many
        self.sync = False  # the next write is fsynced (an approval, a turn's end)
        self.unsynced = False  # a write since the last fsync

    def touch(self, index: int) -> None:
        if index < self.written:
            self.touched.add(index)

    def keep(self, count: int) -> None:
        self.cut = count if self.cut is None else min(self.cut, count)
        self.touched = {i for i in self.touched if i < count}

    def take(self, held: list[Message], base: int, title: str, created: float,
             hurry: bool) -> Batch:
        """The next write, and the record as it will be once it is done: `held` are the
        messages from `base` on (those before it are in the record, and stay as they are)."""
        count = base + len(held)
        sync = self.sync or hurry
        if not self.on_disk or self.dead >= max(COMPACT_AFTER, count):
            batch = Batch(created, title, count, whole=list(held), kept=base, sync=True)
            self.on_disk, self.dead = True, 0
        else:
            first = self.written if self.cut is None else min(self.cut, self.written)
            cut = first if first < self.written else None
            changed = sorted(i for i in self.touched if i < first)
            batch = Batch(created, title, count, cut=cut,
                          changes=[(i, held[i - base]) for i in changed]
                          + [(i, held[i - base]) for i in range(first, count)], sync=sync)
            self.dead += len(changed) + (0 if cut is None else 1 + self.written - first)
        self.written, self.cut, self.sync = count, None, False
        self.touched = set()
        return batch

    def written_ok(self, batch: Batch) -> None:
        self.unsynced = not batch.sync and batch.whole is None

    def failed(self) -> None:
        self.on_disk = False  # the next write is the whole record again
