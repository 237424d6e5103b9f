"""The open conversation of a workspace: its messages, saving them as they come, and switching
to another saved conversation."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio.to_thread

from ..executors.base import Chunk
from ..protocol import (
    CodeOutcome,
    ConversationInfo,
    ExportFormat,
    Message,
    SessionExportResult,
    Usage,
)
from . import export
from .aio import in_thread, to_disk
from .store import (
    Claim,
    ConversationInUse,
    Store,
    Summary,
    is_display,
    new_conversation_id,
    title_of,
)

log = logging.getLogger(__name__)

# What a conversation keeps of the images and HTML its runs displayed (characters of their
# base64 or text, kept in files beside it): past these a note says what was left out.
DISPLAY_ITEM_LIMIT = 4 * 1024 * 1024
DISPLAY_TOTAL_LIMIT = 32 * 1024 * 1024
SAVE_GAP = 0.1  # seconds between saves while changes keep coming
# The first save after a quiet moment starts this long after the change: the answer to the
# request that made it (an oi/execute's result) leaves first, instead of racing a worker
# thread, its GIL hand-offs and two fsyncs (about 1 ms of a warm round trip that follows an
# idle moment, bench row 1a). flush() cuts the wait: a turn's result still waits for its save.
SAVE_DELAY = 0.005


class Conversation:
    def __init__(self, workspace: str, store: Store,
                 notice: Callable[[str], None]) -> None:
        self.workspace = workspace
        self.store = store
        self._notice = notice
        self.save_error: str | None = None  # why the last save failed; None once one works
        loaded = store.load(workspace)
        self.id = loaded.id
        self.messages = loaded.messages
        self.created = loaded.created
        if loaded.notice:
            notice(loaded.notice)
        try:
            self._claim = store.claim(workspace, self.id)
        except ConversationInUse:
            # Another editor's server writes that one: this editor goes on in a new one, so
            # neither overwrites the other's messages.
            notice(f"The conversation “{title_of(self.messages) or self.id}” of this folder "
                   "is open in another editor. This editor starts a new conversation; both "
                   "are kept (the conversation list shows them).")
            self.id, self.messages, self.created = new_conversation_id(), [], time.time()
            self._claim = store.claim(workspace, self.id)
        self._saving: asyncio.Task[None] | None = None
        self._dirty = False
        self._hurry = asyncio.Event()  # set by flush(): save what is left without a gap
        self._displayed = _display_size(self.messages)
        if settle_loaded(self.messages):
            self._dirty = True  # saved with the next change (it needs a running loop)

    # Messages ----------------------------------------------------------------------------

    def record(self, message: Message) -> None:
        self.messages.append(message)
        self._save_soon()

    def changed(self) -> None:
        """A recorded message was updated (a proposal's outcome): save again."""
        self._save_soon()

    def record_displays(self, chunks: list[Chunk], turn_id: str,
                        tool_call_id: str | None = None) -> None:
        """Keep the images and HTML a run displayed, as the stream carried them, within the
        size limits; past them, a note says what was left out."""
        for chunk in chunks:
            if chunk.type == "console":
                continue
            size = len(chunk.content)
            if size > DISPLAY_ITEM_LIMIT or self._displayed + size > DISPLAY_TOTAL_LIMIT:
                what = "an image" if chunk.type == "image" else f"{chunk.format} output"
                limit = (f"the {_mb(DISPLAY_ITEM_LIMIT)} kept per item"
                         if size > DISPLAY_ITEM_LIMIT else
                         f"the {_mb(DISPLAY_TOTAL_LIMIT)} kept per conversation")
                self.record(Message(role="computer", type="console", format="output",
                                    content=f"[{what} ({_mb(size)}) was shown here; not kept: "
                                            f"over {limit}]", turn_id=turn_id,
                                    tool_call_id=tool_call_id))
                continue
            self._displayed += size
            self.record(Message(role="computer", type=chunk.type, format=chunk.format,
                                content=chunk.content, turn_id=turn_id,
                                tool_call_id=tool_call_id))

    def note_usage(self, turn_id: str, usage: Usage) -> None:
        """Keep a turn's usage on its last entry (clients draw it after the turn)."""
        last = next((m for m in reversed(self.messages) if m.turn_id == turn_id), None)
        if last is not None:
            last.usage = usage
            self._save_soon()

    def note_stopped(self, turn_id: str) -> None:
        """Mark the last entry of a turn the user stopped (clients say so after it, as they
        did live), unless a proposal or run of the turn is stopped (or still waits, to be
        settled so): its outcome says it already."""
        mine = [m for m in self.messages if m.turn_id == turn_id]
        if mine and not any(_is_code(m) and m.outcome in (None, "stopped", "expired")
                            for m in mine):
            mine[-1].stopped = True
            self._save_soon()

    def settle(self, turn_id: str, fate: CodeOutcome) -> None:
        """Give the turn's proposals that have no outcome yet this one (stopped, expired)."""
        pending = [m for m in self.messages if m.turn_id == turn_id and _is_code(m)
                   and m.outcome is None]
        for message in pending:
            message.outcome = fate
        if pending:
            self._save_soon()

    def keep(self, count: int) -> None:
        """Drop every message after the first `count` (%undo)."""
        del self.messages[count:]
        self._save_soon()

    def _save_soon(self) -> None:
        """Save in a thread, never on the event loop; one writer, always the newest state."""
        self._dirty = True
        if self._saving is None or self._saving.done():
            self._hurry = asyncio.Event()
            self._saving = asyncio.create_task(self._save_loop())

    async def _save_loop(self) -> None:
        with anyio.move_on_after(SAVE_DELAY):
            await self._hurry.wait()
        while self._dirty:
            self._dirty = False
            snapshot = list(self.messages)
            try:  # a thread anyio waits for even when cancelled: a save is never cut
                await anyio.to_thread.run_sync(self.store.save, self.workspace, self.id,
                                               snapshot, self.created)
            except OSError as exc:
                self._failed(exc)
            else:
                self.save_error = None
            if self._dirty and not self._hurry.is_set():
                # Changes came during the save (runs back to back): one save for all that
                # come within SAVE_GAP, instead of a whole-file write and two fsyncs each. The
                # first change after a quiet moment is saved at once; flush() cuts the wait.
                with anyio.move_on_after(SAVE_GAP):
                    await self._hurry.wait()

    def _failed(self, exc: OSError) -> None:
        """Say the first time saving fails (a read-only or full data folder), not at every
        message; a save that works again ends it."""
        log.warning("could not save the conversation of %s: %s", self.workspace, exc)
        if self.save_error is None:
            self.save_error = (
                f"This conversation cannot be saved in {self.store.folder(self.workspace)} "
                f"({exc.strerror or exc}): it is lost when the editor closes. Make that "
                "folder writable, or set OI_LSP_DATA_DIR to one that is.")
            self._notice(self.save_error)

    async def flush(self) -> None:
        """Wait until what was recorded is on disk (or saving failed: see save_error)."""
        if self._saving is not None:
            self._hurry.set()
            # Shielded: a stop or a timeout waits for the save; a cancelled caller (the
            # loop ending) leaves it going on, never cancels it with itself.
            with anyio.CancelScope(shield=True):
                await asyncio.shield(self._saving)

    async def close(self) -> None:
        """Save, and let another server open this conversation."""
        await self.flush()
        self.store.closed(self.workspace)
        self._claim.release()

    def file(self) -> Path:
        return self.store.path(self.workspace, self.id)

    def spill_dir(self) -> Path:
        return self.store.spill_dir(self.workspace, self.id)

    # Saved conversations -----------------------------------------------------------------

    async def summaries(self) -> list[ConversationInfo]:
        """The saved conversations, the open one (as it is now) first, then newest first."""
        saved = await in_thread(self.store.summaries, self.workspace)
        mine = next((s for s in saved if s.id == self.id), None)
        current = Summary(self.id, title_of(self.messages), self.created,
                          mine.updated if mine else self.created, len(self.messages))
        return [ConversationInfo(id=s.id, title=s.title, created=_iso(s.created),
                                 updated=_iso(s.updated), message_count=s.message_count,
                                 current=s is current)
                for s in [current, *(s for s in saved if s.id != self.id)]]

    async def read(self, conversation_id: str | None) -> tuple[str, list[Message]]:
        """The id and messages of the open conversation, or of a saved one."""
        if conversation_id is None or conversation_id == self.id:
            return self.id, list(self.messages)
        return conversation_id, await in_thread(self.store.read, self.workspace,
                                                        conversation_id)

    async def export(self, conversation_id: str | None,
                     fmt: ExportFormat) -> SessionExportResult:
        conversation_id, messages = await self.read(conversation_id)
        title = title_of(messages)
        content = await in_thread(export.render, messages, fmt, title)
        return SessionExportResult(id=conversation_id, format=fmt, title=title, content=content)

    async def open(self, conversation_id: str, still_free: Callable[[], None]) -> None:
        """Switch to a saved conversation. Raises UnknownConversation or DamagedConversation
        (the file then has been moved aside); `still_free` raises when a turn began while the
        file was read."""
        if conversation_id == self.id:
            return
        messages = await in_thread(self.store.read, self.workspace, conversation_id)
        still_free()
        claim = self.store.claim(self.workspace, conversation_id)  # raises ConversationInUse
        await self.flush()
        await self._switch(conversation_id, messages, claim)

    async def begin(self, messages: list[Message]) -> None:
        """Open a new conversation holding `messages` (the open one stays saved; an empty one
        is reused)."""
        await self.flush()
        if self.messages:
            conversation_id = new_conversation_id()
            await self._switch(conversation_id, messages,
                               self.store.claim(self.workspace, conversation_id))
        else:
            await self._switch(self.id, messages, self._claim)
        if messages:
            self._save_soon()

    async def _switch(self, conversation_id: str, messages: list[Message],
                      claim: Claim) -> None:
        if claim is not self._claim:
            self._claim.release()
            self._claim = claim
        settle_loaded(messages)
        self.id = conversation_id
        self.messages = messages
        self.created = time.time()
        self._displayed = _display_size(messages)
        try:  # what the next server opens; failing that loses nothing of the conversation
            await to_disk(self.store.set_current, self.workspace, conversation_id)
        except OSError as exc:
            self._failed(exc)


def _display_size(messages: list[Message]) -> int:
    """What the images and HTML a conversation keeps add up to (against its limit)."""
    return sum(len(m.content) for m in messages if is_display(m))


def _is_code(message: Message) -> bool:
    """Code the model proposed, or the user ran."""
    return message.type == "code" and message.role in ("assistant", "user")


def settle_loaded(messages: list[Message]) -> bool:
    """Outcomes for code messages that have none: saved by an older oi-lsp (read from what
    followed them), or pending when the server stopped (`expired`: the turn ended with it).
    Whether any changed."""
    changed = False
    for i, message in enumerate(messages):
        if not _is_code(message) or message.outcome is not None:
            continue
        rest = messages[i + 1:]
        following = next((j for j, m in enumerate(rest) if m.role != "computer"), len(rest))
        after = rest[:following]
        ran = next((m for m in after if m.type == "confirmation"), None)
        if message.format == "text" and message.tool_call_id:
            message.outcome = "error"  # a tool call that could not be read
        elif ran is not None:
            message.outcome = "ran" if ran.content == message.content else "edited"
            if message.outcome == "edited":
                message.edited_code = ran.content
        elif after or following < len(rest):
            message.outcome = "skipped"  # the conversation went on without running it
        else:
            message.outcome = "expired"
        changed = True
    return changed


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
