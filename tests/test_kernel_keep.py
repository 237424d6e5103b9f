"""keepKernel for local kernels: the kernel outlives a clean shutdown and a killed server,
and the next server reattaches to it, so its variables survive; a kept kernel that is gone is
said so; with keepKernel off the next server kills it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import psutil

from tests.conftest import StartServer
from tests.hardening import sigkill, wait_gone
from tests.modelserver import ModelServer


async def pid_gone(pid: int, timeout: float = 10) -> bool:
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return await wait_gone([proc], timeout) == []


def _kept_pids(data_dir: Path) -> list[int]:
    pids = []
    for path in (data_dir / "kernels").glob("*.json"):
        pids.append(int(json.loads(path.read_text())["pid"]))
    return pids


async def test_keep_kernel_reattaches_a_local_kernel(start_server: StartServer,
                                                     model: ModelServer, data_dir: Path,
                                                     workspace: Path) -> None:
    options = model.settings(keepKernel=True)
    try:
        client = await start_server(workspace, options=options)
        first = await client.execute("python", "import os\nx = 41\nprint(os.getpid())")
        kernel = int(first["outputs"][0]["content"])
        await client.close()  # a clean shutdown leaves a kept kernel running
        assert psutil.pid_exists(kernel)

        client = await start_server(workspace, options=options)
        again = await client.execute("python", "x += 1\nprint(x, os.getpid())")
        assert again["outputs"][0]["content"] == f"42 {kernel}\n"
        await sigkill(client)  # a crash leaves it too
        client = await start_server(workspace, options=options)
        crashed = await client.execute("python", "x += 1\nprint(x, os.getpid())")
        assert crashed["outputs"][0]["content"] == f"43 {kernel}\n"
        # Interrupt and restart work on a reattached kernel (no jupyter manager owns it).
        since = len(client.notifications)
        run = asyncio.create_task(client.execute("python", "import time\ntime.sleep(60)"))
        await client.wait_for("oi/stream", lambda p: p.get("format") == "running", since=since)
        await asyncio.sleep(0.5)
        assert (await client.request("oi/stop", {}))["stopped"] is True
        assert (await run)["status"] == "stopped"
        kept = await client.execute("python", "print(x)")
        assert kept["outputs"][0]["content"] == "43\n"
        await client.close()

        # The kept kernel died meanwhile: the next server says so and starts a new one.
        os.killpg(os.getpgid(kernel), signal.SIGKILL)  # the kernel's launcher's group
        assert await pid_gone(kernel)
        client = await start_server(workspace, options=options)
        fresh = await client.execute("python", "print('x' in globals())")
        text = "".join(o["content"] for o in fresh["outputs"])
        assert "kept from the last session is gone" in text and text.endswith("False\n")

        # keepKernel off: the next server does not reattach; it kills the kept kernel.
        await client.close()
        kept_pids = _kept_pids(data_dir)
        assert len(kept_pids) == 1 and psutil.pid_exists(kept_pids[0])
        client = await start_server(workspace)
        other = await client.execute("python", "import os\nprint(os.getpid())")
        assert int(other["outputs"][0]["content"]) != kept_pids[0]
        assert await pid_gone(kept_pids[0])
        await client.close()
        assert _kept_pids(data_dir) == []  # not kept: forgotten when it shut down
    finally:
        for pid in _kept_pids(data_dir):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
