"""The chat view end to end in code-server (issue 18, the view's half): what it redraws from
oi/history after hide/show and Developer: Reload Window, a proposal a reload ended, the status
line, Send/Stop, magic output as its own block and the title-bar Stop; MCP servers as code
(issue 39: oi.mcpServers, a destructive tool's question, the tool-call lines). Each scenario saves
screenshots in the light and dark themes to test-artifacts/vsc-view/."""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.client import to_uri
from oi_lsp.core.store import Batch, Store
from oi_lsp.protocol import Message
from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.vscode.test_webview import png
from tests.vscode.workbench import ARTIFACTS, ROOT, UNTITLED_TABS, Workbench

pytestmark = pytest.mark.timeout(1800)  # the first scenario starts the stack

SHOTS = ARTIFACTS / "vsc-view"
IMAGE_CODE = ("import base64\nfrom IPython.display import Image, display\n"
              "print('drawing')\n"
              f"display(Image(data=base64.b64decode({base64.b64encode(png(48, 24)).decode()!r})))")
# workbench.colorTheme "Default Light Modern" / "Default Dark Modern", as the picker names them
THEMES = {"light": ("Light Modern", ".monaco-workbench.vs:not(.vs-dark)"),
          "dark": ("Dark Modern", ".monaco-workbench.vs-dark")}

# What the view shows, block by block, in a form two renderings can be compared in (the
# per-turn usage lines too: oi/history keeps each turn's usage).
DESCRIBE = """(() => [...document.getElementById('oi-log').children]
    .filter((e) => getComputedStyle(e).display !== 'none')
    .map((e) => {
    const kind = ['oi-user', 'oi-assistant', 'oi-code', 'oi-error', 'oi-notice', 'oi-magic']
        .find((c) => e.classList.contains(c)) ?? e.className;
    const source = e.querySelector('.oi-source');
    return {
        kind,
        text: kind === 'oi-code' ? (e.querySelector('.oi-source code')?.dataset.code ?? '')
            : (e.querySelector('.oi-user-text')?.textContent ?? e.textContent).trim(),
        note: e.querySelector('.oi-note')?.textContent ?? null,
        risk: e.querySelector('.oi-risk')?.textContent ?? null,
        struck: source
            ? getComputedStyle(source).textDecorationLine.includes('line-through') : false,
        output: e.querySelector('.oi-output pre')?.textContent ?? null,
        images: e.querySelectorAll('img').length,
        chip: e.querySelector('.oi-context')?.textContent ?? null,
        buttons: e.querySelectorAll('.oi-actions button').length,
    };
}))()"""


def describe(wb: Workbench) -> list[dict[str, Any]]:
    return list(wb("chatEval", expression=DESCRIBE))


def same_view(wb: Workbench, shown: list[dict[str, Any]]) -> None:
    """The view shows the blocks it showed before, one by one."""
    now = describe(wb)
    for before, after in zip(shown, now, strict=False):
        assert after == before
    assert len(now) == len(shown)


def set_theme(wb: Workbench, label: str) -> None:
    """Preferences: Color Theme, as a user picks it."""
    theme, selector = THEMES[label]
    wb("keys", keys=["Escape", "Control+k", "Control+t"])  # Preferences: Color Theme
    wb("wait", selector=".quick-input-widget .monaco-list-row", hasText=theme)
    wb("quickInput", text=theme)
    wb("wait", selector=selector, timeout=30000)
    time.sleep(1.0)  # the webview takes the theme's variables a moment later


