"""A big output through a real server: the client gets all of it, the model its start and end
and the path of a spill file in the session's data folder that holds the whole of it."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import psutil
import pytest

from oi_lsp.client import OIClient
from oi_lsp.core import run_output
from oi_lsp.core.streamer import BEHIND, QUIET, SETTLE, Streamer
from tests import modelserver as ms
from tests.conftest import next_proposal, tool_results
from tests.hardening import record
from tests.modelserver import ModelServer

MEGABYTE = {  # 20,000 lines of 49 digits and a newline: 1,000,000 characters
    "python": "for i in range(20000):\n    print(str(i).zfill(49))",
    "shell": "for i in $(seq 0 19999); do printf '%049d\\n' $i; done",
}
WHOLE = "".join(str(i).zfill(49) + "\n" for i in range(20000))


@pytest.mark.parametrize("language", ["python", "shell"])
async def test_megabyte_is_trimmed_for_the_model_and_spilled(
        client: OIClient, model: ModelServer, data_dir: Path, language: str) -> None:
    model.script(ms.tool(language, MEGABYTE[language]), ms.text("done"))
    chat = asyncio.create_task(client.chat("print a lot"))
    await client.approve((await next_proposal(client, timeout=120))["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    assert client.stream(result["turnId"], "console") == WHOLE  # the client gets everything
    told = tool_results(model.requests[1])[0]
    assert told.startswith(WHOLE[:1400])  # maxOutput 2800: the first and last 1400 kept
    assert f"\n[... {1_000_000 - 2800} characters omitted ...]\n" in told
    assert WHOLE[-1400:].strip() in told
    found = re.search(r"\[the whole output, 1000000 characters, is in the file (.+)\]$", told)
    assert found is not None
    spill = Path(found.group(1))
    assert spill.is_relative_to(data_dir)
    assert await asyncio.to_thread(spill.read_text, encoding="utf-8") == WHOLE


async def test_short_output_has_no_spill_file(client: OIClient, model: ModelServer,
                                              data_dir: Path) -> None:
    model.script(ms.tool("shell", "echo short"), ms.text("done"))
    chat = asyncio.create_task(client.chat("print a little"))
    await client.approve((await next_proposal(client, timeout=120))["proposalId"], "run")
    await chat
    assert tool_results(model.requests[1]) == ["short"]
    assert not await asyncio.to_thread(lambda: list(data_dir.rglob("*.txt")))


async def settled_rss(pid: int, timeout: float = 30) -> int:
    """The server's memory once it has stopped growing (its model library loads at start)."""
    server = psutil.Process(pid)
    last, steady, deadline = server.memory_info().rss, 0, time.monotonic() + timeout
    while steady < 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        now = server.memory_info().rss
        steady = steady + 1 if abs(now - last) < 2 * 2**20 else 0
        last = now
    return last


async def test_hundred_megabyte_line_stays_out_of_the_servers_memory(
        client: OIClient, data_dir: Path) -> None:
    await client.execute("python", "1")
    assert client.process is not None
    base = await settled_rss(client.process.pid)
    server, peak = psutil.Process(client.process.pid), base
    run = asyncio.create_task(client.execute("python", "print('x' * 100_000_000)"))
    while not run.done():
        peak = max(peak, server.memory_info().rss)
        await asyncio.sleep(0.02)
    result = await run
    assert result["status"] == "ok"
    growth_mb = (peak - base) / 2**20
    assert growth_mb < 100, f"the server grew by {growth_mb:.0f} MB"
    # The result has the start and the end, and says where the whole is.
    text = "".join(o["content"] for o in result["outputs"])
    found = re.search(r"\n\[\.\.\. (\d+) characters omitted; the whole output is in the file "
                      r"(.+?) \.\.\.\]\n", text)
    assert found is not None and text.startswith("x" * 1000) and text.endswith("x" * 1000 + "\n")
    assert len(text) - len(found.group(0)) + int(found.group(1)) == 100_000_001
    spill = Path(found.group(2))
    assert spill.is_relative_to(data_dir) and spill.parent.name.endswith(".outputs")
    assert (await asyncio.to_thread(spill.stat)).st_size == 100_000_001
    # Nor does the stream pile up for a client that reads slowly: what it could not take in
    # time is counted in a note, all of it accounted for.
    streamed = client.stream(result["turnId"], "console")
    skipped = sum(int(n.replace(",", "")) for n in re.findall(
        r"\[\.\.\. ([\d,]+) characters not shown here", streamed))
    shown = re.sub(r"\n\[\.\.\. [\d,]+ characters not shown here[^\]]*\]\n", "", streamed)
    assert len(shown) + skipped == 100_000_001
    record("large_output", line_mb=100, line_growth_mb=round(growth_mb),
           line_result_chars=len(text), line_spill_bytes=100_000_001,
           line_streamed_chars=len(shown), line_skipped_chars=skipped)


