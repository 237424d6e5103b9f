"""Baseline B: Open Interpreter's own execution path, in a venv of its own.

The `open-interpreter` package pins its own litellm, pydantic, ... so it never shares our venv:
it is installed once under ~/.cache/oi-lsp/bench-oi-venv and driven through bench/oi_child.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .driver import json_line

CHILD = Path(__file__).with_name("oi_child.py")


def venv_dir() -> Path:
    root = Path(os.environ.get("OI_LSP_CACHE", Path.home() / ".cache" / "oi-lsp"))
    return root / "bench-oi-venv"


def base_python() -> str:
    """The interpreter our venv was made from (a venv of a venv would inherit nothing)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def ensure_venv(log: Any) -> tuple[Path | None, str]:
    """The venv's python, or None with the reason it could not be installed."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists() and python.exists():
        return python, ""
    log(f"installing open-interpreter into {venv} (once; this takes a few minutes)")
    try:
        if not python.exists():
            subprocess.run([base_python(), "-m", "venv", str(venv)], check=True,
                           capture_output=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "open-interpreter"],
                       check=True, capture_output=True, timeout=1800, stdin=subprocess.DEVNULL)
        subprocess.run([str(python), "-c", "import interpreter"], check=True,
                       capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        tail = detail.decode(errors="replace").strip().splitlines()[-1:] if detail else []
        return None, f"open-interpreter could not be installed: {exc} {' '.join(tail)}".strip()
    marker.write_text("ok\n")
    return python, ""


class OpenInterpreter:
    """One child process holding one `interpreter` (its REPLs persist between runs)."""

    def __init__(self, python: Path, cwd: Path) -> None:
        self.python = python
        self.cwd = cwd
        self.proc: asyncio.subprocess.Process | None = None
        self.version = "?"

    async def start(self, timeout: float = 180) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            str(self.python), str(CHILD), cwd=str(self.cwd), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            limit=1 << 20)
        hello = await self._line(timeout)
        self.version = str(hello.get("version", "?"))

    async def _line(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None
        return await json_line(self.proc, timeout, "Open Interpreter child")

    async def timed(self, language: str, code: str, timeout: float = 300) -> float:
        """Seconds `computer.run` took, measured inside the child (no pipe cost counted)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"language": language, "code": code}) + "\n").encode())
        await self.proc.stdin.drain()
        answer = await self._line(timeout)
        if not answer.get("ok"):
            raise RuntimeError(f"Open Interpreter failed: {answer.get('error')}")
        return float(answer["seconds"])

    async def close(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
