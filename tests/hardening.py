"""Helpers shared by the hardening suites (fuzz, faults, crash, load, security).

Every suite records its figures with `record(section, **figures)`; they are merged into
test-artifacts/reliability.json, from which `scripts/reliability-report` renders
docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
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


def kernels_of(data_dir: Path | None = None, marker: str | None = None) -> list[psutil.Process]:
    """Live ipykernel processes (optionally only those whose environment holds `marker`)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if "ipykernel" not in cmd:
            continue
        if marker is not None:
            try:
                if proc.environ().get("OI_HARDENING_RUN") != marker:
                    continue
            except (psutil.AccessDenied, psutil.NoSuchProcess):
                continue
        found.append(proc)
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


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]
