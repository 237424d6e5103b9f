"""Issue 38: a conversation's append-only record. A change costs what it adds, a torn last line
is dropped and said once, a whole-file conversation of an older oi-lsp is migrated losing
nothing, dead lines are compacted away, and a SIGKILL at any point of an append or a
compaction loses no complete line."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from oi_lsp.core import changes, journal
from oi_lsp.core.conversation import Conversation
from oi_lsp.core.store import Batch, DamagedConversation, Store
from oi_lsp.protocol import Message, Usage
from tests.conftest import saved_messages

URI = "file:///some/workspace"
ID = "20261207-000000-abcdef"
ROOT = Path(__file__).resolve().parent.parent


def user(text: str, **extra: Any) -> Message:
    return Message(role="user", type="message", content=text, **extra)


def code(text: str, turn: str) -> Message:
    return Message(role="assistant", type="code", format="python", content=text, turn_id=turn)


async def conversation_of(messages: int, data_dir: Path) -> tuple[Conversation, list[str]]:
    notices: list[str] = []
    conversation = Conversation(URI, Store(data_dir), notices.append)
    for i in range(messages):
        conversation.record(user(f"message {i}", turn_id=f"t{i}"))
    await conversation.flush()
    return conversation, notices


async def growth(messages: int, data_dir: Path) -> tuple[int, list[Message]]:
    """Bytes the record grows by when one message is added and one changes, and the
    messages encoded for it, after `messages` messages."""
    conversation, _ = await conversation_of(messages, data_dir)
    before = conversation.file().stat().st_size
    proposal = code("print(1)", "t-last")
    conversation.record(proposal)
    await conversation.flush()
    before = conversation.file().stat().st_size
    encoded: list[Message] = []
    real = Message.model_dump

    def counting(self: Message, **kwargs: Any) -> dict[str, Any]:
        encoded.append(self)
        return real(self, **kwargs)

    with patch.object(Message, "model_dump", counting):
        proposal.outcome = "ran"
        conversation.changed(proposal)
        conversation.record(Message(role="computer", type="console", format="output",
                                    content="1\n", turn_id="t-last"))
        await conversation.flush()
    grown = conversation.file().stat().st_size - before
    assert saved_messages(conversation.file())[-2]["outcome"] == "ran"
    await conversation.close()
    return grown, encoded


async def test_a_change_costs_what_it_adds_at_any_length(tmp_path: Path) -> None:
    small, small_encoded = await growth(50, tmp_path / "small")
    large, large_encoded = await growth(3000, tmp_path / "large")
    # The same two lines, their index two digits longer: not the whole file again.
    assert 0 < small <= 300 and large - small == 4
    assert len(small_encoded) == len(large_encoded) == 2


async def test_what_was_recorded_is_what_is_read_back(tmp_path: Path) -> None:
    conversation, _ = await conversation_of(5, tmp_path)
    proposal = code("x = 1", "t9")
    conversation.record(proposal)
    conversation.record(user("later"))
    conversation.keep(4)  # %undo: three dropped, one of them never written
    conversation.record(user("after the undo"))
    await conversation.flush()
    proposal.outcome = "skipped"  # dropped already: nothing to write for it
    conversation.note_usage("t1", Usage(prompt_tokens=3, completion_tokens=1, calls=1))
    await conversation.close()
    again = Conversation(URI, Store(tmp_path), lambda _: None)
    assert again.messages == conversation.messages
    assert [m.content for m in again.messages] == [
        "message 0", "message 1", "message 2", "message 3", "after the undo"]
    assert again.messages[1].usage == Usage(prompt_tokens=3, completion_tokens=1, calls=1)
    lines = conversation.file().read_bytes().splitlines()
    assert json.loads(lines[0])["oi"] == "conversation" and b'{"keep":4}' in lines
    await again.close()


async def test_a_torn_last_line_is_dropped_and_said_once(tmp_path: Path) -> None:
    conversation, _ = await conversation_of(3, tmp_path / "whole")
    await conversation.close()
    whole = conversation.file().read_bytes()
    header_end = whole.index(b"\n") + 1
    line_ends = [i + 1 for i, byte in enumerate(whole) if byte == ord("\n")]
    for cut in range(header_end, len(whole)):
        data_dir = tmp_path / f"cut-{cut}"
        record = Store(data_dir).path(URI, conversation.id)
        record.parent.mkdir(parents=True)
        record.write_bytes(whole[:cut])
        (record.parent / "current").write_text(conversation.id)
        complete = sum(1 for end in line_ends if end <= cut) - 1  # the header is no message
        # A line whose newline alone is missing is whole: it counts.
        if cut + 1 in line_ends:
            complete += 1
        notices: list[str] = []
        reopened = Conversation(URI, Store(data_dir), notices.append)
        assert [m.content for m in reopened.messages] == [
            f"message {i}" for i in range(complete)], cut
        torn = cut not in line_ends and cut + 1 not in line_ends
        assert len(notices) == torn, (cut, notices)
        if torn:
            assert "was cut off when oi-lsp stopped" in notices[0]
        reopened.record(user("next"))
        await reopened.close()
        notices.clear()
        third = Conversation(URI, Store(data_dir), notices.append)
        assert notices == []  # said once: the torn bytes are gone from the file
        assert [m.content for m in third.messages][-1] == "next"
        assert len(third.messages) == complete + 1
        await third.close()


def test_a_damaged_middle_line_sets_the_record_aside(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.write(URI, ID, Batch(1.0, "", 2, whole=[user("a"), user("b")]))
    record = store.path(URI, ID)
    lines = record.read_bytes().splitlines(keepends=True)
    record.write_bytes(lines[0] + b'{"i": 0, "m": \n' + lines[2])
    with pytest.raises(DamagedConversation, match="line 2"):
        store.open(URI, ID)
    assert not record.exists()
    assert [p.name.split(".corrupt-")[0] for p in record.parent.glob("*.corrupt-*")] == [
        record.name]


async def test_a_whole_file_conversation_is_migrated_losing_nothing(tmp_path: Path) -> None:
    """Saved by oi-lsp before the record (one JSON file, format 2), an image in a file
    beside it: read and listed as it was, then written as a record when opened."""
    store = Store(tmp_path)
    folder = store.folder(URI)
    (folder / f"{ID}.files").mkdir(parents=True)
    (folder / f"{ID}.files" / "abc.base64.png").write_text("iVBORw0KGgo=")
    saved = [{"role": "user", "type": "message", "content": "plot it", "turnId": "t1"},
             {"role": "assistant", "type": "code", "format": "python", "content": "plot()",
              "turnId": "t1", "outcome": "ran"},
             {"role": "computer", "type": "image", "format": "base64.png", "content": "",
              "file": "abc.base64.png", "turnId": "t1"}]
    legacy = folder / f"{ID}.json"
    legacy.write_text(json.dumps({"version": 2, "workspace": URI, "id": ID, "title": "plot it",
                                  "created": 5.0, "updated": 6.0, "messages": saved}))
    (folder / "current").write_text(ID)
    [listed] = store.summaries(URI)
    assert (listed.id, listed.title, listed.message_count) == (ID, "plot it", 3)
    assert store.read(URI, ID)[2].content == "iVBORw0KGgo="  # read, not yet migrated
    assert legacy.exists()

    conversation = Conversation(URI, Store(tmp_path), lambda _: None)
    assert [m.model_dump(by_alias=True, exclude_none=True) for m in conversation.messages] == [
        *saved[:2], {**{k: v for k, v in saved[2].items() if k != "file"},
                     "content": "iVBORw0KGgo="}]
    assert conversation.created == 5.0
    assert not legacy.exists() and (folder / f"{ID}.json.migrated").exists()
    assert saved_messages(conversation.file()) == saved  # the image still in its own file
    conversation.record(user("and again"))
    await conversation.close()
    [listed] = Store(tmp_path).summaries(URI)
    assert (listed.id, listed.title, listed.message_count) == (ID, "plot it", 4)


async def test_dead_lines_are_compacted_away(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(changes, "COMPACT_AFTER", 20)
    conversation, _ = await conversation_of(10, tmp_path)
    proposal = code("x = 0", "t-last")
    conversation.record(proposal)
    await conversation.flush()
    most = 0
    for i in range(60):
        proposal.outcome = "ran" if i % 2 else "edited"
        conversation.changed(proposal)
        await conversation.flush()
        most = max(most, len(conversation.file().read_bytes().splitlines()))
    assert most <= 1 + 11 + 20 + 1  # header, messages, dead lines up to the threshold
    assert saved_messages(conversation.file())[-1]["outcome"] == "ran"  # the last of them
    await conversation.close()
    again = Conversation(URI, Store(tmp_path), lambda _: None)
    assert again.messages == conversation.messages
    await again.close()


def test_the_summary_beside_the_record_is_used_only_while_it_matches(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.write(URI, ID, Batch(1.0, "first words", 1, whole=[user("first words")]))
    summary = store.path(URI, ID).with_suffix(".summary")
    known = json.loads(summary.read_text())
    summary.write_text(json.dumps({**known, "title": "from the summary"}))
    assert store.summaries(URI)[0].title == "from the summary"
    with store.path(URI, ID).open("ab") as record:  # a write the summary does not know of
        record.write(journal.message_line(1, {"role": "user", "type": "message",
                                              "content": "more"}))
    [listed] = store.summaries(URI)
    assert (listed.title, listed.message_count) == ("first words", 2)


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from oi_lsp.core.store import Batch, Store, UnknownConversation
    from oi_lsp.protocol import Message

    store, mode = Store(Path(sys.argv[1])), sys.argv[2]
    uri, cid = "file:///some/workspace", "20261207-000000-abcdef"
    try:
        messages = store.open(uri, cid).messages
    except UnknownConversation:
        messages = []
        store.write(uri, cid, Batch(1.0, "", 0, whole=[]))
    print("ready", len(messages), flush=True)
    for step in range(STEPS):
        new = [Message(role="user", type="message", content=f"m{len(messages) + k} " + "x" * 100)
               for k in range(2)]
        start = len(messages)
        messages += new
        if mode == "compact" and step % 3 == 0:
            store.write(uri, cid, Batch(1.0, "", len(messages), whole=list(messages)))
        else:
            store.write(uri, cid, Batch(1.0, "", len(messages),
                                        changes=[(start + k, m) for k, m in enumerate(new)]))
        print(len(messages), flush=True)
    sys.stdin.read()  # done: waits for its kill
""")


