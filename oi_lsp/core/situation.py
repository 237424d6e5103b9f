"""Where the model works, for its system message: the user's OS and shell, the workspace folder,
the kernel's Python, the languages that can run here and the date (as Open Interpreter tells its
model); and the workspace's own instructions, `.oi/instructions.md`, in trusted workspaces only.

Gathered once per workspace (again only when the kernel settings change), in threads and at most
one short subprocess: never by starting a kernel, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..executors import interpreter, registry
from .aio import in_thread

log = logging.getLogger(__name__)

INSTRUCTIONS = Path(".oi") / "instructions.md"
MAX_INSTRUCTIONS = 20_000  # characters; a longer file is cut, and the log says so
_VERSION = "import platform; print(platform.python_version())"


@dataclass(frozen=True, slots=True)
class Situation:
    machine: str = ""  # the facts about this machine and workspace, as lines
    instructions: str = ""  # the workspace's .oi/instructions.md (trusted only)
    tools: str = ""  # the MCP servers the kernel's code can call, a line a tool


class Surveyor:
    """One workspace's facts, gathered in the background once and kept."""

    def __init__(self, folder: Path, options: Callable[[], registry.ReplOptions]) -> None:
        self.folder = folder
        self._options = options
        self._key: object = None
        self._facts: asyncio.Task[list[str]] | None = None

    def start(self) -> None:
        """Begin gathering now (when the workspace opens), so the first turn need not wait."""
        options = self._options()
        key = (options.kernel_name, options.gateway, options.python)
        if self._facts is None or key != self._key:
            self._key = key
            self._facts = asyncio.create_task(_gather(self.folder, options))

    async def situation(self, trusted: bool) -> Situation:
        self.start()  # again when the kernel settings changed
        assert self._facts is not None
        try:
            facts = await asyncio.shield(self._facts)
        except Exception:  # a fact that cannot be had is left out, never a failed turn
            log.exception("could not gather the facts about this machine")
            facts = []
        today = datetime.date.today()
        machine = "\n".join([*facts, f"- Today: {today:%A, %B %d, %Y}."])
        instructions = await in_thread(read_instructions, self.folder) if trusted else ""
        return Situation(machine, instructions)


async def _gather(folder: Path, options: registry.ReplOptions) -> list[str]:
    system, languages = await asyncio.gather(in_thread(os_name),
                                             in_thread(_languages, options))
    python = await kernel_python(options)
    return [f"- Operating system: {system}.",
            f"- The user's shell: {shell_name()} (the `shell` language runs bash).",
            f"- Workspace folder (the working directory): {folder}.",
            f"- Python in the kernel: {python}.",
            f"- Languages that can run here: {', '.join(languages)}."]


def os_name() -> str:
    """The OS and its version: "Linux 6.1.0 (Debian GNU/Linux 12)", "macOS 14.5"."""
    system = platform.system()
    if system == "Darwin":
        return f"macOS {platform.mac_ver()[0]}"
    if system == "Windows":
        return f"Windows {platform.release()} ({platform.version()})"
    name = f"{system} {platform.release()}"
    with contextlib.suppress(OSError, AttributeError):
        pretty = platform.freedesktop_os_release().get("PRETTY_NAME")
        if pretty:
            name += f" ({pretty})"
    return name


def shell_name() -> str:
    shell = os.environ.get("SHELL") or os.environ.get("COMSPEC") or ""
    return Path(shell).name or "unknown"


def _languages(options: registry.ReplOptions) -> list[str]:
    """What oi/languages reports as available, by name (no gateway request: the gateway's
    kernels are named as "on the gateway" instead)."""
    # Not a language that would run in another's place (zsh in bash when zsh is missing).
    names = [info.name for info in registry.describe(options)
             if info.available and not info.install_hint]
    if options.gateway is not None:
        names.append(f"the kernels of the Jupyter gateway at {options.gateway.host}")
    return names


async def kernel_python(options: registry.ReplOptions) -> str:
    """The Python version of the workspace's kernel, from its kernelspec's program: this
    server's own when that is the interpreter, else asked of it in a subprocess."""
    if options.gateway is not None:
        return "on the Jupyter gateway (version unknown)"
    if not options.python.own:  # the workspace's own interpreter (executors/interpreter.py)
        try:
            version = await interpreter.check(options.python)
        except interpreter.NoKernel as exc:
            return f"not started: {exc}"
        return f"{version}, {options.python.describe()}"
    program = await in_thread(registry.kernel_program, options.kernel_name)
    if program is None:
        return f"unknown (no local kernelspec {options.kernel_name!r})"
    if program == sys.executable:
        return platform.python_version()
    try:
        proc = await asyncio.create_subprocess_exec(
            program, "-c", _VERSION, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    except OSError:
        return "unknown"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return "unknown"
    return out.decode(errors="replace").strip() or "unknown"


def read_instructions(folder: Path) -> str:
    """The workspace's .oi/instructions.md, "" when there is none (blocking)."""
    path = folder / INSTRUCTIONS
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return ""
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return ""
    if len(text) > MAX_INSTRUCTIONS:
        log.warning("%s is longer than %d characters; the rest is not sent to the model",
                    path, MAX_INSTRUCTIONS)
        text = text[:MAX_INSTRUCTIONS]
    return text.strip()
