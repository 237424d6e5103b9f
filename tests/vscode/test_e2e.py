"""The extension end to end in a real VS Code: code-server (VS Code 1.139) in headless Chromium,
driven by playwright-core (driver.mjs), with the packaged .vsix installed, the real oi-lsp of this
checkout (oi.serverPath, PYTHONPATH) and the scripted model server. One code-server serves all
scenarios of the module; each scenario reads only what it added to the conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.vscode.workbench import Workbench, auth, last_user_message

pytestmark = pytest.mark.timeout(1800)  # the first scenario starts the stack

SECRET_KEY = "sk-from-secret-storage"


def test_streamed_markdown(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.text("# Streamed title\n\nSome **bold** words and a list:\n\n- one\n- two\n",
                         pieces=8, delay=0.05))
    wb("chatSend", text="say something in markdown")
    wb("chatWait", selector=".oi-assistant h1", hasText="Streamed title")
    wb("chatWait", selector=".oi-assistant li", hasText="two")
    wb.wait_idle()
    wb.shot("markdown")
    view = wb.snapshot()
    assert view["users"][-1] == "say something in markdown"
    assert "<strong>bold</strong>" in view["assistantHtml"][-1]
    assert view["assistantHtml"][-1].count("<li>") == 2
    assert last_user_message(model.requests[0]) == "say something in markdown"
    assert auth(model.headers[0]) == "Bearer sk-from-env"


def test_run_shows_output_and_the_repl_persists(vscode: tuple[Workbench, Path],
                                                 model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "x = 6 * 7\nprint('x is', x)"), ms.text("x is set."),
                 ms.tool("python", "print('x + 1 =', x + 1)"), ms.text("Used x."))
    wb("chatSend", text="set x")
    wb("chatWait", selector=".oi-proposal .oi-actions")
    assert [b for b in wb("chatEval", expression="""[...document.querySelectorAll(
        '.oi-actions')].pop().innerText""").split("\n") if b] == [
        "Run", "Skip", "Edit", "Always this code"]  # trusted (trust is off in these tests)
    wb.shot("proposal")
    wb.answer("run")
    wb.wait_output("x is 42")
    wb("chatWait", selector=".oi-assistant", hasText="x is set.")
    wb.wait_idle()
    wb("chatSend", text="use x")
    wb.answer("run")
    wb.wait_output("x + 1 = 43")
    wb("chatWait", selector=".oi-assistant", hasText="Used x.")
    wb.wait_idle()
    assert tool_results(model.requests[3])[-1].strip().endswith("x + 1 = 43")
    wb.shot("run")


def test_skip_runs_nothing(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, workspace = vscode
    marker = workspace / "skipped-side-effect.txt"
    model.script(ms.tool("python", f"open({str(marker)!r}, 'w').write('ran')"),
                 ms.text("Fine, I will not."))
    wb("chatSend", text="write a file")
    wb.answer("skip")
    wb("chatWait", selector=".oi-assistant", hasText="Fine, I will not.")
    wb.wait_idle()
    assert not marker.exists()
    assert wb.snapshot()["codes"][-1]["note"] == "skipped"
    assert "declined" in tool_results(model.requests[1])[-1].lower()


def test_edit_runs_the_edited_code(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "print('as proposed')"), ms.text("Saw the edit."))
    wb("chatSend", text="print something")
    wb.edit_proposal("print('edited', 3 * 3)")
    wb.wait_output("edited 9")
    wb("chatWait", selector=".oi-assistant", hasText="Saw the edit.")
    wb.wait_idle()
    last = wb.snapshot()["codes"][-1]
    assert last["code"] == "print('edited', 3 * 3)" and last["output"] == "edited 9\n"
    result = tool_results(model.requests[1])[-1]
    assert "edited 9" in result and "as proposed" not in result
    wb.shot("edit")


def test_run_selection_as_instruction(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, workspace = vscode
    model.script(ms.text("That sums the numbers."))
    wb("openFile", name="numbers.py")
    wb("dragSelect", **{"from": 1, "to": 2})
    wb("command", title="Open Interpreter: Run Selection as Instruction")
    wb("chatWait", selector=".oi-assistant", hasText="That sums the numbers.")
    wb.wait_idle()
    # The selection is the message; the file, its lines and language come as context.
    sent = last_user_message(model.requests[0])
    selected, _, context = sent.partition("\n\nContext from the editor:\n")
    text = (workspace / "numbers.py").read_text()
    assert selected.strip() and selected in text
    first = text[:text.index(selected)].count("\n") + 1
    last = first + selected.rstrip("\n").count("\n")
    assert context == f"File: {workspace / 'numbers.py'} (lines {first}-{last}), language: python"
    wb.shot("selection")


def test_stop_during_a_long_run_then_run_again(vscode: tuple[Workbench, Path],
                                               model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "import time\nprint('sleeping', flush=True)\ntime.sleep(120)"),
                 ms.tool("python", "print('after the stop')"), ms.text("Ran again."))
    wb("chatSend", text="sleep for a while")
    wb.answer("run")
    wb.wait_output("sleeping")
    wb.shot("running")
    wb("click", selector=".statusbar-item", hasText="Stop")  # the status bar's Stop
    wb("chatWait", selector=".oi-notice", hasText="Stopped.")
    wb.wait_idle()
    wb("chatSend", text="run again")
    wb.answer("run")
    wb.wait_output("after the stop")
    wb("chatWait", selector=".oi-assistant", hasText="Ran again.")
    wb.wait_idle()


def test_script_and_onerror_in_model_text_are_inert(vscode: tuple[Workbench, Path],
                                                    model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.text('Look: <script>window.__pwned = "script"</script>\n\n'
                         '<img src="x" onerror="window.__pwned = \'onerror\'"> **safe**'))
    wb("chatSend", text="be evil")
    wb("chatWait", selector=".oi-assistant strong", hasText="safe")
    wb.wait_idle()
    view = wb.snapshot()
    assert "Look:" in view["assistantHtml"][-1] and "<img" in view["assistantHtml"][-1]
    assert "onerror" not in view["assistantHtml"][-1] and "<script" not in view["assistantHtml"][-1]
    assert view["scripts"] == 0 and view["handlers"] == 0 and view["pwned"] is None


def test_set_api_key_reaches_the_server_not_settings(vscode: tuple[Workbench, Path],
                                                     model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.text("Keyed."))
    wb("command", title="Open Interpreter: Set API Key")
    wb("quickInput", text=SECRET_KEY, title="Open Interpreter: API key")
    # Said once the secret is stored and the settings notification has gone to the server.
    wb("wait", selector=".notification-toast", hasText="API key saved")
    wb("command", title="Open Interpreter: Open Chat")
    wb("chatSend", text="who am I")
    wb("chatWait", selector=".oi-assistant", hasText="Keyed.")
    wb.wait_idle()
    assert auth(model.headers[0]) == f"Bearer {SECRET_KEY}"


def test_reload_shows_the_conversation_from_history(vscode: tuple[Workbench, Path],
                                                    model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.text("Remember the **kiwi**."))
    wb("chatSend", text="a fruit please")
    wb("chatWait", selector=".oi-assistant strong", hasText="kiwi")
    wb.wait_idle()
    wb("reload")
    wb("command", title="Open Interpreter: Open Chat")
    wb("chatWait", selector=".oi-assistant strong", hasText="kiwi")
    view = wb.snapshot()
    assert view["users"][-1] == "a fruit please"
    assert len(view["users"]) > 1  # the earlier scenarios' messages are back too
    wb.shot("reloaded")


def test_program_input_in_an_input_box(vscode: tuple[Workbench, Path],
                                       model: ModelServer) -> None:
    wb, _ = vscode
    model.script(ms.tool("python", "import getpass\nname = input('name? ')\n"
                                   "pw = getpass.getpass('Password: ')\n"
                                   "print('hello', name, len(pw))"),
                 ms.text("Greeted."))
    wb("chatSend", text="greet me")
    wb.answer("run")
    title = "Open Interpreter: the program asks for input"
    wb("quickInput", text="Ada", title=title)
    wb("wait", selector=".quick-input-widget .quick-input-title", hasText=title)
    wb("wait", selector=".quick-input-widget input[type=password]")  # masked
    wb.shot("input-password")
    wb("quickInput", text="pw-secret", title=title)
    wb.wait_output("hello Ada 9")
    wb("chatWait", selector=".oi-assistant", hasText="Greeted.")
    wb.wait_idle()
    wb.shot("input-answered")
    assert "hello Ada 9" in tool_results(model.requests[1])[-1]
    assert "pw-secret" not in json.dumps(model.requests)


def test_a_stop_closes_the_input_box(vscode: tuple[Workbench, Path], model: ModelServer) -> None:
    """The run that asked ends (Stop): its input box goes away instead of waiting for nobody."""
    wb, _ = vscode
    model.script(ms.tool("python", "name = input('your name? ')\nprint('hi', name)"))
    wb("chatSend", text="ask my name")
    wb.answer("run")
    title = "Open Interpreter: the program asks for input"
    wb("wait", selector=".quick-input-widget .quick-input-title", hasText=title)
    wb("click", selector=".statusbar-item", hasText="Stop")  # the status bar's Stop
    wb("chatWait", selector=".oi-notice", hasText="Stopped.")
    wb("wait", selector=".quick-input-widget .quick-input-title", hasText=title, state="hidden",
       timeout=10000)
    wb.wait_idle()
