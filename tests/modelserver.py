"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the tests.

Each POST to /v1/chat/completions takes the next reply of the script and streams it as SSE, the
way OpenAI does: text in pieces, tool calls whose arguments arrive in pieces, HTTP errors, slow
streams. Every request body is recorded so a test can check what the model was sent. It runs in
a thread, so it serves whatever event loop (or process) the code under test uses.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any]


def text(content: str, *, pieces: int = 4, delay: float = 0.0) -> Reply:
    """A plain streamed answer, cut into about `pieces` chunks, `delay` seconds apart."""
    return {"kind": "text", "content": content, "pieces": pieces, "delay": delay}


def tool(language: str, code: str, *, say: str = "", call_id: str | None = None,
         name: str = "execute", arguments: str | None = None, delay: float = 0.0) -> Reply:
    """A tool call (optionally after some text) whose JSON arguments stream in pieces.
    `arguments` replaces the JSON, to send broken arguments."""
    args = arguments if arguments is not None else json.dumps({"language": language,
                                                               "code": code})
    return {"kind": "tool", "say": say, "calls": [(call_id, name, args)], "delay": delay}


def tools(*calls: tuple[str, str], say: str = "") -> Reply:
    """Several execute calls in one reply."""
    return {"kind": "tool", "say": say, "delay": 0.0,
            "calls": [(None, "execute", json.dumps({"language": lang, "code": code}))
                      for lang, code in calls]}


def error(status: int, message: str = "scripted error", *,
          headers: dict[str, str] | None = None) -> Reply:
    return {"kind": "error", "status": status, "message": message, "headers": headers or {}}


def cut(content: str) -> Reply:
    """A stream that stops mid-way, without finish reason or [DONE]."""
    return {"kind": "cut", "content": content}


class ModelServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.default: Reply = text("(the script has no more replies)")
        self.disconnects = 0  # streams the client closed before their end
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self.replies.clear()
            self.requests.clear()
            self.headers.clear()
            self.disconnects = 0

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.replies.popleft() if self.replies else self.default

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The `oi` settings that point oi-lsp at this server."""
        return {"model": "openai/scripted", "apiBase": self.url, "apiKey": "sk-test-key",
                **extra}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # /v1/models, for clients that probe
                self._json(200, {"object": "list", "data": [{"id": "scripted",
                                                              "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = server._next(body, dict(self.headers))
                if reply["kind"] == "error":
                    self._json(reply["status"], {"error": {"message": reply["message"],
                                                           "type": "scripted"}},
                               reply["headers"])
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    self._stream(reply)
                except (BrokenPipeError, ConnectionResetError):
                    server.disconnects += 1  # the client hung up: that is what stop does

            def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None,
                      ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _send(self, delta: dict[str, Any], finish: str | None = None) -> None:
                chunk = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                         "created": int(time.time()), "model": "scripted",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            def _pieces(self, content: str, n: int) -> list[str]:
                size = max(1, -(-len(content) // max(1, n)))
                return [content[i:i + size] for i in range(0, len(content), size)]

            def _stream(self, reply: Reply) -> None:
                self._send({"role": "assistant", "content": ""})
                if reply["kind"] == "cut":
                    self._send({"content": reply["content"]})
                    return
                if reply["kind"] == "text":
                    for piece in self._pieces(reply["content"], reply["pieces"]):
                        if reply["delay"]:
                            time.sleep(reply["delay"])
                        self._send({"content": piece})
                    self._send({}, "stop")
                else:
                    if reply["say"]:
                        self._send({"content": reply["say"]})
                    for index, (call_id, name, args) in enumerate(reply["calls"]):
                        self._send({"tool_calls": [{
                            "index": index, "id": call_id or f"call_{time.time_ns()}_{index}",
                            "type": "function", "function": {"name": name, "arguments": ""}}]})
                        for piece in self._pieces(args, 3):
                            if reply["delay"]:
                                time.sleep(reply["delay"])
                            self._send({"tool_calls": [{"index": index,
                                                        "function": {"arguments": piece}}]})
                    self._send({}, "tool_calls")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler
