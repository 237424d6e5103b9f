"""The server as an LSP peer: bad params, plain clients, settings, transports, streaming."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from oi_lsp.client import OIClient, server_command, to_uri
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, tool_results
from tests.hardening import wait_gone
from tests.modelserver import ModelServer

BAD_PARAMS: dict[str, list[Any]] = {
    "oi/chat": [None, [], "hi", {}, {"message": 3}, {"message": ""},
                {"message": "x", "context": "nope"}, {"message": "x", "workspace": 7},
                {"message": "x", "workspace": "file:///no/such/folder"}],
    "oi/approve": [{}, {"proposalId": "p"}, {"proposalId": "p", "decision": "maybe"},
                   {"proposalId": "p", "decision": "edit"}, {"proposalId": 5, "decision": "run"},
                   {"proposalId": "never-issued", "decision": "run"}],
    "oi/execute": [{}, {"language": "python"}, {"code": "1"}, {"language": 1, "code": "1"},
                   {"language": "python", "code": "1", "timeout": -1}],
    "oi/stop": [[1], {"workspace": 1}],
    "oi/reset": ["x", {"workspace": ["a"]}],
    "oi/history": [3, {"workspace": False}],
    "oi/configure": [[], {"autoRun": "yes"}, {"maxOutput": "big"}, {"temperature": 9}],
    "oi/languages": ["all"],
}


async def test_malformed_params_get_invalid_params(client: OIClient) -> None:
    await client.execute("python", "kept = 1")
    for method, cases in BAD_PARAMS.items():
        for params in cases:
            future = client.lsp.protocol.send_request(method, params)
            with pytest.raises(Exception) as info:
                result = await asyncio.wait_for(asyncio.wrap_future(future), 30)
                pytest.fail(f"{method} {params!r} was accepted: {result!r}")
            assert getattr(info.value, "code", None) == -32602, (method, params, info.value)
    # The server kept serving, and nothing was lost.
    after = await client.execute("python", "print(kept)")
    assert after["outputs"][0]["content"] == "1\n"


async def test_invalid_params_name_the_field(client: OIClient) -> None:
    with pytest.raises(Exception, match="decision"):
        await client.request("oi/approve", {"proposalId": "p", "decision": "maybe"})
    with pytest.raises(Exception, match="message"):
        await client.request("oi/chat", {"message": 3})


async def test_plain_lsp_client_fallback(start_server: StartServer, model: ModelServer,
                                         workspace: Path) -> None:
    client = await start_server(workspace, oi=False)
    client.message_box = lambda message, actions: "Run"
    model.script(ms.tool("python", "print('via message box')"), ms.text("Done it."))
    result = await client.chat("go")
    assert result["status"] == "done"
    box = await client.wait_for("window/showMessageRequest")
    assert box["actions"] == ["Run", "Skip", "Always this code"]
    assert "via message box" in box["message"]
    assert "via message box" in client.stream(result["turnId"], "console")
    logged = await client.wait_for("window/logMessage",
                                   lambda p: p["message"] == "Done it.")
    assert logged["type"] == int(types.MessageType.Info)

    since = len(client.notifications)
    client.message_box = lambda message, actions: "Skip"
    model.script(ms.tool("python", "print('should not run')"), ms.text("Skipped."))
    via_command = await client.lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(command="oi.chat", arguments=["again"]))
    assert via_command["status"] == "running"  # the command answers at once
    await client.wait_for("oi/turn", lambda p: p["turnId"] == via_command["turnId"]
                          and p["status"] == "done")
    assert "should not run" not in client.stream(via_command["turnId"], "console")
    await client.wait_for("window/showMessageRequest", since=since)


async def test_initialize_does_not_import_litellm(model: ModelServer, data_dir: Path,
                                                  workspace: Path) -> None:
    client = OIClient()
    # -X importtime makes the interpreter report every import on stderr as it happens.
    await client.start([sys.executable, "-X", "importtime", "-m", "oi_lsp"],
                       env={"OI_LSP_DATA_DIR": str(data_dir), "OI_LSP_WARM_UP": "1"})
    try:
        await client.lsp.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"oi": True}),
            workspace_folders=[types.WorkspaceFolder(uri=to_uri(workspace), name="ws")],
            initialization_options=model.settings()))
        await client.execute("python", "1")  # a full request later: stderr has caught up
        assert b"litellm" not in client.stderr
        # Nor YAML (profiles and rules files: read later, when a workspace has them).
        served = client.stderr.index(b"| oi_lsp.lsp.server\n")
        assert not re.search(rb"\|\s+yaml$", client.stderr[:served], re.MULTILINE)
        client.lsp.initialized(types.InitializedParams())  # now it loads in the background
        async with asyncio.timeout(120):  # without a chat: the warm-up loads it
            while b"| litellm\n" not in client.stderr:  # noqa: ASYNC110 (stderr: no event)
                await asyncio.sleep(0.1)
        model.script(ms.text("loaded"))
        assert (await client.chat("hi"))["status"] == "done"
    finally:
        await client.close()


async def test_no_warm_up_loads_litellm_at_the_first_chat(model: ModelServer, data_dir: Path,
                                                          workspace: Path) -> None:
    """OI_LSP_WARM_UP=0 (what the tests run with: most of their servers never chat): nothing
    loads litellm until a turn needs it."""
    client = OIClient()
    await client.start([sys.executable, "-X", "importtime", "-m", "oi_lsp"],
                       env={"OI_LSP_DATA_DIR": str(data_dir), "OI_LSP_WARM_UP": "0"})
    try:
        await client.initialize([workspace], options=model.settings())
        await client.execute("python", "1")  # the folder's kernel is up: a warm-up would begin
        await asyncio.sleep(3)  # what must not happen has no event: time for it to begin
        assert b"litellm" not in client.stderr
        model.script(ms.text("loaded now"))
        assert (await client.chat("hi"))["status"] == "done"
        assert b"| litellm\n" in client.stderr
    finally:
        await client.close()


async def test_settings_layers_and_configure(start_server: StartServer, model: ModelServer,
                                             workspace: Path) -> None:
    client = await start_server(workspace, options={"oi": {"maxOutput": 10, "maxOutptu": 1,
                                                           "autoRun": "not a bool"}},
                                env={"OI_MODEL": "openai/scripted", "OI_API_BASE": model.url,
                                     "OI_API_KEY": "sk-from-env"})
    bad = await client.wait_for("window/showMessage", lambda m: "autoRun" in m["message"])
    assert bad["type"] == types.MessageType.Error
    # An editor setting's typo is shown once, with the setting it was probably meant to be.
    typo_shown = await client.wait_for("window/showMessage", lambda m: "maxOutptu" in m["message"])
    assert typo_shown["type"] == types.MessageType.Warning
    assert typo_shown["message"] == ("oi-lsp: unknown setting 'maxOutptu' (did you mean "
                                     "'maxOutput'?) is ignored")
    effective = (await client.request("oi/configure", {}))["settings"]
    assert effective["model"] == "openai/scripted" and effective["maxOutput"] == 10
    assert effective["autoRun"] is False and effective["apiKeySet"] is True
    assert "apiKey" not in effective
    result = await client.request("oi/configure", {"temperature": 0.5})
    assert result["settings"]["temperature"] == 0.5 and result["warnings"] == []
    # A typo is refused, naming the setting it was probably meant to be; nothing changes.
    with pytest.raises(JsonRpcException) as typo:
        await client.request("oi/configure", {"reasoningEfort": "high", "temperature": 0.9})
    assert "unknown setting 'reasoningEfort' (did you mean 'reasoningEffort'?)" in str(typo.value)
    with pytest.raises(JsonRpcException, match="unknown setting 'mystery': nothing"):
        await client.request("oi/configure", {"mystery": True})
    assert (await client.request("oi/configure", {}))["settings"]["temperature"] == 0.5

    client.lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"oi": {"maxOutput": 20, "maxOutptu": 2}}))
    # Another server's section (eglot sends one object for all servers) is not ours to report.
    client.lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"pylsp": {"plugins": {}}}))
    await asyncio.sleep(0.2)
    assert (await client.request("oi/configure", {}))["settings"]["maxOutput"] == 20
    shown = [p["message"] for m, p in client.notifications if m == "window/showMessage"]
    assert sum("maxOutptu" in text for text in shown) == 1, shown
    assert not any("pylsp" in text for text in shown), shown

    # The pull model: no settings in the notification; the server asks for section `oi`.
    client.configuration = {"maxOutput": 30}
    client.lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings=None))
    for _ in range(50):
        if (await client.request("oi/configure", {}))["settings"]["maxOutput"] == 30:
            break
        await asyncio.sleep(0.1)
    assert (await client.request("oi/configure", {}))["settings"]["maxOutput"] == 30

    # A 41-character output (with its newline) comes back trimmed to 30: start and end kept.
    model.script(ms.tool("python", "print('A' * 20 + 'Z' * 20)"), ms.text("ok"))
    chat = asyncio.create_task(client.chat("print"))
    await client.approve((await next_proposal(client))["proposalId"], "run")
    await chat
    told = tool_results(model.requests[1])[0]
    assert told.startswith("A" * 15 + "\n[... 11 characters omitted ...]\n" + "Z" * 14)


async def test_workspace_folders_change(start_server: StartServer, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    client = await start_server(a)
    client.lsp.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(
            added=[types.WorkspaceFolder(uri=to_uri(b), name="b")], removed=[])))
    out = await client.execute("python", "import os; print(os.getcwd())", workspace=to_uri(b))
    assert out["outputs"][0]["content"].strip() == str(b.resolve())
    # With no workspace given, a request goes to the folder holding the context file.
    history = await client.request("oi/history", {"workspace": to_uri(b) + "/"})
    assert history["workspace"] == to_uri(b)


async def test_output_flood_is_coalesced(client: OIClient) -> None:
    since = len(client.notifications)
    result = await client.execute("python", "for i in range(200_000): print(i)")
    assert result["status"] == "ok"
    text = result["outputs"][0]["content"]
    assert text == "".join(f"{i}\n" for i in range(200_000))
    chunks = [p for m, p in client.notifications[since:] if m == "oi/stream"
              and p["turnId"] == result["turnId"] and p["type"] == "console"]
    assert "".join(p.get("content") or "" for p in chunks) == text
    assert len(chunks) < 500  # 200,000 prints, a few hundred notifications at most


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_network_transports(transport: str, data_dir: Path, workspace: Path) -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        *server_command(), transport, "--port", str(port),
        env={**os.environ, "OI_LSP_DATA_DIR": str(data_dir), "OI_LSP_TOKEN": "test-token"},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    client = OIClient()
    try:
        for _ in range(100):
            try:
                if transport == "--tcp":
                    await client.lsp.start_tcp("127.0.0.1", port)
                else:
                    await client.lsp.start_ws("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        await client.initialize([workspace], options={"token": "test-token"})
        out = await client.execute("python", "print('over the network')")
        assert out["outputs"][0]["content"] == "over the network\n"
    finally:
        proc.kill()
        await proc.wait()
        await client.lsp.stop()


async def test_kernel_that_cannot_start_is_a_clear_error(start_server: StartServer,
                                                        model: ModelServer,
                                                        workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(kernelName="no-such-kernel"))
    result = await client.execute("python", "print(1)")
    assert result["status"] == "error" and "could not start python" in result["error"]
    assert "no-such-kernel" in result["outputs"][0]["content"]
    again = await client.execute("python", "print(1)")  # tried again, same clear answer
    assert again["status"] == "error"


async def test_large_request_arrives_whole(client: OIClient) -> None:
    # Far bigger than one pipe read: the server must read the whole body before parsing it.
    code = "s = '" + "x" * 3_000_000 + "'\nprint(len(s))"
    result = await client.execute("python", code)
    assert result["outputs"][0]["content"] == "3000000\n"


async def test_text_beyond_ascii_arrives_whole(client: OIClient) -> None:
    # Message lengths on the wire count bytes: non-ASCII text in a request, in streamed
    # chunks and in the result, and more of it than one write or one pipe buffer holds.
    code = "s = 'é✓日本😀'\nprint(s * 3)\nprint('日本' * 200_000)"
    result = await client.execute("python", code)
    expected = "é✓日本😀" * 3 + "\n" + "日本" * 200_000 + "\n"
    assert result["status"] == "ok"
    assert result["outputs"][0]["content"] == expected
    assert client.stream(result["turnId"], "console") == expected


@pytest.mark.parametrize("polite", [True, False], ids=["shutdown-then-exit", "exit-alone"])
async def test_exit_status_and_kernels(model: ModelServer, data_dir: Path, workspace: Path,
                                       polite: bool) -> None:
    """`exit` after `shutdown` ends the server with 0, without it with 1 (the LSP rule); its
    kernel is gone either way."""
    client = OIClient()
    await client.start(env={"OI_LSP_DATA_DIR": str(data_dir)})
    await client.initialize([workspace], options=model.settings())
    assert (await client.execute("python", "1", workspace=to_uri(workspace)))["status"] == "ok"
    assert client.process is not None
    kernels = psutil.Process(client.process.pid).children(recursive=True)
    assert kernels
    if polite:
        await client.lsp.shutdown_async(None)
    client.lsp.exit(None)
    async with asyncio.timeout(30):
        code = await client.process.wait()
    await client.close()
    assert code == (0 if polite else 1)
    assert await wait_gone(kernels, 10) == []
