"""The plumbing every scripted model server shares: a threaded HTTP server on 127.0.0.1, the
reply script, the record of what each request carried, and the helpers that write JSON, SSE
and NDJSON. A provider's server says only how it answers (its routes, its stream, its errors).

Token counts are estimated the same way everywhere: a token is 4 bytes of UTF-8.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

Reply = dict[str, Any]

def tokens(text: str | bytes | int) -> int:
    """Estimated tokens of a text (or of that many bytes): 4 bytes a token, rounded up."""
    size = text if isinstance(text, int) else len(text.encode() if isinstance(text, str)
                                                  else text)
    return (size + 3) // 4


def pieces(content: str, n: int) -> list[str]:
    """`content` cut into about `n` pieces (none for an empty content)."""
    size = max(1, -(-len(content) // max(1, n)))
    return [content[i:i + size] for i in range(0, len(content), size)]


def usage(reply: Reply, *, prompt: int, completion: str, reasoning: str = "",
          cached: int = 0, cache_write: int = 0) -> dict[str, int]:
    """The counts a server reports for a reply: estimated (prompt tokens as given, completion
    from the streamed text and reasoning), then whatever the reply's `usage` overrides.

    The neutral shape, as OpenAI counts: `prompt` includes `cached` and `cache_write`;
    `completion` includes `reasoning`."""
    counts = {"prompt": prompt, "completion": tokens(completion) + tokens(reasoning),
              "reasoning": tokens(reasoning), "cached": cached, "cache_write": cache_write}
    counts.update(reply.get("usage") or {})
    return counts


def streamed_text(reply: Reply) -> str:
    """What a reply's answer streams besides its reasoning: the text, or the words said before
    the tool calls and their arguments."""
    if reply["kind"] == "tool":
        return reply["say"] + "".join(args for _, _, args in reply["calls"])
    return str(reply.get("content", ""))


class Wire(BaseHTTPRequestHandler):
    """One HTTP exchange; the server it belongs to answers it (ScriptedServer.serve)."""

    protocol_version = "HTTP/1.1"
    scripted: ClassVar[ScriptedServer]

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._dispatch("GET", None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self._dispatch("POST", json.loads(self.rfile.read(length) or b"{}"))

    def _dispatch(self, method: str, body: Any) -> None:
        path, _, query = self.path.partition("?")
        self.scripted._called(method, self.path)
        try:
            self.scripted.serve(self, method, path, query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.scripted._hung_up()  # the client hung up: that is what a stop does

    # Whole answers.
    def json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def plain(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # Streams: the connection closes at their end, so a stream cut short is seen as one.
    def begin_stream(self, content_type: str = "text/event-stream",
                     headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True

    def write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def sse(self, payload: Any, event: str | None = None) -> None:
        """One server-sent event: `event:` line (when named) and `data:` line."""
        head = f"event: {event}\n" if event else ""
        self.write(f"{head}data: {json.dumps(payload)}\n\n".encode())

    def line(self, payload: Any) -> None:
        """One NDJSON line."""
        self.write(json.dumps(payload).encode() + b"\n")


class ScriptedServer:
    """A model server answering from a script: each model request takes the next reply (or
    `default` once the script is out), and its parsed body and headers are recorded."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.calls: list[str] = []  # every request's "METHOD /path?query", model calls or not
        self.default: Reply = {"kind": "text", "content": "(the script has no more replies)",
                               "pieces": 4, "delay": 0.0}
        self.disconnects = 0  # streams the client closed before their end
        self._lock = threading.Lock()
        handler = type(f"{type(self).__name__}Wire", (Wire,), {"scripted": self})
        self._httpd = ThreadingHTTPServer((host, 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    @property
    def url(self) -> str:
        """The api_base litellm is given for this server."""
        return self.root

    def start(self) -> ScriptedServer:
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
            self.calls.clear()
            self.disconnects = 0

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The `oi` settings that point oi-lsp (litellm) at this server."""
        raise NotImplementedError

    def serve(self, wire: Wire, method: str, path: str, query: str, body: Any) -> None:
        """Answer one request."""
        raise NotImplementedError

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.replies.popleft() if self.replies else self.default

    def _called(self, method: str, path: str) -> None:
        with self._lock:
            self.calls.append(f"{method} {path}")

    def _hung_up(self) -> None:
        with self._lock:
            self.disconnects += 1


def pause(reply: Reply) -> None:
    """A reply's `delay` between two of its pieces."""
    if reply.get("delay"):
        time.sleep(reply["delay"])


def signature_for(reasoning: str) -> str:
    """An opaque signature for a thinking text, the same for the same text (base64, as the
    providers' are)."""
    digest = hashlib.sha256(reasoning.encode()).digest()
    return base64.b64encode(b"\x12\x08scripted" + digest + digest).decode()
