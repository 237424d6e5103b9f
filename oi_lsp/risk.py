"""A cheap static risk check of proposed code: destructive or far-reaching commands, with reasons.

It reads the text, not the meaning: it can be fooled, so it only ever adds caution (a high risk
proposal is never auto-run); it never replaces the user's approval.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Level = Literal["low", "medium", "high"]

# (pattern, level, reason). Patterns look at shell commands and at Python calls alike.
_RAW_RULES: list[tuple[str, Level, str]] = [
    (r"\brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rRf][a-zA-Z]*\b", "high",
     "deletes files recursively or by force (rm -rf)"),
    (r"\bshutil\.rmtree\b|\bos\.removedirs\b", "high", "deletes a directory tree"),
    (r"\bch(mod|own)\s+(-[a-z]*\s+)*-[a-z]*R", "high", "changes permissions or owners recursively"),
    (r"\bdd\s+[^\n]*\bof=", "high", "writes raw data to a device or file (dd)"),
    (r"\bmkfs(\.\w+)?\b|\bfdisk\b|\bparted\b|\bwipefs\b", "high", "formats or partitions a disk"),
    (r"\b(curl|wget)\b[^\n|]*\|\s*(sudo\s+)?(ba|z|da)?sh\b", "high",
     "pipes a download into a shell"),
    (r"\b(shutdown|reboot|poweroff|halt)\b|\binit\s+[06]\b|systemctl\s+(reboot|poweroff)",
     "high", "shuts down or reboots the machine"),
    (r":\(\)\s*\{\s*:\|:&\s*\};:", "high", "a fork bomb"),
    (r"\bsudo\b", "high", "runs a command as root (sudo)"),
    (r">\s*/dev/sd[a-z]|>\s*/dev/nvme", "high", "writes to a disk device"),
    (r"\b(pip3?|uv\s+pip|conda|mamba)\s+install\b|\bnpm\s+(i|install)\b|"
     r"\b(apt(-get)?|dnf|yum|brew|pacman)\s+(-\S+\s+)*install\b|\bcargo\s+install\b",
     "medium", "installs packages"),
    (r"\bcurl\b[^\n]*\s(-d|--data\S*|-F|--form|-T|--upload-file)\b|\bscp\b|\brsync\b[^\n]*:|"
     r"requests\.(post|put)\(|\bnc\s+\S+\s+\d+", "medium", "sends data over the network"),
    (r"\bgit\s+push\b[^\n]*(--force|-f)\b|\bgit\s+reset\s+--hard\b|\bgit\s+clean\s+-[a-z]*f",
     "medium", "rewrites or discards git history or files"),
    (r"\bos\.(remove|unlink)\b|\bPath\([^)]*\)\.unlink\b|\brm\s", "medium", "deletes files"),
    (r"\bkill(all)?\s+-9\b|\bpkill\b", "medium", "kills processes"),
]
_RULES = [(re.compile(p, re.M), level, why) for p, level, why in _RAW_RULES]

# Absolute or home paths a piece of code mentions (in quotes or after a shell word).
_PATH = re.compile(
    r"""(?:(?<=["'])|(?<=\s)|^)(~(?:/[^\s"'`;|&)]*)?|/[A-Za-z0-9_.\-][^\s"'`;|&)]*)""", re.M)
_WRITE = re.compile(r"""open\([^)]*['"][wax+]|\.write_(text|bytes)\(|>>?|\b(cp|mv|tee|touch|
                    mkdir|rm|install|ln)\b""", re.X)
_HARMLESS = ("/dev/null", "/dev/stdout", "/dev/stderr", "/tmp", "/usr/bin/env", "/bin/sh",
             "/bin/bash", "/usr/bin/python")


@dataclass(slots=True)
class Risk:
    level: Level = "low"
    reasons: list[str] = field(default_factory=list)

    def add(self, level: Level, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)
        order = ("low", "medium", "high")
        if order.index(level) > order.index(self.level):
            self.level = level


def assess(code: str, workspace: Path, restricted: bool) -> Risk:
    """The risk of running `code` in `workspace`; `restricted` flags any path outside it."""
    risk = Risk()
    for pattern, level, reason in _RULES:
        if pattern.search(code):
            risk.add(level, reason)
    writes = bool(_WRITE.search(code))
    for raw in _PATH.findall(code):
        path = Path(raw).expanduser()
        if raw.startswith(_HARMLESS) or _inside(path, workspace):
            continue
        if restricted:
            risk.add("high", f"uses a path outside the workspace ({raw})")
        elif writes:
            risk.add("high", f"may write outside the workspace ({raw})")
    return risk


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


def semgrep_path() -> str | None:
    return shutil.which("semgrep")


SEMGREP_MISSING = ("safe mode: semgrep is not installed (pip install semgrep), so only oi-lsp's "
                   "built-in risk check ran")


async def semgrep_scan(code: str, language: str, timeout: float = 60) -> list[str]:
    """semgrep's findings for `code` (its `auto` rules); [] when it finds nothing."""
    import asyncio
    import json
    import tempfile

    exe = semgrep_path()
    if exe is None:
        return [SEMGREP_MISSING]
    suffix = {"python": ".py", "shell": ".sh", "javascript": ".js"}.get(language, ".txt")
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as fh:
        fh.write(code)
    try:
        proc = await asyncio.create_subprocess_exec(
            exe, "scan", "--config", "auto", "--json", "--quiet", fh.name,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            return ["safe mode: semgrep did not finish in time"]
        try:
            results = json.loads(out or b"{}").get("results", [])
        except ValueError:
            return ["safe mode: semgrep's output could not be read"]
        return [f"semgrep: {r.get('extra', {}).get('message', r.get('check_id'))}"
                for r in results]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fh.name)
