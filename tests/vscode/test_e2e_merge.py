"""VS Code scenarios of the merge of issue 18's halves and issue 25's VS Code part: settings as
the Settings editor shows them, a proposal answered in another client, and screenshots of the
main screens in both themes (test-artifacts/vsc-merge/)."""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.vscode.conftest import ROOT, code_server
from tests.vscode.workbench import ARTIFACTS, UNTITLED_TABS, Workbench

pytestmark = pytest.mark.timeout(1800)  # the first scenario starts the stack

SHOTS = ARTIFACTS / "vsc-merge"
OI_LSP = Path(sys.executable).with_name("oi-lsp")
# Ctrl+K Ctrl+T names the default themes so; the workbench's class tells which one shows.
THEMES = {"light": ("Light Modern", ".monaco-workbench.vs:not(.vs-dark)"),
          "dark": ("Dark Modern", ".monaco-workbench.vs-dark")}
STATUS_TEXT = "document.getElementById('oi-status-text').textContent"
TOC_ROW = ".settings-toc-container .monaco-list-row"
TOC_HAS = f"[...document.querySelectorAll('{TOC_ROW}')].some((r) => r.textContent.includes(%s))"


def browse_to_extension(wb: Workbench) -> bool:
    """Down the table of contents from "Merge Conflict" until "Open Interpreter" shows (a
    virtual list: only the rows in view exist). False when it did not: the keys went elsewhere
    (focus taken away) or the table was drawn anew."""
    if not wb("evaluate", expression=TOC_HAS % "'Merge Conflict'"):
        wb("click", selector=TOC_ROW, hasText="Extensions")
    wb("click", selector=TOC_ROW, hasText="Merge Conflict")
    for _ in range(40):
        if wb("evaluate", expression=TOC_HAS % "'Open Interpreter'"):
            return True
        wb("keys", keys=["ArrowDown"])
    return False


def test_settings_read_as_open_interpreter(vscode: tuple[Workbench, Path]) -> None:
    wb, _ = vscode
    # Under load the palette's Enter once ran before its list had caught up (no settings
    # editor came): the command again, until the editor shows its table of contents.
    for _ in range(3):
        wb("command", title="Preferences: Open Settings (UI)")
        if wb("waitOptional", selector=TOC_ROW, timeout=15000):
            break
    # As a user browses to them: Extensions > Open Interpreter in the table of contents.
    # Once in a full run the keys did not get there (CI load): up to three tries.
    found = any(browse_to_extension(wb) for _ in range(3))
    SHOTS.mkdir(parents=True, exist_ok=True)
    if not found:
        wb("screenshot", path=str(SHOTS / "settings-not-found.png"))
        pytest.fail("the table of contents never showed Open Interpreter")
    wb("click", selector=TOC_ROW, hasText="Open Interpreter")
    wb("wait", selector=".settings-editor .setting-item-title", hasText="Api Base")
    titles = wb("evaluate", expression="""[...document.querySelectorAll(
        '.settings-editor .setting-item-title')].map((t) => t.textContent)""")
    wb("screenshot", path=str(SHOTS / "settings.png"))
    # Under the extension's "Open Interpreter" heading, no "Oi:" before each setting.
    assert titles[:3] == ["Model", "Api Base", "Profile"], titles
    assert not any(t.startswith("Oi") for t in titles), titles
    toc = wb("evaluate", expression="""[...document.querySelectorAll(
        '.settings-toc-container .monaco-list-row')].map((r) => r.textContent)""")
    assert any("Open Interpreter" in t for t in toc), toc
    wb("keys", keys=["Escape", "Control+w"])  # close the Settings editor
    wb("chatFill", selector="#oi-input", text="")  # F1 may have typed into the focused input



FIGURES = re.compile(r"^python · \d+ s · \d+% CPU · \d+ MB$")


