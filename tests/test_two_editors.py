"""Two editors (two servers) on one folder with one data folder lose no message; a data folder
that cannot be written is said, not silent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.hardening import record
from tests.modelserver import ModelServer


def contents(history: dict[str, object]) -> list[str]:
    return [m["content"] for m in history["messages"]]  # type: ignore[index, union-attr]


async def sessions(client: OIClient) -> dict[str, dict[str, object]]:
    return {s["id"]: s for s in (await client.request("oi/sessions", {}))["sessions"]}


async def test_two_servers_on_one_folder_keep_both_conversations(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    a = await start_server(workspace)
    model.script(ms.text("Answer to A."))
    assert (await a.chat("from A"))["status"] == "done"
    a_id = (await a.request("oi/sessions", {}))["current"]

    b = await start_server(workspace)
    notice = await b.wait_for("window/showMessage", lambda p: "another editor" in p["message"])
    assert "from A" in notice["message"] and "new conversation" in notice["message"]
    b_id = (await b.request("oi/sessions", {}))["current"]
    assert b_id != a_id and contents(await b.request("oi/history", {})) == []
    model.script(ms.text("Answer to B."))
    assert (await b.chat("from B"))["status"] == "done"
    model.script(ms.text("Second answer to A."))
    assert (await a.chat("A again"))["status"] == "done"

    # B cannot take over A's conversation while A has it open, and is told why.
    with pytest.raises(Exception) as info:
        await b.request("oi/session/open", {"id": a_id})
    assert getattr(info.value, "code", None) == -32803 and "another editor" in str(info.value)
    assert contents(await b.request("oi/history", {})) == ["from B", "Answer to B."]

    # A starts a new conversation; B's later saves do not point the folder back elsewhere.
    fresh = (await a.request("oi/session/new", {}))["id"]
    model.script(ms.text("Third answer to B."))
    await b.chat("B again")
    await a.close()
    await b.close()

    c = await start_server(workspace)
    assert (await c.request("oi/sessions", {}))["current"] == fresh
    listed = await sessions(c)
    assert listed[a_id]["messageCount"] == 4 and listed[b_id]["messageCount"] == 4
    await c.request("oi/session/open", {"id": a_id})  # free now that A is gone
    kept = contents(await c.request("oi/history", {}))
    assert kept == ["from A", "Answer to A.", "A again", "Second answer to A."]
    await c.request("oi/session/open", {"id": b_id})
    kept += contents(await c.request("oi/history", {}))
    assert kept[4:] == ["from B", "Answer to B.", "B again", "Third answer to B."]
    record("two_editors", servers=2, conversations_kept=len({a_id, b_id}),
           messages_sent=8, messages_lost=8 - len(kept))


async def test_a_closed_editor_frees_its_conversation(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    a = await start_server(workspace)
    model.script(ms.text("Kept."))
    await a.chat("first")
    a_id = (await a.request("oi/sessions", {}))["current"]
    b = await start_server(workspace)
    assert (await b.request("oi/sessions", {}))["current"] != a_id
    await a.close()
    await b.request("oi/session/open", {"id": a_id})
    assert contents(await b.request("oi/history", {})) == ["first", "Kept."]


async def test_an_unwritable_data_folder_is_said_once_and_in_every_turn(
        start_server: StartServer, model: ModelServer, workspace: Path, tmp_path: Path) -> None:
    # A regular file where a folder should be: writing under it fails even for root (a
    # read-only mode would not stop root, which CI runs as).
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    client = await start_server(workspace, env={"OI_LSP_DATA_DIR": str(blocker / "data")})
    model.script(ms.text("Not kept."))
    result = await client.chat("first")
    assert result["status"] == "done" and result["errorKind"] == "notSaved"
    assert "cannot be saved" in result["error"] and str(blocker) in result["error"]
    errors = [p for m, p in client.notifications
              if m == "window/showMessage" and p["type"] == 1 and "cannot be saved" in p["message"]]
    assert len(errors) == 1
    model.script(ms.text("Still not kept."))
    assert (await client.chat("second"))["errorKind"] == "notSaved"
    fresh = await client.request("oi/session/new", {})  # not a traceback
    assert fresh["messages"] == []
    model.script(ms.text("Nor this."))
    assert (await client.chat("third"))["errorKind"] == "notSaved"
    assert contents(await client.request("oi/history", {})) == ["third", "Nor this."]
    again = [p for m, p in client.notifications
             if m == "window/showMessage" and "cannot be saved" in p["message"]]
    assert len(again) == 1  # told once, not at every message
    record("two_editors", unsaved_turns=3, unsaved_turns_reported=3,
           unsaved_messages=len(again))


async def test_each_server_records_its_kernel(
        start_server: StartServer, workspace: Path, data_dir: Path) -> None:
    spawn = "import subprocess; print(subprocess.Popen(['sleep', '600']).pid)"
    a = await start_server(workspace)
    b = await start_server(workspace)
    sleeps = []
    for client in (a, b):
        result = await client.execute("python", spawn)
        sleeps.append(int(result["outputs"][0]["content"]))
    assert len(list((data_dir / "kernels").glob("*.json"))) == 2  # one record per server
    procs = [psutil.Process(pid) for pid in sleeps]

    # B's server dies without a word; its kernel and what that started are ended by the next
    # server on the folder, while A's, whose server lives, is left alone.
    assert b.process is not None
    b_server = psutil.Process(b.process.pid)
    b.process.kill()
    b_server.wait(10)
    c = await start_server(workspace)
    await c.execute("python", "1")
    gone, _ = await asyncio.to_thread(psutil.wait_procs, [procs[1]], 30)
    assert gone, "the sleep that B's code started outlived B"
    assert procs[0].is_running()
    assert (await a.execute("python", "print('a still works')"))["status"] == "ok"
    procs[0].kill()
    record("two_editors", kernel_records=2, orphans_of_killed_server=0)
