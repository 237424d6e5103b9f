"""The OS sandbox through the server: what oi/languages and oi/status show, a run the sandbox
blocked and its single-use escalation, autoRun inside the sandbox, a changed setting, code
that tries to kill the server, and daemons that try to outlive oi/reset and shutdown."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from oi_lsp.client import OIClient
from oi_lsp.executors.sandbox import landlock
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, tool_results
from tests.hardening import record, sigkill, wait_gone
from tests.modelserver import ModelServer

pytestmark = pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 or later")


def python(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in entries if (e.get("name") or e.get("language")) == "python")


def console(client: OIClient, result: dict[str, Any]) -> str:
    return client.stream(result["turnId"], "console")


async def test_blocked_run_escalates_once(start_server: StartServer, model: ModelServer,
                                          workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    client = await start_server(workspace, options=model.settings(sandbox="workspace-write"))
    languages = (await client.request("oi/languages", {}))["languages"]
    assert python(languages)["sandbox"] == "workspace-write"
    assert python(languages)["sandboxNetwork"] is True

    # Blocked: said to the user and the model; "outside" runs it once, in a fresh process.
    code = f"x = 5\nopen({str(outside / 'a')!r}, 'w').write('x')"
    model.script(ms.tool("python", code), ms.text("Done."))
    chat = asyncio.create_task(client.chat("write a"))
    await client.approve((await next_proposal(client))["proposalId"], "run")
    since = len(client.notifications)
    again = await client.wait_for("oi/proposal", lambda p: bool(p.get("sandboxBlocked")),
                                  since=since - 1)
    assert "Permission denied" in again["sandboxBlocked"] and again["autoRun"] is False
    assert again["risk"]["level"] == "high" and again["code"] == code
    assert not (outside / "a").exists()
    await client.approve(again["proposalId"], "outside")
    result = await chat
    assert (outside / "a").read_text() == "x"
    assert "blocked by the sandbox: " in console(client, result)
    told = tool_results(model.requests[1])[0]
    assert "blocked by the sandbox" in told

    # The next run is confined again, and the kernel kept its variables across the block.
    code = f"print('x is', x)\nopen({str(outside / 'b')!r}, 'w').write('x')"
    model.script(ms.tool("python", code), ms.text("Done."))
    since = len(client.notifications)
    chat = asyncio.create_task(client.chat("write b"))
    await client.approve((await next_proposal(client, since))["proposalId"], "run")
    again = await client.wait_for("oi/proposal", lambda p: bool(p.get("sandboxBlocked")),
                                  since=since)
    await client.approve(again["proposalId"], "skip")
    result = await chat
    assert "x is 5" in console(client, result) and not (outside / "b").exists()

    # "outside" answers nothing but a blocked run.
    model.script(ms.tool("python", "print(1)"), ms.text("Done."))
    since = len(client.notifications)
    chat = asyncio.create_task(client.chat("print"))
    proposal = await next_proposal(client, since)
    with pytest.raises(JsonRpcException, match="sandboxBlocked"):
        await client.approve(proposal["proposalId"], "outside")
    await client.approve(proposal["proposalId"], "skip")
    await chat
    status = await client.request("oi/status", {})
    assert python(status["repls"])["sandbox"] == "workspace-write"


async def test_auto_run_inside_the_sandbox(start_server: StartServer, model: ModelServer,
                                           workspace: Path) -> None:
    """autoRun with workspace-write (its default) runs medium risk code by itself; with the
    sandbox off, medium risk waits for the user; a changed setting restarts the REPL, said."""
    client = await start_server(workspace, options=model.settings(autoRun=True))
    medium = "import os\nopen('f.txt', 'w').close()\nos.remove('f.txt')\nprint('ran medium')"
    model.script(ms.tool("python", medium), ms.text("Done."))
    result = await client.chat("run it")
    assert "ran medium" in console(client, result)
    assert python((await client.request("oi/status", {}))["repls"])["sandbox"] == \
        "workspace-write"

    since = len(client.notifications)
    await client.request("oi/configure", {"sandbox": "off"})
    said = await client.wait_for("window/showMessage", since=since)
    assert "restarting" in said["message"] and "python" in said["message"]
    assert python((await client.request("oi/status", {}))["repls"])["sandbox"] == "off"
    # Restarted before the next run came: that run's output says so too, for the model,
    # as it does when the run comes first and restarts the REPL itself.
    after = await client.execute("python", "print('after')")
    assert "".join(o["content"] for o in after["outputs"]) == (
        "[the sandbox changed (workspace-write -> off): restarting the python REPL; its "
        "variables are lost]\nafter\n")
    again = await client.execute("python", "print('again')")
    assert "".join(o["content"] for o in again["outputs"]) == "again\n"  # said once
    model.script(ms.tool("python", medium), ms.text("Done."))
    since = len(client.notifications)
    chat = asyncio.create_task(client.chat("run it again"))
    proposal = await next_proposal(client, since)
    assert proposal["autoRun"] is False and proposal["risk"]["level"] == "medium"
    await client.approve(proposal["proposalId"], "skip")
    await chat

    # The editor's own settings change (didChangeConfiguration): the same.
    since = len(client.notifications)
    client.lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"oi": {"sandboxNetwork": False}}))
    said = await client.wait_for("window/showMessage", since=since)
    assert "no network" in said["message"] and "python" in said["message"]
    async with asyncio.timeout(60):  # said first, then restarted
        while python((await client.request("oi/status", {}))["repls"])["sandboxNetwork"]:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    assert python((await client.request("oi/status", {}))["repls"])["sandbox"] == "off"


async def test_code_cannot_kill_the_server(start_server: StartServer, model: ModelServer,
                                           workspace: Path) -> None:
    """The kernel's parent is its launcher: killing it ends the kernel, not the server."""
    client = await start_server(workspace, options=model.settings(sandbox="off"))
    await client.execute("python", "x = 1")
    await client.execute("python", "import os\nos.kill(os.getppid(), 9)")
    assert client.process is not None and client.process.returncode is None
    result = await client.execute("python", "print('still here')")
    assert "still here" in "".join(o["content"] for o in result["outputs"])
    record("sandbox", server_killed_by_its_code=0)


