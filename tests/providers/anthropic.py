"""A scripted Anthropic Messages server (POST /v1/messages), streaming as Anthropic does.

The stream: `message_start` (the usage of the input), then one content block after another,
each `content_block_start` / `content_block_delta`s / `content_block_stop`: `thinking`
(`thinking_delta`s, then one `signature_delta`), `text` (`text_delta`s), `tool_use`
(`input_json_delta`s whose `partial_json` pieces make the input); a `ping`; `message_delta`
(`stop_reason` `end_turn` or `tool_use`, `usage.output_tokens`); `message_stop`. A request
without `stream: true` gets the whole Message as JSON.

Prompt caching is billed as Anthropic does it: the request's `cache_control` breakpoints (on
tools, system blocks, message content blocks) mark prefixes of the prompt, in Anthropic's order
tools → system → messages. A breakpoint's prefix is written to the cache; a later request reads
the longest prefix already written that ends at one of its breakpoints or at most 20 blocks
before one (Anthropic's look-back). So `cache_read_input_tokens` is that prefix's tokens,
`cache_creation_input_tokens` the tokens from there to the last breakpoint, `input_tokens` the
rest; a request without breakpoints has only `input_tokens`. Tokens are bytes / 4 of the
canonical JSON of the blocks. `reset()` empties the cache.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

from tests.modelserver import text
from tests.providers.base import (
    Reply,
    ScriptedServer,
    Wire,
    pause,
    pieces,
    streamed_text,
    tokens,
    usage,
)

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 504: "timeout_error",
               529: "overloaded_error"}
ERROR_MESSAGES = {401: "invalid x-api-key", 403: "Your API key does not have permission to use "
                  "the specified resource.", 429: "Number of request tokens has exceeded your "
                  "per-minute rate limit", 500: "Internal server error", 503: "Service "
                  "unavailable", 529: "Overloaded"}
LOOKBACK = 20  # blocks before a breakpoint where Anthropic looks for a cached prefix
MAX_BREAKPOINTS = 4  # more cache_control marks in one request are refused (400)

Event = tuple[str, dict[str, Any]]


def _stripped(block: Any) -> Any:
    return ({k: v for k, v in block.items() if k != "cache_control"}
            if isinstance(block, dict) else block)


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and bool(block.get("cache_control"))


def segments(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    """The prompt as Anthropic caches it, block by block in its order (tools, system,
    messages), each without its cache mark, with whether it carried one."""
    out: list[tuple[Any, bool]] = [(("tool", _stripped(t)), _marked(t))
                                   for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        out.append((("system", system), False))
    elif isinstance(system, list):
        out.extend((("system", _stripped(b)), _marked(b)) for b in system)
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        out.extend(((i, message.get("role"), _stripped(b)), _marked(b)) for b in blocks)
    return out


class PromptCache:
    """The prefixes written so far, by hash, and the billing of one request against them."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.written: set[str] = set()
        self.min_tokens = min_tokens  # a shorter prefix is not cached (Anthropic: 1024+)

    def bill(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input_tokens, cache_creation_input_tokens, cache_read_input_tokens), and the
        request's breakpoints written."""
        digest = hashlib.sha256(str(body.get("model")).encode())
        hashes: list[str] = []
        sizes: list[int] = []
        marks: list[int] = []
        size = 0
        for i, (segment, marked) in enumerate(segments(body)):
            data = json.dumps(segment, sort_keys=True, separators=(",", ":")).encode()
            digest.update(data)
            size += len(data)
            hashes.append(digest.copy().hexdigest())
            sizes.append(size)
            if marked:
                marks.append(i)
        total = tokens(size)
        if not marks:
            return total, 0, 0
        read = 0
        for mark in marks:
            for i in range(max(0, mark - LOOKBACK + 1), mark + 1):
                if hashes[i] in self.written:
                    read = max(read, tokens(sizes[i]))
        for mark in marks:
            if tokens(sizes[mark]) >= self.min_tokens:
                self.written.add(hashes[mark])
        last = tokens(sizes[marks[-1]])
        write = max(0, last - read) if last >= self.min_tokens else 0
        return max(0, total - read - write), write, read


