"""Structured concurrency: whatever ends a turn (its end, a stop, a timeout, a closed folder,
a vanished client) ends everything it started. The server's live tasks (the test-only
oi/debug/tasks) are back to what they were before the turn, and no process the run started
is left. A cancelled save still saves."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from lsprotocol import types

from oi_lsp import protocol
from oi_lsp.client import OIClient, to_uri
from oi_lsp.core.conversation import Conversation
from oi_lsp.core.store import Store
from oi_lsp.protocol import Message
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, saved_messages
from tests.hardening import wait_gone
from tests.modelserver import ModelServer

DEBUG = {protocol.DEBUG_TASKS_ENV: "1"}

# A run that starts a process which ignores SIGINT (as a shell's background job does), says its
# pid, and waits for it: a stop must end it too.
CHILD = ("import subprocess\n"
         "p = subprocess.Popen(['sh', '-c', 'trap \"\" INT; sleep 300'])\n"
         "print('child', p.pid, flush=True)\n"
         "p.wait()\n")


async def tasks(client: OIClient) -> Counter[str]:
    return Counter((await client.request(protocol.DEBUG_TASKS, {}))["tasks"])


async def back_to(client: OIClient, before: Counter[str], timeout: float = 20) -> None:
    """Wait until the server's tasks are those of `before` (a save or a reader may take a
    moment to end); fail saying which are left or missing."""
    deadline = time.monotonic() + timeout
    now = await tasks(client)
    while now != before and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        now = await tasks(client)
    assert now == before, f"left: {dict(now - before)}, missing: {dict(before - now)}"


async def settled(client: OIClient) -> Counter[str]:
    """The server's tasks once they stop changing (what opening a workspace started ended)."""
    last = await tasks(client)
    for _ in range(50):
        await asyncio.sleep(0.3)
        now = await tasks(client)
        if now == last:
            return now
        last = now
    return last


async def child_pid(client: OIClient, since: int = 0) -> int:
    chunk = await client.wait_for(protocol.STREAM, lambda p: re.search(
        r"child (\d+)", p.get("content") or "") is not None and p["type"] == "console",
        since=since, timeout=60)
    found = re.search(r"child (\d+)", chunk["content"])
    assert found is not None
    return int(found.group(1))


async def gone(pids: list[int], timeout: float = 20) -> list[int]:
    """The pids still alive (zombies count as gone) after waiting up to `timeout`."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    return [proc.pid for proc in await wait_gone(procs, timeout)]


async def ready(start_server: StartServer, model: ModelServer, *folders: Path,
                **settings: Any) -> tuple[OIClient, Counter[str]]:
    """A server with its kernel up and settled, and its tasks then."""
    client = await start_server(*folders, options=model.settings(**settings), env=DEBUG)
    await client.execute("python", "1")
    return client, await settled(client)


async def run_child(client: OIClient, model: ModelServer, *after: ms.Reply,
                    **chat: Any) -> tuple[asyncio.Task[dict[str, Any]], int]:
    """A turn whose approved code runs CHILD; (the chat, the child's pid) once it runs."""
    model.script(ms.tool("python", CHILD), *after)
    since = len(client.notifications)
    turn = asyncio.create_task(client.chat("start a child", **chat))
    proposal = await next_proposal(client, since)
    await client.approve(proposal["proposalId"], "run")
    return turn, await child_pid(client, since)


async def test_a_finished_turn_leaves_nothing(start_server: StartServer, model: ModelServer,
                                              workspace: Path) -> None:
    client, before = await ready(start_server, model, workspace)
    model.script(ms.tool("python", "print(6 * 7)"), ms.text("It is 42."))
    since = len(client.notifications)
    turn = asyncio.create_task(client.chat("compute"))
    await client.approve((await next_proposal(client, since))["proposalId"], "run")
    assert (await turn)["status"] == "done"
    await back_to(client, before)


async def test_a_stop_during_the_model_stream_leaves_nothing(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    client, before = await ready(start_server, model, workspace)
    model.script(ms.text("word " * 200, pieces=100, delay=0.1))
    since = len(client.notifications)
    turn = asyncio.create_task(client.chat("talk"))
    await client.wait_for(protocol.STREAM, lambda p: p["role"] == "assistant"
                          and bool(p.get("content")), since=since)
    assert (await client.request(protocol.STOP, {}))["stopped"] is True
    assert (await turn)["status"] == "stopped"
    await back_to(client, before)


async def test_a_stop_during_a_run_leaves_nothing(start_server: StartServer, model: ModelServer,
                                                  workspace: Path) -> None:
    client, before = await ready(start_server, model, workspace)
    turn, pid = await run_child(client, model)
    assert (await client.request(protocol.STOP, {}))["stopped"] is True
    assert (await turn)["status"] == "stopped"
    assert await gone([pid]) == []
    await back_to(client, before)
    assert (await client.execute("python", "print('still here')"))["status"] == "ok"


async def test_a_stop_while_a_proposal_waits_leaves_nothing(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    """The turn waits on the user, not on a task or a process: a stop still ends it as
    stopped (not as a cancelled request) and the proposal can no longer be approved."""
    client, before = await ready(start_server, model, workspace)
    model.script(ms.tool("python", "print('never')"), ms.text("unread"))
    since = len(client.notifications)
    turn = asyncio.create_task(client.chat("propose"))
    proposal = await next_proposal(client, since)
    assert (await client.request(protocol.STOP, {}))["stopped"] is True
    assert (await turn)["status"] == "stopped"
    with pytest.raises(Exception, match="no open proposal"):
        await client.approve(proposal["proposalId"], "run")
    await back_to(client, before)


DIRECT = {  # a run of each kind of REPL that starts a process ignoring SIGINT, and waits
    "python": CHILD,  # a Jupyter kernel
    "shell": "sleep 300 &\necho child $!\nwait\n",  # bash: a background job ignores SIGINT
}
if shutil.which("node"):  # a subprocess REPL (executors/repl.py)
    DIRECT["javascript"] = (
        "const cp = require('child_process');\n"
        "const c = cp.spawn('sh', ['-c', 'trap \"\" INT; sleep 300'], {stdio: 'ignore'});\n"
        "console.log('child', c.pid);\n"
        "cp.execSync('sleep 300');\n")
OK = {"python": "print('ok')", "shell": "echo ok", "javascript": "console.log('ok')"}


@pytest.mark.parametrize("language", sorted(DIRECT))
async def test_a_stopped_direct_run_leaves_nothing(start_server: StartServer, model: ModelServer,
                                                   workspace: Path, language: str) -> None:
    client, _ = await ready(start_server, model, workspace)
    await client.execute(language, OK[language])
    before = await settled(client)
    run = asyncio.create_task(client.execute(language, DIRECT[language]))
    pid = await child_pid(client)
    assert (await client.request(protocol.STOP, {}))["stopped"] is True
    assert (await run)["status"] == "stopped"
    assert await gone([pid]) == []
    await back_to(client, before)
    assert (await client.execute(language, OK[language]))["status"] == "ok"


async def test_an_execution_timeout_leaves_nothing(start_server: StartServer, model: ModelServer,
                                                   workspace: Path) -> None:
    client, before = await ready(start_server, model, workspace, executionTimeout=3)
    turn, pid = await run_child(client, model, ms.text("It timed out."))
    assert (await turn)["status"] == "done"
    assert "timed out after 3 s" in client.stream(type_="console")
    assert await gone([pid]) == []
    await back_to(client, before)


async def test_closing_the_folder_mid_turn_leaves_nothing(
        start_server: StartServer, model: ModelServer, workspace: Path, tmp_path: Path) -> None:
    client, before = await ready(start_server, model, workspace)
    other = tmp_path / "other"
    other.mkdir()
    folder = types.WorkspaceFolder(uri=to_uri(other), name="other")
    client.lsp.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[folder], removed=[])))
    turn, pid = await run_child(client, model, workspace=folder.uri)
    children = (await client.request(protocol.DEBUG_TASKS, {}))["children"]
    client.lsp.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[], removed=[folder])))
    assert (await asyncio.wait_for(turn, 60))["status"] == "stopped"
    assert await gone([pid]) == []
    await back_to(client, before)
    # Only the first folder's REPL is left of the server's children.
    left = (await client.request(protocol.DEBUG_TASKS, {}))["children"]
    assert pid not in left and len(left) < len(children)


