"""Which Python a workspace's kernel runs in: the `python` setting, else the active virtual
environment ($VIRTUAL_ENV), else the workspace's own `.venv` / `venv`, else oi-lsp's own Python.
A project's packages (pandas in its venv) are then importable from the chat without installing
oi-lsp into that environment; the kernel is that interpreter's ipykernel."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_BIN = ("Scripts", "python.exe") if sys.platform == "win32" else ("bin", "python")
_CHECK = "import ipykernel, sys; print(sys.version.split()[0])"


@dataclass(frozen=True, slots=True)
class Interpreter:
    path: str  # absolute; may not exist (a setting pointing nowhere)
    source: str  # where the choice came from, for people: "the python setting", ...

    @property
    def own(self) -> bool:
        """oi-lsp's own interpreter: no check needed, its ipykernel is a dependency."""
        return _same(self.path, sys.executable)

    def describe(self) -> str:
        return "oi-lsp's own Python" if self.own else f"{self.path} ({self.source})"

    def install_command(self) -> str:
        return f"{self.path} -m pip install ipykernel"


class NoKernel(RuntimeError):
    """The chosen interpreter cannot run a kernel; the message says what to do."""


OWN = Interpreter(sys.executable, "oi-lsp's own")


def choose(setting: str | None, folder: Path, environ: Mapping[str, str] = os.environ,
           ) -> Interpreter:
    """The interpreter for `folder`'s Python kernel (blocking: looks at a few paths)."""
    if setting:
        path = Path(os.path.expanduser(setting))
        path = path if path.is_absolute() else folder / path
        if path.is_dir():  # a virtual environment's folder
            path = path.joinpath(*_BIN)
        return Interpreter(str(path), "the python setting")
    venv = environ.get("VIRTUAL_ENV")
    if venv and (found := Path(venv).joinpath(*_BIN)).exists():
        return Interpreter(str(found), "$VIRTUAL_ENV")
    for name in (".venv", "venv"):
        if (found := folder.joinpath(name, *_BIN)).exists():
            return Interpreter(str(found), f"the workspace's {name}")
    return OWN


async def check(interpreter: Interpreter) -> str:
    """The interpreter's Python version, once it is known to have ipykernel; NoKernel with the
    command that fixes it otherwise."""
    if interpreter.own:
        return sys.version.split()[0]
    try:
        proc = await asyncio.create_subprocess_exec(
            interpreter.path, "-c", _CHECK, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    except FileNotFoundError as exc:
        raise NoKernel(f"the Python for this workspace, {interpreter.describe()}, does not "
                       "exist: fix the python setting, or clear it to use oi-lsp's own "
                       "Python") from exc
    except (OSError, TimeoutError) as exc:
        raise NoKernel(f"the Python for this workspace, {interpreter.describe()}, does not "
                       f"run: {exc}") from exc
    if proc.returncode != 0:
        raise NoKernel(f"the Python for this workspace, {interpreter.describe()}, has no "
                       f"ipykernel. Install it with: {interpreter.install_command()}")
    return out.decode(errors="replace").strip()


def is_ipykernel(cmd: list[str]) -> bool:
    """`cmd` starts ipykernel (a Python kernelspec's command)."""
    return len(cmd) >= 3 and cmd[1:3] == ["-m", "ipykernel_launcher"]


def kernel_command(cmd: list[str], interpreter: Interpreter) -> list[str]:
    """A Python kernelspec's command with `interpreter` in its interpreter's place; another
    kernel's (a kernelspec the user chose by kernelName) is left as it is."""
    if interpreter.own or not is_ipykernel(cmd):
        return cmd
    return [interpreter.path, *cmd[1:]]


def _same(a: str, b: str) -> bool:
    # Not resolved: a venv's bin/python links to its base interpreter, yet runs the venv.
    return os.path.abspath(a) == os.path.abspath(b)
