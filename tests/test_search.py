"""Issue 38: searching a workspace's conversations (oi/sessions' query): every word, in what
was said and the code, brought up to date as records grow, are compacted, are cut by %undo,
go away; older whole-file conversations too; a damaged index is rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

from oi_lsp.client import OIClient, to_uri
from oi_lsp.core.store import Batch, Store
from oi_lsp.protocol import Message
from tests.conftest import StartServer

URI = "file:///some/workspace"
A, B = "20261207-000000-aaaaaa", "20261207-000000-bbbbbb"


def said(text: str, role: str = "user") -> Message:
    return Message(role=role, type="message", content=text)  # type: ignore[arg-type]


def found(store: Store, query: str) -> list[str]:
    return [hit.conversation for hit in store.search(URI, query)]


def test_every_word_in_what_was_said_and_the_code(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.write(URI, A, Batch(1.0, "", 2, whole=[said("plot the sales by region"),
                                                 said("Here is the chart.", "assistant")]))
    store.write(URI, B, Batch(1.0, "", 2, whole=[
        said("clean the sales data"),
        Message(role="assistant", type="code", format="python",
                content="df = pandas.read_csv('sales.csv')"),
        Message(role="computer", type="console", format="output", content="region chart")]))
    assert sorted(found(store, "sales")) == [A, B]
    assert found(store, "sales region") == [A]  # every word; run output is not searched
    assert found(store, "pandas") == [B]
    assert found(store, "nothing-like-it") == []
    assert found(store, '" AND (NEAR') == []  # the query's words, never FTS syntax
    [hit] = store.search(URI, "chart")
    assert hit.conversation == A and "[chart]" in hit.snippet


def test_the_index_follows_appends_compactions_undo_and_deletions(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.write(URI, A, Batch(1.0, "", 1, whole=[said("first words")]))
    assert found(store, "first") == [A]
    store.write(URI, A, Batch(1.0, "", 3, changes=[(1, said("zebra crossing")),
                                                   (2, said("yak shaving"))]))
    assert found(store, "zebra") == [A] and found(store, "first") == [A]
    store.write(URI, A, Batch(1.0, "", 2, cut=2, changes=[]))  # %undo dropped the yak
    assert found(store, "yak") == []
    # Compacted: a new file, read again from its start (no word found twice, none lost).
    store.write(URI, A, Batch(1.0, "", 2, whole=[said("first words"), said("zebra crossing")]))
    assert found(store, "zebra") == [A] and found(store, "first") == [A]
    assert len(store.search(URI, "words")) == 1
    store.path(URI, A).unlink()
    assert found(store, "zebra") == []


def test_an_older_whole_file_conversation_and_a_damaged_index(tmp_path: Path) -> None:
    store = Store(tmp_path)
    folder = store.folder(URI)
    folder.mkdir(parents=True)
    (folder / f"{B}.json").write_text(json.dumps({"version": 2, "messages": [
        {"role": "user", "type": "message", "content": "the old quarterly report"}]}))
    assert found(store, "quarterly") == [B]
    (folder / "search.sqlite").write_bytes(b"not a database at all" * 100)
    assert found(store, "quarterly") == [B]  # rebuilt


async def test_oi_sessions_with_a_query(start_server: StartServer, workspace: Path,
                                        data_dir: Path) -> None:
    store, uri = Store(data_dir), to_uri(workspace)
    store.write(uri, A, Batch(1.0, "plot the sales", 1, whole=[said("plot the sales")]))
    store.write(uri, B, Batch(1.0, "clean the data", 1, whole=[said("clean the data")]))
    client: OIClient = await start_server(workspace)
    listed = (await client.request("oi/sessions", {"query": "sales"}))["sessions"]
    assert [(s["id"], s["snippet"]) for s in listed] == [(A, "plot the [sales]")]
    everything = (await client.request("oi/sessions", {}))["sessions"]
    assert {s["id"] for s in everything} >= {A, B}
    assert all("snippet" not in s for s in everything)
