"""oi_lsp/core/litellm_compat.py against the installed litellm: what it patches is still there,
and Ollama's inline <think> reasoning, as the scripted server streams it, comes out of
litellm's ollama_chat stream as reasoning."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # after the cost map setting

from oi_lsp.core import litellm_compat
from tests import modelserver as ms
from tests.providers.ollama import OllamaServer

litellm.suppress_debug_info = True


def parse(parser: object, lines: list[dict[str, object]]) -> tuple[str, str]:
    reasoning = content = ""
    for line in lines:
        delta = parser.chunk_parser(line).choices[0].delta  # type: ignore[attr-defined]
        reasoning += getattr(delta, "reasoning_content", None) or ""
        content += delta.content or ""
    return reasoning, content


def line(content: str, done: bool = False) -> dict[str, object]:
    return {"model": "qwen3", "message": {"role": "assistant", "content": content},
            "done": done, **({"done_reason": "stop"} if done else {})}


def test_the_parser_is_where_it_was_and_still_loses_inline_reasoning() -> None:
    from litellm.llms.ollama.chat.transformation import OllamaChatCompletionResponseIterator
    litellm_compat.split_ollama_think_tags(litellm)
    patched = OllamaChatCompletionResponseIterator.chunk_parser
    litellm_compat.split_ollama_think_tags(litellm)  # once only
    assert OllamaChatCompletionResponseIterator.chunk_parser is patched
    original = patched.__wrapped__
    lines = [line("<think>"), line("2 + 2"), line(" is 4."), line("</think>"), line("\n\nIt is 4."),
             line("", done=True)]

    class Unpatched(OllamaChatCompletionResponseIterator):
        chunk_parser = original

    # When litellm fixes this, the patch can go: this assertion says so.
    unpatched = Unpatched(streaming_response=iter(()), sync_stream=True)
    assert parse(unpatched, lines) == ("", "2 + 2 is 4.\n\nIt is 4.")
    fixed = OllamaChatCompletionResponseIterator(streaming_response=iter(()), sync_stream=True)
    assert parse(fixed, lines) == ("2 + 2 is 4.", "It is 4.")
    # Content that does not open with the tag is the answer (litellm still drops the tag).
    plain = OllamaChatCompletionResponseIterator(streaming_response=iter(()), sync_stream=True)
    assert parse(plain, [line("Use a "), line("<think>"), line(" tag", done=True)]) == (
        "", "Use a  tag")
    # The native field is left to litellm.
    native = OllamaChatCompletionResponseIterator(streaming_response=iter(()), sync_stream=True)
    assert parse(native, [{"model": "qwen3", "message": {"role": "assistant", "content": "",
                                                          "thinking": "hm"},
                           "done": False}, line("ok", done=True)]) == ("hm", "ok")


@pytest.mark.asyncio
async def test_inline_reasoning_over_http_through_litellm() -> None:
    litellm_compat.split_ollama_think_tags(litellm)
    server = OllamaServer(model="ollama_chat/qwen3:8b", think_tags=True).start()
    try:
        server.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
        reasoning = content = ""
        async for chunk in await litellm.acompletion(
                model=server.model, api_base=server.url, stream=True,
                messages=[{"role": "user", "content": "2+2?"}]):
            if chunk.choices:
                reasoning += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
                content += chunk.choices[0].delta.content or ""
        assert (reasoning, content) == ("2 + 2 is 4.", "It is 4.")
    finally:
        server.stop()
