"""The extension's own half of issue 18, end to end in code-server: a first-run user (no model,
no API key, a local model server found), errors with the button that fixes them, the model
picker, Open Chat's focus, a keybinding no default uses, Reset with confirmation and
Conversations, export, tokens and cost per turn. Each scenario saves screenshots in the light
and the dark default theme to test-artifacts/vsc-ext/."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.vscode.conftest import code_server
from tests.vscode.workbench import ARTIFACTS, EXT, Workbench, auth, last_user_message

pytestmark = pytest.mark.timeout(1800)  # the first scenario starts the stack

SHOTS = ARTIFACTS / "vsc-ext"
# The picker shows "Default Light Modern" and "Default Dark Modern" as these.
THEMES = {"light": ("Light Modern", "vs"), "dark": ("Dark Modern", "vs-dark")}
SECRET_KEY = "sk-first-run-key"
# The oi-lsp of the project's environment; PYTHONPATH (set by code_server) makes this
# checkout's code the one it runs.
OI_LSP = Path(sys.executable).with_name("oi-lsp")
# Nothing listens on the discard port: those presets are found down at once.
DOWN = "http://127.0.0.1:9"


def theme(wb: Workbench, variant: str, chat: bool = True) -> None:
    """Switch the colour theme with its picker (Ctrl+K Ctrl+T). Without the chat view, no
    Escape first either: it would close the notification to be shown."""
    name, css = THEMES[variant]
    wb("keys", keys=["Escape", "Control+k", "Control+t"] if chat else ["Control+k", "Control+t"])
    wb("wait", selector=".quick-input-list .monaco-list-row", hasText="Dark Modern")
    wb("quickInput", text=name)
    wb("wait", selector=f".monaco-workbench.{css}")
    if chat:  # the chat view repaints in the new colours
        wb("chatWait", selector=f"body.vscode-{variant}", state="attached")


def shots(wb: Workbench, name: str, setup: Callable[[], None] | None = None,
          chat: bool = True) -> None:
    """A screenshot in each theme; `setup` brings back what a theme change closes (a picker,
    a dialog) and is left open after the last one."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for variant in THEMES:
        if setup is not None:
            wb("keys", keys=["Escape"])
        theme(wb, variant, chat)
        if setup is not None:
            setup()
        time.sleep(0.5)  # the webview repaints in the new colours
        wb("screenshot", path=str(SHOTS / f"{name}-{variant}.png"))


def toasts(wb: Workbench, text: str) -> int:
    return int(wb("eval", expression=f"""[...document.querySelectorAll('.notification-toast')]
        .filter((t) => t.textContent.includes({json.dumps(text)})).length"""))


@pytest.fixture(scope="module")
def first_run(vscode_stack: Path, stack_env: dict[str, str], vsix: Path,
              model_server: ModelServer,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workbench, Path]]:
    """A new user: no model chosen and no API key anywhere; LM Studio's preset points at the
    scripted server (which lists `scripted`), the other local servers are down. The user's
    settings name the scripted server's address (as for a local OpenAI-compatible server)."""
    base = tmp_path_factory.mktemp("first-run")
    workspace = base / "project"
    workspace.mkdir()
    (workspace / "numbers.py").write_text("numbers = [3, 4, 5]\nprint(sum(numbers) * 1000)\n")
    presets = {"lmstudio": model_server.url, "ollama": DOWN, "llamafile": DOWN + "/v1",
               "jan": DOWN + "/v1"}
    with code_server(vscode_stack, stack_env, vsix, base / "cs", open_path=workspace,
                     settings={"oi.serverPath": str(OI_LSP), "oi.apiBase": model_server.url,
                               "workbench.colorTheme": "Default Dark Modern"},
                     extra_env={"OI_LSP_LOCAL_PRESETS": json.dumps(presets)},
                     drop_env=["OI_API_KEY", "OPENAI_API_KEY", "OI_MODEL"]) as wb:
        wb("command", title="Open Interpreter: Open Chat")
        wb("chatWait", selector="#oi-header:not([hidden])")
        yield wb, workspace


def folder_settings(workspace: Path) -> dict[str, object]:
    path = workspace / ".vscode" / "settings.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_first_run_welcome_says_what_to_do(first_run: tuple[Workbench, Path]) -> None:
    wb, _ = first_run
    wb("chatWait", selector=".oi-welcome")
    wb("chatWait", selector="#oi-model", hasText="Select a model")
    buttons = wb("chatEval", expression="""[...document.querySelectorAll(
        '.oi-welcome button')].map((b) => b.textContent)""")
    assert buttons == ["Select Model", "Set API Key", "Read the Docs"]
    shots(wb, "welcome")


