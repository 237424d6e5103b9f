"""Saving and loading a workspace's conversations under the user data folder.

Layout (under `<data dir>/sessions/`):
    <hash of the workspace URI>/<conversation id>.jsonl   its append-only record (journal.py)
    <hash of the workspace URI>/<conversation id>.summary its title, times and size, to list it
                                                          without reading the record
    <hash of the workspace URI>/current                   the id of the open conversation
    <hash of the workspace URI>/<conversation id>.lock    held by the server that has it open
    <hash of the workspace URI>/<conversation id>.files/  the images and HTML its runs
                                                          displayed, one file each, named by
                                                          their hash
    <hash of the workspace URI>/<conversation id>.json    the whole-file format of oi-lsp 0.x
                                                          before the record: read, and migrated
                                                          when opened (kept as .json.migrated)
    <hash of the workspace URI>.json                      the older single-conversation file:
                                                          moved into the folder when read
Each server writes only the conversations it holds (a lock per conversation, released when
the server exits in any way), so two editors on one folder never overwrite each other's
messages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout
from pydantic import TypeAdapter, ValidationError

from ..common.files import atomic_write, data_dir, digest, temp_path
from ..protocol import CONVERSATION_ID, Message
from . import journal, search
from .journal import Journal

log = logging.getLogger(__name__)

_MESSAGES = TypeAdapter(list[Message])
_ID = re.compile(CONVERSATION_ID)  # ids name files: no dots, no slashes
TITLE_LENGTH = 80
_STALE_TEMP = 600.0  # seconds: a temp file older than this is no save in progress
_READ_ERRORS = (OSError, ValueError, KeyError, TypeError, ValidationError)


class UnknownConversation(LookupError):
    """No saved conversation of this workspace has that id."""


class ConversationInUse(RuntimeError):
    """Another server (another editor on this folder) has that conversation open."""


class DamagedConversation(ValueError):
    """A conversation file that cannot be read; it has been moved aside (the message says where)."""


@dataclass(frozen=True, slots=True)
class Summary:
    id: str
    title: str
    created: float
    updated: float
    message_count: int


@dataclass(slots=True)
class Loaded:
    """A conversation opened to be written: its last messages (from `base` on; the older
    ones stay in the record), the lines of its record that no longer count (for compaction),
    and a notice when a torn last line was dropped."""

    id: str
    messages: list[Message]
    created: float
    dead: int = 0
    notice: str | None = None
    on_disk: bool = True  # its record exists (else the first write is the whole of it)
    base: int = 0  # the index of messages[0]
    title: str = ""  # when base > 0 (the first user message is in the record only)
    displayed: int = 0  # when base > 0: what the images and HTML it keeps add up to


@dataclass(slots=True)
class Batch:
    """What changed in the open conversation since the last write."""

    created: float
    title: str
    count: int  # messages once it is written
    cut: int | None = None  # first, keep only this many messages (%undo)
    changes: list[tuple[int, Message]] = field(default_factory=list)  # new or changed, by index
    whole: list[Message] | None = None  # write the record anew as these (new or compacted)
    kept: int = 0  # ... after the first `kept` messages of the record as it is
    sync: bool = False  # fsync: a turn's end, an approval


class Claim:
    """This server's hold on one conversation: while it is held no other server opens it, so
    each conversation has one writer. The operating system ends it with the process."""

    def __init__(self, lock: FileLock | None) -> None:
        self._lock = lock  # None: the data folder cannot hold a lock (its saves fail too)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def new_conversation_id() -> str:
    """Sorts by creation time; random enough that two servers never collide."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def valid_id(conversation_id: str) -> bool:
    return bool(_ID.match(conversation_id))


def title_of(messages: list[Message]) -> str:
    """The first line of the first user message, shortened."""
    first = next((m.content for m in messages if m.role == "user" and m.content.strip()), "")
    line = first.strip().splitlines()[0] if first.strip() else ""
    return line if len(line) <= TITLE_LENGTH else line[:TITLE_LENGTH - 1].rstrip() + "…"


