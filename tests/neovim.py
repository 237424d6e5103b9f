"""Running the Neovim client in tests: a real headless Neovim (`nvim -l`, tests/nvim/harness.lua)
against the real oi-lsp of this checkout, and what a scenario returns."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
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

    def _init(self, setup: dict[str, Any] | None) -> Path:
        """An init.lua loading the plugin of this checkout, set up with `setup`."""
        options = {"cmd": [OI_LSP], "settings": self.model.settings(), **(setup or {})}
        init = self.tmp / "init.lua"
        init.write_text(
            f"vim.opt.rtp:prepend({json.dumps(str(PLUGIN))})\n"
            "vim.opt.swapfile = false\n"
            "vim.cmd.runtime('plugin/oi.lua')\n"
            f"require('oi').setup({lua(options)})\n")
        return init

    def _env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OI_LSP_DATA_DIR": str(self.data_dir),
               "OI_NVIM_TEST": self.tag, "HOME": str(self.home),
               "XDG_CONFIG_HOME": str(self.home / "config"),
               "XDG_DATA_HOME": str(self.home / "data"),
               "XDG_STATE_HOME": str(self.home / "state"),
               "XDG_CACHE_HOME": str(self.home / "cache"), **extra}
        for key in ("OI_MODEL", "OI_API_BASE", "OI_API_KEY", "NVIM", "NVIM_LISTEN_ADDRESS"):
            env.pop(key, None)
        return env

    def run(self, body: str, cwd: Path, setup: dict[str, Any] | None = None,
            timeout: float = 150) -> Run:
        init = self._init(setup)
        script = self.tmp / f"scenario-{uuid.uuid4().hex[:6]}.lua"
        script.write_text(f"local T = dofile({json.dumps(str(HARNESS))})\n"
                          f"T.run(function()\n{body}\nend)\n")
        out = self.tmp / "out.json"
        out.unlink(missing_ok=True)
        proc = subprocess.run([str(NVIM), "--headless", "-u", str(init), "-i", "NONE",
                               "-l", str(script)], cwd=cwd, env=self._env(OI_TEST_OUT=str(out)),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if not out.exists():
            pytest.fail(f"nvim exited {proc.returncode} without a result:\n{proc.stderr[-4000:]}")
        data = json.loads(out.read_text())
        run = Run(ok=data["ok"], result=data.get("result"), lines=list(data.get("lines") or []),
                  notes=list(data.get("notes") or []), error=data.get("error"))
        if not run.ok:
            pytest.fail(f"scenario failed: {run.error}\nstderr:\n{proc.stderr[-4000:]}")
        return run

    @contextlib.contextmanager
    def terminal(self, cwd: Path, setup: dict[str, Any] | None = None,
                 size: tuple[int, int] = (100, 30)) -> Iterator[Terminal]:
        """Neovim with the plugin in a real terminal (tmux), as a person runs it."""
        init = self._init(setup)
        name = f"oi-nvim-{self.tag[:12]}"
        env = self._env()
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(size[0]), "-y",
                        str(size[1]), "-c", str(cwd),
                        *[a for k, v in env.items() if k in ENV_FOR_TMUX or k.startswith("OI_")
                          for a in ("-e", f"{k}={v}")],
                        f"{NVIM} -u {init} -i NONE"], check=True, env=env)
        try:
            yield Terminal(name, kept=True)
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], check=False,
                           capture_output=True)

    def kill_leftovers(self) -> None:
        """Nothing a scenario started may outlive it (nvim, oi-lsp, kernels)."""
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get("OI_NVIM_TEST") == self.tag:
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass


# What Neovim in tmux must see of _env (tmux gives a session its server's environment).
ENV_FOR_TMUX = ("PYTHONPATH", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                "XDG_CACHE_HOME", "PATH")


class Terminal:
    """A tmux session: keys in, the screen out."""

    def __init__(self, name: str, kept: bool = False) -> None:
        self.name = name
        if kept:
            # A program that exits (or crashes) leaves its last screen, and wait() says so,
            # instead of a session gone with nothing to show.
            subprocess.run(["tmux", "set-option", "-t", name, "remain-on-exit", "on"],
                           check=False, capture_output=True)

    def keys(self, *keys: str) -> None:
        """tmux key names (Enter, Escape, C-c) or, with a leading "=", literal text."""
        for key in keys:
            args = ["-l", key[1:]] if key.startswith("=") else [key]
            subprocess.run(["tmux", "send-keys", "-t", self.name, *args], check=True)

    def screen(self, colors: bool = False, joined: bool = False) -> str:
        """The screen's text; with `colors`, with its SGR escapes (capture-pane -e); `joined`:
        a line the terminal wrapped is one line (-J)."""
        flags = [*(["-e"] if colors else []), *(["-J"] if joined else [])]
        screen = subprocess.run(["tmux", "capture-pane", "-p", *flags, "-t", self.name],
                                check=True, capture_output=True, text=True).stdout
        return "\n".join(line.rstrip() for line in screen.split("\n")) if joined else screen

    def exited(self) -> str | None:
        """How the pane's program ended ("status 1", "signal 11"), None while it runs."""
        shown = subprocess.run(["tmux", "display-message", "-p", "-t", self.name,
                                "#{pane_dead} #{pane_dead_status} #{pane_dead_signal}"],
                               check=False, capture_output=True, text=True)
        if shown.returncode != 0:
            return "its tmux session is gone"
        dead, status, signal = [*shown.stdout.split(), "", "", ""][:3]
        if dead != "1":
            return None
        return f"signal {signal}" if signal and signal != "0" else f"status {status}"

    def wait(self, text: str, timeout: float = 60, last_line: bool = False) -> str:
        """The screen once it shows `text` (with `last_line`, at the start of its last line:
        the command line)."""
        end = time.monotonic() + timeout
        while True:
            screen = self.screen()
            last = (screen.rstrip().splitlines() or [""])[-1]
            if last.startswith(text) if last_line else text in screen:
                return screen
            dead = self.exited()
            if dead is not None:
                pytest.fail(f"the program exited ({dead}) before the screen showed {text!r}:"
                            f"\n{screen}")
            if time.monotonic() > end:
                pytest.fail(f"the screen never showed {text!r}:\n{screen}")
            time.sleep(0.2)


def last_user_message(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
