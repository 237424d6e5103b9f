"""VS Code scenarios of the merge of issue 18's halves and issue 25's VS Code part: settings as
the Settings editor shows them, a proposal answered in another client, and screenshots of the
main screens in both themes (test-artifacts/vsc-merge/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vscode.workbench import ARTIFACTS, Workbench

pytestmark = pytest.mark.timeout(1800)  # the first scenario starts the stack

SHOTS = ARTIFACTS / "vsc-merge"
TOC_HAS_OI = """[...document.querySelectorAll('.settings-toc-container .monaco-list-row')]
    .some((r) => r.textContent.includes('Open Interpreter'))"""


def test_settings_read_as_open_interpreter(vscode: tuple[Workbench, Path]) -> None:
    wb, _ = vscode
    wb("command", title="Preferences: Open Settings (UI)")
    # As a user browses to them: Extensions > Open Interpreter in the table of contents.
    wb("click", selector=".settings-toc-container .monaco-list-row", hasText="Extensions")
    wb("click", selector=".settings-toc-container .monaco-list-row", hasText="Merge Conflict")
    for _ in range(40):  # the table is a virtual list: go down it until the extension shows
        if wb("evaluate", expression=TOC_HAS_OI):
            break
        wb("keys", keys=["ArrowDown"])
    wb("click", selector=".settings-toc-container .monaco-list-row", hasText="Open Interpreter")
    wb("wait", selector=".settings-editor .setting-item-title", hasText="Api Base")
    titles = wb("evaluate", expression="""[...document.querySelectorAll(
        '.settings-editor .setting-item-title')].map((t) => t.textContent)""")
    SHOTS.mkdir(parents=True, exist_ok=True)
    wb("screenshot", path=str(SHOTS / "settings.png"))
    # Under the extension's "Open Interpreter" heading, no "Oi:" before each setting.
    assert titles[:3] == ["Model", "Api Base", "Profile"], titles
    assert not any(t.startswith("Oi") for t in titles), titles
    toc = wb("evaluate", expression="""[...document.querySelectorAll(
        '.settings-toc-container .monaco-list-row')].map((r) => r.textContent)""")
    assert any("Open Interpreter" in t for t in toc), toc
    wb("keys", keys=["Escape", "Control+w"])  # close the Settings editor
    wb("chatFill", selector="#oi-input", text="")  # F1 may have typed into the focused input
