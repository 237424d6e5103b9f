"""`oi-lsp daemon --status` and `--stop`: a connection that asks instead of serving LSP."""

from __future__ import annotations

import os
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
    workspaces = answer.get("workspaces")
    print(f"oi-lsp daemon {answer.get('oi-lsp')}: running, pid {answer.get('pid')}\n"
          f"  socket:      {answer.get('socket')}\n"
          f"  connections: {answer.get('connections')}\n"
          f"  workspaces:  {len(workspaces) if isinstance(workspaces, list) else '?'}")
    for uri in workspaces if isinstance(workspaces, list) else ():
        print(f"    {uri}")
    return 0


def stop(wait: float = 30.0) -> int:
    """Ask the daemon to stop, and wait until it has (its REPLs closed)."""
    answer = ask("stop")
    if answer is None:
        print("oi-lsp daemon: not running")
        return 0
    pid = answer.get("pid")
    deadline = time.monotonic() + wait
    while isinstance(pid, int) and time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if isinstance(pid, int) and _alive(pid):
        print(f"oi-lsp daemon: pid {pid} is still closing its REPLs after {wait:g} s")
        return 1
    print(f"oi-lsp daemon: stopped (pid {pid})")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's (the pid was reused)
        return False
    return True
