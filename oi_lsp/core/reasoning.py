"""A model's reasoning, apart from its answer: `<think>` tags in streamed content split out,
and the provider's thinking blocks put back together from their streamed pieces.

Reasoning models served by Ollama, vLLM or llama.cpp (DeepSeek-R1, Qwen3, ...) often write their
reasoning into the content as `<think>…</think>` before the answer. Only a block that opens the
content counts: a `<think>` later in an answer is text the model means.
"""

from __future__ import annotations

from typing import Any, Literal

Kind = Literal["text", "reasoning"]
OPEN, CLOSE = "<think>", "</think>"


class ThinkTags:
    """Splits streamed content into (kind, text) pieces as it arrives; tags cut across
    chunks are held back until they are whole."""

    def __init__(self) -> None:
        self._state: Literal["start", "thinking", "after", "text"] = "start"
        self._held = ""

    def feed(self, text: str) -> list[tuple[Kind, str]]:
        held, self._held = self._held + text, ""
        out: list[tuple[Kind, str]] = []
        while held:
            if self._state == "start":
                body = held.lstrip()
                if body.startswith(OPEN):
                    self._state, held = "thinking", body[len(OPEN):]
                elif OPEN.startswith(body):  # maybe the tag, not whole yet
                    self._held = held
                    return out
                else:
                    self._state = "text"
            elif self._state == "thinking":
                end = held.find(CLOSE)
                if end >= 0:
                    out.append(("reasoning", held[:end]))
                    self._state, held = "after", held[end + len(CLOSE):]
                    continue
                keep = _partial_suffix(held, CLOSE)
                if keep:
                    self._held, held = held[-keep:], held[:-keep]
                out.append(("reasoning", held))
                return _nonempty(out)
            elif self._state == "after":  # the answer starts after the blank lines
                held = held.lstrip()
                if held:
                    self._state = "text"
            else:
                out.append(("text", held))
                held = ""
        return _nonempty(out)

    def flush(self) -> list[tuple[Kind, str]]:
        """What is still held once the stream ended (a tag that never closed, say)."""
        held, self._held = self._held, ""
        if not held:
            return []
        return [("reasoning" if self._state == "thinking" else "text", held)]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that starts `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def _nonempty(pieces: list[tuple[Kind, str]]) -> list[tuple[Kind, str]]:
    return [(kind, text) for kind, text in pieces if text]


class ThinkingBlocks:
    """Anthropic's thinking blocks, as litellm streams them: pieces of a block's text, then
    its signature; redacted blocks whole. Kept to be sent back unchanged."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []

    def add(self, pieces: list[Any]) -> None:
        for raw in pieces:
            piece = dict(raw) if not isinstance(raw, dict) else raw
            kind = piece.get("type")
            last = self.blocks[-1] if self.blocks else None
            if kind == "thinking":
                if last is None or last.get("type") != "thinking" or last.get("signature"):
                    last = {"type": "thinking", "thinking": ""}
                    self.blocks.append(last)
                last["thinking"] += piece.get("thinking") or ""
                if piece.get("signature"):
                    last["signature"] = piece["signature"]
            elif kind == "redacted_thinking":
                self.blocks.append({"type": "redacted_thinking", "data": piece.get("data", "")})
