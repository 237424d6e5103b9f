"""A scripted Gemini API server (Google AI Studio's generativelanguage API), streaming as
Gemini does.

POST {base}/models/{model}:streamGenerateContent?alt=sse answers `data:` chunks, each
`{"candidates": [{"content": {"role": "model", "parts": [...]}, "index": 0}],
"usageMetadata": {...}, "modelVersion", "responseId"}`, the last with `finishReason`; no end
marker. Parts: `{"text": ..., "thought": true}` for the reasoning (in pieces, first, when the
request has `thinkingConfig.includeThoughts`),
`{"text": ...}` for the answer, `{"functionCall": {"name", "args": {...}}}` whole, all of a
reply's calls in one chunk. The `thoughtSignature` goes where the API reference says: on the
first functionCall part of a reply with calls, else on the reply's last part. `usageMetadata`
is on every chunk, its counts so far (`candidatesTokenCount` grows; `thoughtsTokenCount`,
`cachedContentTokenCount` when not zero). Arguments that are no JSON object end as Gemini's
`MALFORMED_FUNCTION_CALL`. POST ...:generateContent answers the same as one JSON.

Errors are `{"error": {"code", "message", "status"}}`: 400 INVALID_ARGUMENT, 401
UNAUTHENTICATED, 403 PERMISSION_DENIED, 429 RESOURCE_EXHAUSTED, 500 INTERNAL, 503 UNAVAILABLE
("The model is overloaded."), and the same object as a `data:` chunk for an in-stream failure.
"""

from __future__ import annotations

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

STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
            404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
            504: "DEADLINE_EXCEEDED"}
MESSAGES = {400: "Request contains an invalid argument.",
            401: "Request had invalid authentication credentials. Expected OAuth 2 access "
                 "token, login cookie or other valid authentication credential.",
            403: "Method doesn't allow unregistered callers (callers without established "
                 "identity). Please use API Key or other form of API consumer identity to call "
                 "this API.",
            404: "models/unknown is not found for API version v1beta, or is not supported for "
                 "generateContent.",
            429: "You exceeded your current quota, please check your plan and billing details.",
            500: "An internal error has occurred. Please retry or report in "
                 "https://developers.generativeai.google/guide/troubleshooting",
            503: "The model is overloaded. Please try again later.",
            504: "Deadline expired before operation could complete."}

Chunk = dict[str, Any]


