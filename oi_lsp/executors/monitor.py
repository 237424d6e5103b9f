"""What a REPL costs the machine: CPU and memory of its process tree, read with psutil."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)

PRIME = 0.2  # seconds between the two readings a process's first CPU figure needs
MIN_INTERVAL = 0.5  # seconds: CPU use measured over less is too coarse (clock ticks)


@dataclass(frozen=True, slots=True)
class Figures:
    cpu_percent: float  # of one core, summed over the process and its children
    rss: int  # bytes, summed over the process and its children
    uptime: float  # seconds since the process started


class Monitor:
    """Samples process trees. Keeps each process it has seen, since CPU use is measured between
    two readings; a reading less than MIN_INTERVAL after the last gives the last figure again
    (two callers sampling at once would otherwise see ~0). Blocking: call it in a thread."""

    def __init__(self) -> None:
        self._seen: dict[int, _Tracked] = {}
        self._lock = threading.Lock()

    def sample(self, pid: int) -> Figures | None:
        """The figures of `pid` and its children; None when it is gone."""
        with self._lock:
            try:
                root = self._process(pid)
                tree = [root, *root.children(recursive=True)]
                uptime = max(0.0, time.time() - root.create_time())
            except psutil.Error:
                self._seen.pop(pid, None)
                return None
            tracked = []
            fresh = False
            for proc in tree:
                known = self._seen.get(proc.pid)
                if known is None or known.process != proc:
                    known = self._seen[proc.pid] = _Tracked(proc)
                    _cpu(proc)  # the first reading only starts the measure
                    fresh = True
                tracked.append(known)
            if fresh:
                time.sleep(PRIME)
            now = time.monotonic()
            cpu = 0.0
            rss = 0
            for item in tracked:
                if item.at is None or now - item.at >= MIN_INTERVAL:
                    item.percent = _cpu(item.process)
                    item.at = now
                cpu += item.percent
                try:
                    rss += item.process.memory_info().rss
                except psutil.Error:
                    pass
            alive = {p.pid for p in tree}
            for gone in [p for p in self._seen if p not in alive]:
                del self._seen[gone]
            return Figures(round(cpu, 1), rss, round(uptime, 1))

    def _process(self, pid: int) -> psutil.Process:
        known = self._seen.get(pid)
        if known is not None and known.process.is_running():
            return known.process
        return psutil.Process(pid)


@dataclass(slots=True)
class _Tracked:
    process: psutil.Process
    percent: float = 0.0
    at: float | None = None  # monotonic time of the last CPU reading


def _cpu(proc: psutil.Process) -> float:
    try:
        return proc.cpu_percent(None)
    except psutil.Error:
        return 0.0
