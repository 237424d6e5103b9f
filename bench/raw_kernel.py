"""Baseline A: the same kernel driven directly with jupyter_client, no server in between.

This is the least any Python REPL front end can cost: send execute_request, read iopub until
the kernel is idle again and take the execute_reply.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager


class RawKernel:
    def __init__(self, cwd: Path, kernel_name: str = "python3",
                 options: Sequence[str] = ()) -> None:
        self.cwd = cwd
        self.kernel_name = kernel_name
        self.options = list(options)  # added to the kernel's command line
        self.km: AsyncKernelManager | None = None
        self.kc: Any = None

    async def start(self, attempts: int = 2) -> None:
        for attempt in range(attempts):
            self.km = AsyncKernelManager(kernel_name=self.kernel_name)
            await self.km.start_kernel(cwd=str(self.cwd), extra_arguments=self.options)
            self.kc = self.km.client()
            self.kc.start_channels()
            try:
                await self.kc.wait_for_ready(timeout=60)
                return
            except RuntimeError:  # "Kernel died before replying": 20 starting at once can
                await self.shutdown()  # race for a port; the runs, not the start, are timed
                if attempt == attempts - 1:
                    raise

    @property
    def pid(self) -> int | None:
        pid = getattr(self.km.provisioner, "pid", None) if self.km is not None else None
        return pid if isinstance(pid, int) else None

    async def run(self, code: str) -> tuple[str, str]:
        """(status, text printed) of one execute, read to the end as a front end must."""
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False)
        parts: list[str] = []
        while True:
            msg = await self.kc.get_iopub_msg()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                parts.append(msg["content"]["text"])
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                break
        while True:
            reply = await self.kc.get_shell_msg()
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]["status"], "".join(parts)

    async def timed(self, code: str) -> float:
        started = time.perf_counter()
        status, _ = await self.run(code)
        elapsed = time.perf_counter() - started
        if status != "ok":
            raise RuntimeError(f"baseline A run failed: {code!r} -> {status}")
        return elapsed

    async def shutdown(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            await self.km.shutdown_kernel(now=True)
        self.km = self.kc = None


async def cold_first_result(cwd: Path, code: str) -> float:
    """Start a kernel and run `code`: the raw cost of a first run with nothing pre-started."""
    kernel = RawKernel(cwd)
    started = time.perf_counter()
    try:
        await kernel.start()
        await kernel.run(code)
        return time.perf_counter() - started
    finally:
        await kernel.shutdown()
