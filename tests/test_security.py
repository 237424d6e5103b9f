"""Security: no code runs unapproved, API keys never leak, network transports need a token,
untrusted workspaces cannot turn auto-run on."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import psutil
import pytest
from pygls.exceptions import JsonRpcException

from oi_lsp.client import OIClient, server_command, to_uri
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal
from tests.hardening import (
    frame,
    free_port,
    initialize_request,
    read_frame,
    read_response,
    record,
)
from tests.modelserver import ModelServer

FAKE_KEY = "OIFAKEKEY-7f3a9c1e5b-DO-NOT-LEAK"


def writer(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')"


async def refused(call: Any) -> int:
    with pytest.raises(JsonRpcException) as info:
        await call
    return int(info.value.code)


# Approvals ---------------------------------------------------------------------------------

async def test_no_code_runs_without_approval(start_server: StartServer, model: ModelServer,
                                             tmp_path: Path) -> None:
    ws1, ws2 = tmp_path / "one", tmp_path / "two"
    ws1.mkdir()
    ws2.mkdir()
    client = await start_server(ws1, ws2)
    paths = 0

    # An id approved before any proposal exists is refused.
    assert await refused(client.approve("made-up-id", "run")) == -32602
    paths += 1

    # A replayed id: the first proposal ran; its id does not approve the second.
    first, second = tmp_path / "first", tmp_path / "second"
    model.script(ms.tool("python", writer(first)), ms.tool("python", writer(second)),
                 ms.text("done"))
    chat = asyncio.create_task(client.chat("write", workspace=to_uri(ws1)))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "run")
    since = len(client.notifications)
    nxt = await next_proposal(client, since)
    assert await refused(client.approve(proposal["proposalId"], "run")) == -32602
    paths += 1

    # The second proposal's id, given with another workspace, is refused.
    assert await refused(client.approve(nxt["proposalId"], "run",
                                        workspace=to_uri(ws2))) == -32602
    paths += 1

    # Stop, then approve: refused, and the turn ended without running it.
    assert (await client.request("oi/stop", {"workspace": to_uri(ws1)}))["stopped"] is True
    assert await refused(client.approve(nxt["proposalId"], "run")) == -32602
    paths += 1
    assert (await chat)["status"] == "stopped"
    # Anything queued would have run before this (runs of a workspace are serialized).
    assert (await client.execute("python", "print('after')",
                                 workspace=to_uri(ws1)))["status"] == "ok"
    assert first.exists()  # the approved one did run: the marker mechanism works
    assert not second.exists()

    # A proposal of ws2 cannot be approved with ws1's name either, and ws2's own id works.
    third = tmp_path / "third"
    model.reset()  # the stopped turn left "done" unread
    model.script(ms.tool("python", writer(third)), ms.text("ok"))
    since = len(client.notifications)
    chat = asyncio.create_task(client.chat("write", workspace=to_uri(ws2)))
    proposal = await next_proposal(client, since)
    assert await refused(client.approve(proposal["proposalId"], "run",
                                        workspace=to_uri(ws1))) == -32602
    paths += 1
    await client.approve(proposal["proposalId"], "skip", workspace=to_uri(ws2))
    assert (await chat)["status"] == "done"
    assert not third.exists()
    record("security", unapproved_paths_tried=paths, unapproved_runs=0)


async def test_auto_run_runs_without_approval(client: OIClient, model: ModelServer,
                                              workspace: Path) -> None:
    """The control: with autoRun the same code does run (so the checks above can fail)."""
    marker = workspace / "auto"
    await client.request("oi/configure", {"autoRun": True})
    model.script(ms.tool("python", writer(marker)), ms.text("ok"))
    result = await client.chat("write")
    assert result["status"] == "done" and marker.exists()
    proposal = await client.wait_for("oi/proposal")
    assert proposal["autoRun"] is True


# Untrusted workspaces ---------------------------------------------------------------------

async def test_untrusted_workspace_ignores_auto_run(start_server: StartServer,
                                                    model: ModelServer,
                                                    workspace: Path) -> None:
    marker = workspace / "untrusted"
    profile = workspace / ".oi" / "profile.yaml"
    profile.parent.mkdir()
    profile.write_text("autoRun: true\nauto_run: true\n")
    client = await start_server(workspace, options=model.settings(trusted=False, autoRun=True))
    await client.request("oi/configure", {"autoRun": True})  # ignored as well
    model.script(ms.tool("python", writer(marker)), ms.text("ok"))
    chat = asyncio.create_task(client.chat("write"))
    proposal = await next_proposal(client)
    assert proposal["autoRun"] is False
    await asyncio.sleep(1)
    assert not marker.exists()
    await client.approve(proposal["proposalId"], "skip")
    assert (await chat)["status"] == "done"
    assert not marker.exists()


# API keys ------------------------------------------------------------------------------------

async def test_api_key_never_leaks(model: ModelServer, data_dir: Path, workspace: Path) -> None:
    client = OIClient()
    await client.start([*server_command(), "--log-level", "debug"],
                       env={"OI_LSP_DATA_DIR": str(data_dir)})
    try:
        await client.initialize([workspace], options=model.settings(apiKey=FAKE_KEY))
        # Providers echo the key in their errors; litellm puts it in exceptions and logs.
        model.script(ms.error(401, f"Incorrect API key provided: {FAKE_KEY}"))
        first = await client.chat("hello")
        assert first["status"] == "error" and "check your API key" in first["error"]
        model.script(ms.error(500, f"internal error for key {FAKE_KEY}"),
                     ms.error(500, f"internal error for key {FAKE_KEY}"),
                     ms.error(500, f"internal error for key {FAKE_KEY}"),
                     ms.error(500, f"internal error for key {FAKE_KEY}"))
        second = await client.chat("again")
        assert second["status"] == "error"
        model.script(ms.tool("python", f"print('the key is' , {FAKE_KEY[:4]!r})"),
                     ms.text("fine"))
        chat = asyncio.create_task(client.chat("run"))
        proposal = await next_proposal(client)
        await client.approve(proposal["proposalId"], "run")
        await chat
        errors = []
        for params in ({"apiKey": 12}, {"apiKey": FAKE_KEY, "temperature": "hot"},
                       {"apiKey": [FAKE_KEY]}):
            with pytest.raises(JsonRpcException) as info:
                await client.request("oi/configure", params)
            errors.append(str(info.value))
        configured = await client.request("oi/configure", {"apiKey": FAKE_KEY})
        history = await client.request("oi/history", {})
        assert {k.lower(): v for k, v in model.headers[0].items()}["authorization"] == (
            f"Bearer {FAKE_KEY}")  # it was used
    finally:
        await client.close()
    await asyncio.sleep(0.2)
    places = {
        "stderr (debug log)": client.stderr.decode(errors="replace"),
        "notifications": json.dumps(client.notifications),
        "responses": json.dumps([first, second, configured, history]),
        "error messages": json.dumps(errors),
        "session files": _read_all(data_dir),
    }
    assert "DEBUG" in places["stderr (debug log)"]  # the debug log was really on
    leaks = [where for where, text in places.items() if FAKE_KEY in text]
    assert leaks == []
    record("security", key_leak_places_checked=len(places), key_leaks=len(leaks))


# Network transports ---------------------------------------------------------------------------

async def start_network(*args: str, env: dict[str, str] | None = None,
                        ) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *server_command(), *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})})


async def connect(port: int, timeout: float = 30
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)


async def stop(proc: asyncio.subprocess.Process) -> bytes:
    if proc.returncode is None:
        proc.kill()
    _, err = await proc.communicate()
    return err


def request(msg_id: int, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


async def test_tcp_requires_the_token(workspace: Path, data_dir: Path) -> None:
    port = free_port()
    proc = await start_network("--tcp", "--port", str(port),
                               env={"OI_LSP_DATA_DIR": str(data_dir)})
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line.startswith(b"oi-lsp token: ")
        token = line.split(b": ", 1)[1].strip().decode()
        reader, writer = await connect(port)
        listening = [c.laddr for c in psutil.Process(proc.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN]
        assert [addr.ip for addr in listening] == ["127.0.0.1"]

        # Before a good initialize, nothing is served: not a request, not a wrong token.
        writer.write(frame(request(1, "oi/execute", {"language": "python", "code": "1"})))
        writer.write(frame(initialize_request(2, workspace)))  # no token
        writer.write(frame(initialize_request(3, workspace, {"token": token + "x"})))
        writer.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        writer.write(frame(request(4, "oi/history", {})))
        await writer.drain()
        codes = [(await read_response(reader, i))["error"]["code"] for i in (1, 2, 3, 4)]
        assert codes == [-32001] * 4

        # A second connection is closed at once, whatever it sends.
        other_reader, other_writer = await connect(port)
        other_writer.write(frame(initialize_request(1, workspace, {"token": token})))
        with pytest.raises((EOFError, ConnectionError)):
            await read_frame(other_reader, timeout=10)
        other_writer.close()

        writer.write(frame(initialize_request(5, workspace, {"oi": {"token": token}})))
        await writer.drain()
        assert "capabilities" in (await read_response(reader, 5))["result"]
        writer.write(frame(request(6, "oi/history", {})))
        await writer.drain()
        assert "messages" in (await read_response(reader, 6))["result"]
        writer.close()
    finally:
        err = await stop(proc)
    assert err.count(token.encode()) == 0  # printed once (read above), never logged again
    record("security", tcp_refused_before_token=4)


async def test_ws_requires_the_token(workspace: Path, data_dir: Path) -> None:
    from websockets.asyncio.client import connect as ws_connect

    port = free_port()
    token_file = data_dir / "token"
    token_file.write_text("s3cret-token\n")
    proc = await start_network("--ws", "--port", str(port), "--token-file", str(token_file),
                               env={"OI_LSP_DATA_DIR": str(data_dir)})
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    ws = await ws_connect(f"ws://127.0.0.1:{port}")
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        async with ws:
            await ws.send(json.dumps(initialize_request(1, workspace, {"token": "wrong"})))
            assert json.loads(await ws.recv())["error"]["code"] == -32001
            await ws.send(json.dumps(initialize_request(2, workspace, {"token": "s3cret-token"})))
            while "result" not in (reply := json.loads(await ws.recv())):
                pass
            assert reply["id"] == 2
    finally:
        await stop(proc)


async def test_token_from_env_and_remote_bind_needs_a_flag() -> None:
    port = free_port()
    refused_proc = await start_network("--tcp", "--host", "0.0.0.0", "--port", str(port))
    err = await asyncio.wait_for(refused_proc.communicate(), 30)
    assert refused_proc.returncode != 0 and b"--allow-remote" in err[1]

    proc = await start_network("--tcp", "--host", "0.0.0.0", "--port", str(port),
                               "--allow-remote", "--log-level", "warning",
                               env={"OI_LSP_TOKEN": "from-env-token"})
    try:
        reader, writer = await connect(port)
        writer.write(frame(initialize_request(1, None, {"token": "from-env-token"})))
        await writer.drain()
        assert "result" in await read_response(reader, 1)
        writer.close()
    finally:
        err2 = await stop(proc)
    assert b"anyone who can reach it" in err2
    assert b"oi-lsp token:" not in err2  # a token given is not printed


def _read_all(folder: Path) -> str:
    """Every file under `folder`, as text (the saved sessions, spill files, ...)."""
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_the_token_is_never_a_command_line_argument(tmp_path: Path) -> None:
    """`ps` shows every process's arguments to every user: the token comes from a file or the
    environment, and --help says so."""
    import subprocess

    help_text = subprocess.run([*server_command(), "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "--token-file" in help_text and "ps" in help_text
    assert "--token " not in help_text and "--token TOKEN" not in help_text
    refused = subprocess.run([*server_command(), "--tcp", "--token", "visible"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--token is not accepted" in refused.stderr
    assert "--token-file PATH or set $OI_LSP_TOKEN" in refused.stderr
    empty = tmp_path / "token"
    empty.write_text("\n")
    failed = subprocess.run([*server_command(), "--tcp", "--token-file", str(empty)],
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "is empty" in failed.stderr
