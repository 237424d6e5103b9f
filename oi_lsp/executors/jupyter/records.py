"""The record of a workspace's local kernel, kept under the data folder.

A server that is killed (SIGKILL, a crash, the machine's OOM killer) cannot stop its kernels,
and ipykernel's own watch on its parent does not reach what the user's code started (a server,
a `sleep 600` in the background): they all share the kernel's process group. So every local
kernel is recorded (pid, start time, its server, its connection info), and the next server
kills the kernel and its process group when that server is gone — or, with `keepKernel`,
reattaches to the kernel, so its variables survive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock

from ...common.files import atomic_write, data_dir, digest

log = logging.getLogger(__name__)


@dataclass
class KernelRecord:
    folder: str
    language: str
    kernel_name: str
    pid: int
    started: float  # the kernel process's create_time: tells it from a reused pid
    server_pid: int
    server_started: float
    keep: bool
    connection: dict[str, Any] = field(repr=False)  # ports and HMAC key: file mode 0600

    def kernel_alive(self) -> bool:
        return _same_process(self.pid, self.started)

    def server_alive(self) -> bool:
        return _same_process(self.server_pid, self.server_started)

    def owned_by_us(self) -> bool:
        return self.server_pid == os.getpid() and self.server_alive()


def _same_process(pid: int, started: float, zombie_too: bool = False) -> bool:
    try:
        proc = psutil.Process(pid)
        return (abs(proc.create_time() - started) < 0.5
                and (zombie_too or proc.status() != psutil.STATUS_ZOMBIE))
    except (psutil.Error, OSError):
        return False


def root() -> Path:
    return data_dir() / "kernels"


def path_for(folder: Path, language: str) -> Path:
    """This server's record of its kernel for the folder and language."""
    return root() / f"{digest(str(folder), language)}-{os.getpid()}.json"


def of(folder: Path, language: str) -> list[Path]:
    """Every server's record for the folder and language (older versions': `<key>.json`)."""
    key = digest(str(folder), language)
    try:
        return sorted(p for p in root().glob(f"{key}*.json")
                      if p.stem == key or p.stem.startswith(f"{key}-"))
    except OSError:
        return []


def log_path(folder: Path, language: str) -> Path:
    """Where the kernels of the folder and language write their own output."""
    return root() / f"{digest(str(folder), language)}.log"


def choosing(folder: Path, language: str) -> FileLock:
    """Held while a server picks a kernel to reattach to (or decides to start one)."""
    root().mkdir(parents=True, exist_ok=True)
    return FileLock(root() / f"{digest(str(folder), language)}.lock", timeout=60,
                    thread_local=False)


def new(folder: Path, language: str, kernel_name: str, pid: int, keep: bool,
        connection: dict[str, Any]) -> KernelRecord:
    me = psutil.Process()
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        started = 0.0
    return KernelRecord(folder=str(folder), language=language, kernel_name=kernel_name,
                        pid=pid, started=started, server_pid=me.pid,
                        server_started=me.create_time(), keep=keep,
                        connection=_plain(connection))


def _plain(connection: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready connection info (the key is bytes in jupyter_client)."""
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in connection.items()}


def load(path: Path) -> KernelRecord | None:
    try:
        data = json.loads(path.read_text())
        return KernelRecord(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring the unreadable kernel record %s: %s", path, exc)
        forget(path)
        return None


def save(record: KernelRecord, path: Path) -> None:
    """Atomically, readable by the user only (it holds the kernel's key)."""
    try:
        atomic_write(path, json.dumps(asdict(record)).encode(), private=True)
    except OSError as exc:
        log.warning("could not record the kernel in %s: %s", path, exc)


def forget(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def kill(record: KernelRecord) -> bool:
    """Kill the kernel and everything in its process group (jupyter_client starts each kernel
    in a session of its own). True when something was killed."""
    killed = False
    leader_is_ours = _same_process(record.pid, record.started, zombie_too=True)
    leader_exists = psutil.pid_exists(record.pid)
    # The group outlives its leader; but a live process with that pid that is not our kernel
    # means the pid was reused: leave that group alone.
    if leader_is_ours:  # the launcher: SIGTERM first, so it ends what left the group too
        _terminate(record.pid)
    if leader_is_ours or not leader_exists:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, signal.SIGKILL)
            killed = True
    if leader_is_ours:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(record.pid, signal.SIGKILL)
            killed = True
    return killed


def _terminate(pid: int, grace: float = 1.0) -> None:
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and proc.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
    except psutil.Error:
        pass


def sweep() -> int:
    """Kill the kernels (and their process groups) of servers that are gone, unless they are
    kept for reattaching; forget their records. Returns how many were killed."""
    killed = 0
    try:
        paths = sorted(root().glob("*.json"))
    except OSError:
        return 0
    for path in paths:
        record = load(path)
        if record is None or record.owned_by_us() or record.server_alive():
            continue
        if record.keep and record.kernel_alive():
            continue  # its workspace's next session reattaches to it
        if kill(record):
            killed += 1
            log.warning("killed kernel %s of %s: the server that started it is gone",
                        record.pid, record.folder)
        if not record.keep:  # a kept one's record stays: its next session says it is gone
            forget(path)
    return killed