def _sleeps(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or ()):
            found.append(proc)
    return found


@pytest.mark.parametrize("sandbox", ["off", "workspace-write"])
async def test_daemons_end_with_reset_and_shutdown(start_server: StartServer,
                                                   model: ModelServer, workspace: Path,
                                                   sandbox: str) -> None:
    client = await start_server(workspace, options=model.settings(sandbox=sandbox))
    for end in ("reset", "shutdown"):
        seconds = str(1000 + uuid.uuid4().int % 8000)  # told apart by the sleep's length
        await client.execute("shell", f"setsid sleep {seconds} &\n"
                                      f"( ( sleep {seconds} & ) & )")
        await client.execute("python", f"import subprocess\nsubprocess.Popen(['setsid', "
                                       f"'sleep', '{seconds}'], start_new_session=True)")
        async with asyncio.timeout(10):
            while len(_sleeps(f"sleep {seconds}")) < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        daemons = _sleeps(f"sleep {seconds}")
        if end == "reset":
            await client.request("oi/reset", {})
        else:
            await client.close()
        assert await wait_gone(daemons, timeout=10) == []
        record("sandbox", **{f"daemons_left_after_{end}_{sandbox}": f"0 of {len(daemons)}"})


async def test_server_death_mid_run_loses_only_the_run(start_server: StartServer,
                                                       model: ModelServer,
                                                       workspace: Path) -> None:
    client = await start_server(workspace)
    model.script(ms.text("First answer."))
    assert (await client.chat("first question"))["status"] == "done"
    model.script(ms.tool("python", "import time\nprint('running', flush=True)\n"
                                   "time.sleep(60)"))
    chat = asyncio.create_task(client.chat("second question"))
    await client.approve((await next_proposal(client))["proposalId"], "run")
    await client.wait_for("oi/stream", lambda p: "running" in (p.get("content") or ""))
    await sigkill(client)
    chat.cancel()
    client = await start_server(workspace)
    history = (await client.request("oi/history", {}))["messages"]
    said = [m["content"] for m in history]
    assert "first question" in said and "First answer." in said and "second question" in said


async def test_the_kernel_starts_in_the_settled_sandbox(start_server: StartServer,
                                                        workspace: Path) -> None:
    """The kernel started as the folder opens, and a first run sent at once, wait until the
    folder's settings files are read (until then `trusted` reads false, which would mean the
    sandbox): the trusted folder's kernel is unconfined from its start, never restarted."""
    client = await start_server(workspace)
    first = await client.execute("python", "kept = 41")
    await asyncio.sleep(1)
    second = await client.execute("python", "print(kept + 1)")
    shown = "".join(o["content"] for o in (*first["outputs"], *second["outputs"]))
    assert shown == "42\n", shown
    status = await client.request("oi/status", {})
    assert python(status["repls"])["sandbox"] == "off"
