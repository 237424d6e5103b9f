"""Text search over a workspace's saved conversations: an SQLite FTS5 index beside them
(`<workspace folder>/search.sqlite`), brought up to date when searched.

What a record adds since the index last read it is read from where the index stopped (a
record only grows); a record rewritten (compacted: a new file) or shorter is read again from
its start. The index is only a shortcut: deleted, it is built again by the next search.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import journal

log = logging.getLogger(__name__)

INDEX = "search.sqlite"
_SEARCHED = {("user", "message"), ("assistant", "message"), ("assistant", "code"),
             ("user", "code")}  # what a person looks for: what was said, and the code
_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS said USING fts5(
    conversation UNINDEXED, position UNINDEXED, content, tokenize = 'unicode61');
CREATE TABLE IF NOT EXISTS records(
    conversation TEXT PRIMARY KEY, inode INTEGER, size INTEGER, count INTEGER);
"""


@dataclass(frozen=True, slots=True)
class Hit:
    conversation: str
    snippet: str  # the words around the first match, the match in [brackets]


def search(folder: Path, query: str, limit: int = 50) -> list[Hit]:
    """The conversations of `folder` (a workspace's) with every word of `query` in what was
    said in them, best match first, at most one hit each."""
    words = query.split()
    if not words or not folder.is_dir():
        return []
    with _index(folder) as db:
        _update(db, folder)
        match = " ".join('"' + w.replace('"', '""') + '"' for w in words)  # words, not syntax
        rows = db.execute(
            "SELECT conversation, snippet(said, 2, '[', ']', '…', 12) FROM said "
            "WHERE said MATCH ? ORDER BY rank LIMIT ?", (match, limit * 20)).fetchall()
    hits: dict[str, Hit] = {}
    for conversation, snippet in rows:
        if conversation not in hits:
            hits[conversation] = Hit(conversation, " ".join(snippet.split()))
    return list(hits.values())[:limit]


@contextlib.contextmanager
def _index(folder: Path) -> Iterator[sqlite3.Connection]:
    path = folder / INDEX
    try:
        db = _open(path)
    except sqlite3.DatabaseError as exc:  # not an index (damaged): it is only a shortcut
        log.warning("rebuilding the search index %s: %s", path, exc)
        path.unlink(missing_ok=True)
        db = _open(path)
    try:
        with db:
            yield db
    finally:
        db.close()


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10)  # another server may be updating it
    db.executescript(_SCHEMA)
    return db


def _update(db: sqlite3.Connection, folder: Path) -> None:
    known = {row[0]: row[1:] for row in db.execute(
        "SELECT conversation, inode, size, count FROM records")}
    present = set()
    for path in folder.glob(f"*{journal.SUFFIX}"):
        conversation = path.stem
        present.add(conversation)
        try:
            stat = path.stat()
            inode, size, count = known.get(conversation, (None, 0, 0))
            if inode == stat.st_ino and size == stat.st_size:
                continue
            if inode != stat.st_ino or stat.st_size < size:
                size, count = 0, 0  # a new file (compacted): read it again
                db.execute("DELETE FROM said WHERE conversation = ?", (conversation,))
            with path.open("rb") as record:
                record.seek(size)
                tail = record.read(stat.st_size - size)
            end = tail.rfind(b"\n") + 1  # a line still being written waits for the next time
            count = _add(db, conversation, map(json.loads, tail[:end].splitlines()), count)
            db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)",
                       (conversation, stat.st_ino, size + end, count))
        except (OSError, ValueError) as exc:
            log.warning("not searching %s: %s", path, exc)
    for path in folder.glob("*.json"):  # an older oi-lsp's, not yet opened (migrated)
        conversation = path.stem
        if conversation in present:
            continue
        present.add(conversation)
        try:
            stat = path.stat()
            if known.get(conversation, (None,))[0] == -stat.st_mtime_ns:
                continue
            db.execute("DELETE FROM said WHERE conversation = ?", (conversation,))
            messages = json.loads(path.read_bytes())["messages"]
            count = _add(db, conversation, ({"i": i, "m": m} for i, m in enumerate(messages)), 0)
            db.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)",
                       (conversation, -stat.st_mtime_ns, stat.st_size, count))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("not searching %s: %s", path, exc)
    for conversation in set(known) - present:  # deleted, or set aside as damaged
        db.execute("DELETE FROM said WHERE conversation = ?", (conversation,))
        db.execute("DELETE FROM records WHERE conversation = ?", (conversation,))


def _add(db: sqlite3.Connection, conversation: str, entries: Iterable[Any], count: int) -> int:
    """Index a record's entries, its lines read (a header is skipped); the messages it then
    holds."""
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if "keep" in entry:
            count = min(count, int(entry["keep"]))
            db.execute("DELETE FROM said WHERE conversation = ? AND position >= ?",
                       (conversation, count))
            continue
        if "m" not in entry:
            continue  # the header
        index, message = int(entry["i"]), entry["m"]
        if index < count:  # changed (an outcome): its words are those it had
            continue
        count = index + 1
        if (message.get("role"), message.get("type")) in _SEARCHED and message.get("content"):
            db.execute("INSERT INTO said VALUES (?, ?, ?)",
                       (conversation, index, str(message["content"])))
    return count
