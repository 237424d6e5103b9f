"""What oi-lsp changes in litellm: all of it here, tested by tests/test_litellm_compat.py (which
fails loudly when a release moves what this relies on)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .reasoning import ThinkTags

_MARK = "_oi_lsp_think_tags"


def split_ollama_think_tags(litellm: ModuleType) -> None:
    """Ollama streams a reasoning model's thinking either in `message.thinking` (when asked
    with `think`) or inline, `<think>…</think>` opening the content (Qwen3, DeepSeek-R1 without
    `think`, older Ollama). litellm's ollama_chat parser (1.7x–1.11x) strips both tags but
    takes the first piece after `<think>` as the end of the reasoning, so the whole reasoning
    joins the answer, unmarked. Before its parser sees a line, inline reasoning is moved into
    `message.thinking`, which litellm handles: it becomes reasoning_content."""
    del litellm  # imported already; the class is looked up in its module
    from litellm.llms.ollama.chat.transformation import OllamaChatCompletionResponseIterator

    original = OllamaChatCompletionResponseIterator.chunk_parser
    if getattr(original, _MARK, False):
        return

    def chunk_parser(self: Any, chunk: dict[str, Any]) -> Any:
        message = chunk.get("message") if isinstance(chunk, dict) else None
        if isinstance(message, dict) and not message.get("thinking") \
                and isinstance(message.get("content"), str):
            tags: ThinkTags = self.__dict__.setdefault(_MARK, ThinkTags())
            pieces = tags.feed(message["content"])
            if chunk.get("done"):
                pieces += tags.flush()
            reasoning = "".join(text for kind, text in pieces if kind == "reasoning")
            chunk = {**chunk, "message": {
                **message, "content": "".join(text for kind, text in pieces if kind == "text")}}
            if reasoning:
                chunk["message"]["thinking"] = reasoning
        return original(self, chunk)

    setattr(chunk_parser, _MARK, True)
    chunk_parser.__wrapped__ = original  # type: ignore[attr-defined]
    OllamaChatCompletionResponseIterator.chunk_parser = chunk_parser  # type: ignore[method-assign]
