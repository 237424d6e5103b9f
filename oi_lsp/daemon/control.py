"""`oi-lsp daemon --status` and `--stop`: a connection that asks instead of serving LSP."""

from __future__ import annotations

import json
import time

from . import handshake, paths
from .relay import connect, read_line


def ask(control: str) -> dict[str, object] | None:
    """The daemon's answer to `control`; None when no daemon listens."""
    sock = connect(paths.socket_path())
    if sock is None:
        return None
    with sock:
        sock.sendall(handshake.hello(control=control))
        try:
            return handshake.decode(read_line(sock))
        except ValueError:
            return None


def status() -> int:
    answer = ask("status")
    if answer is None:
        print(f"oi-lsp daemon: not running (no answer on {paths.socket_path()})")
        return 3  # as `systemctl status` says "not running"
    print(json.dumps(answer, indent=2))
    return 0


def stop(wait: float = 30.0) -> int:
    answer = ask("stop")
    if answer is None:
        print("oi-lsp daemon: not running")
        return 0
    deadline = time.monotonic() + wait  # it closes its workspaces (their REPLs) first
    while time.monotonic() < deadline and paths.socket_path().exists():
        time.sleep(0.05)
    print(f"oi-lsp daemon: stopped (pid {answer.get('pid')})")
    return 0
