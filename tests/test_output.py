"""A big output through a real server: the client gets all of it, the model its start and end
and the path of a spill file in the session's data folder that holds the whole of it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import next_proposal, tool_results
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
