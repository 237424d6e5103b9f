"""Every wire format through oi-lsp: a real server, real litellm, and the scripted server of each
provider (OpenAI chat completions as DeepSeek streams it, Anthropic Messages, Gemini, Ollama's
/api/chat with native tool calls and with fenced code).

For each: a streamed answer with its reasoning, a tool call → proposal → run → the result back
in the provider's own shape, a second turn, the usage and cost line; a stop mid-stream, the
error statuses as errorKinds with their sentence, a retry announced and then answered, a stream
that fails mid-way keeping what it streamed. tests/test_provider_wire.py pins what litellm
itself does with each format.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from oi_lsp import protocol
from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal
from tests.modelserver import ModelServer
from tests.providers.anthropic import AnthropicServer
from tests.providers.base import ScriptedServer, signature_for
from tests.providers.gemini import GeminiServer
from tests.providers.ollama import OllamaServer


@dataclass
class Provider:
    name: str
    make: Callable[[], ScriptedServer]
    settings: dict[str, Any] = field(default_factory=dict)
    overloaded: int = 503  # the status it answers when overloaded
    priced: bool = True  # litellm's price table has a price for the model
    reports_reasoning: bool = True  # its usage counts reasoning tokens apart
    signs: bool = False  # it signs its thinking and wants it back (Anthropic)
    fenced: bool = False  # code comes as a fenced block in the text, not a tool call
    server: ScriptedServer | None = None

    def __str__(self) -> str:
        return self.name


def _deepseek() -> ScriptedServer:
    server = ModelServer(report_usage=True)
    server.settings = lambda **extra: {  # type: ignore[method-assign]
        "model": "deepseek/deepseek-reasoner", "apiBase": server.url,
        "apiKey": "sk-deepseek-test", **extra}
    return server


PROVIDERS = [
    Provider("deepseek", _deepseek),
    Provider("anthropic", AnthropicServer, overloaded=529, reports_reasoning=False, signs=True,
             settings={"reasoningEffort": "low"}),
    Provider("gemini", GeminiServer, settings={"reasoningEffort": "low"}),
    # Ollama reports no reasoning tokens of its own (eval_count holds them all).
    Provider("ollama", lambda: OllamaServer(model="ollama_chat/qwen3:8b"), priced=False,
             reports_reasoning=False, settings={"reasoningEffort": "low"}),
    Provider("ollama-fenced", lambda: OllamaServer(model="ollama_chat/qwen3:8b",
                                                   think_tags=True),
             priced=False, reports_reasoning=False, fenced=True, settings={"toolCalls": False}),
]


@pytest.fixture(scope="module", params=PROVIDERS, ids=str)
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    spec: Provider = request.param
    spec.server = spec.make().start()
    yield spec
    spec.server.stop()
    spec.server = None


@pytest.fixture
async def served(provider: Provider, start_server: StartServer,
                 workspace: Path) -> tuple[Provider, ScriptedServer, OIClient]:
    assert provider.server is not None
    provider.server.reset()
    client = await start_server(workspace, options=provider.server.settings(
        **provider.settings))
    return provider, provider.server, client


def turn_end(client: OIClient, turn_id: str) -> dict[str, Any]:
    return next(p for m, p in client.notifications if m == protocol.TURN
                and p["turnId"] == turn_id and p["status"] != "running")


def kinds(client: OIClient, turn_id: str) -> list[str]:
    """The chunk types of a turn, in order, each run of one type once."""
    out: list[str] = []
    for m, p in client.notifications:
        if m == protocol.STREAM and p["turnId"] == turn_id and p["type"] != "status" \
                and (not out or out[-1] != p["type"]):
            out.append(p["type"])
    return out


def tool_result(provider: Provider, body: dict[str, Any]) -> str:
    """The run's output as the provider's request carries it."""
    if provider.name == "anthropic":
        [result] = [b for b in body["messages"][-1]["content"] if b["type"] == "tool_result"]
        content = result["content"]
        return content if isinstance(content, str) else "".join(c["text"] for c in content)
    if provider.name == "gemini":
        [part] = [p for p in body["contents"][-1]["parts"] if "function_response" in p]
        return str(part["function_response"]["response"]["content"])
    if provider.fenced:  # no tools: the output comes back as the user's message
        last = body["messages"][-1]
        assert last["role"] == "user" and "tool_calls" not in json.dumps(body["messages"])
        return str(last["content"])
    [result] = [m for m in body["messages"] if m["role"] == "tool"]
    return str(result["content"])


def assistant_turn(provider: Provider, body: dict[str, Any]) -> Any:
    """The model's own message with its call, as sent back to it."""
    if provider.name == "gemini":
        return [c for c in body["contents"] if c["role"] == "model"][-1]
    return [m for m in body["messages"] if m["role"] == "assistant"][-1]


