"""The Neovim client answers a program's input (oi/input): vim.ui.input for a line,
inputsecret() for a password (both stubbed here: a headless Neovim has no one to type)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from tests import modelserver as ms
from tests.conftest import tool_results, trust_folder
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, REPO, Nvim

ARTIFACTS = REPO / "test-artifacts" / "neovim"

pytestmark = pytest.mark.skipif(not HAVE_NVIM, reason="nvim and oi-lsp must be installed")


def test_program_input_asked_in_neovim(nvim: Nvim,
                                       model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "import getpass\nname = input('name? ')\n"
                                   "pw = getpass.getpass('Password: ')\n"
                                   "print('hello', name, len(pw))"),
                 ms.text("Greeted."))
    run = nvim.run("""
        local asked = {}
        vim.ui.input = function(opts, done)
          table.insert(asked, "input:" .. opts.prompt)
          vim.defer_fn(function() done("Ada") end, 10)  -- answered later, as a real UI
        end
        vim.fn.inputsecret = function(prompt)
          table.insert(asked, "secret:" .. prompt)
          return "pw-secret"
        end
        vim.cmd("OIChat greet me")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("r")
        T.wait_text("Greeted.")
        T.wait_idle()
        return asked
    """, workspace)
    assert run.result == ["input:name? ", "secret:Password: "]
    assert "hello Ada 9" in run.text and "pw-secret" not in run.text
    assert "hello Ada 9" in tool_results(model.requests[1])[0]


def test_oiattach_sends_the_image_with_the_next_message(nvim: Nvim,
                                                        model: ModelServer, workspace: Path,
                                                        tmp_path: Path, data_dir: Path) -> None:
    picture = tmp_path / "shot.png"
    Image.new("RGB", (12, 8)).save(picture)
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("llm:\n  supports_vision: true\n")
    trust_folder(workspace, data_dir)
    model.script(ms.text("A black image."))
    run = nvim.run(f"""
        local ok, err = pcall(vim.cmd, "OIAttach {tmp_path / 'notes.txt'}")
        vim.cmd("OIAttach {picture}")
        vim.cmd("OIChat what is this?")
        T.wait_text("A black image.")
        T.wait_idle()
        return {{ ok = ok, err = tostring(err) }}
    """, workspace)
    assert not run.result["ok"] and "only images" in run.result["err"]
    last = model.requests[0]["messages"][-1]
    assert [p["type"] for p in last["content"]] == ["text", "image_url"]


def test_an_asynchronous_box_closes_when_the_read_times_out(nvim: Nvim, model: ModelServer,
                                                           workspace: Path) -> None:
    """A vim.ui.input that answers later (dressing.nvim's float) and is never answered: when
    inputTimeout ends the read, the server cancels its oi/input and the float closes."""
    model.script(ms.tool("python", "name = input('name? ')"), ms.text("Nobody answered."))
    run = nvim.run("""
        local box
        vim.ui.input = function(opts, done)  -- a float in insert mode, as dressing.nvim's
          local buf = vim.api.nvim_create_buf(false, true)
          box = vim.api.nvim_open_win(buf, true, { relative = "editor", row = 1, col = 1,
            width = 30, height = 1, border = "rounded", title = opts.prompt })
          vim.cmd.startinsert()
        end
        vim.cmd("OIChat ask my name")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("r")
        vim.wait(20000, function() return box ~= nil end, 20)
        T.wait_text("Nobody answered.")
        T.wait_idle()
        return { asked = box ~= nil, open = box ~= nil and vim.api.nvim_win_is_valid(box),
                 mode = vim.api.nvim_get_mode().mode }
    """, workspace, setup={"settings": {**model.settings(), "inputTimeout": 2}})
    assert run.result == {"asked": True, "open": False, "mode": "n"}
    assert "inputTimeout" in tool_results(model.requests[1])[0]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
def test_the_prompt_closes_when_the_read_times_out_in_a_terminal(
        nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    """Neovim's own input() prompt, in a real terminal: never answered, it goes away when
    inputTimeout ends the read, and Neovim takes keys as before."""
    model.script(ms.tool("python", "name = input('name? ')"), ms.text("Nobody answered."))
    with nvim.terminal(workspace, setup={"settings": {**model.settings(), "inputTimeout": 3}}) \
            as term:
        term.keys("=:OIChat ask my name", "Enter")
        term.wait("[a]lways")
        term.keys("r")
        asked = term.wait("name?", last_line=True)  # the prompt, on the command line
        done = term.wait("Nobody answered.")
        term.keys("=:echo 'still here'", "Enter")
        after = term.wait("still here")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "neovim-input-closed-on-timeout.txt").write_text(
        f"--- asked\n{asked}\n--- the read timed out\n{done}\n--- a command after\n{after}")
    assert not done.rstrip().splitlines()[-1].startswith("name?")
    assert after.rstrip().splitlines()[-1] == "still here"
