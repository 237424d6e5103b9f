"""A conversation's append-only record: a header line, then one JSON object a line.

    {"oi": "conversation", "version": 3, "workspace": "file:///w", "id": "...", "created": 1.5}
    {"i": 0, "m": {"role": "user", ...}}   message 0: appended when i is the count so far,
                                           else it replaces message i (an outcome, a usage)
    {"keep": 12}                           the messages after the first 12 dropped (%undo)

A change costs what it adds: a new message is one line, a message that changed is its line
again. Lines are written whole with one write() each batch, so a killed server leaves every
line it wrote; a torn last line (a power cut, a full disk) is dropped when read. Compaction
rewrites the file as its messages alone (temp file, fsync, rename) once the lines that no
longer count outnumber the messages: the old or the new file is whole at every moment.

Opening a record reads where each message's line is (`scan`: the index at the start of each
line, not the message), so a long conversation is opened by parsing only the messages shown
first; older ones are read by their place when asked for (`Journal.lines`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.files import atomic_write

KIND = "conversation"
VERSION = 3
SUFFIX = ".jsonl"
# How this module writes a message's line and a keep line; a line written otherwise (by hand,
# by another tool) is parsed whole.
_MESSAGE = re.compile(rb'\{"i":(\d+),"m":\{')
_KEEP = re.compile(rb'\{"keep":(\d+)\}')


class Damaged(ValueError):
    """A record that is not one: no header, or a line in its middle that cannot be read."""


class Spans:
    """Where the current line of each message is in the record: its offset and length."""

    __slots__ = ("size", "start")

    def __init__(self) -> None:
        self.start = array("q")
        self.size = array("q")

    def __len__(self) -> int:
        return len(self.start)

    def put(self, index: int, start: int, size: int) -> bool:
        """Message `index` is the line at `start`; True when it replaces an earlier line."""
        if index == len(self.start):
            self.start.append(start)
            self.size.append(size)
            return False
        self.start[index], self.size[index] = start, size
        return True

    def keep(self, count: int) -> int:
        """Drop the messages after the first `count`; how many went."""
        gone = max(0, len(self.start) - count)
        del self.start[count:], self.size[count:]
        return gone


@dataclass(slots=True)
class Scan:
    """A record's structure: its header and where each of its messages is."""

    header: dict[str, Any]
    spans: Spans
    dead: int  # lines that no longer count (replaced messages, dropped ones, keeps)
    good: int  # bytes of the complete lines: where the next line goes
    torn: int  # bytes of a torn last line, dropped
    unterminated: bool = False  # the last line is whole but for its newline


@dataclass(slots=True)
class Replay:
    """A record read whole: its structure and its messages, as saved (displays name their
    file)."""

    scan: Scan
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def header(self) -> dict[str, Any]:
        return self.scan.header

    @property
    def torn(self) -> int:
        return self.scan.torn

    @property
    def dead(self) -> int:
        return self.scan.dead


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def header_line(workspace: str, conversation_id: str, created: float) -> bytes:
    return _json({"oi": KIND, "version": VERSION, "workspace": workspace,
                  "id": conversation_id, "created": created})


def message_line(index: int, data: dict[str, Any]) -> bytes:
    return _json({"i": index, "m": data})


def keep_line(count: int) -> bytes:
    return _json({"keep": count})


def message_of(line: bytes) -> dict[str, Any]:
    """The message a line holds. Raises ValueError."""
    entry = json.loads(line)
    data = entry.get("m") if isinstance(entry, dict) else None
    if not isinstance(data, dict):
        raise ValueError("not a message's line")
    return data


def scan(raw: bytes) -> Scan:
    """Where the messages of a record are, without reading them. Raises Damaged."""
    good = raw.rfind(b"\n") + 1
    torn = len(raw) - good
    unterminated = False
    if raw[good:].strip():
        # A proper prefix of a JSON object is never valid JSON: a tail that parses is a whole
        # line whose newline alone is missing, and it counts.
        try:
            json.loads(raw[good:])
        except ValueError:
            pass
        else:
            good, torn, unterminated = len(raw), 0, True
    first = raw.find(b"\n", 0, good)
    end_of_header = good if first < 0 else first
    if end_of_header == 0:
        raise Damaged("empty file" if not torn else "only a torn first line")
    try:
        header = json.loads(raw[:end_of_header])
    except ValueError as exc:
        raise Damaged(f"line 1: {exc}") from None
    if not isinstance(header, dict) or header.get("oi") != KIND:
        raise Damaged("line 1 is not a conversation's header")
    if not isinstance(header.get("version"), int) or header["version"] > VERSION:
        raise Damaged(f"written by a newer oi-lsp (format {header.get('version')!r})")
    spans, dead = Spans(), 0
    starts, sizes, message = spans.start, spans.size, _MESSAGE.match
    at, number = end_of_header + 1, 2
    while at < good:  # the loop a long conversation's open spends its time in: kept lean
        end = raw.find(b"\n", at, good)
        end = good if end < 0 else end
        found = message(raw, at, end)
        count = len(starts)
        if found is not None and raw[end - 1] == raw[end - 2] == 125:  # b"}}"
            index = int(found[1])
            if index == count:
                starts.append(at)
                sizes.append(end - at)
            elif index < count:
                starts[index], sizes[index] = at, end - at
                dead += 1
            else:
                raise Damaged(f"line {number}: message {index} of {count}")
        else:
            try:
                dead += _other(raw[at:end], at, spans)
            except (ValueError, KeyError, TypeError) as exc:
                raise Damaged(f"line {number}: {exc}") from None
        at, number = end + 1, number + 1
    return Scan(header, spans, dead, good, torn, unterminated)