def themed_shots(wb: Workbench, name: str) -> None:
    """Screenshots of the window in Default Light Modern and Default Dark Modern."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for label in THEMES:
        set_theme(wb, label)
        wb("screenshot", path=str(SHOTS / f"{name}-{label}.png"))


def open_chat(wb: Workbench) -> None:
    wb("command", title="Open Interpreter: Open Chat")
    wb("chatWait", selector="#oi-header:not([hidden])")


def settle(wb: Workbench) -> None:
    wb.wait_idle()
    time.sleep(0.5)


def test_history_redraws_what_the_view_showed(vscode: tuple[Workbench, Path],
                                              model: ModelServer) -> None:
    wb, workspace = vscode
    # An image, a skipped high-risk command, an edit, a stop while waiting, an error.
    model.script(ms.tool("python", IMAGE_CODE), ms.text("Drew it."))
    wb("chatSend", text="draw something")
    wb.answer("run")
    wb("chatWait", selector=".oi-code img")
    wb("chatWait", selector=".oi-assistant", hasText="Drew it.")
    settle(wb)
    model.script(ms.tool("shell", "sudo shutdown -h now"), ms.text("Not then."))
    wb("chatSend", text="shut the machine down")
    wb.answer("skip")
    wb("chatWait", selector=".oi-assistant", hasText="Not then.")
    settle(wb)
    model.script(ms.tool("python", "print('as proposed')"), ms.text("Saw the edit."))
    wb("chatSend", text="print something")
    wb.edit_proposal("print('edited', 3 * 3)")
    wb("chatWait", selector=".oi-assistant", hasText="Saw the edit.")
    settle(wb)
    model.script(ms.tool("python", "print('never runs')"))
    wb("chatSend", text="propose and wait")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    wb("command", title="Open Interpreter: Stop")
    wb("chatWait", selector=".oi-notice", hasText="Stopped.")
    settle(wb)
    model.script(ms.error(400, "scripted refusal"))
    wb("chatSend", text="fail please")
    wb("chatWait", selector=".oi-error", hasText="scripted refusal")
    settle(wb)
    # Run Selection as Instruction, then Run Selection in Session.
    model.script(ms.text("That sums the numbers."))
    wb("openFile", name="numbers.py")
    wb("keys", keys=["Control+Home", "Shift+ArrowDown", "Shift+End"])  # lines 1-2
    wb("command", title="Open Interpreter: Run Selection as Instruction", escape=False)
    wb("chatWait", selector=".oi-assistant", hasText="That sums the numbers.")
    settle(wb)
    wb("openFile", name="numbers.py")
    wb("keys", keys=["Control+Home", "Shift+ArrowDown", "Shift+End"])  # lines 1-2
    wb("command", title="Open Interpreter: Run Selection in Session", escape=False)
    wb.wait_output("12000")
    settle(wb)

    shown = describe(wb)
    codes = [b for b in shown if b["kind"] == "oi-code"]
    drawn = next(b for b in codes if "display(Image" in b["text"])
    assert drawn["images"] == 1 and "drawing" in drawn["output"]
    skipped = next(b for b in codes if "shutdown" in b["text"])
    assert skipped["note"] == "skipped" and skipped["struck"] and "high" in skipped["risk"]
    edited = next(b for b in codes if "3 * 3" in b["text"])
    assert edited["text"] == "print('edited', 3 * 3)" and "edited" in edited["note"]
    stopped = next(b for b in codes if "never runs" in b["text"])
    assert stopped["note"] == "stopped" and stopped["buttons"] == 0
    assert any(b["kind"] == "oi-error" and "scripted refusal" in b["text"] for b in shown)
    selection = (workspace / "numbers.py").read_text().rstrip("\n")
    asked = next(b for b in shown if b["kind"] == "oi-user" and b["chip"])
    assert asked["text"] == selection and asked["chip"] == "numbers.py:1-2"
    assert not any("Context from the editor" in b["text"] for b in shown)
    mine = codes[-1]
    assert mine["note"] == "your run" and mine["output"].strip() == "12000"

    wb("command", title="View: Show Explorer")  # hide the chat, then show it again
    wb("wait", selector=".explorer-folders-view, .explorer-viewlet")
    open_chat(wb)
    wb("chatWait", selector=".oi-code img")
    same_view(wb, shown)

    wb("reload")  # Developer: Reload Window: a new extension host and a new oi-lsp
    open_chat(wb)
    wb("chatWait", selector=".oi-code img")
    wb("chatWait", selector=".oi-user .oi-context")
    same_view(wb, shown)
    themed_shots(wb, "history-redrawn")


def test_reload_while_a_proposal_waits_ends_it_and_says_so(vscode: tuple[Workbench, Path],
                                                           model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "waited = 'for you'"))
    wb("chatSend", text="set a variable, later")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    wb("reload")
    open_chat(wb)
    wb("chatWait", selector=".oi-notice", hasText="Python")
    last = [b for b in describe(wb) if b["kind"] == "oi-code"][-1]
    assert last["text"] == "waited = 'for you'" and last["buttons"] == 0
    assert last["note"] == "ended"
    notice = [b for b in describe(wb) if b["kind"] == "oi-notice"][-1]["text"]
    assert "turn ended" in notice and "Python state was reset" in notice
    themed_shots(wb, "proposal-ended-by-reload")


def status(wb: Workbench) -> dict[str, Any]:
    return dict(wb("chatEval", expression="""(() => ({
        hidden: document.getElementById('oi-status').hidden,
        text: document.getElementById('oi-status-text').textContent,
        stop: !document.getElementById('oi-stop').hidden,
        // every Stop a user can see in the view (Send turns into Stop while a turn runs)
        stops: [...document.querySelectorAll('button')].filter((b) =>
            b.getClientRects().length > 0 && getComputedStyle(b).visibility !== 'hidden'
            && b.textContent.trim() === 'Stop').length,
    }))()"""))


def test_status_line_while_waiting_and_running(vscode: tuple[Workbench, Path],
                                               model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "import time\nstart = time.time()\n"
                                   "while time.time() - start < 10:\n    pass\nprint('busy done')"),
                 ms.text("Busy."))
    wb("chatSend", text="keep the CPU busy")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    time.sleep(0.5)
    waiting = status(wb)
    assert not waiting["hidden"] and "waits for you" in waiting["text"]
    assert "thinking" not in waiting["text"] and not waiting["stop"]
    themed_shots(wb, "status-waiting")
    wb.answer("run")
    seen: list[str] = []
    figures = re.compile(r"^python · \d+ s · \d+% CPU · \d+ MB$")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = status(wb)
        if now["hidden"]:
            break
        seen.append(now["text"])
        assert now["text"].strip(), f"the status went blank after {seen}"
        if "waits for you" in now["text"] and not any(figures.match(s) for s in seen):
            time.sleep(0.1)  # the click on Run is not through yet: nothing runs
            continue
        assert now["stops"] == 1, f"{now['stops']} Stop buttons in the view while {now['text']}"
        if figures.match(now["text"]) and not any(figures.match(s) for s in seen[:-1]):
            themed_shots(wb, "status-running")
        time.sleep(0.4)
    assert any(figures.match(s) for s in seen), seen
    wb("chatWait", selector=".oi-assistant", hasText="Busy.")
    settle(wb)


def send_state(wb: Workbench) -> dict[str, Any]:
    return dict(wb("chatEval", expression="""(() => ({
        send: document.getElementById('oi-send').textContent,
        disabled: document.getElementById('oi-input').disabled,
    }))()"""))


def test_send_is_stop_while_streaming_and_feedback_skips(vscode: tuple[Workbench, Path],
                                                         model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.text("word " * 60, pieces=30, delay=0.3))
    wb("chatSend", text="talk slowly")
    wb("chatWait", selector="#oi-send", hasText="Stop")
    assert send_state(wb) == {"send": "Stop", "disabled": False}
    themed_shots(wb, "send-is-stop")
    wb("chatClick", selector="#oi-send")
    wb("chatWait", selector=".oi-notice", hasText="Stopped.")
    settle(wb)
    assert send_state(wb)["send"] == "Send"
    # While code runs the input is disabled.
    model.script(ms.tool("python", "import time\ntime.sleep(6)\nprint('slept')"), ms.text("Slept."))
    wb("chatSend", text="sleep a little")
    wb.answer("run")
    wb("chatWait", selector="#oi-input[disabled]", state="attached")
    wb.wait_output("slept")
    wb("chatWait", selector=".oi-assistant", hasText="Slept.")
    settle(wb)
    assert send_state(wb) == {"send": "Send", "disabled": False}
    # Sending while a proposal waits skips it with the message as feedback, in plain words.
    model.script(ms.tool("python", "print('not this')"), ms.text("Understood, another way."))
    wb("chatSend", text="propose something")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    wb("chatSend", text="no, do it another way")
    wb("chatWait", selector=".oi-notice", hasText="feedback")
    wb("chatWait", selector=".oi-assistant", hasText="Understood, another way.")
    settle(wb)
    shown = describe(wb)
    notice = [b for b in shown if b["kind"] == "oi-notice"][-1]["text"]
    assert "Skipped the proposal" in notice and "oi/" not in notice
    assert next(b for b in shown if b["text"] == "print('not this')")["note"] == "skipped"
    assert not any("oi/" in b["text"] for b in shown if b["kind"] in ("oi-error", "oi-notice"))
    themed_shots(wb, "feedback-skips")


def test_magic_after_a_run_is_its_own_block(vscode: tuple[Workbench, Path],
                                            model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "print('before the magic')"), ms.text("Printed."))
    wb("chatSend", text="print before")
    wb.answer("run")
    wb.wait_output("before the magic")
    wb("chatWait", selector=".oi-assistant", hasText="Printed.")
    settle(wb)
    wb("chatSend", text="%help")
    wb("chatWait", selector=".oi-magic pre", hasText="Magic commands")
    settle(wb)
    shown = describe(wb)
    ran = [b for b in shown if b["kind"] == "oi-code"][-1]
    assert ran["output"] == "before the magic\n"
    assert shown[-1]["kind"] == "oi-magic" and "%reset" in shown[-1]["output"]
    wrap = wb("chatEval", expression="""(() => {
        const pre = [...document.querySelectorAll('.oi-magic pre')].pop();
        return getComputedStyle(pre).whiteSpace;
    })()""")
    assert wrap == "pre"
    themed_shots(wb, "magic-help")


def title_stop(wb: Workbench) -> int:
    return int(wb("evaluate", expression="""document.querySelectorAll(
        '.part.sidebar .title-actions .action-label[aria-label^="Stop"]').length"""))


def test_title_bar_stop_only_while_busy(vscode: tuple[Workbench, Path],
                                        model: ModelServer) -> None:
    wb, _ = vscode
    open_chat(wb)
    settle(wb)
    wb("wait", selector=".part.sidebar .title-actions .action-label")  # Reset is there
    assert title_stop(wb) == 0
    model.script(ms.tool("python", "import time\ntime.sleep(5)\nprint('woke')"), ms.text("Woke."))
    wb("chatSend", text="nap")
    wb.answer("run")
    wb("wait", selector='.part.sidebar .title-actions .action-label[aria-label^="Stop"]')
    themed_shots(wb, "title-stop-running")
    wb.wait_output("woke")
    wb("chatWait", selector=".oi-assistant", hasText="Woke.")
    settle(wb)
    deadline = time.monotonic() + 10
    while title_stop(wb) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert title_stop(wb) == 0


LOOKS = """(() => {
    const last = (sel) => [...document.querySelectorAll(sel)].pop();
    const style = (e) => getComputedStyle(e);
    const keyword = last('.oi-assistant pre code .hljs-keyword');
    const code = last('.oi-assistant pre code');
    return {
        keyword: keyword ? style(keyword).color : null,
        text: style(code).color,
        cell: style(last('.oi-assistant td')).borderTopWidth,
        quote: style(last('.oi-assistant blockquote')).borderLeftWidth,
        skip: style(last('.oi-actions .oi-skip')).backgroundColor,
        skipBorder: style(last('.oi-actions .oi-skip')).borderTopStyle,
        page: style(document.body).backgroundColor,
        // inside a code block nothing has a box of its own (the inline `code` style would
        // paint one behind every line)
        boxed: [...document.querySelectorAll('.oi-assistant pre code, .oi-assistant pre code span,'
            + ' .oi-source code, .oi-source code span')]
            .map((e) => style(e).backgroundColor).filter((c) => c !== 'rgba(0, 0, 0, 0)'),
    };
})()"""


def test_code_markdown_and_buttons_in_both_themes(vscode: tuple[Workbench, Path],
                                                  model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "print('styled')", say=(
        "Here:\n\n```python\ndef total(xs):\n"
        "    return sum(x for x in xs if x is not None)\n```\n\n"
        "| name | value |\n|---|---|\n| a | 1 |\n| b | 2 |\n\n> a quoted line\n\n")),
        ms.text("Done."))
    wb("chatSend", text="show me styles")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    for label in THEMES:
        set_theme(wb, label)
        looks = wb("chatEval", expression=LOOKS)
        # A colour, not the text's grey: keywords stand out as they do in the editor.
        red, green, blue = (int(v) for v in re.findall(r"\d+", looks["keyword"])[:3])
        assert looks["keyword"] != looks["text"] and not red == green == blue, (label, looks)
        assert looks["cell"] != "0px" and looks["quote"] != "0px", (label, looks)
        assert looks["skip"] not in ("rgba(0, 0, 0, 0)", looks["page"]), (label, looks)
        assert looks["skipBorder"] == "solid", (label, looks)
        assert looks["boxed"] == [], (label, looks)
        SHOTS.mkdir(parents=True, exist_ok=True)
        wb("screenshot", path=str(SHOTS / f"styles-{label}.png"))
    wb.answer("skip")
    wb("chatWait", selector=".oi-assistant", hasText="Done.")
    settle(wb)


RISK = """(() => {
    const box = [...document.querySelectorAll('.oi-proposal')].pop();
    const run = box.querySelector('.oi-actions .oi-run');
    const primary = document.createElement('button');
    document.body.append(primary);
    const looks = {
        risk: box.querySelector('.oi-risk')?.textContent ?? null,
        riskColor: box.querySelector('.oi-risk')
            ? getComputedStyle(box.querySelector('.oi-risk')).color : null,
        text: getComputedStyle(document.body).color,
        run: run?.textContent ?? null,
        runPrimary: run ? getComputedStyle(run).backgroundColor
            === getComputedStyle(primary).backgroundColor : null,
        buttons: [...box.querySelectorAll('.oi-actions button')].map((b) => b.textContent),
    };
    primary.remove();
    return looks;
})()"""


def test_risk_levels_and_a_second_question_for_high(vscode: tuple[Workbench, Path],
                                                    model: ModelServer) -> None:
    wb, workspace = vscode
    marker = workspace / "risky-ran.txt"
    model.script(ms.tool("python", "print('harmless')"), ms.text("Low done."))
    wb("chatSend", text="something harmless")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    low = wb("chatEval", expression=RISK)
    assert low["risk"] == "Risk: low" and low["runPrimary"] and low["run"] == "Run"
    wb.answer("run")
    wb("chatWait", selector=".oi-assistant", hasText="Low done.")
    settle(wb)
    model.script(ms.tool("shell", f"sudo -n true; echo ran > {marker}"), ms.text("High done."))
    wb("chatSend", text="something risky")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    high = wb("chatEval", expression=RISK)
    assert high["risk"].startswith("⚠ Risk: high") and "sudo" in high["risk"]
    assert high["riskColor"] != high["text"] and not high["runPrimary"]
    assert "Always" not in " ".join(high["buttons"])
    themed_shots(wb, "risk-high")
    wb("chatClick", selector=".oi-actions .oi-run")
    wb("chatWait", selector=".oi-risk-confirm", hasText="Really run it?")
    assert not marker.exists()
    themed_shots(wb, "risk-high-confirm")
    wb("chatClick", selector=".oi-actions .oi-cancel")
    wb("chatClick", selector=".oi-actions .oi-run")
    wb("chatClick", selector=".oi-actions .oi-run-anyway")
    wb("chatWait", selector=".oi-assistant", hasText="High done.")
    settle(wb)
    assert marker.read_text().strip() == "ran"


def test_code_and_output_actions(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, _ = vscode
    code = IMAGE_CODE + "\nprint('line two')\nprint('line three')"
    model.script(ms.tool("python", code), ms.text("Shown."))
    wb("chatSend", text="draw and count")
    wb.answer("run")
    wb("chatWait", selector=".oi-assistant", hasText="Shown.")
    settle(wb)
    summary = wb("chatEval", expression="""[...document.querySelectorAll(
        '.oi-code details.oi-output summary')].pop().textContent""")
    assert "3 lines" in summary
    wb("openFile", name="numbers.py")
    wb("keys", keys=["Control+End", "Enter"])
    wb("chatClick", selector=".oi-code .oi-insert")
    wb("wait", selector=".monaco-editor .view-lines", hasText="line three")
    wb("chatClick", selector=".oi-code .oi-open")
    wb("wait", selector=".tab", hasText="Untitled")
    wb("wait", selector=".monaco-editor .view-lines", hasText="IPython.display")
    themed_shots(wb, "code-and-output-actions")
    wb("chatClick", selector=".oi-code .oi-open-image")
    wb("wait", selector=".tab.active", hasText=".png")
    # The image preview keeps the keyboard (a webview): close it so the next scenario's keys
    # reach the workbench.
    wb("click", selector=".tab.active .tab-actions .action-label")
    wb("wait", selector=".tab.active", hasText="Untitled")


RUN_EDITED = ".editor-actions .action-label[aria-label^='Run edited']"


def test_edit_in_an_editor_tab(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, _ = vscode
    # Untitled tabs an earlier scenario left (Open in a new editor) are not this one's.
    left = wb("evaluate", expression=UNTITLED_TABS)
    model.script(ms.tool("python", "print('as proposed')"), ms.text("Ran your version."))
    wb("chatSend", text="print, I will edit it")
    wb.answer("edit")
    wb("wait", selector=".tab.active", hasText="Untitled")
    wb("wait", selector=RUN_EDITED)  # the tab's title bar has Run edited
    wb("chatWait", selector=".oi-edit-hint", hasText="editor tab")
    themed_shots(wb, "edit-in-editor-tab")
    wb("click", selector=".monaco-editor .view-lines")
    wb("keys", keys=["Control+a", "Delete"])
    wb("insertText", text="print('from the tab', 6 * 7)")
    wb("click", selector=RUN_EDITED)
    wb.wait_output("from the tab 42")
    wb("chatWait", selector=".oi-assistant", hasText="Ran your version.")
    settle(wb)
    last = [b for b in describe(wb) if b["kind"] == "oi-code"][-1]
    assert last["text"] == "print('from the tab', 6 * 7)" and last["note"] == "ran, edited"
    # The tab is gone, and a file's editor has no Run edited (the when-clause).
    assert wb("evaluate", expression=UNTITLED_TABS) == left
    wb("openFile", name="numbers.py")
    assert wb("evaluate", expression=f"document.querySelectorAll({RUN_EDITED!r}).length") == 0


THOUGHT = ("The user wants the files listed.\n\nI should run `ls` in the shell, then **say** "
           "how many there are.")
FOLD = """(() => [...document.querySelectorAll('#oi-log details.oi-thought')].map((d) => ({
    open: d.open, summary: d.querySelector('summary').textContent,
    text: d.querySelector('.oi-thought-body').textContent.trim(),
    bold: d.querySelectorAll('.oi-thought-body strong').length,
    before: d.nextElementSibling?.className ?? null })))()"""


def this_turn(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks from this test's message on."""
    start = max(i for i, b in enumerate(blocks)
                if b["kind"] == "oi-user" and b["text"] == "how many files are there?")
    return blocks[start:]


