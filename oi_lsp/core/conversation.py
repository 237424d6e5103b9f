"""The open conversation of a workspace: its messages, saving them as they come, and switching
to another saved conversation."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
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
from .changes import Changes
from .search import Hit
from .store import (
    Claim,
    ConversationInUse,
    DamagedConversation,
    Loaded,
    Store,
    Summary,
    UnknownConversation,
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
_TURNS_KEPT = 8  # where the last turns began, to find their messages without a walk of all
# Messages held in memory: the last ones (up to twice as many before the oldest go). Older ones
# stay in the record and are read from it when a page, an export or the model's context asks.
TAIL = 1000


class Conversation:
    def __init__(self, workspace: str, store: Store,
                 notice: Callable[[str], None]) -> None:
        self.workspace = workspace
        self.store = store
        self._notice = notice
        self.save_error: str | None = None  # why the last save failed; None once one works
        self.messages: list[Message] = []  # the last ones: from `base` on
        self.base = 0  # the index of messages[0] in the conversation
        self._title = ""  # while base > 0: the first user message may be in the record only
        self._displayed = 0  # what the images and HTML it keeps add up to (against the limit)
        self.created = time.time()
        self._changes = Changes()  # since the record was last written
        self._turns: dict[str, int] = {}  # where each of the last turns began
        self._saving: asyncio.Task[None] | None = None
        self._dirty = False
        self._hurry = asyncio.Event()  # set by flush(): save what is left without a gap
        current = store.current(workspace)
        self.id = current or new_conversation_id()
        try:  # held before it is read: what is read is what this server goes on writing
            self._claim = store.claim(workspace, self.id)
        except ConversationInUse:
            # Another editor's server writes that one: this editor goes on in a new one, so
            # neither overwrites the other's messages.
            notice(_in_use(store.title(workspace, self.id) or self.id))
            current, self.id = None, new_conversation_id()
            self._claim = store.claim(workspace, self.id)
        if current is not None:
            self._load(notice)
        if self._changes.touched:
            self._dirty = True  # saved with the next change (it needs a running loop)

    def _load(self, notice: Callable[[str], None]) -> None:
        try:
            loaded = self.store.open(self.workspace, self.id, TAIL)
        except UnknownConversation:
            return
        except DamagedConversation as exc:
            notice(f"{exc}; a new conversation started.")
            self._claim.release()
            self.id = new_conversation_id()
            self._claim = self.store.claim(self.workspace, self.id)
            return
        if loaded.notice:
            notice(loaded.notice)
        self._take(loaded)

    def _take(self, loaded: Loaded) -> None:
        """Go on with these messages (the last of a conversation, or all of it)."""
        self.messages, self.base, self.created = loaded.messages, loaded.base, loaded.created
        self._title = loaded.title
        self._changes.reset(loaded.base + len(loaded.messages), loaded.dead, loaded.on_disk)
        self._changes.touched = {loaded.base + i for i in settle_loaded(self.messages)}
        self._turns = {}
        self._displayed = loaded.displayed if loaded.base else _display_size(self.messages)

    @property
    def count(self) -> int:
        """The messages of the conversation, held or in the record only."""
        return self.base + len(self.messages)

    @property
    def title(self) -> str:
        return self._title if self.base else title_of(self.messages)

    # Messages ----------------------------------------------------------------------------

    def record(self, message: Message) -> None:
        if message.turn_id is not None and message.turn_id not in self._turns:
            if len(self._turns) >= _TURNS_KEPT:
                del self._turns[next(iter(self._turns))]
            self._turns[message.turn_id] = self.count
        self.messages.append(message)
        self._save_soon()

    def changed(self, message: Message, sync: bool = True) -> None:
        """A recorded message was updated (a proposal's risk or outcome): save it again, at
        once to disk unless not `sync` (an approval is not lost with a power cut)."""
        index = next((i for i in range(len(self.messages) - 1, -1, -1)
                      if self.messages[i] is message), None)
        if index is not None:
            self._changes.touch(self.base + index)
            self._changes.sync |= sync
            self._save_soon()

    def _of_turn(self, turn_id: str) -> list[Message]:
        """A turn's messages, oldest first: from where the turn began when that is known
        (the last turns), else from the oldest held."""
        start = max(self._turns.get(turn_id, self.base), self.base) - self.base
        return [m for m in self.messages[start:] if m.turn_id == turn_id]

    def record_displays(self, chunks: list[Chunk], turn_id: str,
                        tool_call_id: str | None = None) -> None:
        """Keep the images and HTML a run displayed, as the stream carried them, within the
        size limits; past them, a note says what was left out."""
        kept, self._displayed = displays(chunks, self._displayed, turn_id, tool_call_id)
        for message in kept:
            self.record(message)

    def note_usage(self, turn_id: str, usage: Usage) -> None:
        """Keep a turn's usage on its last entry (clients draw it after the turn)."""
        mine = self._of_turn(turn_id)
        if mine:
            mine[-1].usage = usage
            self.changed(mine[-1], sync=False)

    def note_stopped(self, turn_id: str) -> None:
        """Mark the last entry of a turn the user stopped (clients say so after it, as they
        did live), unless a proposal or run of the turn is stopped (or still waits, to be
        settled so): its outcome says it already."""
        mine = self._of_turn(turn_id)
        if mine and not any(_is_code(m) and m.outcome in (None, "stopped", "expired")
                            for m in mine):
            mine[-1].stopped = True
            self.changed(mine[-1], sync=False)

    def settle(self, turn_id: str, fate: CodeOutcome) -> None:
        """Give the turn's proposals that have no outcome yet this one (stopped, expired)."""
        pending = [m for m in self._of_turn(turn_id) if _is_code(m) and m.outcome is None]
        for message in pending:
            message.outcome = fate
            self.changed(message)

    def keep(self, count: int) -> None:
        """Drop every message after the first `count` (%undo)."""
        self._title = self.title
        del self.messages[max(0, count - self.base):]
        self.base = min(self.base, count)
        self._changes.keep(count)
        self._turns = {t: i for t, i in self._turns.items() if i < count}
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
            batch = self._changes.take(self.messages, self.base, self.title, self.created,
                                       self._hurry.is_set())
            try:  # a thread anyio waits for even when cancelled: a save is never cut
                await anyio.to_thread.run_sync(self.store.write, self.workspace, self.id,
                                               batch)
            except OSError as exc:
                self._changes.failed()
                self._failed(exc)
            else:
                self.save_error = None
                self._changes.written_ok(batch)
                self._trim()
            if self._dirty and not self._hurry.is_set():
                # Changes came during the save (runs back to back): one save for all that
                # come within SAVE_GAP, instead of a whole-file write and two fsyncs each. The
                # first change after a quiet moment is saved at once; flush() cuts the wait.
                with anyio.move_on_after(SAVE_GAP):
                    await self._hurry.wait()

    def _trim(self) -> None:
        """Let the oldest held messages go once twice TAIL are held, all in the record (the
        turns going on keep theirs: a proposal's outcome is still to be set)."""
        end = min(self.count - TAIL, self._changes.written, *self._turns.values())
        if not self._dirty and len(self.messages) >= 2 * TAIL and end > self.base:
            self._title = self.title  # before the first user message may go
            del self.messages[:end - self.base]
            self.base = end

    def _failed(self, exc: OSError) -> None:
        """Say the first time saving fails (a read-only or full data folder), not at every
        message; a save that works again ends it."""
        log.warning("could not save the conversation of %s: %s", self.workspace, exc)
        if self.save_error is None:
            self.save_error = _cannot_save(self.store.folder(self.workspace), exc)
            self._notice(self.save_error)

    async def flush(self) -> None:
        """Wait until what was recorded is on disk, fsynced (or saving failed: see
        save_error)."""
        if self._dirty or self._changes.unsynced:
            self._changes.sync = True
            self._save_soon()
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

    async def summaries(self, query: str | None = None) -> list[ConversationInfo]:
        """The saved conversations, the open one (as it is now) first, then newest first;
        with a query, those where all its words were said, best match first (the open one
        searched as saved: flushed first)."""
        hits = None
        if query is not None and query.strip():
            await self.flush()
            hits = await in_thread(self.store.search, self.workspace, query)
        saved = await in_thread(self.store.summaries, self.workspace)
        mine = next((s for s in saved if s.id == self.id), None)
        current = Summary(self.id, self.title, self.created,
                          mine.updated if mine else self.created, self.count)
        return listed(current, saved, hits)

    async def read(self, conversation_id: str | None) -> tuple[str, list[Message]]:
        """The id and messages of the open conversation, or of a saved one."""
        if conversation_id is None or conversation_id == self.id:
            return self.id, await self._range(0, self.count)
        return conversation_id, await in_thread(self.store.read, self.workspace,
                                                        conversation_id)

    async def page(self, before: int | None,
                   limit: int | None) -> tuple[int, list[Message], int]:
        """(index of the first, the messages, how many in all): see page_of."""
        return await page_of(self._range, self.count, before, limit)

    async def recent(self, reach: int) -> list[Message]:
        """The newest messages whose contents hold `reach` characters, or all there are:
        what the model's context is fitted from (context_window drops the oldest first)."""
        return await recent_of(self._range, list(self.messages), self.base, reach)

    async def _range(self, first: int, end: int) -> list[Message]:
        """Messages first..end-1: those held, and the older ones read from the record."""
        base = self.base
        held = self.messages[max(0, first - base):max(0, end - base)]
        if first >= base:
            return held
        return await in_thread(self.store.older, self.workspace, self.id, first,
                               min(end, base)) + held

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
        claim = self.store.claim(self.workspace, conversation_id)  # raises ConversationInUse
        try:
            await self.flush()  # the open one's last write, before its record is closed
            loaded = await in_thread(self.store.open, self.workspace, conversation_id, TAIL)
            still_free()
        except BaseException:
            claim.release()
            raise
        await self._switch(conversation_id, loaded, claim)
        if loaded.notice:
            self._notice(loaded.notice)

    async def begin(self, messages: list[Message]) -> None:
        """Open a new conversation holding `messages` (the open one stays saved; an empty one
        is reused)."""
        await self.flush()
        conversation_id = new_conversation_id() if self.count else self.id
        claim = self.store.claim(self.workspace, conversation_id) if self.count \
            else self._claim
        await self._switch(conversation_id,
                           Loaded(conversation_id, messages, time.time(), on_disk=False), claim)
        if messages:
            self._save_soon()

    async def _switch(self, conversation_id: str, loaded: Loaded, claim: Claim) -> None:
        """Go on in another conversation: one read from its record, or a new one (not on
        disk: its record is written whole with its first change)."""
        if claim is not self._claim:
            self._claim.release()
            self._claim = claim
        self.id = conversation_id
        self._take(loaded)
        if self._changes.touched:
            self._save_soon()
        try:  # what the next server opens; failing that loses nothing of the conversation
            await to_disk(self.store.set_current, self.workspace, conversation_id)
        except OSError as exc:
            self._failed(exc)


Ranges = Callable[[int, int], Awaitable[list[Message]]]


async def page_of(messages: Ranges, total: int, before: int | None,
                  limit: int | None) -> tuple[int, list[Message], int]:
    """(index of the first, the messages, how many in all) of the `limit` messages before
    `before` (the newest when None; all of them when `limit` is None), from the start of the
    turn the first of them is in: a page never splits a turn (a proposal from the run it led
    to), so a client draws each page as it drew it live."""
    end = total if before is None else max(0, min(before, total))
    start = 0 if limit is None else max(0, end - limit)
    page = await messages(start, end)
    turn = page[0].turn_id if page else None
    while turn is not None and start > 0:
        first = max(0, start - 64)
        earlier = await messages(first, start)
        keep = len(earlier)
        while keep and earlier[keep - 1].turn_id == turn:
            keep -= 1
        page, start = earlier[keep:] + page, first + keep
        if keep:
            break
    return start, page, total


async def recent_of(messages: Ranges, held: list[Message], base: int,
                    reach: int) -> list[Message]:
    """`held` (messages from `base` on) and as many before them as it takes for their
    contents to hold `reach` characters."""
    size, first = sum(len(m.content) for m in held), base
    while size < reach and first > 0:
        earlier = await messages(max(0, first - TAIL), first)
        size += sum(len(m.content) for m in earlier)
        held, first = earlier + held, first - len(earlier)
    return held


def displays(chunks: list[Chunk], displayed: int, turn_id: str,
             tool_call_id: str | None) -> tuple[list[Message], int]:
    """The messages that keep what a run displayed, within the size limits (past them, a
    note), and what the conversation's displays add up to then."""
    kept = []
    for chunk in chunks:
        if chunk.type == "console":
            continue
        size = len(chunk.content)
        if size > DISPLAY_ITEM_LIMIT or displayed + size > DISPLAY_TOTAL_LIMIT:
            what = "an image" if chunk.type == "image" else f"{chunk.format} output"
            limit = (f"the {_mb(DISPLAY_ITEM_LIMIT)} kept per item"
                     if size > DISPLAY_ITEM_LIMIT else
                     f"the {_mb(DISPLAY_TOTAL_LIMIT)} kept per conversation")
            kept.append(Message(role="computer", type="console", format="output",
                                content=f"[{what} ({_mb(size)}) was shown here; not kept: "
                                        f"over {limit}]", turn_id=turn_id,
                                tool_call_id=tool_call_id))
            continue
        displayed += size
        kept.append(Message(role="computer", type=chunk.type, format=chunk.format,
                            content=chunk.content, turn_id=turn_id,
                            tool_call_id=tool_call_id))
    return kept, displayed


def listed(current: Summary, saved: list[Summary],
           hits: list[Hit] | None) -> list[ConversationInfo]:
    """The open conversation, then the saved ones; only those found (best first) for a
    search's `hits`."""
    every = [current, *(s for s in saved if s.id != current.id)]
    snippets: dict[str, str | None] = {s.id: None for s in every}
    if hits is not None:
        by_id = {s.id: s for s in every}
        every = [by_id[h.conversation] for h in hits if h.conversation in by_id]
        snippets = {h.conversation: h.snippet for h in hits}
    return [ConversationInfo(id=s.id, title=s.title, created=_iso(s.created),
                             updated=_iso(s.updated), message_count=s.message_count,
                             current=s is current, snippet=snippets.get(s.id))
            for s in every]


def _display_size(messages: list[Message]) -> int:
    """What the images and HTML a conversation keeps add up to (against its limit)."""
    return sum(len(m.content) for m in messages if is_display(m))


def _is_code(message: Message) -> bool:
    """Code the model proposed, or the user ran."""
    return message.type == "code" and message.role in ("assistant", "user")


def settle_loaded(messages: list[Message]) -> list[int]:
    """Outcomes for code messages that have none: saved by an older oi-lsp (read from what
    followed them), or pending when the server stopped (`expired`: the turn ended with it).
    The indices of those that changed."""
    changed = []
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
        changed.append(i)
    return changed


def _in_use(title: str) -> str:
    return (f"The conversation “{title}” of this folder is open in another editor. This "
            "editor starts a new conversation; both are kept (the conversation list shows "
            "them).")


def _cannot_save(folder: Path, exc: OSError) -> str:
    return (f"This conversation cannot be saved in {folder} ({exc.strerror or exc}): it is "
            "lost when the editor closes. Make that folder writable, or set OI_LSP_DATA_DIR "
            "to one that is.")


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
