"""Helpers shared by the hardening suites (fuzz, faults, crash, load, security).

Every suite records its figures with `record(section, **figures)`; they are merged into
test-artifacts/reliability.json, from which `scripts/reliability-report` renders
docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "test-artifacts" / "reliability.json"


def record(section: str, **figures: Any) -> None:
    """Merge figures of one suite into the JSON file (one pytest process writes it)."""
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(FIGURES.read_text())
    except (OSError, ValueError):
        data = {}
    entry = data.setdefault(section, {})
    entry.update(figures)
    entry["recorded"] = time.strftime("%Y-%m-%d %H:%M:%S")
    tmp = FIGURES.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, FIGURES)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def frame(payload: dict[str, Any] | bytes) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_frame(reader: asyncio.StreamReader, timeout: float = 30) -> dict[str, Any]:
    """One LSP message from a byte stream."""
    async with asyncio.timeout(timeout):
        length = 0
        while True:
            line = await reader.readline()
            if not line:
                raise EOFError("the server closed the stream")
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        result: dict[str, Any] = json.loads(await reader.readexactly(length))
        return result


async def read_response(reader: asyncio.StreamReader, msg_id: int,
                        timeout: float = 30) -> dict[str, Any]:
    """The response to request `msg_id`, skipping notifications and other messages."""
    async with asyncio.timeout(timeout):
        while True:
            message = await read_frame(reader, timeout)
            if message.get("id") == msg_id and "method" not in message:
                return message


def initialize_request(msg_id: int, folder: Path | None = None,
                       options: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"processId": os.getpid(), "capabilities":
                              {"experimental": {"oi": True}}}
    if folder is not None:
        params["workspaceFolders"] = [{"uri": folder.resolve().as_uri(), "name": folder.name}]
    if options is not None:
        params["initializationOptions"] = options
    return {"jsonrpc": "2.0", "id": msg_id, "method": "initialize", "params": params}


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def marked(marker: str) -> list[psutil.Process]:
    """Every live process started with OI_HARDENING_RUN=marker in its environment (a server
    of the test, and what it started: kernels, REPLs, what their code started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if (proc.status() != psutil.STATUS_ZOMBIE
                    and proc.environ().get("OI_HARDENING_RUN") == marker):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


async def wait_gone(procs: list[psutil.Process], timeout: float = 20) -> list[psutil.Process]:
    """Wait for processes to exit (zombies count as gone); return those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        await asyncio.sleep(0.2)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def sigkill(client: Any) -> None:
    """SIGKILL the server and wait until it is gone (not for its pipes: what it started may
    hold its stderr open until the next server sweeps it)."""
    proc = client.process
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    async with asyncio.timeout(30):
        while proc.returncode is None:  # noqa: ASYNC110 (set by the child watcher)
            await asyncio.sleep(0.02)
    await client.close()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


class RawServer:
    """A real `oi-lsp` over stdio, spoken to byte by byte (no LSP library in between), so a test
    can send what no well-behaved client would. A thread reads its stdout: responses by id;
    requests from the server are answered with null."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        import sys
        import threading

        self._err = open(stderr, "wb")  # closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oi_lsp", "--log-level", "info"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._err, env={**os.environ, **env})
        self.responses: dict[Any, dict[str, Any]] = {}
        self.notifications = 0
        self._cond = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self._cond:
                        self._cond.notify_all()
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None, "the server sent a message without Content-Length"
            message = json.loads(out.read(length))
            if "method" in message and "id" in message:  # a request of the server's
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
            elif "method" in message:
                self.notifications += 1
            else:
                with self._cond:
                    self.responses[message.get("id")] = message
                    self._cond.notify_all()

    def send(self, payload: dict[str, Any] | bytes, raw: bool = False) -> None:
        """Send one message (framed), or with raw=True the bytes exactly as given."""
        data = payload if raw and isinstance(payload, bytes) else frame(payload)
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(data)
        stdin.flush()

    def request(self, method: str, params: Any = None, *, omit_params: bool = False,
                timeout: float = 60) -> dict[str, Any]:
        """Send a request and wait for its response (TimeoutError: the server hung)."""
        self._next_id += 1
        msg_id = self._next_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if not omit_params:
            message["params"] = params
        self.send(message)
        return self.wait(msg_id, timeout)

    def wait(self, msg_id: Any, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while msg_id not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no response to request {msg_id} in {timeout:g} s")
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise EOFError(f"the server exited ({self.proc.returncode}) without "
                                   f"answering request {msg_id}")
                self._cond.wait(min(left, 0.5))
            return self.responses.pop(msg_id)

    def initialize(self, folder: Path, options: dict[str, Any]) -> None:
        self._next_id += 1
        self.send(initialize_request(self._next_id, folder, options))
        assert "result" in self.wait(self._next_id)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def close(self, timeout: float = 30) -> int | None:
        """Shut down politely when possible; kill otherwise. Returns the exit code."""
        try:
            if self.proc.poll() is None:
                self.request("shutdown", omit_params=True, timeout=timeout)
                self.send({"jsonrpc": "2.0", "method": "exit"})
                self.proc.wait(timeout)
        except (TimeoutError, EOFError, OSError, ValueError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._err.close()
        return self.proc.returncode