def test_reasoning_folds_above_the_answer_and_history_redraws_it(
        vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, _ = vscode
    # Overloaded once (the status line says when it retries), then reasoning that streams
    # slowly enough to be seen open, then the answer with the provider's usage.
    model.script(ms.error(503, headers={"retry-after": "2"}),
                 ms.text("There are **3** files.", reasoning=THOUGHT, pieces=12, delay=0.25,
                         usage={"prompt": 1200, "cached": 1000, "completion": 56,
                                "reasoning": 40}))
    wb("chatSend", text="how many files are there?")
    wb("chatWait", selector="#oi-status-text", hasText="retrying in 2 s (retry 1 of 3)")
    wb("screenshot", path=str(SHOTS / "reasoning-retrying.png"))
    wb("chatWait", selector="details.oi-thought.oi-thinking summary", hasText="Thinking…")
    wb("chatClick", selector="details.oi-thought summary")  # opened while it streams
    wb("screenshot", path=str(SHOTS / "reasoning-streaming-open.png"))
    wb("chatClick", selector="details.oi-thought summary")  # and closed again
    wb("chatWait", selector=".oi-assistant", hasText="There are 3 files.")
    settle(wb)
    [live] = wb("chatEval", expression=FOLD)
    assert live["text"].startswith("The user wants the files listed.")
    assert "I should run ls in the shell" in live["text"]
    assert live["before"] == "oi-assistant oi-md"  # above its answer
    assert (live["open"], live["summary"], live["bold"]) == (False, "Thought", 1)
    assert "<think>" not in str(describe(wb))
    # This turn's line: the view keeps the earlier tests' turns above it.
    usage = wb("chatEval", expression="[...document.querySelectorAll('.oi-usage')]"
                                      ".pop()?.textContent")
    assert "1,200 in, 1,000 cached; 56 out, 40 reasoning" in usage
    shown = this_turn(describe(wb))
    themed_shots(wb, "reasoning-folded")

    wb("reload")  # a new oi-lsp: the view is drawn from oi/history
    open_chat(wb)
    wb("chatWait", selector="details.oi-thought")
    wb("chatWait", selector=".oi-assistant", hasText="There are 3 files.")
    assert wb("chatEval", expression=FOLD) == [live]
    assert this_turn(describe(wb)) == shown  # the earlier tests' turns have their own checks
    wb("chatClick", selector="details.oi-thought summary")
    themed_shots(wb, "reasoning-history-open")


SERVER_FILESYSTEM = (ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol"
                     / "server-filesystem" / "dist" / "index.js")
MCP_CODE = """\
from oi_mcp import filesystem
listing = filesystem.list_directory(path={folder!r})["content"].splitlines()
filesystem.write_file(path={notes!r}, content="# Notes\\n\\n" + "\\n".join(listing) + "\\n")
print(f"{{len(listing)}} entries listed, notes.md written")
"""
# The toasts the workbench shows: their text and buttons.
TOASTS = """[...document.querySelectorAll('.notification-toast')].map((t) => ({
    message: t.querySelector('.notification-list-item-message')?.textContent ?? '',
    buttons: [...t.querySelectorAll('.monaco-button')].map((b) => b.textContent.trim()),
    severity: t.querySelector('.notification-list-item-icon')?.className ?? '' }))"""
# A warning toast hides itself after 12 s unless the pointer is on it (VS Code's
# notificationsToasts.ts): a reader's pointer, so a slow machine still finds it to click.
HOLD_TOAST = """[...document.querySelectorAll('.notification-toast')]
    .filter((t) => t.textContent.includes('filesystem.write_file'))
    .forEach((t) => t.dispatchEvent(new MouseEvent('mouseover', { bubbles: true })))"""
# The last code block's output (an earlier run's has the same lines).
LAST_OUTPUT = ".oi-code >> nth=-1 >> details.oi-output pre"
# The last output's lines as the view draws them: those in a tool-call span, the others, and
# whether each is inside the visible part of the log, and inside the box's width (wrapped).
TOOL_LINES = """(() => {
    const pre = [...document.querySelectorAll('.oi-code details.oi-output pre')].pop();
    const log = document.getElementById('oi-log').getBoundingClientRect();
    const seen = (e) => { const r = e.getBoundingClientRect();
        return r.height > 0 && r.top >= log.top && r.bottom <= log.bottom; };
    const spans = [...pre.querySelectorAll('.oi-tool-call')];
    const plain = [...pre.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE)
        .map((n) => n.textContent).join('');
    const style = (e) => getComputedStyle(e);
    // What the text is drawn on: the first box that paints a background, else the side bar
    // the view is in (the webview's own page is transparent).
    const behind = (e) => {
        for (; e; e = e.parentElement) {
            const colour = style(e).backgroundColor;
            if (colour !== 'rgba(0, 0, 0, 0)') return colour;
        }
        const probe = document.body.appendChild(document.createElement('i'));
        probe.style.color = 'var(--vscode-sideBar-background)';
        const colour = style(probe).color;
        probe.remove();
        return colour;
    };
    return {
        text: pre.textContent,
        tool: spans.map((s) => s.textContent).join(''),
        plain,
        shown: seen(pre) && spans.every(seen),
        inside: spans.every((s) => [...s.getClientRects()].every(
            (r) => r.right <= pre.getBoundingClientRect().right)),
        toolStyle: spans[0] ? { font: style(spans[0]).fontStyle, color: style(spans[0]).color,
                                opacity: style(spans[0]).opacity } : null,
        plainStyle: { font: style(pre).fontStyle, color: style(pre).color },
        background: behind(pre),
    };
})()"""
# The header draws the model again once the extension pushed changed `oi` settings to oi-lsp
# (extension.ts: pushSettings, then showModel asks the server): the event a change waits on.
WATCH_MODEL = """(() => { delete document.body.dataset.modelShown;
    new MutationObserver((_, seen) => { document.body.dataset.modelShown = ''; seen.disconnect(); })
        .observe(document.getElementById('oi-model'), { childList: true }); })()"""


def channels(css: str) -> list[float]:
    """The red, green and blue of an rgb()/rgba() colour, 0 to 1."""
    return [int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3]]


