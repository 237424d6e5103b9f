"""The resource monitor: oi/status figures of a live kernel, status chunks during a long run, the
memory limit, and the warning when the server runs as root."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from oi_lsp.client import OIClient
from oi_lsp.core import watch
from oi_lsp.core.settings import Settings
from oi_lsp.executors.base import RunResult
from tests.conftest import StartServer
from tests.modelserver import ModelServer

MB = 1024 * 1024
GROW = "import time\nx = b'1' * (400 << 20)\nprint('grown', flush=True)\ntime.sleep({})\n" \
       "print('finished')"


def python(status: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in status["repls"] if r["language"] == "python")


async def test_status_of_a_live_kernel(client: OIClient) -> None:
    await client.execute("python", "import os\nblock = b'1' * (64 << 20)\nprint(os.getpid())")
    kernel_pid = int((await client.execute("python", "print(os.getpid())"))["outputs"][0]
                     ["content"])
    status = await client.request("oi/status", {})
    repl = python(status)
    assert repl["pid"] == kernel_pid and repl["alive"] is True and repl["busy"] is False
    assert "ipykernel" in " ".join(psutil.Process(kernel_pid).cmdline())
    assert repl["rss"] >= 64 * MB
    assert repl["rss"] >= psutil.Process(kernel_pid).memory_info().rss * 0.9
    assert repl["uptime"] > 0 and repl["cpuPercent"] >= 0
    assert status["turn"] == {"state": "idle"}

    spin = asyncio.create_task(client.execute(
        "python", "import time\nend = time.time() + 7\nwhile time.time() < end: pass\n"
                  "print('spun')"))
    chunk = await client.wait_for("oi/resources", timeout=60)
    assert chunk["repl"]["pid"] == kernel_pid and chunk["elapsed"] >= 3
    assert chunk["repl"]["busy"] is True and chunk["repl"]["cpuPercent"] > 1
    busy = await client.request("oi/status", {})
    assert python(busy)["busy"] is True and python(busy)["cpuPercent"] > 1
    assert busy["turn"]["state"] == "running" and busy["turn"]["turnId"] == chunk["turnId"]
    assert (await spin)["outputs"][0]["content"] == "spun\n"
    assert python(await client.request("oi/status", {}))["busy"] is False


async def test_memory_limit_restart_at_once(start_server: StartServer, model: ModelServer,
                                            workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(
        kernelMemoryLimitMB=300, kernelMemoryLimitAction="restart"))
    await client.execute("python", "kept = 1")
    result = await client.execute("python", GROW.format(30))
    assert result["status"] == "error" and "kernelMemoryLimitMB" in result["error"]
    text = "".join(o["content"] for o in result["outputs"])
    assert "finished" not in text and "restarted" in text
    told = await client.wait_for("window/showMessage", lambda p: "past kernelMemoryLimitMB"
                                 in p["message"])
    assert told["type"] == 2 and "restarted now" in told["message"]
    after = await client.execute("python", "print('kept' in dir())")
    assert after["outputs"][0]["content"] == "False\n"


@pytest.mark.parametrize("answer", ["Restart", "Keep running"])
async def test_memory_limit_asks_first(start_server: StartServer, model: ModelServer,
                                       workspace: Path, answer: str) -> None:
    client = await start_server(workspace, options=model.settings(kernelMemoryLimitMB=300))
    asked: list[str] = []

    def box(message: str, actions: list[str]) -> str:
        asked.append(message)
        return answer

    client.message_box = box
    await client.execute("python", "kept = 1")
    result = await client.execute("python", GROW.format(6))
    assert len(asked) == 1 and "Restart it?" in asked[0] and "MB, past" in asked[0]
    after = await client.execute("python", "print('kept' in dir())")
    if answer == "Restart":
        assert result["status"] == "error" and "restarted" in result["error"]
        assert after["outputs"][0]["content"] == "False\n"
    else:
        assert result["status"] == "ok" and "finished" in result["outputs"][0]["content"]
        assert after["outputs"][0]["content"] == "True\n"


async def test_root_is_warned_once(client: OIClient) -> None:
    if os.geteuid() != 0:
        pytest.skip("the server runs as root only when the tests do")
    await client.execute("python", "1")
    warnings = [p for m, p in client.notifications
                if m == "window/showMessage" and "runs as root" in p["message"]]
    assert len(warnings) == 1 and warnings[0]["type"] == 2


async def test_root_is_warned_in_a_box_only_the_first_time(start_server: StartServer,
                                                           workspace: Path) -> None:
    """Later starts (a root-run container: every editor start) say it in the log only."""
    if os.geteuid() != 0:
        pytest.skip("the server runs as root only when the tests do")
    kinds = []
    for _ in range(2):
        client = await start_server(workspace)
        await client.execute("python", "1")
        kinds.append([m for m, p in client.notifications
                      if m.startswith("window/") and "runs as root" in p.get("message", "")])
        await client.close()
    assert kinds == [["window/showMessage"], ["window/logMessage"]]


class _Quiet:
    """What Watch.run needs of an executor: a key, and no process to sample."""
    pid = None


async def test_a_short_run_starts_no_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run shorter than the first sample's time starts no watcher task (round trips pay for
    none); a longer one is watched from then on, and its watcher ends with it."""
    monkeypatch.setattr(watch, "WATCH_EVERY", 0.2)
    w = watch.Watch(Settings, lambda *_: asyncio.sleep(0))
    seen: list[set[asyncio.Task[Any]]] = []

    async def work(seconds: float) -> RunResult:
        await asyncio.sleep(seconds)
        seen.append(asyncio.all_tasks())
        return RunResult("ok")

    before = asyncio.all_tasks()
    assert (await w.run("python", _Quiet(), work(0), lambda *_: None)).status == "ok"  # type: ignore[arg-type]
    assert seen.pop() == before
    assert (await w.run("python", _Quiet(), work(0.5), lambda *_: None)).status == "ok"  # type: ignore[arg-type]
    watchers = seen.pop() - before
    assert len(watchers) == 1 and all(t.done() for t in watchers)
    assert asyncio.all_tasks() == before
