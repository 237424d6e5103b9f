"""Load: 1,000 oi/execute requests over two workspaces, 8 in flight; and a client that
vanishes mid-turn takes no kernel with it... nor leaves one behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil

from oi_lsp.client import to_uri
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.hardening import descendants, percentile, record, wait_gone
from tests.modelserver import ModelServer

REQUESTS = 1000
IN_FLIGHT = 8
LINES = 20  # lines each run prints: a run's output must arrive whole, and only its own


def _code(tag: str, seq: int) -> str:
    # `_n` counts the runs of this kernel: it must match the order the requests were sent in.
    return (f"_n = globals().get('_n', 0) + 1\n"
            f"for _i in range({LINES}):\n"
            f"    print(f'{tag} {seq} {{_n}} {{_i}}')\n")


async def test_thousand_executes_two_workspaces(start_server: StartServer,
                                                tmp_path: Path) -> None:
    folders = {"a": tmp_path / "a", "b": tmp_path / "b"}
    for folder in folders.values():
        folder.mkdir()
    client = await start_server(*folders.values())
    uris = {tag: to_uri(folder) for tag, folder in folders.items()}
    for tag in folders:  # both kernels up before the clock starts
        assert (await client.execute("python", "_n = 0", workspace=uris[tag]))["status"] == "ok"

    gate = asyncio.Semaphore(IN_FLIGHT)
    latencies: list[float] = []
    sent: dict[str, list[int]] = {"a": [], "b": []}
    results: dict[tuple[str, int], dict[str, object]] = {}

    async def one(i: int) -> None:
        tag = "ab"[i % 2]
        async with gate:
            # Sent in this order: a workspace's runs must execute in it.
            sent[tag].append(i)
            began = time.monotonic()
            result = await client.execute("python", _code(tag, i), workspace=uris[tag])
            latencies.append(time.monotonic() - began)
            results[(tag, i)] = result

    began = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(REQUESTS)))
    elapsed = time.monotonic() - began

    assert len(results) == REQUESTS
    wrong = 0
    for tag, order in sent.items():
        for n, i in enumerate(order, start=1):
            result = results[(tag, i)]
            expected = "".join(f"{tag} {i} {n} {line}\n" for line in range(LINES))
            outputs = result["outputs"]
            assert isinstance(outputs, list)
            text = "".join(o["content"] for o in outputs)
            if result["status"] != "ok" or text != expected:
                wrong += 1
    assert wrong == 0
    # Every chunk streamed for a run names that run's turn and workspace.
    turns = {str(r["turnId"]): tag for (tag, _), r in results.items()}
    crossed = sum(1 for m, p in client.notifications
                  if m == "oi/stream" and p["turnId"] in turns
                  and p["workspace"] != uris[turns[p["turnId"]]])
    assert crossed == 0
    record("load", requests=REQUESTS, workspaces=2, in_flight=IN_FLIGHT,
           lines_per_run=LINES, answered=len(results), wrong_or_incomplete=wrong,
           cross_talk=crossed, seconds=round(elapsed, 2),
           throughput_per_s=round(REQUESTS / elapsed, 1),
           p50_ms=round(percentile(latencies, 50) * 1000, 1),
           p95_ms=round(percentile(latencies, 95) * 1000, 1))


async def test_client_vanishing_mid_turn_leaves_no_process(start_server: StartServer,
                                                           model: ModelServer,
                                                           workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(autoRun=True))
    model.script(ms.tool("python", "import subprocess, time\n"
                                   "subprocess.Popen(['sleep', '300'])\n"
                                   "print('working', flush=True)\ntime.sleep(300)"))
    chat = asyncio.create_task(client.chat("work"))
    await client.wait_for("oi/stream", lambda p: "working" in (p.get("content") or ""),
                          timeout=180)
    proc = client.process
    assert proc is not None
    async with asyncio.timeout(30):  # the child may not have exec'd `sleep` yet
        while True:
            children = descendants(proc.pid)
            names = [" ".join(c.cmdline()[:3]) for c in children if c.is_running()]
            if any(n.startswith("sleep ") for n in names):
                break
            await asyncio.sleep(0.1)
    assert any("ipykernel" in n for n in names)

    # The editor is gone: both pipes close, no shutdown, no exit.
    assert proc.stdin is not None
    proc.stdin.close()
    transport = proc._transport  # type: ignore[attr-defined]
    transport.get_pipe_transport(1).close()
    closed = time.monotonic()
    async with asyncio.timeout(180):  # it stops the turn (interrupting the cell) first
        while proc.returncode is None:  # noqa: ASYNC110 (set by the child watcher)
            await asyncio.sleep(0.05)
    exit_s = time.monotonic() - closed
    left = await wait_gone(children, 15)
    chat.cancel()
    assert [p.pid for p in left] == []
    assert not any(psutil.pid_exists(c.pid) and c.status() != psutil.STATUS_ZOMBIE
                   for c in children if c.is_running())
    record("load", disconnect_processes_before=len(children), disconnect_orphans=len(left),
           disconnect_server_exit=proc.returncode, disconnect_exit_s=round(exit_s, 1))
