"""Driving the real oi-lsp over stdio as an editor does, and watching its memory."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
from lsprotocol import types

from oi_lsp.client import OIClient, server_command, to_uri

# A server whose coalescer sends every chunk at once: the "stage off" side of metric 8. The
# module constants are read on every call, so setting them before serving switches it off.
NO_COALESCING = [sys.executable, "-c",
                 "import oi_lsp.core.streamer as n; n.INTERVAL = 0.0; n.MAX_BYTES = 1\n"
                 "from oi_lsp.cli import main; main()"]


def bytecode_env() -> dict[str, str]:
    """Python's compiled modules kept between starts, as an installed package has them.

    A pip install compiles every module once; this checkout is an editable install and the
    machine may set PYTHONDONTWRITEBYTECODE, so every start would compile oi_lsp again (about
    a third of the server's imports). The cache is the bench's own, outside the source tree.
    The servers, baseline A and the kernels they start all use it."""
    root = Path(os.environ.get("OI_LSP_CACHE", Path.home() / ".cache" / "oi-lsp"))
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(root / "bench-pycache")}


class Server:
    """One oi-lsp process and the client that talks to it; arrival times of notifications."""

    def __init__(self, data_dir: Path, command: Sequence[str] | None = None,
                 daemon: Path | None = None) -> None:
        self.data_dir = data_dir
        self.daemon = daemon  # a runtime folder: a relay to the daemon there, not standalone
        self.command = list(command or server_command())
        self.client = OIClient()
        self.arrivals: list[tuple[float, str, dict[str, Any]]] = []
        self.client.listeners.append(self._arrived)

    def _arrived(self, method: str, params: dict[str, Any]) -> None:
        self.arrivals.append((time.perf_counter(), method, params))

    async def start(self) -> None:
        # Standalone unless asked: the figures are of this one server process.
        mode = ({"OI_LSP_STANDALONE": "1"} if self.daemon is None else
                {"OI_LSP_STANDALONE": "0", "OI_LSP_RUNTIME_DIR": str(self.daemon)})
        await self.client.start(self.command, env={"OI_LSP_DATA_DIR": str(self.data_dir),
                                                   **mode, **bytecode_env()})

    @property
    def pid(self) -> int:
        proc = self.client.process
        assert proc is not None
        return proc.pid

    async def initialize(self, workspaces: Sequence[Path], options: dict[str, Any]) -> float:
        started = time.perf_counter()
        await self.client.initialize(workspaces, options=options)
        return time.perf_counter() - started

    async def execute(self, code: str, workspace: Path | None = None,
                      language: str = "python") -> tuple[float, dict[str, Any]]:
        params: dict[str, Any] = {"workspace": to_uri(workspace)} if workspace else {}
        started = time.perf_counter()
        result = await self.client.execute(language, code, **params)
        return time.perf_counter() - started, result

    async def timed(self, code: str, workspace: Path | None = None,
                    language: str = "python") -> float:
        elapsed, result = await self.execute(code, workspace, language)
        if result["status"] != "ok":
            raise RuntimeError(f"oi/execute {code[:40]!r} -> {result['status']}: "
                               f"{result.get('error')}")
        return elapsed

    def timed_ok(self, code: str, workspace: Path | None = None,
                 language: str = "python") -> Callable[[], Awaitable[float]]:
        """`timed` as a side for Bench.interleave."""
        return lambda: self.timed(code, workspace, language)

    def open_folders(self, folders: Sequence[Path]) -> None:
        self._change(added=folders, removed=())

    def close_folders(self, folders: Sequence[Path]) -> None:
        self._change(added=(), removed=folders)

    def _change(self, added: Sequence[Path], removed: Sequence[Path]) -> None:
        def folder(p: Path) -> types.WorkspaceFolder:
            return types.WorkspaceFolder(uri=to_uri(p), name=p.name)
        self.client.lsp.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(event=types.WorkspaceFoldersChangeEvent(
                added=[folder(p) for p in added], removed=[folder(p) for p in removed])))

    def notifications_since(self, index: int, method: str = "oi/stream") -> int:
        return sum(1 for m, _ in self.client.notifications[index:] if m == method)

    async def close(self) -> None:
        await self.client.close()


def rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def tree_rss(pid: int) -> int:
    """The process and all its descendants (the server and its kernels)."""
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class PeakRSS:
    """Samples one process's RSS every few ms in a thread (the event loop stays free)."""

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def wait_idle_cpu(pids: Sequence[int], below: float = 5.0, timeout: float = 30) -> None:
    """Wait until these processes (children included) are quiet, so RSS is an idle figure."""
    procs = []
    for pid in pids:
        proc = psutil.Process(pid)
        procs += [proc, *proc.children(recursive=True)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            try:
                p.cpu_percent(None)
            except psutil.NoSuchProcess:
                pass
        await asyncio.sleep(0.5)
        total = 0.0
        for p in procs:
            try:
                total += p.cpu_percent(None)
            except psutil.NoSuchProcess:
                pass
        if total < below:
            return


async def stop_daemon(runtime: Path, data_dir: Path) -> None:
    """`oi-lsp daemon --stop` for the daemon of that runtime folder."""
    proc = await asyncio.create_subprocess_exec(
        *server_command(), "daemon", "--stop", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "OI_LSP_RUNTIME_DIR": str(runtime),
                                                 "OI_LSP_DATA_DIR": str(data_dir)})
    await proc.wait()


async def json_line(proc: asyncio.subprocess.Process, timeout: float, who: str) -> dict[str, Any]:
    """The next JSON line a baseline's child process writes; RuntimeError when it exited."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        raise RuntimeError(f"the {who} process exited")
    answer: dict[str, Any] = json.loads(line)
    return answer