async def test_a_vanished_client_leaves_nothing(start_server: StartServer, model: ModelServer,
                                                workspace: Path, data_dir: Path) -> None:
    client, _ = await ready(start_server, model, workspace)
    turn, pid = await run_child(client, model)
    server = client.process
    assert server is not None and server.stdin is not None
    repls = (await client.request(protocol.DEBUG_TASKS, {}))["children"]
    server.stdin.close()  # the editor is gone: no shutdown, no exit
    assert await asyncio.wait_for(server.wait(), 60) == 1
    with contextlib.suppress(RuntimeError):  # the chat's answer never came
        await turn
    assert await gone([pid, *repls]) == []
    log = client.stderr.decode(errors="replace")
    assert "Task was destroyed" not in log and "never retrieved" not in log, log[-3000:]
    # The run's code was saved with how it ended.
    saved = [m for path in await asyncio.to_thread(lambda: list(data_dir.rglob("*.jsonl")))
             for m in saved_messages(path) if m.get("content") == CHILD and m["type"] == "code"]
    assert [m.get("outcome") for m in saved] == ["stopped"], saved


class SlowStore(Store):
    """A slow disk: every save takes a second."""

    def write(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(1.0)
        super().write(*args, **kwargs)


@pytest.mark.parametrize("cancel", ["scope", "task"])
async def test_a_cancelled_save_still_saves(cancel: str, data_dir: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OI_LSP_DATA_DIR", str(data_dir))
    store = SlowStore()
    conversation = Conversation(to_uri(tmp_path), store, lambda _: None)
    conversation.record(Message(role="user", type="message", content="first"))
    await asyncio.sleep(0.2)  # its save is under way ...
    conversation.record(Message(role="user", type="message", content="second"))  # ... and this
    if cancel == "scope":  # a stop or a timeout
        with anyio.move_on_after(0.2):
            await conversation.flush()
    else:  # the server's loop ending
        flushing = asyncio.create_task(conversation.flush())
        await asyncio.sleep(0.2)
        flushing.cancel()
        await asyncio.wait([flushing])
    await asyncio.sleep(2.5)  # both saves' time, had they gone on
    saved = saved_messages(conversation.file())
    assert [m["content"] for m in saved] == ["first", "second"]
    await conversation.close()
