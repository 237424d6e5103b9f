"""The scripted provider servers, driven through real litellm over HTTP: what litellm hands back
from each wire format (text, reasoning, thinking blocks and signatures, tool calls, usage,
errors, broken streams), and what it sends each provider of a conversation with tool calls.

These pin litellm's behaviour as much as the servers': when a litellm upgrade changes how a
provider's stream surfaces, a test here says where.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # after the cost map setting
from litellm.exceptions import MidStreamFallbackError

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.providers.anthropic import AnthropicServer
from tests.providers.base import ScriptedServer, signature_for
from tests.providers.gemini import GeminiServer
from tests.providers.ollama import OllamaServer

litellm.suppress_debug_info = True

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOOLS = [{"type": "function", "function": {
    "name": "execute", "description": "Run code.",
    "parameters": {"type": "object", "required": ["language", "code"],
                   "properties": {"language": {"type": "string"}, "code": {"type": "string"}}}}}]
EPHEMERAL = {"type": "ephemeral"}


def _serving(server: ScriptedServer) -> Iterator[ScriptedServer]:
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def openai_server() -> Iterator[ScriptedServer]:
    yield from _serving(ModelServer(report_usage=True))


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[ScriptedServer]:
    yield from _serving(AnthropicServer())


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[ScriptedServer]:
    yield from _serving(GeminiServer())


@pytest.fixture(scope="module")
def ollama_server() -> Iterator[ScriptedServer]:
    yield from _serving(OllamaServer(model="ollama_chat/qwen3:8b"))


@pytest.fixture
def openai(openai_server: ModelServer) -> ModelServer:
    openai_server.reset()
    return openai_server


@pytest.fixture
def anthropic(anthropic_server: AnthropicServer) -> AnthropicServer:
    anthropic_server.reset()
    return anthropic_server


@pytest.fixture
def gemini(gemini_server: GeminiServer) -> GeminiServer:
    gemini_server.reset()
    return gemini_server


@pytest.fixture
def ollama(ollama_server: OllamaServer) -> OllamaServer:
    ollama_server.reset()
    ollama_server.think_tags = False
    return ollama_server


@dataclass
class Streamed:
    """What a litellm stream handed back, put together as a client would."""

    content: str = ""
    reasoning: str = ""
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)  # as the deltas had them
    signatures: list[str] = field(default_factory=list)  # provider_specific_fields' (Gemini)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # by index
    call_chunks: list[list[Any]] = field(default_factory=list)  # each chunk's tool call deltas
    finish: str | None = None
    usage: Any = None

    def assistant(self, **more: Any) -> dict[str, Any]:
        """The assistant message of this reply, as the next request carries it."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None,
                                   **more}
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def arguments(self) -> list[dict[str, Any]]:
        return [json.loads(self.calls[i]["function"]["arguments"]) for i in sorted(self.calls)]


