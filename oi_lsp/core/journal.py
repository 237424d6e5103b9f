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
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.files import atomic_write

KIND = "conversation"
VERSION = 3
SUFFIX = ".jsonl"


class Damaged(ValueError):
    """A record that is not one: no header, or a line in its middle that cannot be read."""


@dataclass(slots=True)
class Replay:
    header: dict[str, Any]
    messages: list[dict[str, Any]]  # as saved: displays name their file
    dead: int  # lines that no longer count (replaced messages, dropped ones, keeps)
    good: int  # bytes of the complete lines: where the next line goes
    torn: int  # bytes of a torn last line, dropped
    unterminated: bool = False  # the last line is whole but for its newline


def _json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def header_line(workspace: str, conversation_id: str, created: float) -> bytes:
    return _json({"oi": KIND, "version": VERSION, "workspace": workspace,
                  "id": conversation_id, "created": created})


def message_line(index: int, data: dict[str, Any]) -> bytes:
    return _json({"i": index, "m": data})


def keep_line(count: int) -> bytes:
    return _json({"keep": count})


def replay(raw: bytes) -> Replay:
    """The messages a record holds. Raises Damaged."""
    good = raw.rfind(b"\n") + 1
    tail = raw[good:]
    lines = raw[:good].split(b"\n")[:-1]
    torn = len(tail)
    unterminated = False
    if tail.strip():
        # A proper prefix of a JSON object is never valid JSON: a tail that parses is a whole
        # line whose newline alone is missing, and it counts.
        try:
            json.loads(tail)
        except ValueError:
            pass
        else:
            lines.append(tail)
            good, torn, unterminated = len(raw), 0, True
    if not lines:
        raise Damaged("empty file" if not torn else "only a torn first line")
    try:
        header = json.loads(lines[0])
    except ValueError as exc:
        raise Damaged(f"line 1: {exc}") from None
    if not isinstance(header, dict) or header.get("oi") != KIND:
        raise Damaged("line 1 is not a conversation's header")
    if not isinstance(header.get("version"), int) or header["version"] > VERSION:
        raise Damaged(f"written by a newer oi-lsp (format {header.get('version')!r})")
    messages: list[dict[str, Any]] = []
    dead = 0
    for number, line in enumerate(lines[1:], 2):
        try:
            entry = json.loads(line)
            if "m" in entry:
                index, data = entry["i"], entry["m"]
                if not isinstance(index, int) or not isinstance(data, dict) \
                        or not 0 <= index <= len(messages):
                    raise ValueError(f"message {index!r} of {len(messages)}")
                if index == len(messages):
                    messages.append(data)
                else:
                    messages[index] = data
                    dead += 1
            else:
                count = entry["keep"]
                if not isinstance(count, int) or count < 0:
                    raise ValueError(f"keep {count!r}")
                dead += 1 + max(0, len(messages) - count)
                del messages[count:]
        except (ValueError, KeyError, TypeError) as exc:
            raise Damaged(f"line {number}: {exc}") from None
    return Replay(header, messages, dead, good, torn, unterminated)


class Journal:
    """The record of the open conversation, written by one thread at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0  # where the next line goes

    def start(self, lines: list[bytes]) -> None:
        """Write the record anew as these lines (a new, migrated or compacted conversation):
        the old file or the new one, whole."""
        self.close()
        atomic_write(self.path, b"".join(lines))

    def resume(self, replayed: Replay) -> None:
        """Go on writing an existing record after its complete lines: a torn tail goes, a
        last line without its newline gets it."""
        self.close()
        fd = os.open(self.path, os.O_WRONLY)
        try:
            if os.fstat(fd).st_size != replayed.good:
                os.ftruncate(fd, replayed.good)
                os.fsync(fd)
            self._fd, self._size = fd, replayed.good
            if replayed.unterminated:
                self.append([b"\n"], sync=True)
        except BaseException:
            self._fd = None
            os.close(fd)
            raise

    def append(self, lines: list[bytes], sync: bool) -> None:
        """Add these lines in one write; on a failure (a full disk) the file is cut back to
        where it was, so no torn line stays between two whole ones."""
        if self._fd is None:
            fd = os.open(self.path, os.O_WRONLY)
            self._fd, self._size = fd, os.lseek(fd, 0, os.SEEK_END)
        fd = self._fd
        data = memoryview(b"".join(lines))
        written = 0
        try:
            while written < len(data):
                written += os.pwrite(fd, data[written:], self._size + written)
            if sync:
                os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                pass
            raise
        self._size += written

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
