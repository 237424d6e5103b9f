"""Issue 38: a long conversation holds only its last messages in memory; pages before them,
exports and the model's context read the older ones from the record, which compaction and
%undo keep whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from oi_lsp.core import changes
from oi_lsp.core import conversation as conversation_module
from oi_lsp.core.conversation import Conversation
from oi_lsp.core.store import Store
from oi_lsp.protocol import Message
from tests.conftest import saved_messages

URI = "file:///some/workspace"


@pytest.fixture(autouse=True)
def small_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conversation_module, "TAIL", 10)


def said(i: int) -> Message:
    """Message i: turns of a question and two answers, so that pages have turns to keep."""
    turn = f"t{i // 3}"
    if i % 3 == 0:
        return Message(role="user", type="message", content=f"question {i}", turn_id=turn)
    return Message(role="assistant", type="message", content=f"answer {i}", turn_id=turn)


async def written(count: int, data: Path) -> list[Message]:
    conversation = Conversation(URI, Store(data), lambda _: None)
    messages = [said(i) for i in range(count)]
    for message in messages:
        conversation.record(message)
    await conversation.flush()
    await conversation.close()
    return messages


async def test_a_reopened_long_conversation_holds_its_tail_and_reads_the_rest(
        tmp_path: Path) -> None:
    messages = await written(56, tmp_path)
    again = Conversation(URI, Store(tmp_path), lambda _: None)
    assert (again.base, len(again.messages), again.count) == (46, 10, 56)
    assert again.messages == messages[46:]
    assert again.title == "question 0"  # from the record: message 0 is not held
    # The newest page from memory; the one before it from the record, whole turns (message
    # 45 begins turn 15, so message 44's page goes back to 42, where turn 14 begins).
    assert await again.page(None, 5) == (51, messages[51:], 56)
    assert await again.page(51, 7) == (42, messages[42:51], 56)
    assert await again.page(3, 10) == (0, messages[:3], 56)
    assert (await again.read(None))[1] == messages
    assert await again.recent(1) == messages[46:]  # held is enough
    assert await again.recent(10**6) == messages  # the window takes everything
    summary = (await again.summaries())[0]
    assert (summary.title, summary.message_count) == ("question 0", 56)
    await again.close()


async def test_held_messages_go_once_written_and_the_turns_going_on_keep_theirs(
        tmp_path: Path) -> None:
    conversation = Conversation(URI, Store(tmp_path), lambda _: None)
    messages = [said(i) for i in range(45)]
    for message in messages:
        conversation.record(message)
        await conversation.flush()
        assert len(conversation.messages) < 20 + 8 * 3  # twice TAIL, the last turns' own
    assert conversation.base > 0 and conversation.count == 45
    assert conversation.title == "question 0"
    assert (await conversation.read(None))[1] == messages
    # A proposal of the turn going on keeps its outcome, however much comes after it.
    proposal = Message(role="assistant", type="code", format="python", content="1",
                       turn_id="long")
    conversation.record(proposal)
    for i in range(30):
        conversation.record(Message(role="computer", type="console", format="output",
                                    content=f"{i}\n", turn_id="long"))
        await conversation.flush()
    conversation.settle("long", "stopped")
    await conversation.flush()
    assert saved_messages(conversation.file())[45]["outcome"] == "stopped"
    await conversation.close()


async def test_compaction_and_undo_keep_the_messages_not_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changes, "COMPACT_AFTER", 5)
    messages = await written(40, tmp_path)
    again = Conversation(URI, Store(tmp_path), lambda _: None)
    assert again.base == 30
    last = again.messages[-1]
    for i in range(45):  # dead lines past 40: the record is rewritten, its start copied
        last.content = f"answer 39, edit {i}"
        again.changed(last)
        await again.flush()
    lines = again.file().read_bytes().splitlines()
    assert len(lines) < 1 + 40 + 40  # compacted since
    assert saved_messages(again.file()) == [
        m.model_dump(by_alias=True, exclude_none=True) for m in [*messages[:39], last]]
    assert await again.page(30, 6) == (24, messages[24:30], 40)  # read where it is now
    again.keep(12)  # %undo back past what is held
    again.record(said(12))
    await again.flush()
    assert (again.base, again.count) == (12, 13)
    await again.close()
    reopened = Conversation(URI, Store(tmp_path), lambda _: None)
    assert (await reopened.read(None))[1] == [*messages[:12], said(12)]
    await reopened.close()
