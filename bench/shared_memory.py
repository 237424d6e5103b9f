"""Memory of 3 editors on 3 workspaces: each with its own standalone server, against 3 relays
to one shared daemon (issue 25). Each editor runs a chat turn (so the model library is loaded)
and a cell; then, once everything is idle, the RSS of every process involved is summed:
servers or relays, the daemon, and the kernels.

    .venv/bin/python -m bench.shared_memory
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import psutil

from oi_lsp.client import OIClient, server_command
from tests import modelserver as ms
from tests.modelserver import ModelServer

from .driver import tree_rss, wait_idle_cpu

EDITORS = 3


def daemon_pids(runtime: Path) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if (proc.info["cmdline"] or [])[-2:] == ["oi_lsp", "daemon"] and \
                    proc.environ().get("OI_LSP_RUNTIME_DIR") == str(runtime):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


async def editors(base: Path, model: ModelServer, shared: bool) -> tuple[int, int]:
    """(total RSS of everything, the number of processes that are servers or relays)."""
    runtime = base / "run"
    env = {"OI_LSP_DATA_DIR": str(base / "data"), "OI_LSP_RUNTIME_DIR": str(runtime),
           "OI_LSP_STANDALONE": "0" if shared else "1"}
    clients = []
    try:
        for i in range(EDITORS):
            folder = base / f"ws{i}"
            folder.mkdir()
            client = OIClient()
            await client.start(server_command(), env=env)
            clients.append(client)
            await client.initialize([folder], options=model.settings())
            model.script(ms.text("hello"))
            await client.chat("hi")
            await client.execute("python", "x = list(range(1000))")
        pids = [c.process.pid for c in clients if c.process is not None]
        pids += daemon_pids(runtime) if shared else []
        await wait_idle_cpu(pids, timeout=60)
        return sum(tree_rss(pid) for pid in pids), len(pids)
    finally:
        for client in clients:
            await client.close()
        if shared:
            for pid in daemon_pids(runtime):
                psutil.Process(pid).kill()


async def main() -> None:
    model = ModelServer().start()
    try:
        results = {}
        for shared in (False, True):
            with tempfile.TemporaryDirectory(prefix="oib-", dir="/tmp") as tmp:
                results[shared] = await editors(Path(tmp), model, shared)
    finally:
        model.stop()
    alone, together = results[False][0], results[True][0]
    print(f"| {EDITORS} editors on {EDITORS} workspaces | standalone | shared daemon | ratio |")
    print("|---|---|---|---|")
    print(f"| RSS, servers + kernels (MiB) | {alone / 2**20:.0f} | {together / 2**20:.0f} | "
          f"{together / alone:.2f} |")


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    sys.exit(asyncio.run(main()))
