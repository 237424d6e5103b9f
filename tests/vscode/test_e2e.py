"""The extension end to end in a real VS Code: code-server (VS Code 1.139) in headless Chromium,
driven by playwright-core (driver.mjs), with the packaged .vsix installed, the real oi-lsp of this
checkout (oi.serverPath, PYTHONPATH) and the scripted model server. One code-server serves all
scenarios of the module; each scenario reads only what it added to the conversation."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.vscode.conftest import ARTIFACTS, EXT, ROOT, run

pytestmark = pytest.mark.timeout(1800)  # the first scenario starts the stack

SECRET_KEY = "sk-from-secret-storage"


class Workbench:
    """code-server's workbench through driver.mjs (one JSON line per request and answer)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["node", str(Path(__file__).with_name("driver.mjs"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=EXT)
        self.next_id = 0

    def __call__(self, op: str, **params: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **params}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the driver exited during {op}"
        answer = json.loads(line)
        if not answer["ok"] and op != "screenshot":  # keep what the window showed
            self("screenshot", path=str(ARTIFACTS / "vscode-e2e-failure.png"))
        assert answer["ok"], f"{op} {params}: {answer['error']}"
        return answer["value"]

    def close(self) -> None:
        try:
            self("close")
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    # Conveniences --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What the chat view shows (read inside its frame)."""
        return self("chatEval", expression="""(() => {
            const log = document.getElementById('oi-log');
            const all = (sel) => [...log.querySelectorAll(sel)];
            return {
                users: all('.oi-user').map((e) => e.textContent),
                assistantHtml: all('.oi-assistant').map((e) => e.innerHTML),
                codes: all('.oi-code').map((e) => ({
                    code: e.querySelector('.oi-source code')?.dataset.code ?? null,
                    note: e.querySelector('.oi-note')?.textContent ?? null,
                    output: e.querySelector('details.oi-output pre')?.textContent ?? null })),
                notices: all('.oi-notice, .oi-error').map((e) => e.textContent),
                scripts: log.querySelectorAll('script').length,
                handlers: [...log.querySelectorAll('*')].filter(
                    (e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
                pwned: window.__pwned ?? null,
                folder: document.getElementById('oi-folder').selectedOptions[0]?.textContent,
            };
        })()""")

    def shot(self, name: str) -> Path:
        path = ARTIFACTS / f"vscode-e2e-{name}.png"
        self("screenshot", path=str(path))
        return path

    def answer(self, button: str) -> None:
        self("chatWait", selector=".oi-actions button.oi-" + button)
        self("chatClick", selector=".oi-actions button.oi-" + button)

    def wait_output(self, text: str, timeout: int = 60000) -> None:
        self("chatWait", selector="details.oi-output pre", hasText=text, timeout=timeout)

    def wait_idle(self) -> None:
        self("chatWait", selector="#oi-status[hidden]", timeout=60000, state="attached")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def stack_env(vscode_stack: Path, playwright_env: dict[str, str],
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    node24 = vscode_stack / "node" / "node_modules" / "node" / "bin"
    scratch = tmp_path_factory.mktemp("cs-env")
    for sub in ("xdg", "tmp"):
        (scratch / sub).mkdir()
    return {**os.environ, **playwright_env, "PATH": f"{node24}:{os.environ['PATH']}",
            "XDG_CONFIG_HOME": str(scratch / "xdg"), "TMPDIR": str(scratch / "tmp")}


@pytest.fixture(scope="module")
def vsix(vscode_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vsix") / "oi-lsp.vsix"
    run(["npx", "@vscode/vsce", "package", "-o", out], timeout=600)
    return out


@pytest.fixture(scope="module")
def vscode(vscode_stack: Path, stack_env: dict[str, str], vsix: Path, model_server: ModelServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workbench, Path]]:
    base = tmp_path_factory.mktemp("code-server")
    workspace = base / "project"
    workspace.mkdir()
    (workspace / "numbers.py").write_text("numbers = [3, 4, 5]\nprint(sum(numbers) * 1000)\n")
    user = base / "ud" / "User"
    user.mkdir(parents=True)
    (user / "settings.json").write_text(json.dumps({
        "oi.serverPath": str(ROOT / ".venv" / "bin" / "oi-lsp"),
        "oi.model": "openai/scripted", "oi.apiBase": model_server.url,
        "workbench.startupEditor": "none", "telemetry.telemetryLevel": "off",
        "security.workspace.trust.enabled": False, "extensions.autoUpdate": False,
        "workbench.tips.enabled": False, "chat.disableAIFeatures": True,
    }))
    code_server = vscode_stack / "cs" / "node_modules" / ".bin" / "code-server"
    dirs = ["--user-data-dir", str(base / "ud"), "--extensions-dir", str(base / "ext")]
    run([code_server, *dirs, "--install-extension", vsix], env=stack_env, timeout=300)
    port = free_port()
    env = {**stack_env, "PYTHONPATH": str(ROOT), "OI_LSP_DATA_DIR": str(base / "data"),
           "OI_API_KEY": "sk-from-env"}
    log = (base / "code-server.log").open("w")
    server = subprocess.Popen(
        [code_server, "--bind-addr", f"127.0.0.1:{port}", "--auth", "none",
         "--disable-telemetry", "--disable-update-check", *dirs, str(workspace)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    workbench = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
                break
            except OSError:
                assert server.poll() is None, (base / "code-server.log").read_text()
                assert time.monotonic() < deadline, "code-server did not answer in 120 s"
                time.sleep(0.5)
        ARTIFACTS.mkdir(exist_ok=True)
        workbench = Workbench(env)
        workbench("open", url=f"http://127.0.0.1:{port}/?folder={workspace}")
        workbench("command", title="Open Interpreter: Open Chat")
        workbench("chatWait", selector="#oi-header:not([hidden])")
        yield workbench, workspace
    finally:
        if workbench is not None:
            workbench.close()
        # code-server leaves a watcher child: stop the whole group (its server, oi-lsp, kernels).
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def auth(headers: dict[str, str]) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == "authorization"), None)


def last_user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


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
    wb.answer("edit")
    wb("chatFill", selector="textarea.oi-edit-area", text="print('edited', 3 * 3)")
    wb("chatClick", selector="button.oi-run-edited")
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
