"""Stop latency: `oi/stop` sent while a direct Python run sleeps → its answer (the run
interrupted, the REPL ready, the run recorded). Not a row of bench.run: a quick before/after
figure for changes to cancellation (issue 27). Run against a checkout with PYTHONPATH:

    PYTHONPATH=/path/to/checkout .venv/bin/python -m bench.stop_latency [n]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import summarize
from oi_lsp import protocol
from oi_lsp.client import OIClient

SLEEP = "import time\nprint('go', flush=True)\ntime.sleep(30)"


async def measure(n: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder, data = Path(tmp) / "ws", Path(tmp) / "data"
        folder.mkdir()
        data.mkdir()
        client = OIClient()
        await client.start(env={"OI_LSP_DATA_DIR": str(data)})
        await client.initialize([folder], options={"model": ""})
        await client.execute("python", "1")
        times = []
        try:
            for _ in range(n):
                since = len(client.notifications)
                run = asyncio.create_task(client.execute("python", SLEEP))
                await client.wait_for(protocol.STREAM, lambda p: p["type"] == "console"
                                      and "go" in (p.get("content") or ""), since=since)
                await asyncio.sleep(0.3)  # inside time.sleep
                start = time.perf_counter()
                await client.request(protocol.STOP, {})
                times.append(time.perf_counter() - start)
                await run
        finally:
            await client.close()
        return times


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    summary = summarize(asyncio.run(measure(n)))
    assert summary is not None
    print(f"stop latency (oi/stop → answer, a sleeping run): {summary.ms()}")


if __name__ == "__main__":
    main()