class Store:
    """The conversations of every workspace, one folder per workspace (named by a hash)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or data_dir()) / "sessions"
        # The file each displayed image or HTML was saved as, by the content string's id (its
        # hash is computed once, not at every write that names it).
        self._names: dict[int, tuple[str, str]] = {}
        self._journals: dict[Path, Journal] = {}  # the open conversations' records
        self._journals_lock = threading.Lock()  # workspaces write from threads of their own

    def folder(self, workspace: str) -> Path:
        return self.root / digest(workspace)

    def closed(self, workspace: str) -> None:
        """The workspace's conversation was closed (its last write done): its record's file
        is closed too, or a daemon serving folder after folder kept every one open."""
        folder = self.folder(workspace)
        with self._journals_lock:
            for path in [p for p in self._journals if p.parent == folder]:
                self._journals.pop(path).close()

    def spill_dir(self, workspace: str, conversation_id: str) -> Path:
        """Where the whole outputs of a conversation's runs go when the model sees them
        trimmed (run_output.prune keeps a workspace's within a budget)."""
        return self.folder(workspace) / f"{conversation_id}.outputs"

    def path(self, workspace: str, conversation_id: str) -> Path:
        if not valid_id(conversation_id):
            raise UnknownConversation(f"no conversation {conversation_id!r}")
        return self.folder(workspace) / f"{conversation_id}{journal.SUFFIX}"

    # Reading -----------------------------------------------------------------------------

    def current(self, workspace: str) -> str | None:
        """The id of the conversation the workspace had open, if it has one."""
        self._migrate(workspace)
        _drop_stale_temp(self.folder(workspace))
        return self._current(workspace)

    def open(self, workspace: str, conversation_id: str, tail: int | None = None) -> Loaded:
        """Read a conversation to go on writing it (hold its claim first), its last `tail`
        messages only when given (the others are read by `older`): an older file is
        migrated to a record, a torn last line is cut off (and said, once). Raises
        UnknownConversation, or DamagedConversation after moving the file aside."""
        path = self.path(workspace, conversation_id)
        legacy = path.with_suffix(".json")
        if not path.exists() and legacy.exists():
            try:
                self._migrate_file(workspace, conversation_id, legacy)
            except OSError:  # read from the old file; the first write says why it fails
                data, created = _read_legacy(legacy, conversation_id)
                return Loaded(conversation_id, _MESSAGES.validate_python(
                    [_inline(m, _files(path)) for m in data]), created, on_disk=False)
        raw, found = self._scan(path, conversation_id)
        count = len(found.spans)
        base = 0 if tail is None else max(0, count - tail)
        messages = _messages(path, [_line(raw, found, i) for i in range(base, count)])
        notice = None
        if found.torn:
            notice = (f"The last change to this conversation ({found.torn} bytes) was cut "
                      "off when oi-lsp stopped and could not be read; everything before it "
                      "is kept.")
            log.warning("%s: dropped a torn last line of %d bytes", path, found.torn)
        record = self._journal(path)
        record.known(found)
        try:
            record.resume(found)
        except OSError as exc:  # a read-only data folder: the writes say so
            log.warning("cannot reopen %s for writing: %s", path, exc)
        loaded = Loaded(conversation_id, messages, _created(found.header), found.dead, notice,
                        base=base)
        if base:
            loaded.title = _first_title(path, raw, found, base)
            loaded.displayed = _folder_size(_files(path))
        return loaded

    def older(self, workspace: str, conversation_id: str, first: int,
              end: int) -> list[Message]:
        """Messages first..end-1 of the open conversation, read from its record. Raises
        DamagedConversation for a line that cannot be read (the record is left as it is:
        it is still being written)."""
        path = self.path(workspace, conversation_id)
        lines = self._journal(path).lines(first, end)
        if len(lines) != max(0, end - first):  # never fewer than asked, silently
            raise DamagedConversation(f"Messages {first + 1} to {end} of {path} are not in "
                                      "its record")
        try:
            return _messages(path, lines, set_aside=False)
        except DamagedConversation as exc:
            raise DamagedConversation(f"Messages {first + 1} to {end} of {path} cannot be "
                                      f"read: {exc}") from None

    def read(self, workspace: str, conversation_id: str) -> list[Message]:
        """A saved conversation's messages, written by nobody here (another conversation of
        the workspace, perhaps open in another editor). Raises UnknownConversation, or
        DamagedConversation after moving the file aside."""
        path = self.path(workspace, conversation_id)
        legacy = path.with_suffix(".json")
        if not path.exists() and legacy.exists():
            data, _ = _read_legacy(legacy, conversation_id)
            return _MESSAGES.validate_python([_inline(m, _files(path)) for m in data])
        raw, found = self._scan(path, conversation_id)
        return _messages(path, [_line(raw, found, i) for i in range(len(found.spans))])

    def _scan(self, path: Path, conversation_id: str) -> tuple[bytes, journal.Scan]:
        try:
            raw = path.read_bytes()
            return raw, journal.scan(raw)
        except FileNotFoundError:
            raise UnknownConversation(f"no conversation {conversation_id!r}") from None
        except (OSError, journal.Damaged) as exc:
            raise DamagedConversation(_set_aside(path, exc)) from None

    def _migrate_file(self, workspace: str, conversation_id: str, legacy: Path) -> None:
        """Write a whole-file conversation as a record, then keep the old file as
        `.json.migrated` (read by nothing; an older oi-lsp's copy). A folder that cannot be
        written leaves it: it is read from the old file until it can."""
        messages, created = _read_legacy(legacy, conversation_id)
        lines = [journal.message_line(i, m) for i, m in enumerate(messages)]
        path = self.path(workspace, conversation_id)
        try:
            Journal(path).start(journal.header_line(workspace, conversation_id, created), lines)
            os.replace(legacy, legacy.with_name(legacy.name + ".migrated"))
        except OSError as exc:
            log.warning("cannot migrate %s: %s", legacy, exc)
            path.unlink(missing_ok=True)
            raise
        log.info("migrated %s to %s (%d messages)", legacy.name, path.name, len(messages))

    def summaries(self, workspace: str) -> list[Summary]:
        """Every readable saved conversation of the workspace, newest first. A damaged file is
        left where it is (it is moved aside when someone opens it) and skipped."""
        self._migrate(workspace)
        folder = self.folder(workspace)
        found = {p.stem: p for p in folder.glob("*.json")}
        found.update({p.stem: p for p in folder.glob(f"*{journal.SUFFIX}")})
        summaries = []
        for conversation_id, path in found.items():
            try:
                summaries.append(self._summary(conversation_id, path))
            except _READ_ERRORS as exc:
                log.warning("skipping unreadable conversation %s: %s", path, exc)
        return sorted(summaries, key=lambda s: s.updated, reverse=True)

    def search(self, workspace: str, query: str) -> list[search.Hit]:
        """The workspace's conversations where every word of `query` was said, best first."""
        return search.search(self.folder(workspace), query)

    def title(self, workspace: str, conversation_id: str) -> str:
        """A saved conversation's title ("" when it cannot be read)."""
        path = self.path(workspace, conversation_id)
        for candidate in (path, path.with_suffix(".json")):
            with contextlib.suppress(*_READ_ERRORS):
                return self._summary(conversation_id, candidate).title
        return ""

    def _summary(self, conversation_id: str, path: Path) -> Summary:
        """From the summary written beside the record when it is of the record as it is;
        else from the file itself (which writes the summary)."""
        if path.suffix == ".json":
            data = _parse(path.read_bytes())
            messages = data["messages"]
            title = data.get("title")
            if not isinstance(title, str):
                title = title_of(_MESSAGES.validate_python(messages))
            updated = float(data.get("updated") or path.stat().st_mtime)
            return Summary(conversation_id, title, float(data.get("created") or updated),
                           updated, len(messages))
        stat = path.stat()
        side = path.with_suffix(".summary")
        with contextlib.suppress(OSError, ValueError):
            known = json.loads(side.read_bytes())
            if known.get("size") == stat.st_size:
                return Summary(conversation_id, str(known["title"]), float(known["created"]),
                               float(known["updated"]), int(known["count"]))
        raw = path.read_bytes()
        found = journal.scan(raw)
        count = len(found.spans)
        summary = Summary(conversation_id, _first_title(path, raw, found, count),
                          _created(found.header), stat.st_mtime, count)
        with contextlib.suppress(OSError):
            _write_summary(side, summary, stat.st_size)
        return summary

    def _current(self, workspace: str) -> str | None:
        try:
            text = (self.folder(workspace) / "current").read_text().strip()
        except OSError:
            return None
        return text if valid_id(text) else None

    def _migrate(self, workspace: str) -> None:
        """Move the single-conversation file of older versions into the workspace's folder,
        as its open conversation (a rename: the file itself is kept as it was)."""
        legacy = self.root / f"{digest(workspace)}.json"
        if not legacy.exists():
            return
        conversation_id = new_conversation_id()
        self.folder(workspace).mkdir(parents=True, exist_ok=True)
        os.replace(legacy, self.folder(workspace) / f"{conversation_id}.json")
        self.set_current(workspace, conversation_id)
        log.info("moved %s into %s", legacy, self.folder(workspace))

    def claim(self, workspace: str, conversation_id: str) -> Claim:
        """Hold the conversation for this server. Raises ConversationInUse when another live
        server holds it."""
        lock = FileLock(self.folder(workspace) / f"{conversation_id}.lock", timeout=0,
                        thread_local=False)  # released by whichever thread closes it
        try:
            self.folder(workspace).mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except Timeout:
            raise ConversationInUse(
                "this conversation is open in another editor (another oi-lsp on this "
                "folder); close it there first") from None
        except OSError as exc:  # a read-only data folder: saving says so, once
            log.warning("cannot lock the conversation %s: %s", conversation_id, exc)
            return Claim(None)
        return Claim(lock)

    def _external(self, message: Message, files: Path) -> dict[str, Any]:
        """A message as saved: an image or HTML a run displayed goes to a file of its own
        (written once: named by its content), the conversation keeps its name."""
        data = message.model_dump(by_alias=True, exclude_none=True)
        if not is_display(message):
            return data
        content = message.content
        known = self._names.get(id(content))
        if known is not None and known[0] is content:
            name = known[1]
        else:
            digest = hashlib.sha256(content.encode()).hexdigest()[:32]
            name = f"{digest}.{re.sub(r'[^A-Za-z0-9.]', '', message.format or 'data')}"
            if len(self._names) > 4096:
                self._names.clear()
            self._names[id(content)] = (content, name)
        if not (files / name).exists():
            atomic_write(files / name, content.encode())
        data["content"] = ""
        data["file"] = name
        return data

    def _journal(self, path: Path) -> Journal:
        """The record's writer; a workspace has one conversation open, so opening another
        of its folder closes the one before."""
        with self._journals_lock:
            known = self._journals.get(path)
            if known is None:
                for other in [p for p in self._journals if p.parent == path.parent]:
                    self._journals.pop(other).close()
                known = self._journals[path] = Journal(path)
            return known

    def write(self, workspace: str, conversation_id: str, batch: Batch) -> None:
        """Add a batch of changes to the conversation's record (or write it anew); the
        conversation becomes the workspace's open one only when there is none (switching is
        what changes it: a second editor's writes never point it elsewhere)."""
        path = self.path(workspace, conversation_id)
        files = _files(path)
        record = self._journal(path)
        if batch.whole is not None:
            record.start(journal.header_line(workspace, conversation_id, batch.created),
                         [journal.message_line(i, self._external(m, files))
                          for i, m in enumerate(batch.whole, batch.kept)], batch.kept)
            if self._current(workspace) is None:
                self.set_current(workspace, conversation_id)
        else:
            record.append(batch.cut, [(i, journal.message_line(i, self._external(m, files)))
                                      for i, m in batch.changes], batch.sync)
        with contextlib.suppress(OSError):  # only a shortcut for listing it
            _write_summary(path.with_suffix(".summary"),
                           Summary(conversation_id, batch.title, batch.created, time.time(),
                                   batch.count), path.stat().st_size)

    def set_current(self, workspace: str, conversation_id: str) -> None:
        atomic_write(self.folder(workspace) / "current", conversation_id.encode())


def _first_title(path: Path, raw: bytes, found: journal.Scan, base: int) -> str:
    """The title of a conversation whose first messages were not read: its first user
    message's."""
    for index in range(base):
        data = journal.message_of(_line(raw, found, index))
        if data.get("role") == "user" and str(data.get("content") or "").strip():
            return title_of(_messages(path, [_line(raw, found, index)],
                                           set_aside=False))
    return ""



def _messages(path: Path, lines: list[bytes], set_aside: bool = True,
              ) -> list[Message]:
    """The messages these lines of a record hold, their displays read back."""
    files = _files(path)
    try:
        return _MESSAGES.validate_python(
            [_inline(journal.message_of(line), files) for line in lines])
    except (ValueError, ValidationError) as exc:
        raise DamagedConversation(_set_aside(path, exc) if set_aside else
                                  f"{type(exc).__name__}: {exc}"[:200]) from None



def _read_legacy(legacy: Path, conversation_id: str,
                 ) -> tuple[list[dict[str, Any]], float]:
    """The messages (as saved) and creation time of a whole-file conversation."""
    try:
        data = _parse(legacy.read_bytes())
        messages = data["messages"]
        _MESSAGES.validate_python(messages)
        return messages, float(data.get("created") or data.get("updated") or 0)
    except FileNotFoundError:
        raise UnknownConversation(f"no conversation {conversation_id!r}") from None
    except _READ_ERRORS as exc:
        raise DamagedConversation(_set_aside(legacy, exc)) from None



def _drop_stale_temp(folder: Path) -> None:
    """Delete the temp files of saves a killed server never finished (they are never
    read: the file they were to replace is whole). Another live server's are kept."""
    for tmp in folder.glob(".*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        try:
            if pid.isdigit() and psutil.pid_exists(int(pid)) \
                    and time.time() - tmp.stat().st_mtime < _STALE_TEMP:
                continue
            tmp.unlink()
            log.info("removed %s, left by an interrupted save", tmp.name)
        except OSError:
            continue

# Writing -----------------------------------------------------------------------------



def _files(path: Path) -> Path:
    """Where a conversation's displayed images and HTML are kept."""
    return path.with_name(path.stem + ".files")


def _created(header: dict[str, Any]) -> float:
    created = header.get("created")
    return float(created) if isinstance(created, int | float) else 0.0


def _line(raw: bytes, found: journal.Scan, index: int) -> bytes:
    start = found.spans.start[index]
    return raw[start:start + found.spans.size[index]]


def _folder_size(folder: Path) -> int:
    """What the files in a folder hold (0 when there is none)."""
    try:
        return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file())
    except OSError:
        return 0


def _write_summary(path: Path, summary: Summary, size: int) -> None:
    """Whole or not at all, without fsync: it is read only when `size` is the record's."""
    tmp = temp_path(path)
    tmp.write_text(json.dumps({"title": summary.title, "created": summary.created,
                               "updated": summary.updated, "count": summary.message_count,
                               "size": size}, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def is_display(message: Message) -> bool:
    """An image or HTML a run displayed (kept in a file of its own)."""
    return message.role == "computer" and (
        message.type == "image" or (message.type == "code" and message.format == "html"))


def _inline(data: Any, files: Path) -> Any:
    """A saved message with its file's content back in it; a file that is gone becomes a
    note saying so."""
    if not isinstance(data, dict) or not isinstance(data.get("file"), str):
        return data
    name = data.pop("file")
    try:
        data["content"] = (files / Path(name).name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("a displayed item of the conversation is missing: %s", exc)
        return {**data, "type": "console", "format": "output",
                "content": f"[an item shown here is no longer kept: {files / name} cannot be "
                           "read]"}
    return data


def _parse(raw: bytes) -> dict[str, Any]:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TypeError("not a JSON object")
    return data


def _set_aside(path: Path, exc: Exception) -> str:
    """Move a damaged file to `<name>.corrupt-<time>` (never deleted); say what happened."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    why = f"{type(exc).__name__}: {exc}"[:200]
    try:
        os.replace(path, aside)
    except OSError as move_error:
        log.error("conversation file %s is damaged (%s) and could not be moved: %s",
                  path, why, move_error)
        return f"The saved conversation {path} could not be read ({why}) and was left in place"
    log.error("conversation file %s is damaged (%s); moved to %s", path, why, aside)
    return f"The saved conversation could not be read ({why}); it was moved to {aside}"
