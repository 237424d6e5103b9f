"""End to end over stdio: chat → proposal → approval → run → result back to the model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types

from oi_lsp.client import OIClient, to_uri
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, start_sleeping_run, tool_results
from tests.modelserver import ModelServer


async def test_chat_streams_text(client: OIClient, model: ModelServer) -> None:
    model.script(ms.text("Hello **there**, I am streamed.", pieces=5))
    result = await client.chat("hi")
    assert result["status"] == "done"
    assert client.stream(result["turnId"], "message") == "Hello **there**, I am streamed."
    chunks = [p for m, p in client.notifications if m == "oi/stream"
              and p["turnId"] == result["turnId"] and p["type"] == "message"]
    assert chunks[0].get("start") and chunks[-1].get("end")
    turns = [p["status"] for m, p in client.notifications if m == "oi/turn"]
    assert turns == ["running", "done"]
    assert model.requests[0]["messages"][-1] == {"role": "user", "content": "hi"}
    assert model.requests[0]["tools"][0]["function"]["name"] == "execute"


async def test_run_then_repl_persists(client: OIClient, model: ModelServer) -> None:
    model.script(ms.tool("python", "x = 41\nprint('x is set')", say="Setting x."),
                 ms.text("x is 41 now."))
    chat = asyncio.create_task(client.chat("set x"))
    proposal = await next_proposal(client)
    assert proposal["language"] == "python" and "x = 41" in proposal["code"]
    assert proposal["autoRun"] is False
    await client.approve(proposal["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    assert "x is set" in client.stream(result["turnId"], "console")
    assert tool_results(model.requests[1]) == ["x is set"]
    assert client.stream(result["turnId"], "message") == "Setting x.x is 41 now."

    since = len(client.notifications)
    model.script(ms.tool("python", "print(x + 1)"), ms.text("It printed 42."))
    chat = asyncio.create_task(client.chat("add one"))
    proposal = await next_proposal(client, since)
    await client.approve(proposal["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    assert "42" in client.stream(result["turnId"], "console")
    # The second turn's first request carries the whole first turn, tool call and result.
    msgs = model.requests[2]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "execute"


async def test_skip_runs_nothing(client: OIClient, model: ModelServer, workspace: Path) -> None:
    marker = workspace / "ran.txt"
    model.script(ms.tool("python", f"open({str(marker)!r}, 'w').write('x')"),
                 ms.text("OK, I won't."))
    chat = asyncio.create_task(client.chat("write a file"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "skip")
    assert (await chat)["status"] == "done"
    assert not marker.exists()
    assert "declined" in tool_results(model.requests[1])[0]


async def test_edit_runs_edited_code(client: OIClient, model: ModelServer) -> None:
    model.script(ms.tool("python", "print('original')"), ms.text("Noted."))
    chat = asyncio.create_task(client.chat("print something"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "edit", code="print('edited by user')")
    result = await chat
    console = client.stream(result["turnId"], "console")
    assert "edited by user" in console and "original" not in console
    told = tool_results(model.requests[1])[0]
    assert "edited" in told and "print('edited by user')" in told


async def test_stop_during_long_run(client: OIClient, model: ModelServer) -> None:
    chat = await start_sleeping_run(client, model, "state survives a stop")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await client.request("oi/stop", {}))["stopped"] is True
    result = await asyncio.wait_for(chat, 10)
    assert result["status"] == "stopped"
    assert loop.time() - started < 5  # "well under a second" is measured in bench/
    after = await client.execute("python", "print(kept)")
    assert after["status"] == "ok"
    assert after["outputs"][0]["content"] == "state survives a stop\n"  # no restart


async def test_cancel_request_stops_turn(client: OIClient, model: ModelServer) -> None:
    model.script(ms.tool("python", "print('never')"))
    request = client.lsp.protocol.send_request("oi/chat", {"message": "go"}, msg_id="chat-1")
    await next_proposal(client)
    client.lsp.protocol.notify("$/cancelRequest", types.CancelParams(id="chat-1"))
    await client.wait_for("oi/turn", lambda p: p["status"] == "stopped", timeout=10)
    try:
        await asyncio.wait_for(asyncio.wrap_future(request), 10)
    except Exception as exc:  # a cancelled request answers with RequestCancelled
        assert "cancel" in str(exc).lower()
    # Nothing ran, and the workspace takes a new turn.
    model.script(ms.text("fine"))
    assert (await client.chat("again"))["status"] == "done"


async def test_fenced_code_block_fallback(client: OIClient, model: ModelServer) -> None:
    model.script(ms.text("Let me check.\n```python\nprint(6 * 7)\n```\n"), ms.text("It is 42."))
    chat = asyncio.create_task(client.chat("what is 6*7"))
    proposal = await next_proposal(client)
    assert proposal["code"] == "print(6 * 7)"
    await client.approve(proposal["proposalId"], "run")
    result = await chat
    assert "42" in client.stream(result["turnId"], "console")
    last = model.requests[1]["messages"][-1]
    assert last["role"] == "user" and "42" in last["content"]


async def test_auto_run(start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(autoRun=True))
    model.script(ms.tool("python", "print('auto')"), ms.text("ran it"))
    result = await client.chat("go")
    proposal = await client.wait_for("oi/proposal")
    assert proposal["autoRun"] is True
    assert "auto" in client.stream(result["turnId"], "console")


async def test_invalid_tool_call_is_told_to_model(client: OIClient, model: ModelServer) -> None:
    model.script(ms.tool("", "", arguments='{"language": "python", "code": '),
                 ms.tool("", "", name="browse", arguments="{}"),
                 ms.text("Sorry."))
    result = await client.chat("go")
    assert result["status"] == "done"
    assert "not valid JSON" in tool_results(model.requests[1])[0]
    assert "Unknown tool 'browse'" in tool_results(model.requests[2])[1]


async def test_model_errors_end_turn_cleanly(client: OIClient, model: ModelServer) -> None:
    model.script(ms.error(401, "bad key"))
    result = await client.chat("hi")
    assert result["status"] == "error" and "API key" in result["error"]
    assert "sk-test-key" not in result["error"]
    model.script(ms.text("recovered"))
    assert (await client.chat("again"))["status"] == "done"


async def test_no_model_configured(start_server: StartServer, workspace: Path) -> None:
    client = await start_server(workspace, options={})
    result = await client.chat("hi")
    assert result["status"] == "error" and "No model is configured" in result["error"]


async def test_two_workspaces_are_isolated(start_server: StartServer, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    client = await start_server(a, b)
    set_a = await client.execute("python", "secret = 'only in a'", workspace=to_uri(a))
    assert set_a["status"] == "ok"
    in_b = await client.execute("python", "print(secret)", workspace=to_uri(b))
    assert in_b["status"] == "error" and "NameError" in in_b["error"]
    cwd_b = await client.execute("python", "import os; print(os.getcwd())", workspace=to_uri(b))
    assert cwd_b["outputs"][0]["content"].strip() == str(b.resolve())


async def test_history_survives_restart(start_server: StartServer, model: ModelServer,
                                        workspace: Path) -> None:
    first = await start_server(workspace)
    model.script(ms.tool("python", "print('hello')"), ms.text("Printed hello."))
    chat = asyncio.create_task(first.chat("say hello"))
    await first.approve((await next_proposal(first))["proposalId"], "run")
    await chat
    await first.close()

    second = await start_server(workspace)
    history = (await second.request("oi/history", {}))["messages"]
    assert [(m["role"], m["type"]) for m in history] == [
        ("user", "message"), ("assistant", "code"), ("computer", "confirmation"),
        ("computer", "console"), ("assistant", "message")]
    model.script(ms.text("I remember."))
    await second.chat("do you remember?")
    roles = [m["role"] for m in model.requests[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_context_reaches_model(client: OIClient, model: ModelServer,
                                     workspace: Path) -> None:
    model.script(ms.text("That squares x."))
    context = {"uri": to_uri(workspace / "m.py"), "language": "python",
               "selection": "y = x ** 2",
               "range": {"start": {"line": 2, "character": 0}, "end": {"line": 2,
                                                                       "character": 10}}}
    await client.chat("explain", context=context)
    sent = model.requests[0]["messages"][-1]["content"]
    assert "y = x ** 2" in sent and "m.py" in sent and "lines 3-3" in sent


async def test_stop_closes_a_slow_model_stream(client: OIClient, model: ModelServer) -> None:
    model.script(ms.text("word " * 100, pieces=100, delay=0.1))  # ten seconds of text
    chat = asyncio.create_task(client.chat("talk"))
    await client.wait_for("oi/stream", lambda p: p["type"] == "message" and bool(p.get("content")))
    await client.request("oi/stop", {})
    result = await asyncio.wait_for(chat, 10)
    assert result["status"] == "stopped"
    for _ in range(50):  # the server hung up: the model stops generating
        if model.disconnects:
            break
        await asyncio.sleep(0.1)
    assert model.disconnects == 1
    history = (await client.request("oi/history", {}))["messages"]
    assert history[-1]["role"] == "assistant" and history[-1]["content"].startswith("word")


async def test_auto_run_turned_on_during_a_turn_covers_its_next_proposals(
        client: OIClient, model: ModelServer) -> None:
    """A client's "always": oi/configure autoRun while a proposal waits, then run it."""
    # Chosen, so that autoRun does not change it (its default would then be workspace-write,
    # and the REPL restart before the next run, saying so: tests/test_sandbox_server.py).
    await client.request("oi/configure", {"sandbox": "off"})
    model.script(ms.tools(("python", "print('first')"), ("python", "print('second')")),
                 ms.text("Both ran."))
    chat = asyncio.create_task(client.chat("two things"))
    first = await next_proposal(client)
    assert first["autoRun"] is False
    await client.request("oi/configure", {"autoRun": True})
    await client.approve(first["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    proposals = [p for m, p in client.notifications if m == "oi/proposal"]
    assert [p["autoRun"] for p in proposals] == [False, True]
    assert tool_results(model.requests[1]) == ["first", "second"]
