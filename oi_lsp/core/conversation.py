"""The open conversation of a workspace: its messages, saving them as they come, and switching
to another saved conversation."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ..protocol import ConversationInfo, ExportFormat, Message, SessionExportResult
from . import export
from .store import Store, Summary, new_conversation_id, title_of

log = logging.getLogger(__name__)


class Conversation:
    def __init__(self, workspace: str, store: Store,
                 notice: Callable[[str], None]) -> None:
        self.workspace = workspace
        self.store = store
        loaded = store.load(workspace)
        self.id = loaded.id
        self.messages = loaded.messages
        self.created = loaded.created
        if loaded.notice:
            notice(loaded.notice)
        self._saving: asyncio.Task[None] | None = None
        self._dirty = False

    # Messages ----------------------------------------------------------------------------

    def record(self, message: Message) -> None:
        self.messages.append(message)
        self._save_soon()

    def keep(self, count: int) -> None:
        """Drop every message after the first `count` (%undo)."""
        del self.messages[count:]
        self._save_soon()

    def _save_soon(self) -> None:
        """Save in a thread, never on the event loop; one writer, always the newest state."""
        self._dirty = True
        if self._saving is None or self._saving.done():
            self._saving = asyncio.create_task(self._save_loop())

    async def _save_loop(self) -> None:
        while self._dirty:
            self._dirty = False
            snapshot = list(self.messages)
            try:
                await asyncio.to_thread(self.store.save, self.workspace, self.id, snapshot,
                                        self.created)
            except OSError:
                log.exception("could not save the conversation of %s", self.workspace)

    async def flush(self) -> None:
        """Wait until what was recorded is on disk."""
        if self._saving is not None:
            await self._saving

    def file(self) -> Path:
        return self.store.path(self.workspace, self.id)

    def spill_dir(self) -> Path:
        return self.store.spill_dir(self.workspace)

    # Saved conversations -----------------------------------------------------------------

    async def summaries(self) -> list[ConversationInfo]:
        """The saved conversations, the open one (as it is now) first, then newest first."""
        saved = await asyncio.to_thread(self.store.summaries, self.workspace)
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
        return conversation_id, await asyncio.to_thread(self.store.read, self.workspace,
                                                        conversation_id)

    async def export(self, conversation_id: str | None,
                     fmt: ExportFormat) -> SessionExportResult:
        conversation_id, messages = await self.read(conversation_id)
        title = title_of(messages)
        content = await asyncio.to_thread(export.render, messages, fmt, title)
        return SessionExportResult(id=conversation_id, format=fmt, title=title, content=content)

    async def open(self, conversation_id: str, still_free: Callable[[], None]) -> None:
        """Switch to a saved conversation. Raises UnknownConversation or DamagedConversation
        (the file then has been moved aside); `still_free` raises when a turn began while the
        file was read."""
        if conversation_id == self.id:
            return
        messages = await asyncio.to_thread(self.store.read, self.workspace, conversation_id)
        still_free()
        await self.flush()
        await asyncio.to_thread(self.store.set_current, self.workspace, conversation_id)
        self._switch(conversation_id, messages)

    async def begin(self, messages: list[Message]) -> None:
        """Open a new conversation holding `messages` (the open one stays saved; an empty one
        is reused)."""
        await self.flush()
        conversation_id = self.id if not self.messages else new_conversation_id()
        await asyncio.to_thread(self.store.set_current, self.workspace, conversation_id)
        self._switch(conversation_id, messages)
        if messages:
            self._save_soon()

    def _switch(self, conversation_id: str, messages: list[Message]) -> None:
        self.id = conversation_id
        self.messages = messages
        self.created = time.time()


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
