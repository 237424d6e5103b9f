"""Crash safety: a server killed with SIGKILL at any point of a turn loses no finished turn,
leaves no damaged session file, and leaves no process behind once the next server starts;
with keepKernel the next server reattaches to the kernel instead (its variables survive)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from oi_lsp.client import OIClient
from oi_lsp.protocol import Message
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.hardening import descendants, record, wait_gone
from tests.modelserver import ModelServer

KILLS = 50


def marked(marker: str) -> list[psutil.Process]:
    """Every live process started for this test (the marker is in its environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if (proc.status() != psutil.STATUS_ZOMBIE
                    and proc.environ().get("OI_HARDENING_RUN") == marker):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


async def sigkill(client: OIClient) -> None:
    """SIGKILL the server and wait until it is gone (not for its pipes: what it started may
    hold its stderr open until the next server sweeps it)."""
    proc = client.process
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    async with asyncio.timeout(30):
        while proc.returncode is None:  # noqa: ASYNC110 (set by the child watcher)
            await asyncio.sleep(0.02)
    await client.close()


def check_session_files(data_dir: Path) -> tuple[int, int]:
    """(files, damaged): every session file must be whole JSON of valid messages."""
    files = damaged = 0
    for path in (data_dir / "sessions").glob("*"):
        if ".corrupt-" in path.name:
            damaged += 1
            continue
        if not path.name.endswith(".json") or path.name.startswith("."):
            continue  # a temp file of a save the kill interrupted: never read
        files += 1
        try:
            data = json.loads(path.read_bytes())
            for message in data["messages"]:
                Message.model_validate(message)
        except (ValueError, KeyError, TypeError):
            damaged += 1
    return files, damaged


@pytest.mark.timeout(900)
async def test_sigkill_at_random_points_of_turns(model: ModelServer, data_dir: Path,
                                                 workspace: Path) -> None:
    marker = uuid.uuid4().hex
    env = {"OI_LSP_DATA_DIR": str(data_dir), "OI_HARDENING_RUN": marker}
    options = model.settings(autoRun=True)
    rng = random.Random(7)
    finished: dict[str, int] = {}  # turn id -> step number, for turns whose result came
    lost = corrupt = orphans = killed_in_turn = 0
    points: list[float] = []
    turn_time = 3.0  # replaced by the measured length of a whole turn
    client: OIClient | None = None
    began = time.monotonic()
    try:
        for step in range(KILLS + 1):
            client = OIClient()
            await client.start(env=env)
            await client.initialize([workspace], options=options)

            # What the previous servers left: every finished turn, no damaged file.
            history = (await client.request("oi/history", {}))["messages"]
            for turn_id, n in finished.items():
                texts = [m["content"] for m in history if m.get("turnId") == turn_id]
                if f"turn {n}" not in texts or f"finished {n}" not in texts:
                    lost += 1
            _, damaged = check_session_files(data_dir)
            corrupt = max(corrupt, damaged)
            # Its kernel is up once this returns: the sweep of dead servers' kernels is done.
            assert (await client.execute("python", "print('up')"))["status"] == "ok"
            ours = {p.pid for p in descendants(client.process.pid)} | {client.process.pid}
            left = await wait_gone([p for p in marked(marker) if p.pid not in ours], 10)
            orphans += len(left)
            print(f"step {step}: {time.monotonic() - began:.1f} s", file=sys.stderr)
            if step == KILLS:
                break

            # A turn: the model streams, its code starts a background process (which outlives
            # a killed kernel unless its process group is killed) and prints, the model answers.
            model.reset()
            code = (f"import subprocess\nsubprocess.Popen(['sleep', '300'])\n"
                    f"print('step {step}')")
            model.script(ms.tool("python", code, say=f"running step {step}"),
                         ms.text(f"finished {step}", pieces=4, delay=0.05))
            started = time.monotonic()
            chat = asyncio.create_task(client.chat(f"turn {step}"))
            if step == 0:  # the first turn runs whole: its length scales the kill points
                result = await chat
                turn_time = time.monotonic() - started
                finished[result["turnId"]] = step
            else:
                point = rng.uniform(0, turn_time * 1.2)
                points.append(point)
                done, _ = await asyncio.wait([chat], timeout=point)
                if done:
                    result = chat.result()
                    assert result["status"] == "done", result
                    finished[result["turnId"]] = step
                else:
                    killed_in_turn += 1
            await sigkill(client)
            client = None
            if not chat.done():
                chat.cancel()
    finally:
        if client is not None:
            await client.close()
        for proc in marked(marker):  # whatever a failing run left
            try:
                proc.kill()
            except psutil.Error:
                pass
    files, damaged = check_session_files(data_dir)
    assert files == 1
    assert damaged == corrupt == 0
    assert lost == 0
    assert orphans == 0
    record("crash_safety", kills=KILLS, kills_survived=KILLS, killed_mid_turn=killed_in_turn,
           finished_turns=len(finished), finished_turns_lost=lost,
           corrupt_session_files=corrupt, orphan_processes=orphans,
           turn_seconds=round(turn_time, 2),
           kill_points_s=[round(min(points), 2), round(max(points), 2)])


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
        os.killpg(kernel, signal.SIGKILL)
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