def test_model_picker_lists_local_servers_and_sets_the_folder_model(
        first_run: tuple[Workbench, Path], model_server: ModelServer) -> None:
    wb, workspace = first_run

    def picker() -> None:
        wb("chatClick", selector=".oi-welcome button:text('Select Model')")
        wb("wait", selector=".quick-input-list .monaco-list-row", hasText="openai/scripted")

    shots(wb, "model-picker", picker)
    rows = wb("eval", expression="""[...document.querySelectorAll(
        '.quick-input-list .monaco-list-row')].map((r) => r.textContent)""")
    assert any("not running at http://127.0.0.1:9" in r for r in rows), rows  # one down, said
    assert not any("Error" in r for r in rows), rows  # plain words, no "ConnectError: ..."
    wb("click", selector=".quick-input-list .monaco-list-row", hasText="openai/scripted")
    wb("chatWait", selector="#oi-model", hasText="Model: openai/scripted")
    deadline = time.monotonic() + 20  # the two settings are written one after the other
    while folder_settings(workspace).get("oi.apiBase") is None and time.monotonic() < deadline:
        time.sleep(0.25)
    settings = folder_settings(workspace)
    assert settings["oi.model"] == "openai/scripted"
    assert settings["oi.apiBase"] == model_server.url
    wb("chatWait", selector=".oi-welcome-model", hasText="openai/scripted")


def test_no_key_error_offers_set_api_key_once(first_run: tuple[Workbench, Path],
                                              model: ModelServer) -> None:
    wb, _ = first_run
    model.script(ms.error(401, "Incorrect API key provided: `sk-placeholder`."),
                 ms.text("Keyed."))
    wb("chatSend", text="hello there")
    wb("chatWait", selector=".oi-error button.oi-error-action", hasText="Set API Key")
    kind, text = wb("chatEval", expression="""(() => {
        const box = [...document.querySelectorAll('.oi-error')].pop();
        return [box.dataset.errorKind, box.querySelector('.oi-error-text').textContent]; })()""")
    # A local server the user set no key for wants one: a missing key, not a refused one.
    assert kind == "noApiKey" and "API key" in text, (kind, text)
    assert "`" not in text and "litellm" not in text.lower() and "Error" not in text
    time.sleep(3)  # the server's own copy of the message would show by now
    assert toasts(wb, "API key") == 0  # said once: in the chat, with its button
    shots(wb, "error-no-key")
    wb("chatClick", selector=".oi-error-action")
    title = "Open Interpreter: API key"
    wb("wait", selector=".quick-input-widget .quick-input-title", hasText=title)
    wb("quickInput", text=SECRET_KEY, title=title)
    wb("wait", selector=".notification-toast", hasText="API key saved")
    wb("chatSend", text="and now?")
    wb("chatWait", selector=".oi-assistant", hasText="Keyed.")
    wb("chatWait", selector="#oi-status[hidden]", timeout=60000, state="attached")
    assert auth(model.headers[1]) == f"Bearer {SECRET_KEY}"


