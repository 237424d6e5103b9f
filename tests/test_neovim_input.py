"""The Neovim client answers a program's input (oi/input): vim.ui.input for a line,
inputsecret() for a password (both stubbed here: a headless Neovim has no one to type)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests import modelserver as ms
from tests.conftest import tool_results, trust_folder
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, Nvim

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
