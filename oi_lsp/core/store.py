"""Saving and loading a workspace's conversations, atomically, under the user data folder.

Layout (under `<data dir>/sessions/`):
    <hash of the workspace URI>/<conversation id>.json   one file per conversation
    <hash of the workspace URI>/current                  the id of the open conversation
    <hash of the workspace URI>/<conversation id>.lock   held by the server that has it open
    <hash of the workspace URI>/<conversation id>.files/ the images and HTML its runs displayed,
                                                         one file each, named by their hash
    <hash of the workspace URI>.json                     the old single-conversation file: moved
                                                         into the folder (migrated) when read
Every write goes to a temp file, is fsynced and renamed over the old file, so a server killed
at any moment leaves the old or the new file whole. Each server writes only the conversations
it holds (a lock per conversation, released when the server exits in any way), so two editors
on one folder never overwrite each other's messages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout
from pydantic import TypeAdapter, ValidationError

from ..common.files import atomic_write, data_dir, digest
from ..protocol import CONVERSATION_ID, Message

log = logging.getLogger(__name__)

_MESSAGES = TypeAdapter(list[Message])
FORMAT_VERSION = 2
_ID = re.compile(CONVERSATION_ID)  # ids name files: no dots, no slashes
TITLE_LENGTH = 80
_STALE_TEMP = 600.0  # seconds: a temp file older than this is no save in progress


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
    """The conversation a workspace had open, and a notice when a damaged file was set aside."""

    id: str
    messages: list[Message]
    created: float
    notice: str | None = None


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
        # hash is computed once, not at every save of the conversation).
        self._names: dict[int, tuple[str, str]] = {}
        # Per workspace, its conversation last saved and each of its messages as JSON text
        # (see _encoded).
        self._encoded_last: dict[str, tuple[str, dict[int, tuple[Message, Any, str]]]] = {}

    def folder(self, workspace: str) -> Path:
        return self.root / digest(workspace)

    def closed(self, workspace: str) -> None:
        """The workspace's conversation was closed (its last save done): what the saves kept
        of it goes too, or a daemon serving folder after folder kept every closed one's."""
        self._encoded_last.pop(workspace, None)

    def spill_dir(self, workspace: str, conversation_id: str) -> Path:
        """Where the whole outputs of a conversation's runs go when the model sees them
        trimmed (run_output.prune keeps a workspace's within a budget)."""
        return self.folder(workspace) / f"{conversation_id}.outputs"

    def path(self, workspace: str, conversation_id: str) -> Path:
        if not valid_id(conversation_id):
            raise UnknownConversation(f"no conversation {conversation_id!r}")
        return self.folder(workspace) / f"{conversation_id}.json"

    # Reading -----------------------------------------------------------------------------

    def load(self, workspace: str) -> Loaded:
        """The conversation the workspace had open (a new empty one when there is none)."""
        self._migrate(workspace)
        self._drop_stale_temp(workspace)
        current = self._current(workspace)
        if current is None:
            return Loaded(new_conversation_id(), [], time.time())
        try:
            messages, created = self._read(workspace, current)
            return Loaded(current, messages, created)
        except UnknownConversation:
            return Loaded(current, [], time.time())
        except DamagedConversation as exc:
            return Loaded(new_conversation_id(), [], time.time(),
                          f"{exc}; a new conversation started.")

    def read(self, workspace: str, conversation_id: str) -> list[Message]:
        """Raises UnknownConversation, or DamagedConversation after moving the file aside."""
        return self._read(workspace, conversation_id)[0]

    def _read(self, workspace: str, conversation_id: str) -> tuple[list[Message], float]:
        path = self.path(workspace, conversation_id)
        try:
            data = _parse(path.read_bytes())
            messages = [_inline(m, self._files(path)) for m in data["messages"]]
            return _MESSAGES.validate_python(messages), float(
                data.get("created") or data.get("updated") or 0)
        except FileNotFoundError:
            raise UnknownConversation(f"no conversation {conversation_id!r}") from None
        except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
            raise DamagedConversation(_set_aside(path, exc)) from None

    def summaries(self, workspace: str) -> list[Summary]:
        """Every readable saved conversation of the workspace, newest first. A damaged file is
        left where it is (it is moved aside when someone opens it) and skipped."""
        self._migrate(workspace)
        summaries = []
        for path in self.folder(workspace).glob("*.json"):
            try:
                data = _parse(path.read_bytes())
                messages = data["messages"]
                title = data.get("title")
                if not isinstance(title, str):
                    title = title_of(_MESSAGES.validate_python(messages))
                updated = float(data.get("updated") or path.stat().st_mtime)
                summaries.append(Summary(path.stem, title,
                                         float(data.get("created") or updated), updated,
                                         len(messages)))
            except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
                log.warning("skipping unreadable conversation %s: %s", path, exc)
        return sorted(summaries, key=lambda s: s.updated, reverse=True)

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
        os.replace(legacy, self.path(workspace, conversation_id))
        self.set_current(workspace, conversation_id)
        log.info("moved %s into %s", legacy, self.folder(workspace))

    def _drop_stale_temp(self, workspace: str) -> None:
        """Delete the temp files of saves a killed server never finished (they are never
        read: the file they were to replace is whole). Another live server's are kept."""
        for tmp in self.folder(workspace).glob(".*.tmp"):
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

    def _files(self, path: Path) -> Path:
        """Where a conversation's displayed images and HTML are kept."""
        return path.with_name(path.stem + ".files")

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

    def save(self, workspace: str, conversation_id: str, messages: list[Message],
             created: float) -> None:
        """Write the conversation; it becomes the workspace's open one only when there is none
        (switching is what changes it: a second editor's saves never point it elsewhere)."""
        path = self.path(workspace, conversation_id)
        head = json.dumps({
            "version": FORMAT_VERSION,
            "workspace": workspace,
            "id": conversation_id,
            "title": title_of(messages),
            "created": created,
            "updated": time.time(),
        }, ensure_ascii=False)
        encoded = self._encoded(workspace, conversation_id, messages, self._files(path))
        body = f'{head[:-1]}, "messages": [{", ".join(encoded)}]}}'
        atomic_write(path, body.encode())
        if self._current(workspace) is None:
            self.set_current(workspace, conversation_id)

    def _encoded(self, workspace: str, conversation_id: str, messages: list[Message],
                 files: Path) -> list[str]:
        """Each message as JSON text. The whole conversation is saved after every change,
        and encoding all of it each time cost a long session more at every run (a thread
        holding the GIL while the next run went on). A message once recorded changes only its
        outcome, edited code, usage and stopped mark, so its text from the last save is reused
        while those are the same (and it is the same object); displays go through _external
        every time."""
        last_id, last = self._encoded_last.get(workspace, ("", {}))
        known = last if last_id == conversation_id else {}
        kept: dict[int, tuple[Message, Any, str]] = {}
        out = []
        for message in messages:
            if is_display(message):
                out.append(json.dumps(self._external(message, files), ensure_ascii=False))
                continue
            state = (message.outcome, message.edited_code, message.usage, message.stopped)
            hit = known.get(id(message))
            if hit is not None and hit[0] is message and hit[1] == state:
                text = hit[2]
            else:
                text = json.dumps(message.model_dump(by_alias=True, exclude_none=True),
                                  ensure_ascii=False)
            kept[id(message)] = (message, state, text)
            out.append(text)
        self._encoded_last[workspace] = (conversation_id, kept)
        return out

    def set_current(self, workspace: str, conversation_id: str) -> None:
        atomic_write(self.folder(workspace) / "current", conversation_id.encode())


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
