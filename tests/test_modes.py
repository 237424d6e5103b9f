"""Loop mode, maxSteps and the forced fenced-code path, end to end over stdio."""

from __future__ import annotations

import asyncio
from pathlib import Path

from oi_lsp.client import OIClient
from oi_lsp.core.settings import LOOP_BREAKERS, LOOP_MESSAGE
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, tool_results
from tests.modelserver import ModelServer


async def test_loop_goes_on_until_a_breaker(start_server: StartServer, model: ModelServer,
                                            workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(loop=True, autoRun=True))
    settings = (await client.request("oi/configure", {}))["settings"]
    assert settings["loop"] is True and settings["loopBreakers"] == LOOP_BREAKERS
    model.script(ms.text("I will start by looking around."),
                 ms.tool("python", "print('looked around')"),
                 ms.text("Found what I needed."),
                 ms.text("All finished. The task is done."),
                 ms.text("never asked for"))
    result = await client.chat("tidy up")
    assert result["status"] == "done"
    assert len(model.requests) == 4
    # After each reply without code, the model is told to go on, as the user.
    prompt = {"role": "user", "content": LOOP_MESSAGE}
    assert model.requests[1]["messages"][-1] == prompt
    assert model.requests[3]["messages"][-1] == prompt
    assert tool_results(model.requests[2]) == ["looked around"]
    assert model.requests[2]["messages"][-2]["role"] == "assistant"  # no prompt after code
    assert LOOP_MESSAGE in client.stream(result["turnId"], "message")
    history = (await client.request("oi/history", {}))["messages"]
    assert [m["content"] for m in history if m["role"] == "user"] == [
        "tidy up", LOOP_MESSAGE, LOOP_MESSAGE]

    # Own breakers and prompt; loop off ends after the first reply without code again.
    model.reset()
    await client.request("oi/configure", {"loopMessage": "Keep going.",
                                          "loopBreakers": ["ALL DONE"]})
    model.script(ms.text("The task is done."), ms.text("Now really: ALL DONE"))
    assert (await client.chat("again"))["status"] == "done"
    assert len(model.requests) == 2
    assert model.requests[1]["messages"][-1] == {"role": "user", "content": "Keep going."}
    model.reset()
    await client.request("oi/configure", {"loop": False})
    model.script(ms.text("Just one reply."))
    assert (await client.chat("once"))["status"] == "done"
    assert len(model.requests) == 1


async def test_loop_without_a_breaker_ends_at_max_steps(start_server: StartServer,
                                                        model: ModelServer,
                                                        workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(loop=True, maxSteps=3))
    result = await client.chat("go")  # the script is empty: every reply is the same text
    assert result["status"] == "error" and "maxSteps" in result["error"]
    assert len(model.requests) == 4  # the first call and three loop prompts


async def test_max_steps_ends_an_endless_tool_call_script(client: OIClient,
                                                          model: ModelServer) -> None:
    await client.request("oi/configure", {"maxSteps": 4, "autoRun": True})
    endless = model.default
    model.default = ms.tool("python", "print('again')")  # every reply calls the tool
    try:
        result = await client.chat("never stop")
    finally:
        model.default = endless
    assert result["status"] == "error"
    assert "stopped after 4 steps" in result["error"] and "maxSteps" in result["error"]
    assert len(model.requests) == 5
    assert client.stream(result["turnId"], "console").count("again") == 4
    end = await client.wait_for("oi/turn", lambda p: p["turnId"] == result["turnId"]
                                and p["status"] == "error")
    assert "maxSteps" in end["error"]
    # The session goes on.
    model.script(ms.text("back"))
    assert (await client.chat("hello"))["status"] == "done"


async def test_tool_calls_off_forces_fenced_code(client: OIClient, model: ModelServer) -> None:
    await client.request("oi/configure", {"toolCalls": False})
    # Even a model that has called the tool before is read for fenced blocks now.
    model.script(ms.tool("python", "print('via the tool')"), ms.text("ok"))
    chat = asyncio.create_task(client.chat("first"))
    await client.approve((await next_proposal(client))["proposalId"], "run")
    await chat
    model.reset()
    model.script(ms.text("Computing.\n```python\nprint(6 * 7)\n```\n"), ms.text("It is 42."))
    since = len(client.notifications)
    chat = asyncio.create_task(client.chat("what is 6*7"))
    proposal = await next_proposal(client, since)
    assert proposal["code"] == "print(6 * 7)" and proposal["language"] == "python"
    await client.approve(proposal["proposalId"], "run")
    assert (await chat)["status"] == "done"
    first, second = model.requests
    assert "tools" not in first and "tools" not in second
    assert "fenced Markdown code block" in first["messages"][0]["content"]
    last = second["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("Output of the python code")
    assert "42" in last["content"]
    # The earlier tool call reads as fenced code, with no tool message left for a tool-less API.
    roles = [m["role"] for m in first["messages"]]
    assert "tool" not in roles and not any(m.get("tool_calls") for m in first["messages"])
    assert "```python\nprint('via the tool')\n```" in first["messages"][2]["content"]
