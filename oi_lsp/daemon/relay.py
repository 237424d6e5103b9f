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

MAX_SOCKET_PATH = 107  # bytes: sun_path's size on Linux, less its NUL
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
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise OSError(f"the socket path {path} is too long for a Unix socket")
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


EDITOR_GONE = threading.Event()  # the editor closed our stdin


def pump_in(sock: socket.socket) -> None:
    """Editor → daemon; at the editor's end of stream the daemon is told (half close)."""
    try:
        while data := os.read(0, 65536):
            sock.sendall(data)
        EDITOR_GONE.set()
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Framing:
    """Follows the daemon's LSP framing (headers, then Content-Length bytes of body) so that
    what comes after the stream, the daemon's end line (handshake.END), is not passed on."""

    def __init__(self) -> None:
        self.body_left = 0
        self.header = bytearray()
        self.end: int | None = None  # the exit status the daemon's end line gave

    def feed(self, data: bytes) -> bytes:
        """What of `data` goes to the editor."""
        out: list[bytes] = []
        view = memoryview(data)
        while view and self.end is None:
            if self.body_left:
                piece = view[:self.body_left]
                out.append(bytes(piece))
                self.body_left -= len(piece)
                view = view[len(piece):]
                continue
            self.header += view
            view = view[len(view):]
            if self.header.startswith(handshake.END) and b"\n" in self.header:
                line = bytes(self.header[:self.header.index(b"\n")])
                self.end = int(line[len(handshake.END):] or b"1")
                break
            stop = self.header.find(b"\r\n\r\n")
            if stop < 0:
                continue
            head, rest = bytes(self.header[:stop + 4]), bytes(self.header[stop + 4:])
            self.header.clear()
            out.append(head)
            self.body_left = _content_length(head)
            view = memoryview(rest)
        return b"".join(out)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or b"0")
    return 0


def pump_out(sock: socket.socket) -> int | None:
    """Daemon → editor, until the daemon closes; the exit status its end line gave."""
    framing = Framing()
    while framing.end is None:
        try:
            data = sock.recv(65536)
        except OSError:
            return None
        if not data:
            return None
        view = memoryview(framing.feed(data))
        while view:
            view = view[os.write(1, view):]
    return framing.end


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
    end = pump_out(sock)
    if end is None:  # 1, as a server whose client left without `shutdown`
        if not EDITOR_GONE.is_set():
            log("the daemon closed the connection")
        return 1
    return end  # after `exit`: 0 when `shutdown` came first, as a standalone server
