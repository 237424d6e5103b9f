"""The chat page alone in Chromium (playwright-core), fed a notification sequence recorded from a
real oi-lsp turn against the scripted model: markdown, a proposal answered with the page's own
buttons (Run, then Edit + Run edited), streamed output, an inline image, the oi/history reload,
and model text with <script> / onerror= rendered inert."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.client import OIClient, to_uri
from tests import modelserver as ms
from tests.conftest import next_proposal
from tests.modelserver import ModelServer
from tests.vscode.conftest import ARTIFACTS, EXT, run

pytestmark = pytest.mark.timeout(1800)  # the first test may install the stack

EVIL = ('# Plan\n\nI will **print** it.\n\n<script>window.__pwned = "script"</script>\n\n'
        '<img src="x" onerror="window.__pwned = \'onerror\'">\n\n[click](javascript:alert(1))\n\n'
        '![tracker](https://example.com/pixel.png)\n')


def png(width: int, height: int) -> bytes:
    """A small red PNG, made here so the test needs no image library."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


IMAGE_CODE = ("import base64\nfrom IPython.display import Image, display\n"
              "print('hello from the kernel')\n"
              f"display(Image(data=base64.b64decode({base64.b64encode(png(24, 12)).decode()!r})))")


def page(built: Path, env: dict[str, str], tmp_path: Path, **request: Any) -> dict[str, Any]:
    spec = tmp_path / "page-input.json"
    spec.write_text(json.dumps(request))
    report: dict[str, Any] = json.loads(run(["node", Path(__file__).with_name("webview_page.mjs"),
                                             spec], cwd=built, env=env, timeout=300)
                                        .strip().splitlines()[-1])
    assert report["errors"] == [], report["errors"]
    return report


async def test_recorded_turns_render_and_answer(client: OIClient, model: ModelServer,
                                                workspace: Path, built_extension: Path,
                                                playwright_env: dict[str, str],
                                                tmp_path: Path) -> None:
    model.script(ms.tool("python", IMAGE_CODE, say=EVIL), ms.text("Done: **42**."),
                 ms.tool("python", "print('as proposed')"), ms.text("Edited run seen."))
    chat = asyncio.create_task(client.chat("show me an image"))
    proposal = await next_proposal(client, timeout=120)
    await client.approve(proposal["proposalId"], "run")
    assert (await chat)["status"] == "done"
    since = len(client.notifications)
    chat = asyncio.create_task(client.chat("print something"))
    proposal = await next_proposal(client, since, timeout=120)
    await client.approve(proposal["proposalId"], "edit", code="print('as edited')")
    assert (await chat)["status"] == "done"
    history = (await client.request("oi/history", {}))["messages"]

    ARTIFACTS.mkdir(exist_ok=True)
    report = page(built_extension, playwright_env, tmp_path, mode="replay",
                  notifications=client.notifications, history=history,
                  folders=[{"uri": to_uri(workspace), "name": "ws"}],
                  decisions=[{"decision": "run"},
                             {"decision": "edit", "code": "print('as edited')"}],
                  screenshot=str(ARTIFACTS / "vscode-webview-replay.png"),
                  historyScreenshot=str(ARTIFACTS / "vscode-webview-history.png"))

    # The page answered through its buttons what the recorded session answered.
    assert report["buttons"] == ["Run", "Skip", "Edit", "Always this code"]
    approvals = [m for m in report["posted"] if m["type"] == "approve"]
    assert [(m["decision"], m.get("code")) for m in approvals] == [
        ("run", None), ("edit", "print('as edited')")]
    # The CSP is the second line: it blocks the remote image, and reports the handler DOMPurify
    # parsed (inertly) before removing it. Nothing else was attempted.
    kinds = {v.split()[0] for v in report["violations"]}
    assert kinds <= {"script-src-attr", "img-src"}, report["violations"]
    assert any(v.startswith("img-src https://example.com/pixel.png") for v in report["violations"])

    for view in (report["live"], report["history"]):
        # Markdown rendered; the model's script, handler and javascript: link are gone.
        assert "<h1>Plan</h1>" in view["assistantHtml"][0]
        assert "<strong>print</strong>" in view["assistantHtml"][0]
        assert view["scripts"] == 0 and view["handlers"] == 0 and view["javascriptLinks"] == 0
        assert view["pwned"] is None
        assert [t.strip() for t in view["assistantText"][1:]] == ["Done: 42.", "Edited run seen."]
        first, second = view["codes"]
        assert first["language"] == "python" and first["code"] == IMAGE_CODE
        assert first["highlighted"] > 0 and not first["actions"]
        assert first["output"].startswith("hello from the kernel") and first["outputOpen"]
        assert second["code"] == "print('as edited')"
        assert second["output"].startswith("as edited")
    live = report["live"]
    assert live["codes"][0]["output"] == "hello from the kernel\n"
    # The saved conversation names the image but does not keep it (the server records the model's
    # view of a run), so only the live view shows it.
    assert live["codes"][0]["images"] == [{"src": "data:image/png;base64,iVBORw0K", "width": 24}]
    assert [c["note"] for c in live["codes"]] == ["ran", "ran, edited"]
    assert live["statusHidden"]
    assert [c["note"] for c in report["history"]["codes"]] == ["ran", "ran, edited"]
    assert report["history"]["users"] == ["show me an image", "print something"]