async def stream(server: ScriptedServer, messages: list[dict[str, Any]] | None = None,
                 **kwargs: Any) -> Streamed:
    settings = server.settings()
    response = await litellm.acompletion(
        model=settings["model"], api_base=settings["apiBase"], api_key=settings["apiKey"],
        messages=messages or [{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True}, **kwargs)
    out = Streamed()
    async for chunk in response:
        if getattr(chunk, "usage", None) is not None:
            out.usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        out.finish = choice.finish_reason or out.finish
        out.content += delta.content or ""
        out.reasoning += getattr(delta, "reasoning_content", None) or ""
        out.thinking_blocks.extend(getattr(delta, "thinking_blocks", None) or [])
        extra = getattr(delta, "provider_specific_fields", None) or {}
        out.signatures.extend(extra.get("thought_signatures") or [])
        if delta.tool_calls:
            out.call_chunks.append(delta.tool_calls)
        for call in delta.tool_calls or []:
            merged = out.calls.setdefault(call.index, {
                "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            merged["id"] = call.id or merged["id"]
            merged["function"]["name"] += call.function.name or ""
            merged["function"]["arguments"] += call.function.arguments or ""
    return out


def tool_results(first: Streamed, *outputs: str) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": first.calls[i]["id"], "content": output}
            for i, output in zip(sorted(first.calls), outputs, strict=True)]


PARALLEL = ms.tools(("python", "print(1)"), ("shell", "ls -l"), say="Running both.",
                    reasoning="Two independent steps.")
SIGNATURE = signature_for("Two independent steps.")


# OpenAI chat completions (DeepSeek / OpenRouter-style reasoning).

async def test_openai_streams_reasoning_content_then_the_answer_and_usage_when_asked(
        openai: ModelServer) -> None:
    openai.script(ms.text("It is 4.", reasoning="2 + 2 is 4.",
                          usage={"prompt": 120, "cached": 100, "completion": 30,
                                 "reasoning": 12}))
    got = await stream(openai)
    assert (got.reasoning, got.content, got.finish) == ("2 + 2 is 4.", "It is 4.", "stop")
    assert got.thinking_blocks == []
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (120, 30)
    assert got.usage.prompt_tokens_details.cached_tokens == 100
    assert got.usage.completion_tokens_details.reasoning_tokens == 12


async def test_openai_usage_chunk_is_sent_only_when_asked_and_enabled() -> None:
    plain = ModelServer().start()  # the conftest's: no usage chunk unless a reply has usage
    try:
        async with httpx.AsyncClient() as http:
            async def events(reply: ms.Reply, include: bool) -> list[dict[str, Any]]:
                plain.script(reply)
                body: dict[str, Any] = {"model": "scripted", "stream": True,
                                        "messages": [{"role": "user", "content": "hi"}]}
                if include:
                    body["stream_options"] = {"include_usage": True}
                r = await http.post(plain.url + "/chat/completions", json=body)
                lines = [x[6:] for x in r.text.splitlines() if x.startswith("data: ")]
                assert lines[-1] == "[DONE]"
                return [json.loads(x) for x in lines[:-1]]

            assert not any("usage" in e for e in await events(ms.text("hi"), True))
            assert not any("usage" in e for e in await events(ms.text("hi", usage={}), False))
            last = (await events(ms.text("hello", reasoning="hmm", usage={"cached": 3}), True))[-1]
            assert last["choices"] == []
            assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 3,
                                                              "audio_tokens": 0}
            assert last["usage"]["completion_tokens_details"]["reasoning_tokens"] == 1
            assert last["usage"]["completion_tokens"] == 3  # "hello" 2 + "hmm" 1
    finally:
        plain.stop()


@pytest.mark.parametrize("model", ["openai/scripted", "deepseek/deepseek-reasoner"])
async def test_openai_compatible_gets_reasoning_and_thinking_blocks_back_untouched(
        openai: ModelServer, model: str) -> None:
    openai.script(ms.text("ok"))
    sent = {"role": "assistant", "content": "It is 4.", "reasoning_content": "2 + 2 is 4.",
            "thinking_blocks": [{"type": "thinking", "thinking": "2 + 2 is 4.",
                                 "signature": "sig"}]}
    response = await litellm.acompletion(
        model=model, api_base=openai.url, api_key="sk-test", stream=True,
        messages=[{"role": "user", "content": "2+2?"}, sent, {"role": "user", "content": "sure?"}])
    async for _ in response:
        pass
    # litellm strips neither: the caller must, for a server that refuses them (DeepSeek).
    assert openai.requests[-1]["messages"][1] == sent


async def test_openrouter_reads_reasoning_from_delta_reasoning_only() -> None:
    server = ModelServer(reasoning_field="reasoning_content").start()
    other = ModelServer(reasoning_field="reasoning").start()
    try:
        for each, expected in ((server, ""), (other, "hmm")):
            each.script(ms.text("ok", reasoning="hmm"))
            response = await litellm.acompletion(
                model="openrouter/deepseek/deepseek-r1", api_base=each.url, api_key="sk",
                messages=[{"role": "user", "content": "hi"}], stream=True)
            reasoning = ""
            async for chunk in response:
                reasoning += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
            assert reasoning == expected
    finally:
        server.stop()
        other.stop()


# Anthropic Messages.

async def test_anthropic_thinking_streams_as_reasoning_and_signed_thinking_blocks(
        anthropic: AnthropicServer) -> None:
    anthropic.script(ms.text("It is 4.", reasoning="2 + 2 is 4.", signature="sig-abc"))
    got = await stream(anthropic, reasoning_effort="low")
    assert (got.reasoning, got.content, got.finish) == ("2 + 2 is 4.", "It is 4.", "stop")
    # One block per thinking_delta, then one with the signature and no text.
    assert "".join(b["thinking"] for b in got.thinking_blocks) == "2 + 2 is 4."
    assert [b.get("signature") for b in got.thinking_blocks][-1] == "sig-abc"
    assert all(b["type"] == "thinking" and not b.get("signature")
               for b in got.thinking_blocks[:-1])
    assert anthropic.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert anthropic.headers[0]["x-api-key"] == "sk-ant-test-key"


async def test_anthropic_parallel_tool_calls_then_the_turn_in_anthropics_shape(
        anthropic: AnthropicServer) -> None:
    anthropic.script(PARALLEL, ms.text("Both ran."))
    first = await stream(anthropic, tools=TOOLS)
    assert first.finish == "tool_calls" and first.content == "Running both."
    assert first.arguments() == [{"language": "python", "code": "print(1)"},
                                 {"language": "shell", "code": "ls -l"}]
    assert all(c["id"].startswith("toolu_") for c in first.calls.values())
    # The arguments arrive in pieces (input_json_delta), each call's after the one before.
    assert [c.index for chunk in first.call_chunks for c in chunk] == [0] * 4 + [1] * 4
    signed = [b for b in first.thinking_blocks if b.get("signature")]
    assert [b["signature"] for b in signed] == [SIGNATURE]

    block = {"type": "thinking", "thinking": first.reasoning, "signature": SIGNATURE}
    messages = [{"role": "system", "content": "You run code."},
                {"role": "user", "content": "run two"},
                first.assistant(thinking_blocks=[block]),
                *tool_results(first, "1\n", "total 0\n")]
    second = await stream(anthropic, messages, tools=TOOLS)
    assert second.content == "Both ran."
    body = anthropic.requests[-1]
    assert body["system"] == [{"type": "text", "text": "You run code."}]
    ids = [first.calls[0]["id"], first.calls[1]["id"]]
    assert body["messages"][1:] == [
        {"role": "assistant", "content": [
            block,
            {"type": "text", "text": "Running both."},
            {"type": "tool_use", "id": ids[0], "name": "execute",
             "input": {"language": "python", "code": "print(1)"}},
            {"type": "tool_use", "id": ids[1], "name": "execute",
             "input": {"language": "shell", "code": "ls -l"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": ids[0], "content": "1\n"},
            {"type": "tool_result", "tool_use_id": ids[1], "content": "total 0\n"}]}]


async def test_anthropic_reasoning_content_alone_is_not_sent_back(
        anthropic: AnthropicServer) -> None:
    anthropic.script(ms.text("ok"))
    await stream(anthropic, [{"role": "user", "content": "2+2?"},
                             {"role": "assistant", "content": "4", "reasoning_content": "sum"},
                             {"role": "user", "content": "sure?"}])
    assert anthropic.requests[-1]["messages"][1] == {
        "role": "assistant", "content": [{"type": "text", "text": "4"}]}


async def test_anthropic_usage_without_cache_marks(anthropic: AnthropicServer) -> None:
    anthropic.script(ms.text("x" * 40, reasoning="y" * 8))
    got = await stream(anthropic)
    assert got.usage.completion_tokens == 10 + 2  # thinking is billed as output
    assert got.usage.prompt_tokens > 0
    assert got.usage.prompt_tokens_details.cached_tokens == 0
    assert got.usage.cache_creation_input_tokens == 0


async def test_anthropic_prompt_cache_reads_what_the_call_before_wrote(
        anthropic: AnthropicServer) -> None:
    system = {"role": "system", "content": "S" * 400, "cache_control": EPHEMERAL}
    first: list[dict[str, Any]] = [system, {"role": "user", "content": "U" * 200,
                                            "cache_control": EPHEMERAL}]
    anthropic.script(ms.text("A" * 40), ms.text("B"), ms.text("C"))
    one = await stream(anthropic, first)
    written = one.usage.cache_creation_input_tokens
    assert written > 100 and one.usage.prompt_tokens_details.cached_tokens == 0
    assert one.usage.prompt_tokens == written  # everything up to the last mark is written

    # The next call marks its newest message: it reads the first call's prefix (its mark was
    # on the message now unmarked, within the look-back) and writes what follows.
    second: list[dict[str, Any]] = [system, {"role": "user", "content": "U" * 200},
                                    {"role": "assistant", "content": "A" * 40},
                                    {"role": "user", "content": "V" * 100,
                                     "cache_control": EPHEMERAL}]
    two = await stream(anthropic, second)
    assert two.usage.prompt_tokens_details.cached_tokens == written
    assert two.usage.cache_read_input_tokens == written
    assert 0 < two.usage.cache_creation_input_tokens < written
    assert two.usage.prompt_tokens == written + two.usage.cache_creation_input_tokens
    assert two.usage.prompt_tokens_details.cache_creation_tokens \
        == two.usage.cache_creation_input_tokens

    anthropic.reset()  # the cache goes with it
    anthropic.script(ms.text("again"))
    assert (await stream(anthropic, first)).usage.cache_read_input_tokens == 0


async def test_anthropic_cache_marks_litellm_forwards(anthropic: AnthropicServer) -> None:
    tools = [{**TOOLS[0], "cache_control": EPHEMERAL}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "system, marked on the message", "cache_control": EPHEMERAL},
        {"role": "user", "content": [{"type": "text", "text": "a part, marked",
                                      "cache_control": EPHEMERAL}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "toolu_1", "type": "function",
            "function": {"name": "execute", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "out", "cache_control": EPHEMERAL}]
    anthropic.script(ms.text("ok"))
    await stream(anthropic, messages, tools=tools)
    body = anthropic.requests[-1]
    assert body["tools"][0]["cache_control"] == EPHEMERAL
    assert body["system"] == [{"type": "text", "text": "system, marked on the message",
                               "cache_control": EPHEMERAL}]
    assert body["messages"][0]["content"][0]["cache_control"] == EPHEMERAL
    assert "cache_control" not in body["messages"][0]["content"][1]
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": "out", "cache_control": EPHEMERAL}]
    assert anthropic.cache.written  # four marks: all billed

    anthropic.script(ms.text("never"))
    too_many = [*messages, {"role": "user", "content": "more", "cache_control": EPHEMERAL}]
    with pytest.raises(litellm.BadRequestError) as refused:
        await stream(anthropic, too_many, tools=tools)
    assert refused.value.status_code == 400 and "maximum of 4" in str(refused.value)


async def test_anthropic_in_stream_overload_and_cut_stream_raise(
        anthropic: AnthropicServer) -> None:
    anthropic.script(ms.fail_midstream("Half an"), ms.cut("Half an"))
    with pytest.raises(MidStreamFallbackError) as failed:
        await stream(anthropic)
    # The in-stream overloaded_error: litellm makes it a 500 (its stream parser has no status).
    assert failed.value.status_code == 500
    assert isinstance(failed.value.original_exception, litellm.InternalServerError)
    assert "Overloaded" in str(failed.value)
    with pytest.raises(MidStreamFallbackError) as cut:
        await stream(anthropic)
    assert isinstance(cut.value.original_exception, litellm.APIConnectionError)
    assert "Stream ended before a finish_reason" in str(cut.value)


# Gemini.

async def test_gemini_thoughts_when_asked_and_usage_with_thinking_and_cached_tokens(
        gemini: GeminiServer) -> None:
    reply = ms.text("It is 4.", reasoning="2 + 2 is 4.",
                    usage={"prompt": 500, "cached": 400, "completion": 40, "reasoning": 25})
    gemini.script(reply, reply)
    quiet = await stream(gemini)
    assert (quiet.reasoning, quiet.content) == ("", "It is 4.")  # thought, not shown
    got = await stream(gemini, reasoning_effort="low")
    assert gemini.requests[1]["generationConfig"]["thinkingConfig"] == {
        "thinkingBudget": 1024, "includeThoughts": True}
    assert (got.reasoning, got.content, got.finish) == ("2 + 2 is 4.", "It is 4.", "stop")
    assert got.thinking_blocks == []
    assert got.signatures == [signature_for("2 + 2 is 4.")]  # the last part's
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (500, 40)
    assert got.usage.completion_tokens_details.reasoning_tokens == 25
    assert got.usage.prompt_tokens_details.cached_tokens == 400
    assert gemini.headers[0]["x-goog-api-key"] == "gemini-test-key"
    assert gemini.calls[0].endswith("/v1beta/models/gemini-2.5-flash:streamGenerateContent"
                                    "?alt=sse")


async def test_gemini_parallel_calls_arrive_whole_and_go_back_as_gemini_parts(
        gemini: GeminiServer) -> None:
    gemini.script(PARALLEL, ms.text("Both ran."))
    first = await stream(gemini, tools=TOOLS, reasoning_effort="low")
    assert first.finish == "tool_calls" and first.content == "Running both."
    assert first.arguments() == [{"language": "python", "code": "print(1)"},
                                 {"language": "shell", "code": "ls -l"}]
    assert len(first.call_chunks) == 1 and len(first.call_chunks[0]) == 2  # one chunk
    # The signature rides on the first call: in its id, and in its provider_specific_fields.
    assert first.calls[0]["id"].endswith("__thought__" + SIGNATURE)
    assert "__thought__" not in first.calls[1]["id"]
    assert first.call_chunks[0][0].provider_specific_fields == {"thought_signature": SIGNATURE}

    messages = [{"role": "system", "content": "You run code."},
                {"role": "user", "content": "run two"},
                first.assistant(reasoning_content=first.reasoning),
                *tool_results(first, "1\n", "total 0\n")]
    assert (await stream(gemini, messages, tools=TOOLS)).content == "Both ran."
    body = gemini.requests[-1]
    assert body["system_instruction"] == {"parts": [{"text": "You run code."}]}
    # litellm writes the request's parts in snake case (the API takes both).
    assert body["contents"][1:] == [
        {"role": "model", "parts": [
            {"thought": True, "text": "Two independent steps."},  # reasoning_content, back
            {"text": "Running both."},
            {"function_call": {"name": "execute",
                               "args": {"language": "python", "code": "print(1)"}},
             "thoughtSignature": SIGNATURE},
            {"function_call": {"name": "execute", "args": {"language": "shell",
                                                           "code": "ls -l"}}}]},
        {"role": "user", "parts": [
            {"function_response": {"name": "execute", "response": {"content": "1\n"}}},
            {"function_response": {"name": "execute", "response": {"content": "total 0\n"}}}]}]


async def test_gemini_cut_stream_ends_as_if_done_and_a_malformed_call_is_empty(
        gemini: GeminiServer) -> None:
    gemini.script(ms.cut("Half an"), ms.tool("python", "x", arguments="{broken"))
    cut = await stream(gemini)  # no end marker in Gemini's stream: litellm cannot tell
    assert (cut.content, cut.finish) == ("Half an", "stop")
    malformed = await stream(gemini, tools=TOOLS)  # finishReason MALFORMED_FUNCTION_CALL
    assert (malformed.content, malformed.calls, malformed.finish) == ("", {}, "stop")


async def test_gemini_in_stream_error(gemini: GeminiServer) -> None:
    gemini.script(ms.fail_midstream("Half an"))
    with pytest.raises(MidStreamFallbackError) as failed:
        await stream(gemini)
    # litellm maps Gemini's overload message to a 500 InternalServerError, whatever the code.
    assert failed.value.status_code == 500
    assert isinstance(failed.value.original_exception, litellm.InternalServerError)
    assert "UNAVAILABLE - The model is overloaded." in str(failed.value)


# Ollama.

async def test_ollama_thinking_field_when_think_is_on(ollama: OllamaServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # oi-lsp turns litellm's token counter off (its tokenizer costs ~110 MiB): pin both.
    monkeypatch.setattr(litellm, "disable_token_counter", False)
    ollama.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
    got = await stream(ollama, reasoning_effort="low")
    assert ollama.requests[0]["think"] is True
    assert (got.reasoning, got.content, got.finish) == ("2 + 2 is 4.", "It is 4.", "stop")
    # prompt_eval_count and eval_count; no details, but litellm counts reasoning tokens
    # itself from the thinking text (at most the completion tokens).
    assert got.usage.prompt_tokens > 0 and got.usage.completion_tokens == 2 + 3
    assert got.usage.prompt_tokens_details is None
    assert 0 < got.usage.completion_tokens_details.reasoning_tokens <= 5
    # With the counter off, as oi-lsp runs litellm, Ollama's usage names no reasoning tokens.
    monkeypatch.setattr(litellm, "disable_token_counter", True)
    ollama.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
    off = await stream(ollama, reasoning_effort="low")
    assert off.usage.completion_tokens == 5
    assert not getattr(off.usage.completion_tokens_details, "reasoning_tokens", 0)


async def test_ollama_think_tags_become_reasoning_with_oi_lsps_litellm_fix(
        ollama: OllamaServer) -> None:
    """litellm's ollama_chat parser alone loses inline reasoning into the answer
    (tests/test_litellm_compat.py pins that); with oi-lsp's fix it is reasoning again."""
    from oi_lsp.core import litellm_compat
    litellm_compat.split_ollama_think_tags(litellm)
    ollama.think_tags = True
    ollama.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
    got = await stream(ollama, reasoning_effort="low")
    assert (got.reasoning, got.content) == ("2 + 2 is 4.", "It is 4.")
    ollama.think_tags = False
    ollama.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
    unasked = await stream(ollama)  # no `think` in the request: Ollama inlines the tags too
    assert "think" not in ollama.requests[-1]
    assert (unasked.reasoning, unasked.content) == ("2 + 2 is 4.", "It is 4.")
    # On the wire the tags were there, each a piece of its own, as a model's tokens come.
    ollama.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
    async with httpx.AsyncClient() as http:
        lines = (await http.post(ollama.url + "/api/chat", json={
            "model": "qwen3:8b", "messages": [{"role": "user", "content": "hi"}]})).text
    pieces = [json.loads(x)["message"]["content"] for x in lines.splitlines()]
    assert "".join(pieces) == "<think>2 + 2 is 4.</think>\n\nIt is 4."
    assert pieces[0] == "<think>" and "</think>" in pieces


async def test_ollama_native_tool_calls_and_the_turn_in_ollamas_shape(
        ollama: OllamaServer) -> None:
    ollama.script(PARALLEL, ms.text("Both ran."))
    first = await stream(ollama, tools=TOOLS, reasoning_effort="low")
    assert first.reasoning == "Two independent steps."
    assert first.finish == "tool_calls" and first.content == "Running both."
    assert first.arguments() == [{"language": "python", "code": "print(1)"},
                                 {"language": "shell", "code": "ls -l"}]
    assert len(first.call_chunks) == 1  # whole, in one line

    messages = [{"role": "user", "content": "run two"},
                first.assistant(reasoning_content=first.reasoning),
                *tool_results(first, "1\n", "total 0\n")]
    assert (await stream(ollama, messages, tools=TOOLS)).content == "Both ran."
    sent = ollama.requests[-1]["messages"]
    ids = [first.calls[0]["id"], first.calls[1]["id"]]
    assert sent[1] == {"role": "assistant", "thinking": "Two independent steps.",
                       "content": "Running both.", "images": [], "tool_calls": [
                           {"id": ids[0], "function": {"name": "execute", "arguments": {
                               "language": "python", "code": "print(1)"}}},
                           {"id": ids[1], "function": {"name": "execute", "arguments": {
                               "language": "shell", "code": "ls -l"}}}]}
    assert [(m["role"], m["content"], m["tool_call_id"]) for m in sent[2:]] == [
        ("tool", "1\n", ids[0]), ("tool", "total 0\n", ids[1])]


async def test_ollama_without_tools_writes_fenced_code(ollama: OllamaServer) -> None:
    ollama.script(ms.tool("python", "print(1)", say="Here:"))
    got = await stream(ollama)
    assert got.calls == {} and got.finish == "stop"
    assert got.content == "Here:\n\n```python\nprint(1)\n```\n"


async def test_ollama_broken_streams(ollama: OllamaServer) -> None:
    ollama.script(ms.cut("Half an"), ms.fail_midstream("Half an", message="out of memory"))
    with pytest.raises(MidStreamFallbackError) as cut:
        await stream(ollama)
    assert "Stream ended before a finish_reason" in str(cut.value)
    # An {"error": ...} line in the stream: litellm's parser fails on its missing "message".
    with pytest.raises(litellm.BadRequestError) as failed:
        await stream(ollama)
    assert failed.value.status_code == 400 and "out of memory" in str(failed.value)


async def test_ollama_side_endpoints(ollama: OllamaServer) -> None:
    async with httpx.AsyncClient(base_url=ollama.url) as http:
        assert (await http.get("/")).text == "Ollama is running"
        assert (await http.get("/api/version")).json()["version"]
        tags = (await http.get("/api/tags")).json()["models"]
        assert [m["name"] for m in tags] == ["qwen3:8b"]
        show = (await http.post("/api/show", json={"model": "qwen3:8b"})).json()
        assert "tools" in show["capabilities"] and show["model_info"]["llama.context_length"]
    assert ollama.requests == []  # none of these is a model call


# Errors, every format.

ERRORS = [
    ("openai", 401, litellm.AuthenticationError, 401),
    ("openai", 429, litellm.RateLimitError, 429),
    ("openai", 503, litellm.ServiceUnavailableError, 503),
    ("anthropic", 401, litellm.AuthenticationError, 401),
    ("anthropic", 429, litellm.RateLimitError, 429),
    ("anthropic", 529, litellm.InternalServerError, 500),  # provider_status_code 529
    ("gemini", 401, litellm.AuthenticationError, 401),
    ("gemini", 403, litellm.BadRequestError, 403),
    ("gemini", 429, MidStreamFallbackError, 429),  # its original: RateLimitError
    ("gemini", 503, MidStreamFallbackError, 500),  # "The model is overloaded." → 500
    ("ollama", 401, litellm.AuthenticationError, 401),
    ("ollama", 429, litellm.RateLimitError, 429),
    ("ollama", 503, litellm.ServiceUnavailableError, 503),
]


@pytest.mark.parametrize(("provider", "status", "raised", "code"), ERRORS,
                         ids=[f"{p}-{s}" for p, s, _, _ in ERRORS])
async def test_error_statuses_surface_as_litellm_exceptions(
        request: pytest.FixtureRequest, provider: str, status: int, raised: type[Exception],
        code: int) -> None:
    server: ScriptedServer = request.getfixturevalue(provider)
    server.script(ms.error(status, headers={"retry-after": "7"}))
    with pytest.raises(raised) as caught:
        await stream(server, num_retries=0)
    assert caught.value.status_code == code  # type: ignore[attr-defined]
    if provider == "anthropic" and status == 529:
        assert caught.value.provider_status_code == 529  # type: ignore[attr-defined]
    if status == 429 and provider != "gemini":
        headers = caught.value.litellm_response_headers  # type: ignore[attr-defined]
        assert headers["retry-after"] == "7"


# Whole answers (no `stream`), and the servers' own plumbing.

async def test_whole_answers_for_requests_without_stream(
        anthropic: AnthropicServer, gemini: GeminiServer, ollama: OllamaServer) -> None:
    for server in (anthropic, gemini, ollama):
        server.script(ms.text("It is 4.", reasoning="2 + 2 is 4."), PARALLEL)
        settings = server.settings()
        args = {"model": settings["model"], "api_base": settings["apiBase"],
                "api_key": settings["apiKey"], "reasoning_effort": "low",
                "messages": [{"role": "user", "content": "hi"}]}
        answer = await litellm.acompletion(**args)
        message = answer.choices[0].message
        assert (message.content, message.reasoning_content) == ("It is 4.", "2 + 2 is 4."), server
        assert answer.usage.completion_tokens > 0
        called = await litellm.acompletion(**args, tools=TOOLS)
        message = called.choices[0].message
        assert [json.loads(c.function.arguments)["code"] for c in message.tool_calls] == [
            "print(1)", "ls -l"], server
        assert called.choices[0].finish_reason == "tool_calls"
    assert gemini.calls[0].endswith(":generateContent")
    assert ollama.requests[0]["stream"] is False
    assert "stream" not in anthropic.requests[0] or anthropic.requests[0]["stream"] is False


async def test_a_client_hanging_up_is_counted_and_reset_clears_the_record(
        anthropic: AnthropicServer) -> None:
    anthropic.script(ms.text("word " * 50, pieces=50, delay=0.01))
    async with httpx.AsyncClient() as http, http.stream(
            "POST", anthropic.url + "/v1/messages",
            json={"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 10,
                  "messages": [{"role": "user", "content": "hi"}]}) as response:
        async for _ in response.aiter_bytes():
            break  # the first bytes, then the client goes
    for _ in range(200):
        if anthropic.disconnects:
            break
        await asyncio.sleep(0.01)
    assert anthropic.disconnects == 1
    assert anthropic.calls == ["POST /v1/messages"] and len(anthropic.requests) == 1
    anthropic.reset()
    assert (anthropic.calls, anthropic.requests, anthropic.headers, anthropic.disconnects) \
        == ([], [], [], 0)


async def test_tools_takes_calls_with_their_own_ids_and_names(openai: ModelServer) -> None:
    openai.script(ms.tools(ms.tool("python", "1", call_id="call_a", name="run"),
                           ("shell", "ls"), say="Both."))
    got = await stream(openai, tools=TOOLS)
    assert (got.calls[0]["id"], got.calls[0]["function"]["name"]) == ("call_a", "run")
    assert got.arguments() == [{"language": "python", "code": "1"},
                               {"language": "shell", "code": "ls"}]
