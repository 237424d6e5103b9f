"""Crash safety: a server killed with SIGKILL at any point of a turn loses no finished turn,
leaves no damaged session file, and leaves no process behind once the next server starts.

Kill points follow the turn's progress, not the clock: the first turn runs whole and counts
the notifications a turn sends; each later turn is killed right after one of them (or before
the first, or after its result came back), every one of those points once in a random order,
so every stage (streaming, the proposal, the run, its output, the final text, saving) gets
killed in, whatever the machine's speed. (Fifty random points, as before, missed some and hit
others twice, at twice the cost.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from oi_lsp.client import OIClient, to_uri
from oi_lsp.core import journal
from oi_lsp.protocol import Message
from tests import modelserver as ms
from tests.hardening import descendants, marked, record, sigkill, wait_gone
from tests.modelserver import ModelServer

ROUNDS = int(os.environ.get("OI_CRASH_ROUNDS", "1"))  # every kill point this many times


def check_session_files(data_dir: Path) -> tuple[int, int]:
    """(conversation records, damaged ones): each must replay, whole lines of valid messages
    (a torn last line would be dropped: it counts as damage here, as a kill never tears one)."""
    files = damaged = 0
    for path in (data_dir / "sessions").rglob("*"):
        if ".corrupt-" in path.name:
            damaged += 1
            continue
        if not path.name.endswith(journal.SUFFIX) or path.name.startswith("."):
            continue  # a temp file of a compaction the kill interrupted: never read
        files += 1
        try:
            replayed = journal.replay(path.read_bytes())
            for message in replayed.messages:
                Message.model_validate(message)
            damaged += bool(replayed.torn)
        except (ValueError, KeyError, TypeError):
            damaged += 1
    return files, damaged


async def kill_after(client: OIClient, chat: asyncio.Task[dict[str, object]], start: int,
                     point: int, rng: random.Random) -> bool:
    """Wait for the turn's `point`-th notification, plus a few random milliseconds (to land
    between it and the next), or for its result; True when the turn finished first."""
    while len(client.notifications) - start < point and not chat.done():  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    await asyncio.sleep(rng.uniform(0, 0.02))
    return chat.done()


@pytest.mark.timeout(1500)
async def test_sigkill_at_random_points_of_turns(model: ModelServer, data_dir: Path,
                                                 workspace: Path) -> None:
    marker = uuid.uuid4().hex
    env = {"OI_LSP_DATA_DIR": str(data_dir), "OI_HARDENING_RUN": marker}
    options = model.settings(autoRun=True)
    uri = to_uri(workspace)
    rng = random.Random(7)
    finished: dict[str, int] = {}  # turn id -> step number, for turns whose result came
    lost = corrupt = orphans = killed_in_turn = 0
    plan: list[int] = []  # the kill point of each later turn, drawn once the first has run
    notifications_per_turn = 0  # counted in the first turn, which runs whole
    began = time.monotonic()
    servers: list[OIClient] = []

    async def spawn() -> OIClient:
        # Started while the previous server still runs its turn, so loading litellm (seconds)
        # overlaps it; with no workspace folder it opens nothing until that server is dead and
        # the first request below names the workspace.
        client = OIClient()
        servers.append(client)
        await client.start(env=env)
        await client.initialize([], options=options)
        return client

    spawning = asyncio.create_task(spawn())
    client: OIClient | None = None
    try:
        for step in itertools.count():
            client = await spawning
            # What the previous servers left: every finished turn, no damaged file.
            history = (await client.request("oi/history", {"workspace": uri}))["messages"]
            for turn_id, n in finished.items():
                texts = [m["content"] for m in history if m.get("turnId") == turn_id]
                if f"turn {n}" not in texts or f"finished {n}" not in texts:
                    lost += 1
            _, damaged = check_session_files(data_dir)
            corrupt = max(corrupt, damaged)
            # Its kernel is up once this returns: the sweep of dead servers' kernels is done.
            up = await client.execute("python", "print('up')", workspace=uri)
            assert up["status"] == "ok", up
            assert client.process is not None
            ours = {p.pid for p in descendants(client.process.pid)} | {client.process.pid}
            left = await wait_gone([p for p in marked(marker) if p.pid not in ours], 10)
            orphans += len(left)
            print(f"step {step}: {time.monotonic() - began:.1f} s", file=sys.stderr)
            if step > len(plan):
                break
            spawning = asyncio.create_task(spawn())

            # A turn: the model streams, its code starts a background process (which outlives
            # a killed kernel unless its process group is killed) and prints, the model answers.
            model.reset()
            code = (f"import subprocess\nsubprocess.Popen(['sleep', '300'])\n"
                    f"print('step {step}')")
            model.script(ms.tool("python", code, say=f"running step {step}"),
                         ms.text(f"finished {step}", pieces=4, delay=0.05))
            start = len(client.notifications)
            chat = asyncio.create_task(client.chat(f"turn {step}", workspace=uri))
            if step == 0:
                result = await chat
                notifications_per_turn = len(client.notifications) - start
                assert notifications_per_turn > 5, client.notifications[start:]
                # 0: before anything came back; notifications_per_turn + 1: after the result.
                plan = list(range(notifications_per_turn + 2)) * ROUNDS
                rng.shuffle(plan)
            else:
                point = plan[step - 1]
                if not await kill_after(client, chat, start, point, rng):
                    killed_in_turn += 1
                    await sigkill(client)
                    client = None
                    with contextlib.suppress(Exception):  # the request died with its server
                        await chat
                    continue
                result = chat.result()
            assert result["status"] == "done", result
            finished[str(result["turnId"])] = step
            await sigkill(client)
            client = None
    finally:
        spawning.cancel()
        for server in servers:
            if server.process is not None and server.process.returncode is None:
                await server.close()
        for proc in marked(marker):  # whatever a failing run left
            with contextlib.suppress(psutil.Error):
                proc.kill()
    files, damaged = check_session_files(data_dir)
    temp_files = len(list((data_dir / "sessions").rglob(".*.tmp")))
    assert files == 1
    assert damaged == corrupt == 0
    assert lost == 0
    assert orphans == 0
    assert killed_in_turn > len(plan) // 2, "the kill points missed the turns"
    record("crash_safety", kills=len(plan), kills_survived=len(plan),
           killed_mid_turn=killed_in_turn,
           finished_turns=len(finished), finished_turns_lost=lost,
           corrupt_session_files=corrupt, orphan_processes=orphans,
           notifications_per_turn=notifications_per_turn, leftover_temp_files=temp_files,
           seconds=round(time.monotonic() - began, 1),
           kill_points=sorted(set(plan)))