def test_tokens_and_cost_under_each_turn_and_in_the_header(
        first_run: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, workspace = first_run
    # A model litellm has a price for, served by the scripted server (the user's apiBase).
    wb("command", title="Open Interpreter: Select Model")
    wb("wait", selector=".quick-input-list .monaco-list-row", hasText="claude-3-5-sonnet-latest")
    wb("quickInput", text="openai/gpt-4o-mini")
    wb("chatWait", selector="#oi-model", hasText="Model: openai/gpt-4o-mini")
    deadline = time.monotonic() + 20
    while "oi.apiBase" in folder_settings(workspace) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert "oi.apiBase" not in folder_settings(workspace)  # the user's address applies again
    model.script(ms.text("A priced answer."))
    wb("chatSend", text="what does this cost")
    wb("chatWait", selector=".oi-assistant", hasText="A priced answer.")
    wb("chatWait", selector=".oi-usage")
    usage = wb("chatEval", expression="[...document.querySelectorAll('.oi-usage')].pop()"
                                      ".textContent")
    assert "tokens (" in usage and " in, " in usage and "$" in usage, usage
    wb("chatWait", selector="#oi-session-cost", hasText="Session: $")
    assert last_user_message(model.requests[0]) == "what does this cost"
    shots(wb, "usage")


def test_open_chat_puts_the_cursor_in_the_input(first_run: tuple[Workbench, Path]) -> None:
    wb, _ = first_run
    wb("openFile", name="numbers.py")  # the editor has the focus
    wb("command", title="Open Interpreter: Open Chat")
    deadline = time.monotonic() + 20
    while wb("chatEval", expression="document.hasFocus() && document.activeElement?.id") \
            != "oi-input":
        assert time.monotonic() < deadline, "the chat's input did not get the focus"
        time.sleep(0.25)


def test_the_keybinding_is_no_default_ones_and_runs_the_selection(
        first_run: tuple[Workbench, Path], model: ModelServer) -> None:
    wb, _ = first_run
    [binding] = json.loads((EXT / "package.json").read_text())["contributes"]["keybindings"]
    key = binding["key"]
    # VS Code's own list (with the extensions' keybindings): the key appears once, for us.
    wb("command", title="Preferences: Open Default Keyboard Shortcuts (JSON)")
    wb("wait", selector=".monaco-editor .view-lines", hasText="Override key bindings")
    wb("eval", expression="document.querySelector('.monaco-editor .view-lines').click()")
    wb("keys", keys=["Control+f"])
    wb("wait", selector=".find-widget.visible")
    quoted = json.dumps(json.dumps(key))  # "ctrl+alt+/" with its quotes, as the list has it
    wb("eval", expression=f"document.execCommand('insertText', false, {quoted})")
    wb("wait", selector=".find-widget .matchesCount", hasText="1 of 1")
    wb("wait", selector=".monaco-editor .view-line", hasText="oi.runSelectionAsInstruction")
    wb("keys", keys=["Escape"])
    wb("command", title="View: Close Editor")
    model.script(ms.text("That sums the numbers."))
    wb("openFile", name="numbers.py")
    wb("dragSelect", **{"from": 1, "to": 2})
    names = {"ctrl": "Control", "alt": "Alt", "shift": "Shift"}
    wb("keys", keys=["+".join(names.get(k, k) for k in key.split("+"))])
    wb("chatWait", selector=".oi-assistant", hasText="That sums the numbers.")
    assert "numbers = [3, 4, 5]" in last_user_message(model.requests[0])


def test_reset_asks_first_and_the_old_conversation_stays_reachable(
        first_run: tuple[Workbench, Path]) -> None:
    wb, _ = first_run
    wb("chatWait", selector="#oi-status[hidden]", timeout=60000, state="attached")
    wb("chatWait", selector=".oi-user", hasText="hello there")

    def confirm() -> None:
        wb("command", title="Open Interpreter: Reset Session")
        wb("wait", selector=".monaco-dialog-box", hasText="Reset the session?")

    shots(wb, "reset-confirm", confirm)
    dialog = wb("eval", expression="document.querySelector('.monaco-dialog-box').textContent")
    assert "Conversations" in dialog and "variables" in dialog
    wb("click", selector=".monaco-dialog-box .monaco-button", hasText="Reset")
    wb("chatWait", selector=".oi-welcome")
    assert wb("chatEval", expression="document.querySelectorAll('.oi-user').length") == 0

    def conversations() -> None:
        wb("command", title="Open Interpreter: Conversations")
        wb("wait", selector=".quick-input-list .monaco-list-row", hasText="hello there")

    shots(wb, "conversations", conversations)
    wb("click", selector=".quick-input-list .monaco-list-row", hasText="hello there")
    wb("chatWait", selector=".oi-user", hasText="hello there")
    wb("chatWait", selector=".oi-assistant", hasText="That sums the numbers.")


def test_export_as_markdown_opens_an_editor(first_run: tuple[Workbench, Path]) -> None:
    wb, _ = first_run
    wb("command", title="Open Interpreter: Export Conversation")
    wb("wait", selector=".quick-input-list .monaco-list-row", hasText="Markdown")
    wb("click", selector=".quick-input-list .monaco-list-row", hasText="Markdown")
    wb("wait", selector=".monaco-editor .view-lines", hasText="hello there")
    wb("wait", selector=".tab", hasText="Untitled")
    shots(wb, "export-markdown")
