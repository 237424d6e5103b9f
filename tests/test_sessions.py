"""Saved conversations: restore after a crash, damaged files set aside, several conversations per
workspace, export, and the files of older versions."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from oi_lsp.client import OIClient, to_uri
from oi_lsp.core import conversation as conversation_module
from oi_lsp.core.conversation import Conversation
from oi_lsp.core.store import Batch, Store
from oi_lsp.protocol import Message
from tests import modelserver as ms
from tests.conftest import StartServer, saved_messages
from tests.modelserver import ModelServer


def kill_hard(client: OIClient) -> None:
    """SIGKILL the server (no shutdown, no flush), then the REPLs it leaves behind."""
    assert client.process is not None
    server = psutil.Process(client.process.pid)
    children = server.children(recursive=True)
    os.kill(server.pid, signal.SIGKILL)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def requests_text(model: ModelServer) -> str:
    return json.dumps(model.requests)


async def test_restore_after_sigkill_mid_stream(start_server: StartServer, model: ModelServer,
                                                workspace: Path) -> None:
    first = await start_server(workspace)
    model.script(ms.text("The answer is forty-two."))
    assert (await first.chat("first question"))["status"] == "done"
    model.script(ms.text("partial " * 60, pieces=60, delay=0.1))  # six seconds of text
    chat = asyncio.create_task(first.chat("second question"))
    await first.wait_for("oi/stream", lambda p: "partial" in (p.get("content") or ""))
    kill_hard(first)
    with pytest.raises(Exception):  # noqa: B017 - the server is gone; any error will do
        await asyncio.wait_for(chat, 10)

    second = await start_server(workspace)
    history = (await second.request("oi/history", {}))["messages"]
    # Everything up to the message being streamed is back; that message is lost.
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "first question"), ("assistant", "The answer is forty-two."),
        ("user", "second question")]
    model.reset()
    model.script(ms.text("Continuing."))
    assert (await second.chat("third question"))["status"] == "done"
    sent = [(m["role"], m["content"]) for m in model.requests[0]["messages"][1:]]
    assert sent == [("user", "first question"), ("assistant", "The answer is forty-two."),
                    ("user", "second question"), ("user", "third question")]


async def test_damaged_file_is_set_aside(start_server: StartServer, model: ModelServer,
                                         workspace: Path, data_dir: Path) -> None:
    store = Store(data_dir)
    uri = to_uri(workspace)
    folder = store.folder(uri)
    folder.mkdir(parents=True)
    damaged = folder / "20260101-000000-abcdef.json"
    damaged.write_bytes(b'{"version": 2, "messages": [{"role": "user", "type": "mess')
    (folder / "current").write_text("20260101-000000-abcdef")

    client = await start_server(workspace)
    notice = await client.wait_for("window/showMessage", lambda p: p["type"] == 1)
    assert "could not be read" in notice["message"] and ".corrupt-" in notice["message"]
    assert (await client.request("oi/history", {}))["messages"] == []
    aside = list(folder.glob("20260101-000000-abcdef.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b'{"version": 2')
    assert not damaged.exists()

    model.script(ms.text("Fresh start."))
    assert (await client.chat("hello again"))["status"] == "done"
    await client.close()
    # The new conversation is saved beside the damaged one, which is still there.
    saved = list(folder.glob("*.jsonl"))
    assert len(saved) == 1 and "hello again" in saved[0].read_text()
    assert aside[0].exists()


async def test_single_conversation_file_of_older_versions_is_migrated(
        start_server: StartServer, model: ModelServer, workspace: Path, data_dir: Path) -> None:
    store = Store(data_dir)
    uri = to_uri(workspace)
    legacy = store.root / f"{store.folder(uri).name}.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"version": 1, "workspace": uri, "updated": 1700000000.0,
                                  "messages": [
                                      {"role": "user", "type": "message", "content": "old one"},
                                      {"role": "assistant", "type": "message",
                                       "content": "old answer"}]}))
    client = await start_server(workspace)
    history = (await client.request("oi/history", {}))["messages"]
    assert [m["content"] for m in history] == ["old one", "old answer"]
    listed = (await client.request("oi/sessions", {}))["sessions"]
    assert [(s["title"], s["messageCount"], s["current"]) for s in listed] == [
        ("old one", 2, True)]
    assert not legacy.exists() and len(list(store.folder(uri).glob("*.jsonl"))) == 1
    model.script(ms.text("I see the old one."))
    await client.chat("continue")
    assert "old answer" in requests_text(model)


async def test_several_conversations_and_export(start_server: StartServer, model: ModelServer,
                                                workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(autoRun=True))
    model.script(ms.tool("python", "print(6 * 7)", say="Computing."), ms.text("It is 42."))
    assert (await client.chat("Alpha: compute six times seven\nplease"))["status"] == "done"
    alpha = (await client.request("oi/sessions", {}))["current"]

    fresh = await client.request("oi/session/new", {})
    assert fresh["messages"] == [] and fresh["id"] != alpha
    assert (await client.request("oi/history", {}))["messages"] == []
    model.script(ms.text("Beta answer."))
    await client.chat("Beta question")
    beta = fresh["id"]

    listed = await client.request("oi/sessions", {})
    assert listed["current"] == beta
    rows = {s["id"]: s for s in listed["sessions"]}
    assert rows[alpha]["title"] == "Alpha: compute six times seven"
    assert rows[alpha]["messageCount"] == 6 and rows[alpha]["current"] is False
    assert rows[beta]["title"] == "Beta question" and rows[beta]["messageCount"] == 2
    assert rows[beta]["updated"].endswith("Z")

    opened = await client.request("oi/session/open", {"id": alpha})
    assert [m["content"] for m in opened["messages"]][-1] == "It is 42."
    model.reset()
    model.script(ms.text("Still alpha."))
    await client.chat("and now?")
    sent = requests_text(model)
    assert "six times seven" in sent and "Beta question" not in sent

    notebook = await client.request("oi/session/export", {"id": alpha, "format": "ipynb"})
    nb = nbformat.reads(notebook["content"], as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in code] == ["print(6 * 7)"]
    assert code[0].outputs[0]["text"].strip() == "42"
    texts = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert any("Alpha: compute" in t for t in texts) and any("It is 42." in t for t in texts)

    markdown = await client.request("oi/session/export", {"id": beta, "format": "markdown"})
    assert "Beta question" in markdown["content"] and "Beta answer." in markdown["content"]
    dumped = await client.request("oi/session/export", {"format": "json"})  # the open one
    assert dumped["id"] == alpha
    assert [m["content"] for m in json.loads(dumped["content"])][-1] == "Still alpha."

    for bad in ({"id": "../../etc/passwd"}, {"id": "20990101-000000-ffffff"}, {}):
        with pytest.raises(Exception) as info:
            await client.request("oi/session/open", bad)
        assert getattr(info.value, "code", None) == -32602 and "id" in str(info.value)
    with pytest.raises(Exception) as info:
        await client.request("oi/session/export", {"format": "pdf"})
    assert getattr(info.value, "code", None) == -32602 and "format" in str(info.value)

    await client.close()  # the open conversation survives a restart
    again = await start_server(workspace)
    assert (await again.request("oi/sessions", {}))["current"] == alpha


async def test_history_in_pages_from_the_newest(start_server: StartServer, workspace: Path,
                                               data_dir: Path) -> None:
    store, uri = Store(data_dir), to_uri(workspace)
    store.write(uri, "20261207-000000-abcdef", Batch(
        1.0, "m0", 10, whole=[Message(role="user" if i in (0, 3, 7) else "assistant",
                                      type="message", content=f"m{i}",
                                      turn_id="t3" if 3 <= i <= 6 else f"t{i}")
                              for i in range(10)]))
    client = await start_server(workspace)

    async def page(**params: object) -> tuple[list[str], int, int]:
        got = await client.request("oi/history", params)
        return [m["content"] for m in got["messages"]], got["start"], got["total"]

    # m3 to m6 are one turn: a page that begins inside it begins with it.
    assert await page(limit=1) == (["m9"], 9, 10)
    assert await page(limit=4) == (["m3", "m4", "m5", "m6", "m7", "m8", "m9"], 3, 10)
    assert await page(limit=4, before=8) == (["m3", "m4", "m5", "m6", "m7"], 3, 10)
    assert await page(limit=2, before=3) == (["m1", "m2"], 1, 10)
    assert await page(limit=4, before=3) == (["m0", "m1", "m2"], 0, 10)
    assert await page(limit=1, before=99) == (["m9"], 9, 10)
    assert await page() == ([f"m{i}" for i in range(10)], 0, 10)  # no limit: all of it
    opened = await client.request("oi/session/new", {})
    opened = await client.request("oi/session/open", {"id": "20261207-000000-abcdef",
                                                      "limit": 1})
    assert ([m["content"] for m in opened["messages"]], opened["start"], opened["total"]) == (
        ["m9"], 9, 10)
    for bad in ({"limit": 0}, {"before": -1}, {"limit": "ten"}):
        with pytest.raises(Exception) as info:
            await client.request("oi/history", bad)
        assert getattr(info.value, "code", None) == -32602, bad


async def test_past_what_the_server_holds_pages_and_the_model_read_the_record(
        start_server: StartServer, model: ModelServer, workspace: Path, data_dir: Path) -> None:
    """A conversation longer than the messages a server holds (conversation.TAIL): a page
    before them, and a model whose window takes it all, get the older ones from the record."""
    count = 2 * conversation_module.TAIL + 500
    Store(data_dir).write(to_uri(workspace), "20261207-000000-abcdef", Batch(
        1.0, "m0", count, whole=[Message(role="assistant" if i % 2 else "user",
                                         type="message", content=f"m{i}", turn_id=f"t{i // 2}")
                                 for i in range(count)]))
    client = await start_server(workspace)
    got = await client.request("oi/history", {"before": 100, "limit": 50})
    assert ([m["content"] for m in got["messages"]], got["start"], got["total"]) == (
        [f"m{i}" for i in range(50, 100)], 50, count)
    await client.request("oi/configure", {"contextWindow": 1_000_000})
    model.script(ms.text("Yes."))
    assert (await client.chat("still there?"))["status"] == "done"
    sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] != "system"]
    assert sent[:3] == ["m0", "m1", "m2"] and len(sent) == count + 1
    exported = await client.request("oi/session/export", {"format": "json"})
    assert len(json.loads(exported["content"])) == count + 2  # with the question and answer


async def test_switching_while_a_turn_runs_is_refused(client: OIClient,
                                                      model: ModelServer) -> None:
    model.script(ms.text("slow " * 30, pieces=30, delay=0.1))
    chat = asyncio.create_task(client.chat("talk"))
    await client.wait_for("oi/stream", lambda p: "slow" in (p.get("content") or ""))
    for method in ("oi/session/new", "oi/session/open"):
        with pytest.raises(Exception) as info:
            await client.request(method, {"id": "20990101-000000-ffffff"})
        assert getattr(info.value, "code", None) == -32803
    await client.request("oi/stop", {})
    await chat
    assert (await client.request("oi/history", {}))["messages"][0]["content"] == "talk"


def test_temp_files_of_interrupted_saves_are_removed(tmp_path: Path) -> None:
    """A server killed inside a save leaves its temp file; the next load removes it, but not
    the temp file of a save that a live server is making now."""
    store = Store(tmp_path)
    uri = "file:///some/workspace"
    store.write(uri, "20261203-000000-abcdef", Batch(0.0, "", 0, whole=[]))
    folder = store.folder(uri)
    dead = psutil.Popen(["true"])
    dead.wait()
    killed = folder / f".20261203-000000-abcdef.jsonl.{dead.pid}.tmp"
    live = folder / f".20261203-000000-abcdef.jsonl.{os.getpid()}.tmp"
    for path in (killed, live):
        path.write_text('{"half a')
    assert store.current(uri) == "20261203-000000-abcdef"
    assert store.open(uri, "20261203-000000-abcdef").messages == []
    assert not killed.exists() and live.exists()


class CountingStore(Store):
    """A disk whose saves are counted (and take a little time, as a real one's fsyncs do)."""

    saves = 0

    def write(self, *args: object, **kwargs: object) -> None:
        time.sleep(0.02)
        CountingStore.saves += 1
        super().write(*args, **kwargs)  # type: ignore[arg-type]


async def test_changes_back_to_back_share_saves(data_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs back to back (each records messages) do not each rewrite and fsync the whole
    file; what was recorded is all on disk once flushed."""
    monkeypatch.setenv("OI_LSP_DATA_DIR", str(data_dir))
    CountingStore.saves = 0
    conversation = Conversation(to_uri(tmp_path), CountingStore(), lambda _: None)
    for i in range(60):
        conversation.record(Message(role="user", type="message", content=f"m{i}"))
        await asyncio.sleep(0.005)
    await conversation.flush()
    saved = saved_messages(conversation.file())
    assert [m["content"] for m in saved] == [f"m{i}" for i in range(60)]
    assert CountingStore.saves <= 10, CountingStore.saves
    await conversation.close()


class StartCountingStore(Store):
    """Counts the saves begun."""
    begun = 0

    def write(self, *args: object, **kwargs: object) -> None:
        StartCountingStore.begun += 1
        super().write(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_save_lets_the_answer_go_first_unless_flushed(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first save after a quiet moment begins SAVE_DELAY after the change (the answer to
    the request that made it leaves first); flush() does not wait for it, and the save then
    holds everything recorded meanwhile."""
    monkeypatch.setenv("OI_LSP_DATA_DIR", str(data_dir))
    monkeypatch.setattr(conversation_module, "SAVE_DELAY", 30.0)  # longer than this test
    StartCountingStore.begun = 0
    conversation = Conversation(to_uri(tmp_path), StartCountingStore(), lambda _: None)
    conversation.record(Message(role="user", type="message", content="first"))
    await asyncio.sleep(0.3)
    assert StartCountingStore.begun == 0
    conversation.record(Message(role="user", type="message", content="second"))
    await asyncio.wait_for(conversation.flush(), 5)
    assert StartCountingStore.begun == 1
    saved = saved_messages(conversation.file())
    assert [m["content"] for m in saved] == ["first", "second"]
    await conversation.close()


async def test_a_closed_conversation_leaves_nothing_behind(data_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    """Once closed, nothing of a conversation stays in memory (a daemon serves folder after
    folder: each closed one's messages were kept by the store's save cache)."""
    monkeypatch.setenv("OI_LSP_DATA_DIR", str(data_dir))
    store = Store()
    conversation = Conversation(to_uri(tmp_path), store, lambda _: None)
    for i in range(3):
        conversation.record(Message(role="user", type="message", content=f"kept-{i}-3f9a"))
    await conversation.flush()
    await conversation.close()
    saved = saved_messages(conversation.file())
    del conversation
    gc.collect()
    alive = [o for o in gc.get_objects()
             if isinstance(o, Message) and o.content.endswith("-3f9a")]
    assert alive == []
    assert len(saved) == 3  # all saved before it went


async def test_a_turns_usage_is_kept_on_its_last_entry(start_server: StartServer,
                                                        model: ModelServer,
                                                        workspace: Path) -> None:
    """A redrawn conversation shows each turn's tokens, as oi/turn did live; across a restart."""
    client = await start_server(workspace, options=model.settings(autoRun=True))
    model.script(ms.tool("python", "print(6 * 7)"), ms.text("It is 42."))
    assert (await client.chat("compute"))["status"] == "done"
    live = (await client.wait_for("oi/turn", lambda p: p["status"] == "done"))["usage"]
    await client.execute("python", "print('mine')")  # a direct run calls no model: no usage
    await client.close()
    second = await start_server(workspace)
    history = (await second.request("oi/history", {}))["messages"]
    with_usage = [(m["role"], m["type"], m["content"]) for m in history if "usage" in m]
    assert with_usage == [("assistant", "message", "It is 42.")]
    kept = next(m["usage"] for m in history if "usage" in m)
    assert kept == {k: v for k, v in live.items() if k != "sessionCost"} and kept["calls"] == 2


async def test_a_stopped_turn_says_so_on_its_last_entry(start_server: StartServer,
                                                         model: ModelServer,
                                                         workspace: Path) -> None:
    """Stopped while its answer streamed: the redrawn conversation says "stopped" after what
    streamed, as the live turn's end did; a turn that ended by itself says nothing."""
    client = await start_server(workspace, options=model.settings())
    model.script(ms.text("done by itself"),
                 ms.text("word " * 40, pieces=40, delay=0.1))
    assert (await client.chat("first"))["status"] == "done"
    talking = asyncio.create_task(client.chat("talk slowly"))
    await client.wait_for("oi/stream", lambda p: "word" in (p.get("content") or ""))
    await client.request("oi/stop", {})
    assert (await talking)["status"] == "stopped"
    await client.close()
    second = await start_server(workspace)
    history = (await second.request("oi/history", {}))["messages"]
    stopped = [(m["type"], m["content"].split()[0]) for m in history if m.get("stopped")]
    assert stopped == [("message", "word")]
    assert "usage" in next(m for m in history if m.get("stopped"))
