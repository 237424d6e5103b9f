"""Baseline A driven from the benchmark: each RawProcess is a fresh bench/raw_child.py, a
process of its own that does nothing but drive its kernels (timed inside it)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .driver import bytecode_env, json_line

ROOT = Path(__file__).resolve().parent.parent


class RawProcess:
    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.pids: list[int] = []

    async def spawn(self, timeout: float = 120) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.raw_child", cwd=str(ROOT),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, limit=1 << 20,
            env={**os.environ, **bytecode_env()})
        await self._line(timeout)

    async def start(self, *cwds: Path, options: Sequence[str] = (),
                    timeout: float = 300) -> None:
        """Spawn the process and start one kernel per folder in it, with `options` added to
        each kernel's command line."""
        await self.spawn()
        answer = await self._ask({"op": "start", "cwds": [str(c) for c in cwds],
                                  "options": list(options)}, timeout)
        self.pids = [p for p in answer["pids"] if isinstance(p, int)]

    @property
    def pid(self) -> int | None:
        """The first kernel's process id."""
        return self.pids[0] if self.pids else None

    async def timed(self, code: str, timeout: float = 300) -> float:
        """Seconds to run `code` in every kernel at once, measured in the child."""
        answer = await self._ask({"op": "run", "code": code}, timeout)
        return float(answer["seconds"])

    async def _ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        await self.proc.stdin.drain()
        answer = await self._line(timeout)
        if not answer.get("ok"):
            raise RuntimeError(f"baseline A {request['op']} failed: "
                               f"{answer.get('error') or answer.get('status')}")
        return answer

    async def _line(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None
        return await json_line(self.proc, timeout, "baseline A")

    async def shutdown(self, timeout: float = 60) -> None:
        """EOF: the child shuts its kernels down and exits."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def cold_first_result(cwd: Path, code: str) -> float:
    """A fresh process starts a kernel and runs `code`: the raw first run, timed in there
    from before the kernel's start (the child's own imports are not counted)."""
    raw = RawProcess()
    await raw.spawn()
    try:
        answer = await raw._ask({"op": "cold", "cwd": str(cwd), "code": code}, 300)
        return float(answer["seconds"])
    finally:
        await raw.shutdown()

