"""`oi-lsp` over stdio, as editors start it: a thin relay to the user's daemon.

It connects to the daemon's socket (starting the daemon if none answers: under a lock file, so
relays starting together start one), says hello (its client's environment settings), and
copies bytes both ways until either side ends. It imports only the standard library's
lightest parts: it starts in milliseconds and stays small. The daemon going away ends the
relay with status 1, so the editor sees its server exit; a daemon of another version makes
the relay serve standalone (this process becomes `oi-lsp --standalone`), saying why."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

from . import handshake, paths

START_TIMEOUT = 60.0  # seconds for a new daemon to listen (its imports, on a busy machine)


def log(text: str) -> None:
    sys.stderr.write(f"oi-lsp relay: {text}\n")
    sys.stderr.flush()


def connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def start_daemon(folder: Path) -> None:
    """The daemon, detached: forked twice, in a session of its own, so it is nobody's child
    here and outlives this relay and its editor; its stderr is its log."""
    log_fd = os.open(folder / paths.LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(log_fd, 2)
                os.execv(sys.executable, [sys.executable, "-m", "oi_lsp", "daemon"])
        finally:
            os._exit(0)
    os.close(log_fd)
    os.waitpid(child, 0)


def connect_or_start(folder: Path) -> socket.socket:
    """A connection to the daemon; started first when none answers. Race-safe: the relay
    holding the start lock starts it, the others wait for the lock and then connect."""
    import fcntl

    path = paths.socket_path(folder)
    sock = connect(path)
    if sock is not None:
        return sock
    with open(folder / paths.START_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        sock = connect(path)
        if sock is not None:
            return sock
        start_daemon(folder)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            sock = connect(path)
            if sock is not None:
                return sock
            time.sleep(0.02)
    raise OSError(f"the daemon did not listen on {path} within {START_TIMEOUT:g} s "
                  f"(see {folder / paths.LOG})")


def read_line(sock: socket.socket) -> bytes:
    """The daemon's handshake line, read byte by byte: nothing of the LSP stream after it
    may be taken from the socket here."""
    line = bytearray()
    while len(line) < handshake.MAX_LINE:
        byte = sock.recv(1)
        if not byte or byte == b"\n":
            break
        line += byte
    return bytes(line)


def greet(sock: socket.socket) -> dict[str, object]:
    sock.sendall(handshake.hello(env=handshake.client_env(), cwd=os.getcwd()))
    return handshake.decode(read_line(sock))


def pump_in(sock: socket.socket) -> None:
    """Editor → daemon; at the editor's end of stream the daemon is told (half close)."""
    try:
        while data := os.read(0, 65536):
            sock.sendall(data)
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def pump_out(sock: socket.socket) -> None:
    """Daemon → editor, until the daemon closes."""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


def standalone(why: str) -> None:
    log(f"serving standalone: {why}")
    os.execv(sys.executable, [sys.executable, "-m", "oi_lsp", "--standalone", *sys.argv[1:]])


def main() -> int:
    try:
        folder = paths.private_dir()
        sock = connect_or_start(folder)
        answer = greet(sock)
    except (OSError, ValueError, paths.UnsafeFolder) as exc:
        standalone(f"no daemon ({exc})")
        return 1
    from .. import __version__

    if answer.get("oi-lsp") != __version__:
        sock.close()
        standalone(f"the daemon runs oi-lsp {answer.get('oi-lsp')}, this is {__version__}; "
                   "`oi-lsp daemon --stop` once its editors are closed")
        return 1
    threading.Thread(target=pump_in, args=(sock,), daemon=True).start()
    pump_out(sock)
    log("the daemon closed the connection")
    return 1
