"""Baseline A's worker: raw jupyter_client in a fresh process of its own, otherwise idle.

Measured inside the benchmark's process, the same `RawKernel` code shares an event loop (and
the GIL) with the clients of two oi-lsp servers and reads up to 1.7x slower than in a clean
process: the baseline would be handicapped. Here it has a process and a loop to itself.

Reads one JSON request per line on stdin and answers one JSON line each:
- `{"op": "start", "cwds": [...], "options": [...]}`: start one kernel per folder
  (concurrently), `options` (if given) added to each kernel's command line; `{"pids"}`;
- `{"op": "run", "code": ...}`: run it in every kernel at once; `{"seconds", "ok", "status"}`,
  timed here (from the request sent to the last reply read), so no pipe cost is counted;
- `{"op": "cold", "cwd": ..., "code": ...}`: start a kernel, run, shut down; `{"seconds"}`.
The first line it writes is `{"ready": true}`. It ends (kernels shut down) at EOF.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.raw_kernel import RawKernel, cold_first_result


class Worker:
    def __init__(self) -> None:
        self.kernels: list[RawKernel] = []

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "start":
            options = request.get("options", [])
            new = [RawKernel(Path(cwd), options=options) for cwd in request["cwds"]]
            self.kernels += new
            await asyncio.gather(*(k.start() for k in new))
            return {"ok": True, "pids": [k.pid for k in new]}
        if op == "run":
            started = time.perf_counter()
            results = await asyncio.gather(*(k.run(request["code"]) for k in self.kernels))
            seconds = time.perf_counter() - started
            statuses = [status for status, _ in results]
            return {"ok": all(s == "ok" for s in statuses), "seconds": seconds,
                    "status": statuses, "chars": sum(len(text) for _, text in results)}
        if op == "cold":
            seconds = await cold_first_result(Path(request["cwd"]), request["code"])
            return {"ok": True, "seconds": seconds}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def close(self) -> None:
        await asyncio.gather(*(k.shutdown() for k in self.kernels), return_exceptions=True)


async def main() -> None:
    out = sys.stdout
    worker = Worker()
    loop = asyncio.get_running_loop()
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    try:
        while True:
            # Reading stdin in a thread keeps this loop free, as RawKernel's front end has it.
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            try:
                answer = await worker.handle(json.loads(line))
            except Exception as exc:  # said to the bench, which stops with it
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(answer) + "\n")
            out.flush()
    finally:
        await worker.close()


if __name__ == "__main__":
    asyncio.run(main())
