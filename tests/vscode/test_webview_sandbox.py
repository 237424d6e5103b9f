"""The chat page (Chromium, playwright-core) answering a run the sandbox blocked: a proposal
with sandboxBlocked offers "Run outside the sandbox" and Skip, no Run or Edit; its button sends
oi/approve "outside". Fed the notifications of a real turn against the scripted model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oi_lsp.client import to_uri
from oi_lsp.executors.sandbox import landlock
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.modelserver import ModelServer
from tests.vscode.conftest import ARTIFACTS
from tests.vscode.test_webview import page

pytestmark = [pytest.mark.timeout(1800),  # the first test may install the stack
              pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 or later")]


async def test_blocked_run_offers_run_outside(start_server: StartServer, model: ModelServer,
                                              workspace: Path, tmp_path: Path,
                                              built_extension: Path,
                                              playwright_env: dict[str, str]) -> None:
    target = tmp_path / "outside.txt"
    code = f"open({str(target)!r}, 'w').write('hi')"
    client = await start_server(workspace, options=model.settings(sandbox="workspace-write"))
    model.script(ms.tool("python", code), ms.text("Written."))
    chat = asyncio.create_task(client.chat("write it"))
    first = await client.wait_for("oi/proposal", timeout=120)
    await client.approve(first["proposalId"], "run")
    blocked = await client.wait_for("oi/proposal", lambda p: bool(p.get("sandboxBlocked")))
    await client.approve(blocked["proposalId"], "outside")
    assert (await chat)["status"] == "done" and target.read_text() == "hi"

    ARTIFACTS.mkdir(exist_ok=True)
    report = page(built_extension, playwright_env, tmp_path, mode="replay",
                  notifications=client.notifications,
                  folders=[{"uri": to_uri(workspace), "name": "ws"}],
                  decisions=[{"decision": "run"}, {"decision": "outside"}],
                  screenshot=str(ARTIFACTS / "sandbox" / "vscode-webview-blocked.png"))
    approvals = [m["decision"] for m in report["posted"] if m["type"] == "approve"]
    assert approvals == ["run", "outside"]
    assert report["everyButtons"] == [["Run", "Skip", "Edit", "Always this code"],
                                      ["Run outside the sandbox", "Skip"]]
    notes = [c["note"] for c in report["live"]["codes"]]
    assert notes[-1].startswith("running outside the sandbox") or "ran" in notes[-1]
    assert "blocked by the sandbox" in report["live"]["codes"][-1]["risk"]