class AnthropicServer(ScriptedServer):
    """Anthropic's Messages API. `model`: the default model string of `settings()`."""

    def __init__(self, *, model: str = "anthropic/claude-sonnet-4-5",
                 min_cache_tokens: int = 0) -> None:
        super().__init__()
        self.model = model
        self.cache = PromptCache(min_cache_tokens)
        self.default = text("(the script has no more replies)")

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.cache.written.clear()

    def settings(self, **extra: Any) -> dict[str, Any]:
        # litellm appends /v1/messages to the api_base (a base already ending so is kept).
        return {"model": self.model, "apiBase": self.url, "apiKey": "sk-ant-test-key", **extra}

    def serve(self, wire: Wire, method: str, path: str, query: str, body: Any) -> None:
        if method == "GET" and path.rstrip("/").endswith("/v1/models"):
            name = self.model.split("/", 1)[-1]
            wire.json(200, {"data": [{"type": "model", "id": name, "display_name": name,
                                      "created_at": "2025-09-29T00:00:00Z"}],
                            "has_more": False, "first_id": name, "last_id": name})
            return
        if method != "POST" or not path.rstrip("/").endswith("/v1/messages"):
            self._error(wire, 404, f"Not found: {method} {path}", None, {})
            return
        reply = self._next(body, dict(wire.headers))
        if reply["kind"] == "error":
            self._error(wire, reply["status"], reply["message"], reply["error_kind"],
                        reply["headers"])
            return
        marks = sum(marked for _, marked in segments(body))
        if marks > MAX_BREAKPOINTS:
            self._error(wire, 400, "A maximum of 4 blocks with cache_control may be provided. "
                        f"Found {marks}.", None, {})
            return
        with self._lock:
            billed = self.cache.bill(body)
        events = self._events(reply, body, billed)
        if not body.get("stream"):
            self._whole(wire, reply, events)
            return
        wire.begin_stream(headers={"request-id": f"req_{uuid.uuid4().hex[:24]}"})
        for event, data in events:
            if event == "pause":
                pause(reply)
            else:
                wire.sse(data, event)

    @staticmethod
    def error_payload(status: int, message: str | None, kind: str | None) -> dict[str, Any]:
        return {"type": "error",
                "error": {"type": kind or ERROR_TYPES.get(status, "api_error"),
                          "message": message or ERROR_MESSAGES.get(status, "scripted error")},
                "request_id": f"req_{uuid.uuid4().hex[:24]}"}

    def _error(self, wire: Wire, status: int, message: str | None, kind: str | None,
               headers: dict[str, str]) -> None:
        payload = self.error_payload(status, message, kind)
        wire.json(status, payload, {"request-id": payload["request_id"], **headers})

    def _events(self, reply: Reply, body: dict[str, Any],
                billed: tuple[int, int, int]) -> Iterator[Event]:
        """The stream's events; ("pause", {}) where the reply's delay falls."""
        fresh, written, read = billed
        reasoning = reply.get("reasoning") or ""
        counts = usage(reply, prompt=fresh + written + read, completion=streamed_text(reply),
                       reasoning=reasoning, cached=read, cache_write=written)
        start_usage = {"input_tokens": max(0, counts["prompt"] - counts["cached"]
                                           - counts["cache_write"]),
                       "cache_creation_input_tokens": counts["cache_write"],
                       "cache_read_input_tokens": counts["cached"], "output_tokens": 1}
        yield "message_start", {"type": "message_start", "message": {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": body.get("model"), "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": start_usage}}
        index = 0
        if reply["kind"] in ("cut", "fail"):
            yield from self._text_block(index, reply["content"], 1, reply, close=False)
            if reply["kind"] == "fail":
                yield "error", self.error_payload(reply["status"] or 529, reply["message"],
                                                  reply["error_kind"])
            return
        if reasoning:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "thinking", "thinking": "",
                                                            "signature": ""}}
            for piece in pieces(reasoning, 4):
                yield "pause", {}
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "thinking_delta",
                                                        "thinking": piece}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "signature_delta",
                                                    "signature": reply["signature"]}}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        if reply["kind"] == "text":
            yield from self._text_block(index, reply["content"], reply["pieces"], reply)
            stop = "end_turn"
        else:
            if reply["say"]:
                yield from self._text_block(index, reply["say"], 1, reply)
                index += 1
            for call_id, name, args in reply["calls"]:
                block = {"type": "tool_use", "id": call_id or f"toolu_{uuid.uuid4().hex[:24]}",
                         "name": name, "input": {}}
                yield "content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": block}
                for piece in pieces(args, 3):
                    yield "pause", {}
                    yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "input_json_delta",
                                                            "partial_json": piece}}
                yield "content_block_stop", {"type": "content_block_stop", "index": index}
                index += 1
            stop = "tool_use"
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": counts["completion"]}}
        yield "message_stop", {"type": "message_stop"}

    def _text_block(self, index: int, content: str, n: int, reply: Reply,
                    close: bool = True) -> Iterator[Event]:
        yield "content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": {"type": "text", "text": ""}}
        if index == 0:
            yield "ping", {"type": "ping"}
        for piece in pieces(content, n):
            yield "pause", {}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": piece}}
        if close:
            yield "content_block_stop", {"type": "content_block_stop", "index": index}

    def _whole(self, wire: Wire, reply: Reply, events: Iterator[Event]) -> None:
        """A request without `stream`: the Message the events make, as one JSON."""
        message: dict[str, Any] = {}
        partial: dict[int, str] = {}
        for event, data in events:
            if event == "message_start":
                message = data["message"]
            elif event == "content_block_start":
                message["content"].append(dict(data["content_block"]))
            elif event == "content_block_delta":
                block, delta = message["content"][data["index"]], data["delta"]
                if delta["type"] == "input_json_delta":
                    partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
                else:
                    key = {"text_delta": "text", "thinking_delta": "thinking",
                           "signature_delta": "signature"}[delta["type"]]
                    block[key] = block.get(key, "") + delta[key]
            elif event == "message_delta":
                message.update(data["delta"])
                message["usage"]["output_tokens"] = data["usage"]["output_tokens"]
            elif event == "error":
                self._error(wire, reply["status"] or 529, reply["message"], reply["error_kind"],
                            {})
                return
        if reply["kind"] == "cut":  # the answer breaks off: half a JSON, then the close
            wire.begin_stream("application/json")
            wire.write(json.dumps(message).encode()[:40])
            return
        for i, args in partial.items():
            try:
                message["content"][i]["input"] = json.loads(args)
            except ValueError:
                message["content"][i]["input"] = {}
        wire.json(200, message)