def luminance(rgb: list[float]) -> float:
    """The relative luminance (WCAG) of sRGB channels."""
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str, opacity: float = 1.0) -> float:
    """WCAG contrast of text colour `a` (drawn at `opacity`) on background `b`: the browser
    blends the channels as they are (sRGB), then the blend is what the eye gets."""
    bg = channels(b)
    fg = [opacity * f + (1 - opacity) * g for f, g in zip(channels(a), bg, strict=True)]
    light, dark = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def edit_user_settings(wb: Workbench, settings: Path, values: dict[str, Any]) -> None:
    """The user's `settings` (settings.json) made `values` in VS Code's editor, and saved, as a
    user does; until oi-lsp has the change. Written from outside, the file would not count:
    code-server does not see changes under its user data folder (neither the theme nor an
    open editor of the file follows them), while a folder's .vscode/settings.json is seen."""
    wb("chatWait", selector="#oi-model")  # drawn a first time when the view opened
    wb("chatEval", expression=WATCH_MODEL)
    wb("command", title="Preferences: Open User Settings (JSON)")
    editor = ".monaco-editor[data-uri$='/User/settings.json']"
    wb("click", selector=f"{editor} .view-lines")
    wb("keys", keys=["Control+a", "Delete"])
    wb("insertText", text=json.dumps(values))  # one line: nothing auto-indented or -closed
    wb("keys", keys=["Control+s"])
    wb("chatWait", selector="body[data-model-shown]", state="attached", timeout=60000)
    assert json.loads(settings.read_text()) == values
    # It opened in a modal editor (workbench.editor.useModal), above the command palette.
    wb("click", selector=".modal-editor-header .codicon-close")
    wb("wait", selector=editor, state="detached")


