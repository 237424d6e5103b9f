"""The first line each way on a daemon connection, before the LSP stream (JSON, one line).

relay → daemon: {"oi-lsp": version, "env": {OI_* and key variables}, "cwd": folder}
             or {"oi-lsp": version, "control": "status" | "stop"}
daemon → relay: {"oi-lsp": version, "pid": daemon pid} (and, for a control, what it asked)
A daemon of another version answers and closes; the relay then serves standalone.
After the LSP stream, the daemon's END line gives the relay its exit status.
Imports nothing of oi-lsp but keys.py: the relay uses it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .. import __version__
from ..common.keys import is_key

MAX_LINE = 1 << 20
# After the LSP stream, when the client ended its session with `exit`: this, the exit status a
# standalone server would give (0 after `shutdown`), and a newline. A stream that ends without
# it ended otherwise (the daemon went away, or the client closed its side).
END = b"OI-LSP-END "


def client_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What of the relay's environment is its client's settings: OI_* and provider keys."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items()
            if (k.startswith("OI_") and not k.startswith("OI_LSP_")) or is_key(k)}


def hello(**extra: Any) -> bytes:
    return encode({"oi-lsp": __version__, **extra})


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One handshake line; ValueError when it is not a JSON object naming a version."""
    message = json.loads(line)
    if not isinstance(message, dict) or not isinstance(message.get("oi-lsp"), str):
        raise ValueError("not an oi-lsp handshake")
    return message