async def test_always_for_this_command_button(client: OIClient, model: ModelServer,
                                             workspace: Path, built_extension: Path,
                                             playwright_env: dict[str, str],
                                             tmp_path: Path) -> None:
    model.script(ms.tool("shell", "echo one"), ms.tool("shell", "echo two"), ms.text("Done."))
    chat = asyncio.create_task(client.chat("echo twice"))
    proposal = await next_proposal(client, timeout=120)
    assert proposal["command"] == "echo"
    await client.approve(proposal["proposalId"], "run", always="command")
    assert (await chat)["status"] == "done"

    shots = ARTIFACTS / "assistant"
    shots.mkdir(parents=True, exist_ok=True)
    report = page(built_extension, playwright_env, tmp_path, mode="replay",
                  notifications=client.notifications,
                  folders=[{"uri": to_uri(workspace), "name": "ws"}],
                  decisions=[{"decision": "always"}],
                  proposalScreenshot=str(shots / "vscode-always-buttons.png"),
                  screenshot=str(shots / "vscode-always-for-this-command.png"))
    assert report["buttons"] == ["Run", "Skip", "Edit", "Always `echo`"]
    approvals = [m for m in report["posted"] if m["type"] == "approve"]
    assert approvals == [{"type": "approve", "proposalId": proposal["proposalId"],
                          "decision": "run", "always": "command"}]
    first, second = report["live"]["codes"]
    assert first["always"] == "From now on `echo` commands run here without asking."
    assert (first["note"], second["note"]) == ("ran", "auto-run")


def test_input_enter_shift_enter_and_history(built_extension: Path,
                                              playwright_env: dict[str, str],
                                              tmp_path: Path) -> None:
    report = page(built_extension, playwright_env, tmp_path, mode="input")
    assert report["beforeSend"] == "first line\nsecond line"
    assert report["afterSend"] == ""
    assert (report["up1"], report["up2"]) == ("another", "first line\nsecond line")
    assert (report["down1"], report["down2"]) == ("another", "")
    assert [m for m in report["posted"] if m["type"] != "ready"] == [
        {"type": "send", "text": "first line\nsecond line"}, {"type": "send", "text": "another"},
        {"type": "stop"}]
    assert EXT.is_dir()


def test_pasted_and_dropped_images_go_with_the_message(built_extension: Path,
                                                       playwright_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    image = base64.b64encode(png(8, 6)).decode()
    report = page(built_extension, playwright_env, tmp_path, mode="attach", png=image,
                  screenshot=str(ARTIFACTS / "input-vision" / "vscode-webview-attached.png"))
    assert report["chips"] == ["pasted.png✕", "dropped.png✕"]
    assert report["chipsAfter"] == 0  # sent with the message, not again with the next
    assert [m for m in report["posted"] if m["type"] != "ready"] == [
        {"type": "send", "text": "what are these?",
         "attachments": [{"data": image, "mimeType": "image/png"}] * 2}]