def test_a_tour_in_both_themes(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    """The screens a new user meets, in Light Modern and Dark Modern: a streamed answer with a
    Python block, a high-risk proposal, a run with its output and status line, an error with
    its button, the conversations picker, the welcome of a new conversation."""
    wb, _ = vscode
    # Markdown with a Python block, then the proposal to try it (a reply of text alone would
    # have its python block proposed as code to run).
    model.script(ms.tool("python", "print(mean_of([1, 2, 3]))", say=(
        "A helper:\n\n```python\nimport statistics\n\ndef mean_of(xs: list[float]) -> float:\n"
        "    \"\"\"The mean, or 0 for none.\"\"\"\n    if not xs:\n        return 0.0\n"
        "    return statistics.mean(xs)\n```\n\n| call | gives |\n|---|---|\n"
        "| `mean_of([1, 2, 3])` | 2 |\n\n> It needs the helper defined first.\n\n")),
        ms.text("Skipped, fine."))
    wb("chatSend", text="write a mean helper")
    wb("chatWait", selector=".oi-assistant pre code .hljs-keyword")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    themed_shots(wb, "answer-with-code")
    wb.answer("skip")
    wb("chatWait", selector=".oi-assistant", hasText="Skipped, fine.")
    wb.wait_idle()

    model.script(ms.tool("shell", "sudo shutdown -h now"), ms.text("Left it."))
    wb("chatSend", text="shut the machine down")
    wb("chatWait", selector=".oi-proposal .oi-risk-high")
    themed_shots(wb, "risk-high")
    wb.answer("skip")
    wb("chatWait", selector=".oi-assistant", hasText="Left it.")
    wb.wait_idle()

    model.script(ms.tool("python", "import time\nprint('crunching')\nstart = time.time()\n"
                                   "while time.time() - start < 25:\n    pass\nprint('crunched')"),
                 ms.text("Crunched."))
    wb("chatSend", text="crunch for a while")
    wb.answer("run")
    wb.wait_output("crunching")
    deadline = time.monotonic() + 20
    while not FIGURES.match(wb("chatEval", expression=STATUS_TEXT) or ""):
        assert time.monotonic() < deadline, wb("chatEval", expression=STATUS_TEXT)
        time.sleep(0.3)
    themed_shots(wb, "run-with-status")
    wb("chatWait", selector=".oi-assistant", hasText="Crunched.", timeout=90000)
    wb.wait_idle()

    model.script(ms.error(404, "The model `openai/scripted` does not exist."))
    wb("chatSend", text="and now?")
    wb("chatWait", selector=".oi-error button.oi-error-action", hasText="Select Model")
    themed_shots(wb, "error-with-button")

    SHOTS.mkdir(parents=True, exist_ok=True)
    for label, (theme, selector) in THEMES.items():
        set_theme(wb, theme, selector)
        wb("command", title="Open Interpreter: Conversations")
        wb("wait", selector=".quick-input-list .monaco-list-row", hasText="write a mean helper")
        time.sleep(0.5)
        wb("screenshot", path=str(SHOTS / f"conversations-{label}.png"))
        wb("keys", keys=["Escape"])

    wb("command", title="Open Interpreter: New Conversation")
    wb("chatWait", selector=".oi-welcome")
    themed_shots(wb, "welcome")

def set_theme(wb: Workbench, theme: str, selector: str) -> None:
    wb("keys", keys=["Escape", "Control+k", "Control+t"])  # Preferences: Color Theme
    wb("wait", selector=".quick-input-widget .monaco-list-row", hasText=theme)
    wb("quickInput", text=theme)
    wb("wait", selector=selector, timeout=30000)
    time.sleep(0.5)  # the webview repaints in the new colours


def themed_shots(wb: Workbench, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for label, (theme, selector) in THEMES.items():
        set_theme(wb, theme, selector)
        wb("screenshot", path=str(SHOTS / f"{name}-{label}.png"))


def daemons(runtime: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if (proc.info["cmdline"] or [])[-2:] == ["oi_lsp", "daemon"] and \
                    proc.environ().get("OI_LSP_RUNTIME_DIR") == str(runtime):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


@pytest.fixture(scope="module")
def shared(vscode_stack: Path, stack_env: dict[str, str], vsix: Path,
           model_server: ModelServer) -> Iterator[tuple[Workbench, Path, dict[str, str]]]:
    """VS Code on a folder through the user's shared oi-lsp daemon (not standalone), and the
    environment a second client (the terminal's, another editor's) attaches to it with."""
    base = Path(tempfile.mkdtemp(prefix="oiv-", dir="/tmp"))  # a socket path is short
    workspace = base / "project"
    workspace.mkdir()
    env = {"OI_LSP_STANDALONE": "0", "OI_LSP_RUNTIME_DIR": str(base / "run"),
           "OI_LSP_DATA_DIR": str(base / "cs" / "data"), "OI_LSP_DAEMON_IDLE": "120",
           "PYTHONPATH": str(ROOT)}
    try:
        with code_server(vscode_stack, stack_env, vsix, base / "cs", open_path=workspace,
                         settings={"oi.serverPath": str(OI_LSP), "oi.model": "openai/scripted",
                                   "oi.apiBase": model_server.url},
                         extra_env={**env, "OI_API_KEY": "sk-from-env"}) as wb:
            wb("command", title="Open Interpreter: Open Chat")
            wb("chatWait", selector="#oi-header:not([hidden])")
            yield wb, workspace, env
    finally:
        for proc in daemons(base / "run"):
            proc.kill()
        shutil.rmtree(base, ignore_errors=True)


def test_a_proposal_answered_in_another_client(
        shared: tuple[Workbench, Path, dict[str, str]], model: ModelServer) -> None:
    wb, workspace, env = shared
    loop = asyncio.new_event_loop()
    other = OIClient()

    def step(coroutine: Any) -> Any:
        return loop.run_until_complete(coroutine)

    try:
        step(other.start(env=env))
        step(other.initialize([workspace], options=model.settings()))
        model.script(ms.tool("python", "print('answered over there', 6 * 7)"),
                     ms.text("Done there."))
        untitled = wb("evaluate", expression=UNTITLED_TABS)
        wb("chatSend", text="print something")
        wb("chatWait", selector=".oi-proposal .oi-actions")
        proposal = step(other.wait_for("oi/proposal", timeout=60))
        wb.answer("edit")  # an editor tab for it, left unchanged
        wb("wait", selector=".tab.active", hasText="Untitled")
        step(other.approve(proposal["proposalId"], "run"))
        wb("chatWait", selector=".oi-elsewhere", hasText="Answered in another client: run")
        # The unchanged edit tab of a proposal answered elsewhere closes: it can run nothing.
        deadline = time.monotonic() + 30
        while wb("evaluate", expression=UNTITLED_TABS) != untitled \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        assert wb("evaluate", expression=UNTITLED_TABS) == untitled
        box = wb("chatEval", expression=f"""(() => {{
            const box = document.querySelector('[data-proposal-id="{proposal["proposalId"]}"]');
            return {{ buttons: box.querySelectorAll('button.oi-run, button.oi-skip').length,
                      note: box.querySelector('.oi-note')?.textContent }}; }})()""")
        assert box["buttons"] == 0, box
        wb.wait_output("answered over there 42")
        wb("chatWait", selector=".oi-assistant", hasText="Done there.")
        themed_shots(wb, "answered-elsewhere")
    finally:
        step(other.close())
        loop.close()