async def test_a_conversation_in_the_providers_own_shape(
        served: tuple[Provider, ScriptedServer, OIClient]) -> None:
    provider, server, client = served
    # 1. A streamed answer: the reasoning first, apart, then the text.
    server.script(ms.text("The answer is **4**.", reasoning="2 + 2 is 4.", pieces=5))
    first = await client.chat("what is 2+2")
    assert first["status"] == "done", first
    assert client.stream(first["turnId"], "reasoning") == "2 + 2 is 4."
    assert client.stream(first["turnId"], "message") == "The answer is **4**."
    assert kinds(client, first["turnId"]) == ["reasoning", "message"]
    usage = turn_end(client, first["turnId"])["usage"]
    assert usage["calls"] == 1 and usage["promptTokens"] > 0 and usage["completionTokens"] > 0
    # Priced from litellm's table; a local model costs nothing.
    assert usage["cost"] > 0 if provider.priced else not usage.get("cost")
    if provider.reports_reasoning:
        assert 0 < usage["reasoningTokens"] <= usage["completionTokens"]

    # 2. A tool call (or fenced code) → a proposal → the run → its output in the next request.
    code = "print(6 * 7)"
    thought = "I will compute it in Python."
    server.script(ms.tool("python", code, say="Computing.", reasoning=thought),
                  ms.text("It is 42."))
    chat = asyncio.create_task(client.chat("what is 6 times 7"))
    proposal = await next_proposal(client, timeout=60)
    assert proposal["language"] == "python" and proposal["code"].strip() == code
    await client.approve(proposal["proposalId"], "run")
    second = await chat
    assert second["status"] == "done", second
    assert "42" in client.stream(second["turnId"], "console")
    assert client.stream(second["turnId"], "reasoning") == thought
    assert "42" in tool_result(provider, server.requests[-1])
    sent = assistant_turn(provider, server.requests[-1])
    if provider.signs:  # the signed thinking block, unchanged, before the tool call
        blocks = sent["content"]
        assert blocks[0] == {"type": "thinking", "thinking": thought,
                             "signature": signature_for(thought)}
        assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    else:  # reasoning without a signature is not the model's to read again
        assert thought not in json.dumps(server.requests[-1])
        assert "2 + 2 is 4." not in json.dumps(server.requests[-1])

    # 3. A second turn: the whole conversation goes with it.
    server.script(ms.text("Still 42."))
    third = await client.chat("and again?")
    assert third["status"] == "done"
    body = json.dumps(server.requests[-1])
    assert "what is 2+2" in body and "The answer is **4**." in body and "It is 42." in body
    history = (await client.request(protocol.HISTORY, {}))["messages"]
    reasoning = [m["content"] for m in history if m["type"] == "reasoning"]
    assert reasoning == ["2 + 2 is 4.", thought]
    if provider.name == "anthropic":  # the cached prefix is read at a lower price
        usage = turn_end(client, third["turnId"])["usage"]
        assert usage["cachedTokens"] > 0 and usage["cacheSaved"] > 0


async def test_failures_in_the_providers_own_shape(
        served: tuple[Provider, ScriptedServer, OIClient]) -> None:
    provider, server, client = served
    await client.request(protocol.CONFIGURE, {"modelRetries": 0})
    for status, kind, words in [(401, "authFailed", "refused the API key (401)"),
                                (429, "rateLimited", "rate limiting requests (429)"),
                                (provider.overloaded, "overloaded",
                                 f"is overloaded ({provider.overloaded})")]:
        server.script(ms.error(status))
        result = await client.chat(f"status {status}")
        assert (result["status"], result["errorKind"]) == ("error", kind), result
        assert words in result["error"]

    # Retried after the server's Retry-After, announced, then answered.
    await client.request(protocol.CONFIGURE, {"modelRetries": 2})
    since = len(client.notifications)
    server.script(ms.error(provider.overloaded, headers={"retry-after": "0"}),
                  ms.text("Back again."))
    result = await client.chat("retry please")
    assert result["status"] == "done", result
    retrying = await client.wait_for(protocol.STREAM, lambda p: p.get("format") == "retrying",
                                     since=since)
    assert f"overloaded ({provider.overloaded}): retrying in 0 s (retry 1 of 2)" \
        in retrying["content"]
    assert client.stream(result["turnId"], "message") == "Back again."

    # A stream that fails mid-way: what streamed is kept, and the error says so.
    server.script(ms.fail_midstream("Partial answer so far."))
    result = await client.chat("break off")
    assert result["status"] == "error", result
    assert "broke off" in result["error"]
    assert "Partial answer so far." in client.stream(result["turnId"], "message")

    # Stopped while it streams: the text so far stays, the stream is closed.
    server.script(ms.text("word " * 200, pieces=100, delay=0.05))
    chat = asyncio.create_task(client.chat("a long answer"))
    await client.wait_for(protocol.STREAM, lambda p: p["type"] == "message"
                          and "word" in (p.get("content") or ""), since=since)
    await client.request(protocol.STOP, {})
    result = await chat
    assert result["status"] == "stopped"
    kept = client.stream(result["turnId"], "message")
    assert kept.startswith("word") and len(kept) < len("word " * 200)
    history = (await client.request(protocol.HISTORY, {}))["messages"]
    assert any(m["type"] == "message" and m["content"] == "Partial answer so far."
               for m in history)
    assert any(m["type"] == "message" and m["content"] == kept for m in history)