STEPS = 60


async def kill_rounds(mode: str, data_dir: Path, kills: int, rng: random.Random,
                      ) -> tuple[int, int]:
    """SIGKILL a writer `kills` times, each at a random step (the kill lands wherever the
    writer got to while the signal was sent: encoding, writing, renaming); (complete lines
    lost, kills that landed before the writer's last step)."""
    lost = early = 0
    record = Store(data_dir).path(URI, ID)
    for _ in range(kills):
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD.replace("STEPS", str(STEPS)), str(data_dir), mode,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert child.stdout is not None
        ready = await asyncio.wait_for(child.stdout.readline(), 60)
        assert ready.startswith(b"ready"), ready
        for _ in range(rng.randrange(0, STEPS - 10)):
            await asyncio.wait_for(child.stdout.readline(), 60)
        child.send_signal(signal.SIGKILL)
        reported = [int(line) for line in (await child.stdout.read()).split()]
        await child.wait()
        replayed = journal.replay(record.read_bytes())
        contents = [m["content"].split()[0] for m in replayed.messages]
        assert contents == [f"m{i}" for i in range(len(contents))]  # in order, no gap
        last = reported[-1] if reported else int(ready.split()[1])
        lost += max(0, last - len(contents))
        early += last < int(ready.split()[1]) + 2 * STEPS
    return lost, early


@pytest.mark.timeout(600)
async def test_sigkill_at_random_points_of_appends_and_compactions(tmp_path: Path) -> None:
    rng = random.Random(38)
    results = await asyncio.gather(kill_rounds("append", tmp_path / "append", 25, rng),
                                   kill_rounds("compact", tmp_path / "compact", 25, rng))
    assert [lost for lost, _ in results] == [0, 0]
    assert all(early > 20 for _, early in results), results  # the kills cut the writes short