def _other(line: bytes, at: int, spans: Spans) -> int:
    """Put a line not written as this module writes its lines in `spans`; the lines it makes
    dead."""
    keep = _KEEP.fullmatch(line)
    if keep is not None:
        return 1 + spans.keep(int(keep[1]))
    entry = json.loads(line)
    if "m" not in entry:
        count = entry["keep"]
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"keep {count!r}")
        return 1 + spans.keep(count)
    index = entry["i"]
    if not isinstance(index, int) or not isinstance(entry["m"], dict) \
            or not 0 <= index <= len(spans):
        raise ValueError(f"message {index!r} of {len(spans)}")
    return int(spans.put(index, at, len(line)))


def replay(raw: bytes) -> Replay:
    """The messages a record holds, all of them. Raises Damaged."""
    found = scan(raw)
    messages = []
    for index, (start, size) in enumerate(zip(found.spans.start, found.spans.size,
                                              strict=True)):
        try:
            messages.append(message_of(raw[start:start + size]))
        except ValueError as exc:
            raise Damaged(f"message {index}: {exc}") from None
    return Replay(found, messages)


class Journal:
    """The record of the open conversation: written by one thread at a time, read (older
    messages, by their place) by others."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0  # where the next line goes
        self._spans = Spans()
        self._lock = threading.Lock()  # a read by place never meets a rewrite

    def start(self, header: bytes, lines: list[bytes], kept: int = 0) -> None:
        """Write the record anew as these messages' lines, after the first `kept` messages of
        the record as it is (a new, migrated or compacted conversation): the old file or the
        new one, whole."""
        with self._lock:
            if kept > len(self._spans):  # never a record without the messages it had
                raise OSError(errno.EIO, f"{self.path}: {kept} messages to keep, "
                              f"{len(self._spans)} known")
            old = self._read(0, kept) if kept else []
            self._close()
            spans, at = Spans(), len(header)
            for index, line in enumerate([*old, *lines]):
                spans.put(index, at, len(line) - 1)
                at += len(line)
            atomic_write(self.path, b"".join([header, *old, *lines]))
            self._spans = spans

    def known(self, found: Scan) -> None:
        """The record is as scanned: its older messages can be read by their place."""
        with self._lock:
            self._spans = found.spans

    def resume(self, found: Scan) -> None:
        """Go on writing an existing record after its complete lines: a torn tail goes, a
        last line without its newline gets it."""
        with self._lock:
            self._spans = found.spans
            self._close()
            fd = os.open(self.path, os.O_WRONLY)
            try:
                if os.fstat(fd).st_size != found.good:
                    os.ftruncate(fd, found.good)
                    os.fsync(fd)
                self._fd, self._size = fd, found.good
                if found.unterminated:
                    self._write(b"\n", sync=True)
            except BaseException:
                self._fd = None
                os.close(fd)
                raise

    def append(self, cut: int | None, lines: list[tuple[int, bytes]], sync: bool) -> None:
        """Add a keep line (when `cut` is given), then these messages' lines, in one write;
        on a failure (a full disk) the file is cut back to where it was, so no torn line
        stays between two whole ones."""
        with self._lock:
            keep = b"" if cut is None else keep_line(cut)
            at = self._write(b"".join([keep, *(line for _, line in lines)]), sync) + len(keep)
            if cut is not None:
                self._spans.keep(cut)
            for index, line in lines:
                self._spans.put(index, at, len(line) - 1)
                at += len(line)

    def lines(self, first: int, end: int) -> list[bytes]:
        """The lines of messages first..end-1 as the record has them now."""
        with self._lock:
            return self._read(first, end)

    def _read(self, first: int, end: int) -> list[bytes]:
        end = min(end, len(self._spans))
        if first >= end:
            return []
        with open(self.path, "rb") as f:
            fd = f.fileno()
            return [os.pread(fd, self._spans.size[i], self._spans.start[i]) + b"\n"
                    for i in range(first, end)]

    def _write(self, data: bytes, sync: bool) -> int:
        """Write at the end; where it went."""
        if self._fd is None:
            fd = os.open(self.path, os.O_WRONLY)
            self._fd, self._size = fd, os.lseek(fd, 0, os.SEEK_END)
        fd = self._fd
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], self._size + written)
            if sync:
                os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            raise
        self._size += written
        return self._size - written

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
