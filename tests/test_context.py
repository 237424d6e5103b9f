"""Context trimming, token and cost reports, maxBudget: units with the real litellm, and what the
scripted model receives over the wire."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from oi_lsp.client import OIClient
from oi_lsp.core import context_window as context
from oi_lsp.core import llm as model
from oi_lsp.core import prompt
from oi_lsp.core.settings import Settings
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.modelserver import ModelServer

NUMBERS = "print(' '.join(str(i) for i in range(2000)))"  # ~2800 characters, ~1400 tokens


@pytest.fixture(scope="module")
def litellm() -> ModuleType:
    return model._import_litellm()


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def convo(exchanges: int, output: str) -> list[dict[str, Any]]:
    """A system message, then exchanges of user → tool call → tool result → reply."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "SYSTEM " + words(20, "s")}]
    for k in range(exchanges):
        call = f"call_{k}"
        out += [{"role": "user", "content": f"question {k}"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": call, "type": "function",
                    "function": {"name": "execute", "arguments": '{"language": "python"}'}}]},
                {"role": "tool", "tool_call_id": call, "content": output},
                {"role": "assistant", "content": f"answer {k}"}]
    return out


def valid(messages: list[dict[str, Any]]) -> bool:
    """Every tool result follows the assistant message that made its call."""
    calls: set[str] = set()
    for m in messages:
        calls |= {c["id"] for c in m.get("tool_calls") or ()}
        if m["role"] == "tool" and m["tool_call_id"] not in calls:
            return False
    return True


def test_fit_leaves_what_fits_alone(litellm: ModuleType) -> None:
    settings = Settings(model="openai/scripted", context_window=8000)
    messages = convo(2, "short output")
    assert context.fit(litellm, settings, messages) is messages


def test_fit_shortens_old_outputs_first(litellm: ModuleType) -> None:
    settings = Settings(model="openai/scripted", context_window=1500, max_tokens=300)
    messages = convo(3, words(300, "out"))  # each output ~600 tokens
    fitted = context.fit(litellm, settings, messages)
    assert fitted[0] == messages[0]
    # Every exchange stays; the old outputs are shortened, the newest one is not.
    assert [m["content"] for m in fitted if m["role"] == "user"] == [
        "question 0", "question 1", "question 2"]
    tools = [m["content"] for m in fitted if m["role"] == "tool"]
    assert context.TRIMMED in tools[0] and context.TRIMMED in tools[1]
    assert tools[2] == words(300, "out")
    assert context.count(litellm, settings, fitted) <= context.budget(litellm, settings)
    assert messages[3]["content"] == words(300, "out")  # the caller's list is untouched
    assert valid(fitted)


def test_fit_drops_oldest_exchanges_whole(litellm: ModuleType) -> None:
    settings = Settings(model="openai/scripted", context_window=1000, max_tokens=200)
    messages = convo(6, "ok")
    for m in messages:
        if m["role"] == "assistant" and m["content"]:
            m["content"] += " " + words(120, "w")  # long replies cannot be shortened
    fitted = context.fit(litellm, settings, messages)
    assert fitted[0] == messages[0] and fitted[-1] == messages[-1]
    asked = [m["content"] for m in fitted if m["role"] == "user"]
    assert asked[-1] == "question 5" and "question 0" not in asked
    assert asked == [f"question {k}" for k in range(6 - len(asked), 6)]  # newest, in order
    assert fitted[1]["role"] == "user" and valid(fitted)
    assert context.count(litellm, settings, fitted) <= context.budget(litellm, settings)


def test_fit_shortens_the_current_exchange_last(litellm: ModuleType) -> None:
    settings = Settings(model="openai/scripted", context_window=1000, max_tokens=200)
    messages = convo(1, words(800, "big"))[:-1]  # mid-turn: the newest message is the output
    fitted = context.fit(litellm, settings, messages)
    assert [m["role"] for m in fitted] == ["system", "user", "assistant", "tool"]
    assert context.TRIMMED in fitted[-1]["content"]