def test_spill_files_are_kept_within_a_budget(tmp_path: Path) -> None:
    folder = tmp_path / "workspace"
    for n, conversation in enumerate(["a", "b", "a", "c"]):
        spill = folder / f"{conversation}.outputs" / f"{n}.txt"
        spill.parent.mkdir(parents=True, exist_ok=True)
        spill.write_bytes(b"x" * 1000)
        os.utime(spill, (1000 + n, 1000 + n))
    (folder / "a.json").write_text("{}")  # not a spill file: never counted or removed
    run_output.prune(folder, budget=2500)
    assert sorted(p.name for p in folder.rglob("*.txt")) == ["2.txt", "3.txt"]
    assert (folder / "a.json").exists()


def test_stream_skips_while_the_client_is_behind() -> None:
    sent: list[dict[str, object]] = []
    backlog = [0]
    streamer = Streamer(lambda method, params: sent.append(params), "file:///w",
                        lambda: backlog[0])

    async def scenario() -> None:
        streamer.content("t", "computer", "console", "output", "a" * 10)
        backlog[0] = BEHIND + 1
        streamer.content("t", "computer", "console", "output", "b" * 20)
        streamer.content("t", "assistant", "message", None, "model text is never skipped")
        streamer.content("t", "computer", "console", "output", "c" * 30)
        backlog[0] = BEHIND  # still behind: not caught up
        streamer.content("t", "computer", "console", "output", "d" * 40)
        backlog[0] = 0
        streamer.content("t", "computer", "console", "output", "e" * 5)
        streamer.close()

    asyncio.run(scenario())
    text = "".join(str(p.get("content") or "") for p in sent)
    assert "b" not in text.replace("been", "") and "d" * 40 not in text
    assert "model text is never skipped" in text
    assert "[... 20 characters not shown here" in text  # the model's text closed that block
    assert "[... 70 characters not shown here" in text and text.endswith("e" * 5)


def test_settled_waits_for_a_quiet_spell_and_sends_what_came() -> None:
    """A question a run asks (an MCP call's) follows what the run printed before it: settled()
    returns once output was quiet for QUIET seconds (SETTLE at most), with all of it sent."""
    sent: list[dict[str, object]] = []
    streamer = Streamer(lambda method, params: sent.append(params), "file:///w")

    async def scenario() -> tuple[float, float, str]:
        loop = asyncio.get_running_loop()
        for i in range(4):  # output still coming for 0.15 s after the question
            loop.call_later(0.05 * i, streamer.content, "t", "computer", "console", "output",
                            f"line {i}\n")
        start = time.monotonic()
        await streamer.settled()
        took = time.monotonic() - start
        shown = "".join(str(p.get("content") or "") for p in sent)
        # A flood that never stops: SETTLE bounds the wait.
        flood = loop.call_soon(lambda: None)

        def more() -> None:
            nonlocal flood
            streamer.content("t", "computer", "console", "output", ".")
            flood = loop.call_later(0.03, more)
        more()
        start = time.monotonic()
        await streamer.settled()
        flooded = time.monotonic() - start
        flood.cancel()
        return took, flooded, shown

    took, flooded, shown = asyncio.run(scenario())
    assert shown == "line 0\nline 1\nline 2\nline 3\n"
    assert 0.15 + QUIET <= took < SETTLE
    assert SETTLE <= flooded < SETTLE + 0.5
