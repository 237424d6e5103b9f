"""A scripted Ollama server (POST /api/chat), streaming NDJSON as Ollama does.

Each line is `{"model", "created_at", "message": {"role": "assistant", "content": ...},
"done": false}`; the last has `"done": true`, `done_reason`, `prompt_eval_count`,
`eval_count` and the durations. Reasoning comes first: as `message.thinking` pieces when the
request has `think` on, else (and always with `think_tags=True`, as many models do) inline,
`<think>` … `</think>` opening the content, each tag a piece of its own as a model's tokens
come. Tool calls, when the request has `tools`, arrive whole in one line's
`message.tool_calls` (`{"function": {"name", "arguments": {…object…}}}`); without `tools` (or
when the arguments are no JSON object) the model writes the code fenced in its content, as a
model without tool calling does. A request with `"stream": false` gets one JSON.

Also GET /api/tags, POST /api/show, GET /api/version and GET / answer as Ollama's do. Errors
are `{"error": "..."}` with the status, and that same line in the stream for an in-stream one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
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

VERSION = "0.12.6"
MESSAGES = {400: "invalid request", 401: "unauthorized", 404: "model not found, try pulling "
            "it first", 429: "too many requests", 500: "llama runner process has terminated",
            503: "server busy, please try again.  maximum pending requests exceeded"}

Line = dict[str, Any]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fenced(reply: Reply) -> str:
    """A tool reply as a model without tool calling writes it: the code in fences."""
    out = reply["say"]
    for _, _, args in reply["calls"]:
        try:
            call = json.loads(args)
        except ValueError:
            call = None
        if isinstance(call, dict) and "code" in call:
            out += f"\n\n```{call.get('language', '')}\n{call['code']}\n```\n"
        else:
            out += f"\n\n{args}\n"
    return out


class OllamaServer(ScriptedServer):
    """Ollama's native API. `model`: the default model string of `settings()` (litellm's
    `ollama_chat/`, its client of /api/chat); `think_tags`: reasoning always inline in
    `<think>` tags; `capabilities`: what /api/show says the model can do."""

    def __init__(self, *, model: str = "ollama_chat/llama3.1", think_tags: bool = False,
                 capabilities: tuple[str, ...] = ("completion", "tools", "thinking"),
                 context_length: int = 131072) -> None:
        super().__init__()
        self.model = model
        self.think_tags = think_tags
        self.capabilities = capabilities
        self.context_length = context_length
        self.default = text("(the script has no more replies)")

    def settings(self, **extra: Any) -> dict[str, Any]:
        # litellm appends /api/chat to the api_base: the server's root, as for Ollama itself.
        return {"model": self.model, "apiBase": self.url, "apiKey": "ollama-test-key", **extra}

    @property
    def name(self) -> str:
        name = self.model.split("/", 1)[-1]
        return name if ":" in name else f"{name}:latest"

    def serve(self, wire: Wire, method: str, path: str, query: str, body: Any) -> None:
        route = (method, path.rstrip("/") or "/")
        if route == ("GET", "/"):
            wire.plain(200, "Ollama is running")
        elif route == ("GET", "/api/version"):
            wire.json(200, {"version": VERSION})
        elif route == ("GET", "/api/tags"):
            wire.json(200, {"models": [self._listing()]})
        elif route == ("POST", "/api/show"):
            wire.json(200, self._show())
        elif route == ("POST", "/api/chat"):
            self._chat(wire, body)
        else:
            wire.json(404, {"error": f"{method} {path} not found"})

    def _listing(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.name, "modified_at": _now(),
                "size": 4920753328, "digest": "46e0c10c039e" + "0" * 52,
                "details": self._details()}

    def _details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                "parameter_size": "8.0B", "quantization_level": "Q4_K_M"}

    def _show(self) -> dict[str, Any]:
        return {"license": "", "modelfile": f"FROM {self.name}\n",
                "parameters": 'stop "<|eot_id|>"', "template": "{{ .Prompt }}",
                "details": self._details(),
                "model_info": {"general.architecture": "llama",
                               "general.parameter_count": 8030261248,
                               "llama.context_length": self.context_length,
                               "llama.embedding_length": 4096},
                "capabilities": list(self.capabilities), "modified_at": _now()}

    def _chat(self, wire: Wire, body: dict[str, Any]) -> None:
        reply = self._next(body, dict(wire.headers))
        if reply["kind"] == "error":
            wire.json(reply["status"], {"error": reply["message"]
                                        or MESSAGES.get(reply["status"], "error")},
                      reply["headers"])
            return
        lines = self._lines(reply, body)
        if body.get("stream") is False:
            self._whole(wire, reply, lines)
            return
        wire.begin_stream("application/x-ndjson")
        for line in lines:
            if line.get("pause"):
                pause(reply)
            else:
                wire.line(line)

    def _lines(self, reply: Reply, body: dict[str, Any]) -> Iterator[Line]:
        """The stream's lines; {"pause": True} where the reply's delay falls."""
        model = body.get("model") or self.name

        def line(**message: Any) -> Line:
            return {"model": model, "created_at": _now(),
                    "message": {"role": "assistant", "content": "", **message}, "done": False}

        if reply["kind"] in ("cut", "fail"):
            yield line(content=reply["content"])
            if reply["kind"] == "fail":
                yield {"error": reply["message"] or MESSAGES.get(reply["status"] or 500, "error")}
            return
        reasoning = reply.get("reasoning") or ""
        if reasoning and body.get("think") and not self.think_tags:
            for piece in pieces(reasoning, 4):
                yield {"pause": True}
                yield line(thinking=piece)
        elif reasoning:
            for piece in ["<think>", *pieces(reasoning, 4), "</think>", "\n\n"]:
                yield {"pause": True}
                yield line(content=piece)
        native = reply["kind"] == "tool" and bool(body.get("tools"))
        calls: list[dict[str, Any]] = []
        if native:
            for _, name, args in reply["calls"]:
                try:
                    parsed = json.loads(args)
                except ValueError:
                    parsed = None
                if not isinstance(parsed, dict):  # Ollama leaves what it cannot parse as text
                    native = False
                    break
                calls.append({"function": {"name": name, "arguments": parsed}})
        if reply["kind"] == "text":
            answer, n = reply["content"], reply["pieces"]
        else:
            answer, n = (reply["say"], 2) if native else (fenced(reply), 4)
        for piece in pieces(answer, n):
            yield {"pause": True}
            yield line(content=piece)
        if native:
            yield {"pause": True}
            yield line(tool_calls=calls)
        counts = usage(reply, prompt=tokens(json.dumps(body)), completion=streamed_text(reply),
                       reasoning=reasoning)
        final = line()
        final.update(done=True, done_reason="stop", total_duration=812345678,
                     load_duration=12345678, prompt_eval_count=counts["prompt"],
                     prompt_eval_duration=123456789, eval_count=counts["completion"],
                     eval_duration=676543211)
        yield final

    def _whole(self, wire: Wire, reply: Reply, lines: Iterator[Line]) -> None:
        """`"stream": false`: the lines as one message, with the final line's counts."""
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        for line in lines:
            if "error" in line:
                wire.json(reply["status"] or 500, line)
                return
            if line.get("pause"):
                continue
            part = line["message"]
            message["content"] += part.get("content", "")
            if part.get("thinking"):
                message["thinking"] = message.get("thinking", "") + part["thinking"]
            if part.get("tool_calls"):
                message["tool_calls"] = part["tool_calls"]
            if line["done"]:
                wire.json(200, {**line, "message": message})
                return
        wire.begin_stream("application/json")  # a cut reply: half an answer, then the close
        wire.write(json.dumps({"model": self.name, "message": message}).encode()[:40])