def consent(wb: Workbench) -> dict[str, Any]:
    """The notification that asks about filesystem.write_file, once it is drawn in full."""
    toast = ".notification-toast.notification-fade-in-done"
    wb("wait", selector=toast, hasText="filesystem.write_file", timeout=90000)
    wb("eval", expression=HOLD_TOAST)
    # The question follows the output printed before the call (the server asks once it
    # settled): the call's line is there, waiting for its time.
    wb("chatWait", selector=f"{LAST_OUTPUT} .oi-tool-call", hasText="filesystem.write_file")
    [asked] = [t for t in wb("eval", expression=TOASTS) if "filesystem.write_file" in t["message"]]
    return dict(asked)


@pytest.mark.skipif(not SERVER_FILESYSTEM.is_file(),
                    reason="scripts/setup.d/65-mcp-servers did not install the MCP servers")
def test_mcp_servers_as_code_ask_before_a_destructive_call_and_show_their_calls(
        vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    """oi.mcpServers, added to the user's settings.json, names npm's server-filesystem on the
    workspace: the proposed Python lists the folder and writes notes.md with it; the write (a
    tool its server marks destructive) asks in a notification with Allow / Deny. Denied,
    nothing is written; allowed, notes.md is, and the output shows a quieter ⚙ line per call
    above the program's own."""
    wb, workspace = vscode
    settings = workspace.parent / "ud" / "User" / "settings.json"
    notes = workspace / "notes.md"
    code = MCP_CODE.format(folder=str(workspace), notes=str(notes))
    servers = {"filesystem": {"command": "node", "args": [str(SERVER_FILESYSTEM), str(workspace)]}}
    answers = {"Deny": "You said no: notes.md is not written.",
               "Allow": "Listed the workspace and wrote **notes.md**."}
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        edit_user_settings(wb, settings,
                           {**json.loads(settings.read_text()), "oi.mcpServers": servers})
        for label, answer in (("light", "Deny"), ("dark", "Allow")):
            set_theme(wb, label)  # before the question: the picker's Escape would hide it
            wb("chatWait", selector=f"body.vscode-{label}", state="attached")  # its colours
            model.script(ms.tool("python", code), ms.text(answers[answer]))
            wb("chatSend", text="list the workspace and note what is in it in notes.md")
            wb.answer("run")
            asked = consent(wb)
            assert asked["message"].startswith(
                "oi-lsp: The running code calls the MCP tool filesystem.write_file, which its "
                f'server marks destructive, with {{"path": "{notes}", "content": "# Notes'), asked
            assert asked["message"].endswith("Allow this call?"), asked
            assert asked["buttons"] == ["Allow", "Deny"] and "warning" in asked["severity"]
            assert not notes.exists()  # the call waits for the answer
            wb("screenshot", path=str(SHOTS / f"mcp-consent-{label}.png"))
            wb("click", selector=".notification-toast .monaco-button", hasText=answer)
            wb("chatWait", selector=".oi-assistant", hasText=answers[answer].replace("**", ""))
            settle(wb)
            assert not [t for t in wb("eval", expression=TOASTS)
                        if "filesystem.write_file" in t["message"]]
            output = wb("chatEval", expression=TOOL_LINES)["text"]
            if answer == "Deny":
                assert re.search(r"⚙ filesystem\.write_file\(.+\) · CallDenied after \d", output)
                assert output.count("CallDenied") >= 2 and not notes.exists(), output  # raised
        written = notes.read_text()
        assert written.startswith("# Notes\n\n") and "[FILE] numbers.py\n" in written
        # The model was told of the server's tools.
        assert "`oi_mcp.filesystem`" in model.requests[0]["messages"][0]["content"]

        for label in ("dark", "light"):
            set_theme(wb, label)
            wb("chatWait", selector=f"body.vscode-{label}", state="attached")  # its colours
            lines = wb("chatEval", expression=TOOL_LINES)
            tool = lines["tool"].splitlines()
            assert len(tool) == 2, lines
            # (an argument longer than 40 characters is cut: '/tmp/pytest-of-…')
            took = r"\) · \d+\.\d\d s"
            assert re.fullmatch(r"⚙ filesystem\.list_directory\(path='/.+" + took, tool[0])
            assert re.fullmatch(r"⚙ filesystem\.write_file\(path='/.+, content='# Notes.+" + took,
                                tool[1]), tool
            entries = written.count("\n") - 2
            assert lines["plain"] == f"{entries} entries listed, notes.md written\n", lines
            assert lines["text"] == lines["tool"] + lines["plain"]  # the text as it ran
            assert lines["shown"] and lines["inside"], lines
            # Quieter than the program's lines, still readable (WCAG AA for small text).
            look, plain, background = lines["toolStyle"], lines["plainStyle"], lines["background"]
            assert look["font"] == "italic" and plain["font"] == "normal", lines
            readable = contrast(look["color"], background, float(look["opacity"]))
            assert 4.5 <= readable < contrast(plain["color"], background), (
                label, readable, look, plain, background)
            wb("screenshot", path=str(SHOTS / f"mcp-output-{label}.png"))
    finally:
        values = json.loads(settings.read_text())  # with the theme VS Code wrote since
        if values.pop("oi.mcpServers", None) is not None:  # taken back the same way, so the
            edit_user_settings(wb, settings, values)  # next scenarios run without the server
        notes.unlink(missing_ok=True)


# Where the first message of each kind is on the view's screen, and the earlier line's text.
PLACES = """(() => {
    const log = document.getElementById('oi-log');
    const users = [...log.querySelectorAll('.oi-user')];
    const earlier = log.querySelector('.oi-earlier');
    return { users: users.length, first: users[0]?.textContent.trim() ?? null,
             earlier: earlier ? earlier.textContent : null,
             scrollTop: log.scrollTop,
             tops: Object.fromEntries(users.map((u) => [u.textContent.trim(),
                 Math.round(u.getBoundingClientRect().top)])) };
})()"""


def test_a_long_conversation_opens_at_its_end_and_scrolls_back_page_by_page(
        vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    """50,000 messages: the view draws the last page (oi/history's limit) under a line saying
    how many are earlier; scrolled to the top, the page before comes above without moving
    what the view showed. Last in the module: the conversation stays open after it."""
    wb, workspace = vscode
    uri, conversation = to_uri(workspace), "20261207-000000-abcdef"
    store = Store(workspace.parent / "data")
    messages = [Message(role=role, type="message", turn_id=f"t{i}",
                        content=f"question {i}" if role == "user" else f"Answer **{i}**.")
                for i in range(25_000) for role in ("user", "assistant")]
    store.write(uri, conversation, Batch(1.0, "question 0", len(messages), whole=messages))
    store.set_current(uri, conversation)  # what the next server opens
    wb("reload")
    open_chat(wb)
    wb("chatWait", selector=".oi-assistant", hasText="Answer 24999.")
    opened = wb("chatEval", expression=PLACES)
    assert opened["users"] == 100 and opened["first"] == "question 24900"
    assert opened["earlier"] == "▲ 49,800 earlier messages: scroll up to show them"
    themed_shots(wb, "long-conversation-end")
    wb("chatEval", expression="document.getElementById('oi-log').scrollTop = 0")
    wb("screenshot", path=str(SHOTS / "long-conversation-loading.png"))
    wb("chatWait", selector=".oi-user", hasText="question 24800")
    after = wb("chatEval", expression=PLACES)
    assert after["users"] == 200 and after["first"] == "question 24800"
    assert after["earlier"] == "▲ 49,600 earlier messages: scroll up to show them"
    # What the view showed at the top stays where it was on the screen.
    assert abs(after["tops"]["question 24900"] - opened["tops"]["question 24900"]
               - opened["scrollTop"]) <= 2, (opened["scrollTop"], after["tops"]["question 24900"])
    themed_shots(wb, "long-conversation-earlier-page")
    for page in range(2, 4):  # two more pages, scrolled up to each time
        wb("chatEval", expression="document.getElementById('oi-log').scrollTop = 0")
        wb("chatWait", selector=".oi-user", hasText=f"question {24900 - 100 * page}")
    assert wb("chatEval", expression=PLACES)["users"] == 400


def test_conversations_searched_as_you_type(vscode: tuple[Workbench, Path],
                                           model: ModelServer) -> None:
    """Typed in Conversations, the words are searched in what was said in every
    conversation (oi/sessions' query): the matches, with the words around them; one opens."""
    wb, workspace = vscode
    Store(workspace.parent / "data").write(
        to_uri(workspace), "20261207-000000-feed01", Batch(2.0, "make the report", 2, whole=[
            Message(role="user", type="message", content="make the report"),
            Message(role="assistant", type="message",
                    content="The quarterly sales grew by a tenth.")]))
    wb("command", title="Open Interpreter: Conversations")
    wb("wait", selector=".quick-input-list .monaco-list-row", hasText="New Conversation")
    wb("typeQuick", text="quarterly sales")
    wb("wait", selector=".quick-input-list .monaco-list-row",
       hasText="The [quarterly] [sales] grew")
    SHOTS.mkdir(parents=True, exist_ok=True)
    wb("screenshot", path=str(SHOTS / "conversations-search.png"))  # the theme of the last test
    wb("click", selector=".quick-input-list .monaco-list-row", hasText="make the report")
    wb("chatWait", selector=".oi-assistant", hasText="The quarterly sales grew by a tenth.")
    themed_shots(wb, "conversations-search-opened")


