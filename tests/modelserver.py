"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the tests, and the
reply builders every scripted server shares (tests/providers/ has Anthropic's, Gemini's and
Ollama's, which take the same replies).

Each POST to /v1/chat/completions takes the next reply of the script and streams it as SSE, the
way OpenAI does: reasoning (`delta.reasoning_content`, as DeepSeek and OpenRouter send it), text
in pieces, tool calls whose arguments arrive in pieces, HTTP errors, slow streams, and the usage
chunk when asked for. Every request body is recorded so a test can check what the model was
sent. It runs in a thread, so it serves whatever event loop (or process) the code under test
uses.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.providers.base import (
    Reply,
    ScriptedServer,
    Wire,
    pause,
    pieces,
    signature_for,
    streamed_text,
    tokens,
    usage,
)

__all__ = ["ModelServer", "Reply", "cut", "error", "fail_midstream", "text", "tool", "tools"]

Usage = dict[str, int]  # {"prompt", "completion", "reasoning", "cached", "cache_write"}, any of


def _thinking(reasoning: str | None, signature: str | None) -> dict[str, Any]:
    if reasoning and signature is None:
        signature = signature_for(reasoning)
    return {"reasoning": reasoning, "signature": signature}


def text(content: str, *, pieces: int = 4, delay: float = 0.0, reasoning: str | None = None,
         signature: str | None = None, usage: Usage | None = None) -> Reply:
    """A plain streamed answer, cut into about `pieces` chunks, `delay` seconds apart.

    `reasoning` streams first, in pieces, as the provider sends thinking; `signature` is the one
    Anthropic (and Gemini) put on it, generated when not given. `usage` overrides counts the
    server reports: `prompt` (cached and cache-written tokens included), `completion`
    (reasoning included), `reasoning`, `cached`, `cache_write`."""
    return {"kind": "text", "content": content, "pieces": pieces, "delay": delay,
            "usage": usage, **_thinking(reasoning, signature)}


def tool(language: str, code: str, *, say: str = "", call_id: str | None = None,
         name: str = "execute", arguments: str | None = None, delay: float = 0.0,
         reasoning: str | None = None, signature: str | None = None,
         usage: Usage | None = None) -> Reply:
    """A tool call (optionally after some text) whose JSON arguments stream in pieces.
    `arguments` replaces the JSON, to send broken arguments."""
    args = arguments if arguments is not None else json.dumps({"language": language,
                                                               "code": code})
    return {"kind": "tool", "say": say, "calls": [(call_id, name, args)], "delay": delay,
            "usage": usage, **_thinking(reasoning, signature)}


def tools(*calls: tuple[str, str] | Reply, say: str = "", reasoning: str | None = None,
          signature: str | None = None, usage: Usage | None = None) -> Reply:
    """Several calls in one reply (parallel tool calls): each a (language, code) execute call,
    or a `tool(...)` reply for a call with its own name, id or arguments."""
    listed: list[tuple[str | None, str, str]] = []
    for call in calls:
        if isinstance(call, dict):
            listed.extend(call["calls"])
        else:
            language, code = call
            listed.append((None, "execute", json.dumps({"language": language, "code": code})))
    return {"kind": "tool", "say": say, "delay": 0.0, "calls": listed, "usage": usage,
            **_thinking(reasoning, signature)}


def error(status: int, message: str | None = None, *, headers: dict[str, str] | None = None,
          kind: str | None = None) -> Reply:
    """The request refused with this HTTP status, in the provider's error shape. `message`
    defaults to what the provider says for the status; `kind` to its error type for it
    (Anthropic's `overloaded_error`, Gemini's `UNAVAILABLE`); `headers` such as retry-after."""
    return {"kind": "error", "status": status, "message": message, "headers": headers or {},
            "error_kind": kind}


def cut(content: str) -> Reply:
    """A stream that stops mid-way, without finish reason or end marker ([DONE],
    message_stop, the `done` line)."""
    return {"kind": "cut", "content": content}


def fail_midstream(content: str, status: int | None = None, *, kind: str | None = None,
                   message: str | None = None) -> Reply:
    """A stream that starts (status 200), sends `content`, then the provider's in-stream error
    event: Anthropic's `event: error`, an `error` object in OpenAI's and Gemini's data, Ollama's
    `{"error": ...}` line. `status` (and `kind`, the error type) default to the provider's
    overload: Anthropic's 529 `overloaded_error`, Gemini's 503 `UNAVAILABLE`, OpenAI's
    `server_error`."""
    return {"kind": "fail", "content": content, "status": status, "error_kind": kind,
            "message": message}


class ModelServer(ScriptedServer):
    """OpenAI's chat completions. `report_usage`: send the usage chunk whenever the request
    asks for it (`stream_options.include_usage`); by default only replies with their own
    `usage` send it, so that the tests that count tokens themselves keep doing so.
    `reasoning_field`: the delta attribute reasoning streams in (`reasoning_content` as
    DeepSeek, or `reasoning` as OpenRouter)."""

    def __init__(self, *, report_usage: bool = False,
                 reasoning_field: str = "reasoning_content", host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.report_usage = report_usage
        self.reasoning_field = reasoning_field
        self.default = text("(the script has no more replies)")

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The `oi` settings that point oi-lsp at this server."""
        return {"model": "openai/scripted", "apiBase": self.url, "apiKey": "sk-test-key",
                **extra}

    def serve(self, wire: Wire, method: str, path: str, query: str, body: Any) -> None:
        if method == "GET":  # /v1/models, for clients that probe
            wire.json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            return
        reply = self._next(body, dict(wire.headers))
        if reply["kind"] == "error":
            wire.json(reply["status"], {"error": {"message": reply["message"] or "scripted error",
                                                  "type": reply["error_kind"] or "scripted"}},
                      reply["headers"])
            return
        wire.begin_stream()
        self._stream(wire, reply, body)

    def _send(self, wire: Wire, delta: dict[str, Any], finish: str | None = None) -> None:
        wire.sse(self._chunk([{"index": 0, "delta": delta, "finish_reason": finish}]))

    def _chunk(self, choices: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        return {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": "scripted", "choices": choices, **more}

    def _stream(self, wire: Wire, reply: Reply, body: dict[str, Any]) -> None:
        self._send(wire, {"role": "assistant", "content": ""})
        if reply["kind"] in ("cut", "fail"):
            self._send(wire, {"content": reply["content"]})
            if reply["kind"] == "fail":
                wire.sse({"error": {"message": reply["message"] or "The server had an error "
                                    "while processing your request. Sorry about that!",
                                    "type": reply["error_kind"] or "server_error",
                                    "param": None, "code": None}})
            return
        for piece in pieces(reply.get("reasoning") or "", 4):
            pause(reply)
            self._send(wire, {self.reasoning_field: piece})
        if reply["kind"] == "text":
            for piece in pieces(reply["content"], reply["pieces"]):
                pause(reply)
                self._send(wire, {"content": piece})
            self._send(wire, {}, "stop")
        else:
            if reply["say"]:
                self._send(wire, {"content": reply["say"]})
            for index, (call_id, name, args) in enumerate(reply["calls"]):
                self._send(wire, {"tool_calls": [{
                    "index": index, "id": call_id or f"call_{time.time_ns()}_{index}",
                    "type": "function", "function": {"name": name, "arguments": ""}}]})
                for piece in pieces(args, 3):
                    pause(reply)
                    self._send(wire, {"tool_calls": [{"index": index,
                                                      "function": {"arguments": piece}}]})
            self._send(wire, {}, "tool_calls")
        if (body.get("stream_options") or {}).get("include_usage") \
                and (self.report_usage or reply.get("usage")):
            wire.sse(self._chunk([], usage=self._usage(reply, body)))
        wire.write(b"data: [DONE]\n\n")

    def _usage(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        n = usage(reply, prompt=tokens(json.dumps(body)), completion=streamed_text(reply),
                  reasoning=reply.get("reasoning") or "")
        return {"prompt_tokens": n["prompt"], "completion_tokens": n["completion"],
                "total_tokens": n["prompt"] + n["completion"],
                "prompt_tokens_details": {"cached_tokens": n["cached"], "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": n["reasoning"],
                                              "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}
