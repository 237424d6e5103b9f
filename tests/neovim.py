"""Running the Neovim client in tests: a real headless Neovim (`nvim -l`, tests/nvim/harness.lua)
against the real oi-lsp of this checkout, and what a scenario returns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.modelserver import ModelServer

BIN = Path(sys.executable).parent
NVIM = shutil.which("nvim", path=str(BIN)) or shutil.which("nvim")
OI_LSP = shutil.which("oi-lsp", path=str(BIN))
REPO = Path(__file__).resolve().parent.parent
PLUGIN = REPO / "clients" / "neovim"
HARNESS = Path(__file__).resolve().parent / "nvim" / "harness.lua"

HAVE_NVIM = NVIM is not None and OI_LSP is not None


def lua(value: Any) -> str:
    """A Lua expression for a JSON-able value."""
    return f"vim.json.decode({json.dumps(json.dumps(value))})"


@dataclass
class Run:
    ok: bool
    result: Any
    lines: list[str]
    notes: list[dict[str, Any]]
    error: str | None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def errors(self) -> list[str]:
        return [n["msg"] for n in self.notes if n["level"] == 4]  # vim.log.levels.ERROR


class Nvim:
    def __init__(self, tmp: Path, model: ModelServer, data_dir: Path) -> None:
        self.tmp = tmp
        self.model = model
        self.data_dir = data_dir
        self.home = tmp / "home"
        self.home.mkdir()
        self.tag = uuid.uuid4().hex

    def run(self, body: str, cwd: Path, setup: dict[str, Any] | None = None,
            timeout: float = 150) -> Run:
        options = {"cmd": [OI_LSP], "settings": self.model.settings(), **(setup or {})}
        init = self.tmp / "init.lua"
        init.write_text(
            f"vim.opt.rtp:prepend({json.dumps(str(PLUGIN))})\n"
            "vim.opt.swapfile = false\n"
            "vim.cmd.runtime('plugin/oi.lua')\n"
            f"require('oi').setup({lua(options)})\n")
        script = self.tmp / f"scenario-{uuid.uuid4().hex[:6]}.lua"
        script.write_text(f"local T = dofile({json.dumps(str(HARNESS))})\n"
                          f"T.run(function()\n{body}\nend)\n")
        out = self.tmp / "out.json"
        out.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "OI_LSP_DATA_DIR": str(self.data_dir),
               "OI_TEST_OUT": str(out), "OI_NVIM_TEST": self.tag, "HOME": str(self.home),
               "XDG_CONFIG_HOME": str(self.home / "config"),
               "XDG_DATA_HOME": str(self.home / "data"),
               "XDG_STATE_HOME": str(self.home / "state"),
               "XDG_CACHE_HOME": str(self.home / "cache")}
        for key in ("OI_MODEL", "OI_API_BASE", "OI_API_KEY", "NVIM", "NVIM_LISTEN_ADDRESS"):
            env.pop(key, None)
        proc = subprocess.run([str(NVIM), "--headless", "-u", str(init), "-i", "NONE",
                               "-l", str(script)], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if not out.exists():
            pytest.fail(f"nvim exited {proc.returncode} without a result:\n{proc.stderr[-4000:]}")
        data = json.loads(out.read_text())
        run = Run(ok=data["ok"], result=data.get("result"), lines=list(data.get("lines") or []),
                  notes=list(data.get("notes") or []), error=data.get("error"))
        if not run.ok:
            pytest.fail(f"scenario failed: {run.error}\nstderr:\n{proc.stderr[-4000:]}")
        return run

    def kill_leftovers(self) -> None:
        """Nothing a scenario started may outlive it (nvim, oi-lsp, kernels)."""
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get("OI_NVIM_TEST") == self.tag:
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass


def last_user_message(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