def test_window_and_price(litellm: ModuleType) -> None:
    assert context.window(litellm, Settings(model="openai/scripted")) == context.DEFAULT_WINDOW
    assert context.window(litellm, Settings(model="gpt-4o-mini")) >= 100_000  # litellm knows
    assert context.window(litellm, Settings(model="gpt-4o-mini", context_window=5000)) == 5000
    assert context.price(litellm, Settings(model="openai/scripted"), 100, 10) is None
    cost = context.price(litellm, Settings(model="openai/gpt-4o-mini"), 1000, 100)
    assert cost is not None and 0 < cost < 0.01


# Over the wire ---------------------------------------------------------------------------------

async def test_trimming_on_the_wire(client: OIClient, model: ModelServer) -> None:
    await client.request("oi/configure", {"contextWindow": 2000, "maxTokens": 300,
                                          "autoRun": True})
    for k in range(2):
        model.script(ms.tool("python", NUMBERS), ms.text(f"answer {k}"))
        assert (await client.chat(f"question {k}"))["status"] == "done"
    model.script(ms.text("final"))
    assert (await client.chat("question 2"))["status"] == "done"
    # The second call of the first turn: its own (newest) output had to be shortened.
    first = model.requests[1]["messages"]
    assert context.TRIMMED in first[-1]["content"] and first[-1]["role"] == "tool"
    last = model.requests[-1]["messages"]
    assert last[0]["role"] == "system" and last[0]["content"].startswith(model_prompt())
    assert last[-1] == {"role": "user", "content": "question 2"}
    tools = [m["content"] for m in last if m["role"] == "tool"]
    assert tools and all(context.TRIMMED in t for t in tools)
    assert valid(last)
    assert sum(len(str(m.get("content") or "")) for m in last) < 8000


async def test_drops_oldest_on_the_wire(client: OIClient, model: ModelServer) -> None:
    await client.request("oi/configure", {"contextWindow": 1500, "maxTokens": 300})
    for k in range(5):
        model.script(ms.text(f"answer {k} " + words(150, "w")))
        assert (await client.chat(f"question {k}"))["status"] == "done"
    last = model.requests[-1]["messages"]
    asked = [m["content"] for m in last if m["role"] == "user"]
    assert last[0]["role"] == "system" and asked[-1] == "question 4"
    assert "question 0" not in asked and len(asked) < 5
    assert last[1]["role"] == "user"


def model_prompt() -> str:
    return prompt.SYSTEM_MESSAGE[:200]


async def test_usage_is_reported_per_turn(client: OIClient, model: ModelServer) -> None:
    model.script(ms.text("hello there"))
    result = await client.chat("hi")
    end = await client.wait_for("oi/turn", lambda p: p["turnId"] == result["turnId"]
                                and p["status"] == "done")
    usage = end["usage"]
    assert usage["calls"] == 1 and usage["promptTokens"] > 100 and usage["completionTokens"] > 0
    assert "cost" not in usage  # litellm has no price for openai/scripted


async def test_max_budget_stops_the_loop(start_server: StartServer, model: ModelServer,
                                         workspace: Path) -> None:
    # A model litellm knows the price of, served by the scripted server.
    client = await start_server(workspace, options=model.settings(
        model="openai/gpt-4o-mini", maxBudget=0.0000001, autoRun=True))
    model.script(ms.tool("python", "print('ran once')"), ms.text("sent once the budget is raised"))
    result = await client.chat("go")
    assert result["status"] == "error" and "maxBudget" in result["error"]
    assert len(model.requests) == 1  # the tool result never went back to the model
    assert "ran once" in client.stream(result["turnId"], "console")
    end = await client.wait_for("oi/turn", lambda p: p["turnId"] == result["turnId"]
                                and p["status"] == "error")
    assert end["usage"]["cost"] > 0 and end["usage"]["sessionCost"] == end["usage"]["cost"]
    # The next turn stops before calling the model at all.
    again = await client.chat("go on")
    assert again["status"] == "error" and "maxBudget" in again["error"]
    assert len(model.requests) == 1
    # Raising the budget lets the session go on.
    await client.request("oi/configure", {"maxBudget": 5.0})
    assert (await client.chat("go on"))["status"] == "done"
    assert len(model.requests) == 2
