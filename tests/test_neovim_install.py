"""The README's Neovim install specs, verbatim, in a fresh HOME: lazy.nvim (its v11.17.5 release,
kept in tests/fixtures since tests reach no GitHub) and a plain 'runtimepath'. Only the
plugin's source is changed: the checkout instead of "<you>/oi-lsp"."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.neovim import HAVE_NVIM, NVIM

ROOT = Path(__file__).resolve().parent.parent
LAZY = ROOT / "tests" / "fixtures" / "lazy.nvim-v11.17.5.tar.gz"

pytestmark = pytest.mark.skipif(not HAVE_NVIM, reason="needs nvim")


def readme_lua() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Neovim"):]
    return re.findall(r"```lua\n(.*?)```", section, re.S)


def probe(home: Path, init: str) -> str:
    """What a user sees after startup: whether :OIChat exists, and :help oi."""
    (home / "init.lua").write_text(init, encoding="utf-8")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local/share"), "XDG_STATE_HOME": str(home / ".state"),
           "XDG_CACHE_HOME": str(home / ".cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [NVIM, "--headless", "-u", str(home / "init.lua"), "-i", "NONE",
         "+lua io.stdout:write('OIChat=' .. vim.fn.exists(':OIChat') .. ' help='"
         " .. #vim.fn.getcompletion('oi-commands', 'help') .. '\\n')", "+qa!"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return done.stdout + done.stderr


def test_the_lazy_nvim_spec_as_written_defines_the_commands(tmp_path: Path) -> None:
    [spec] = [block for block in readme_lua() if "<you>/oi-lsp" in block]
    data = tmp_path / ".local/share"
    with tarfile.open(LAZY) as archive:
        archive.extractall(data / "nvim/lazy", filter="data")
    spec = spec.strip().replace('"<you>/oi-lsp"', f'dir = "{ROOT}", name = "oi-lsp"')
    init = (f'vim.opt.rtp:prepend("{data}/nvim/lazy/lazy.nvim")\n'
            f'require("lazy").setup({{ {spec} }}, {{ install = {{ missing = false }},\n'
            '  checker = { enabled = false }, change_detection = { enabled = false },\n'
            '  rocks = { enabled = false }, performance = { reset_packpath = false } })\n')
    shown = probe(tmp_path, init)
    assert "OIChat=2 help=1" in shown, shown


def test_the_plain_runtimepath_lines_define_the_commands(tmp_path: Path) -> None:
    [plain] = [block for block in readme_lua() if "/path/to/oi-lsp" in block]
    init = plain.replace("/path/to/oi-lsp", str(ROOT))
    assert "OIChat=2 help=1" in probe(tmp_path, init)
    # and without setup(): Neovim sources plugin/oi.lua after init.lua
    first = init.splitlines()[0]
    assert "OIChat=2" in probe(tmp_path, first)