class GeminiServer(ScriptedServer):
    """The Gemini API. `model`: the default model string of `settings()`. The reasoning's
    thought parts are streamed only when the request asks for them
    (`generationConfig.thinkingConfig.includeThoughts`, which litellm sets for a
    `reasoning_effort`), as Gemini does; `include_thoughts` True or False overrides that. Its
    tokens (`thoughtsTokenCount`) and signature are there either way."""

    def __init__(self, *, model: str = "gemini/gemini-2.5-flash",
                 include_thoughts: bool | None = None) -> None:
        super().__init__()
        self.model = model
        self.include_thoughts = include_thoughts
        self.default = text("(the script has no more replies)")

    @property
    def url(self) -> str:
        # litellm joins api_base + "/models/{model}:streamGenerateContent?alt=sse".
        return f"{self.root}/v1beta"

    def settings(self, **extra: Any) -> dict[str, Any]:
        return {"model": self.model, "apiBase": self.url, "apiKey": "gemini-test-key", **extra}

    def serve(self, wire: Wire, method: str, path: str, query: str, body: Any) -> None:
        action = path.rsplit(":", 1)[-1] if "/models/" in path else ""
        if method == "GET" and path.rstrip("/").endswith("/models"):
            name = self.model.split("/", 1)[-1]
            wire.json(200, {"models": [{"name": f"models/{name}", "displayName": name,
                                        "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
                                        "supportedGenerationMethods": [
                                            "generateContent", "countTokens"],
                                        "thinking": True}]})
            return
        if method != "POST" or action not in ("streamGenerateContent", "generateContent"):
            self._error(wire, 404, f"Not found: {method} {path}", None, {})
            return
        reply = self._next(body, dict(wire.headers))
        if reply["kind"] == "error":
            self._error(wire, reply["status"], reply["message"], reply["error_kind"],
                        reply["headers"])
            return
        model = path.rsplit("/models/", 1)[-1].rsplit(":", 1)[0]
        chunks = self._chunks(reply, body, model)
        if action == "generateContent":
            self._whole(wire, reply, chunks)
            return
        wire.begin_stream()
        for chunk in chunks:
            if chunk.get("pause"):
                pause(reply)
            else:
                wire.sse(chunk)

    @staticmethod
    def error_payload(status: int, message: str | None, kind: str | None) -> dict[str, Any]:
        return {"error": {"code": status, "message": message or MESSAGES.get(status, "error"),
                          "status": kind or STATUSES.get(status, "UNKNOWN")}}

    def _error(self, wire: Wire, status: int, message: str | None, kind: str | None,
               headers: dict[str, str]) -> None:
        wire.json(status, self.error_payload(status, message, kind), headers)

    def _chunks(self, reply: Reply, body: dict[str, Any], model: str) -> Iterator[Chunk]:
        """The stream's chunks; {"pause": True} where the reply's delay falls."""
        response_id = uuid.uuid4().hex[:22]
        reasoning = reply.get("reasoning") or ""
        counts = usage(reply, prompt=tokens(json.dumps(body)), completion=streamed_text(reply),
                       reasoning=reasoning)
        streamed = {"text": 0, "thought": 0}

        def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> Chunk:
            for part in parts:
                if "text" in part:
                    streamed["thought" if part.get("thought") else "text"] += tokens(part["text"])
                elif "functionCall" in part:
                    streamed["text"] += tokens(json.dumps(part["functionCall"]["args"]))
            done = finish is not None
            thoughts = counts["reasoning"] if done else min(streamed["thought"],
                                                            counts["reasoning"])
            answer = (counts["completion"] - counts["reasoning"]) if done else streamed["text"]
            meta: dict[str, Any] = {"promptTokenCount": counts["prompt"],
                                    "candidatesTokenCount": answer,
                                    "totalTokenCount": counts["prompt"] + answer + thoughts,
                                    "promptTokensDetails": [{"modality": "TEXT",
                                                             "tokenCount": counts["prompt"]}]}
            if thoughts:
                meta["thoughtsTokenCount"] = thoughts
            if counts["cached"]:
                meta["cachedContentTokenCount"] = counts["cached"]
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts},
                                         "index": 0}
            if finish:
                candidate["finishReason"] = finish
            return {"candidates": [candidate], "usageMetadata": meta, "modelVersion": model,
                    "responseId": response_id}

        if reply["kind"] in ("cut", "fail"):
            yield chunk([{"text": reply["content"]}])
            if reply["kind"] == "fail":
                yield self.error_payload(reply["status"] or 503, reply["message"],
                                         reply["error_kind"])
            return
        for piece in pieces(reasoning, 4) if self._shows_thoughts(body) else []:
            yield {"pause": True}
            yield chunk([{"text": piece, "thought": True}])
        signature = reply.get("signature")
        if reply["kind"] == "text":
            answer = pieces(reply["content"], reply["pieces"]) or [""]
            for i, piece in enumerate(answer):
                yield {"pause": True}
                last = i == len(answer) - 1
                part: dict[str, Any] = {"text": piece}
                if last and signature:
                    part["thoughtSignature"] = signature
                yield chunk([part], "STOP" if last else None)
            return
        if reply["say"]:
            yield chunk([{"text": reply["say"]}])
        calls: list[dict[str, Any]] = []
        for call_id, name, args in reply["calls"]:
            try:
                parsed = json.loads(args)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):  # Gemini cannot send it: the call is refused
                yield chunk([], "MALFORMED_FUNCTION_CALL")
                return
            call: dict[str, Any] = {"name": name, "args": parsed}
            if call_id:
                call["id"] = call_id
            part = {"functionCall": call}
            if signature and not calls:
                part["thoughtSignature"] = signature
            calls.append(part)
        yield {"pause": True}
        yield chunk(calls, "STOP")

    def _shows_thoughts(self, body: dict[str, Any]) -> bool:
        if self.include_thoughts is not None:
            return self.include_thoughts
        config = body.get("generationConfig") or body.get("generation_config") or {}
        thinking = config.get("thinkingConfig") or config.get("thinking_config") or {}
        return bool(thinking.get("includeThoughts") or thinking.get("include_thoughts"))

    def _whole(self, wire: Wire, reply: Reply, chunks: Iterator[Chunk]) -> None:
        """generateContent: the chunks' parts in one response, with the last usage."""
        parts: list[dict[str, Any]] = []
        last: Chunk = {}
        for chunk in chunks:
            if "error" in chunk:
                wire.json(chunk["error"]["code"], chunk)  # the failure, as a whole answer
                return
            if chunk.get("pause"):
                continue
            for part in chunk["candidates"][0]["content"]["parts"]:
                same = parts and "text" in part and "text" in parts[-1] \
                    and bool(part.get("thought")) == bool(parts[-1].get("thought"))
                if same:
                    merged = {**parts[-1], **part, "text": parts[-1]["text"] + part["text"]}
                    parts[-1] = merged
                else:
                    parts.append(dict(part))
            last = chunk
        if reply["kind"] == "cut":
            wire.begin_stream("application/json")
            wire.write(json.dumps(last).encode()[:40])
            return
        last["candidates"][0]["content"]["parts"] = parts
        wire.json(200, last)
