"""A cheap static risk check of proposed code: destructive or far-reaching commands, with reasons.

It reads the text, not the meaning: it can be fooled, so it only ever adds caution (a high risk
proposal is never auto-run); it never replaces the user's approval. Safe mode adds semgrep's
findings when semgrep is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .. import languages
from ..protocol import Risk, RiskLevel

_ORDER: tuple[RiskLevel, ...] = ("low", "medium", "high")

# A command word: at the start of a line or after a shell separator, sudo, or an opening quote
# (so `subprocess.run(["reboot"])` counts but `server.shutdown()` does not).
_CMD = r"""(?:^|[;&|(`]\s*|\bsudo\s+|["'])"""

# (pattern, level, reason). Patterns look at shell commands and at Python calls alike.
_RAW_RULES: list[tuple[str, RiskLevel, str]] = [
    (r"\brm\s+(?:-\w+\s+)*(?:-[a-zA-Z]*[rRf][a-zA-Z]*|--recursive|--force)\b", "high",
     "deletes files recursively or by force (rm -rf)"),
    (r"\bshutil\.rmtree\b|\bos\.removedirs\b|\bRemove-Item\b[^\n]*-Recurse", "high",
     "deletes a directory tree"),
    (r"\bch(?:mod|own|grp)\s+(?:-\w+\s+)*(?:-[a-zA-Z]*R|--recursive)", "high",
     "changes permissions or owners recursively"),
    (r"\bdd\s+[^\n]*\bof=", "high", "writes raw data to a device or file (dd)"),
    (_CMD + r"(?:mkfs(?:\.\w+)?|fdisk|sfdisk|parted|wipefs)\b", "high",
     "formats or partitions a disk"),
    (r"\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b|"
     r"\b(?:ba)?sh\s+<\(\s*(?:curl|wget)\b|\biex\b[^\n]*\bDownloadString\b", "high",
     "runs a script straight from the internet (curl | sh)"),
    (_CMD + r"(?:shutdown|reboot|poweroff|halt)\b|\binit\s+[06]\b|"
     r"\bsystemctl\s+(?:reboot|poweroff|halt)\b|\bStop-Computer\b|\bRestart-Computer\b",
     "high", "shuts down or reboots the machine"),
    (r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", "high", "a fork bomb"),
    (r"\bsudo\b|\bdoas\b", "high", "runs a command as root (sudo)"),
    (r">\s*/dev/(?:sd[a-z]|nvme\d|hd[a-z]|disk\d|mmcblk\d)", "high", "writes to a disk device"),
    (r"\b(?:pip3?|uv\s+pip|conda|mamba|poetry|pipx)\s+(?:add|install)\b|"
     r"\b(?:npm|pnpm|yarn)\s+(?:i|install|add)\b|\bgem\s+install\b|\bcargo\s+install\b|"
     r"\b(?:apt(?:-get)?|dnf|yum|brew|pacman|apk|zypper)\s+(?:-\S+\s+)*(?:install|add|-S)\b|"
     r"\binstall\.packages\(|%pip\s+install\b", "medium", "installs packages"),
    (r"\bcurl\b[^\n]*\s(?:-d|--data\S*|-F|--form|-T|--upload-file)\b|\bscp\b|"
     r"\brsync\b[^\n]*\S:|\bsftp\b|\bftp\s|"
     r"requests\.(?:post|put|patch)\(|httpx\.(?:post|put|patch)\(|\bnc\s+\S+\s+\d+",
     "medium", "sends data over the network"),
    (r"\bgit\s+push\b[^\n]*(?:--force|\s-f)\b|\bgit\s+reset\s+--hard\b|"
     r"\bgit\s+clean\s+-[a-z]*f", "medium", "rewrites or discards git history or files"),
    (r"\bos\.(?:remove|unlink|rmdir)\(|\.unlink\(|\brm\s|\bRemove-Item\b|\bunlink\(",
     "medium", "deletes files"),
    (r"\bkill(?:all)?\s+-(?:9|KILL)\b|\bpkill\b|\bos\.kill\(", "medium", "kills processes"),
    (r"\bcrontab\b|\bsystemctl\s+(?:enable|disable|stop|mask)\b|~/\.(?:bashrc|zshrc|profile)\b",
     "medium", "changes how the system or the shell starts"),
]
_RULES = [(re.compile(p, re.M), level, why) for p, level, why in _RAW_RULES]

# Absolute, home or parent-relative paths a piece of code mentions (in quotes, after a space,
# an `=` or a redirection, or at the start of a line).
_PATH = re.compile(r"""(?:(?<=["'=>\s])|^)(~(?:/[^\s"'`;|&)]*)?|\.\./[^\s"'`;|&)]*|"""
                   r"""/[A-Za-z_.~-][^\s"'`;|&)]*)""", re.M)
# What makes the line a path sits on a write: a writing command, or a Python call that opens
# for writing or writes. (A shell redirection counts only for the path it points at.)
_WRITE = re.compile(r"""\b(?:cp|mv|tee|touch|mkdir|rm|rmdir|install|ln|chmod|chown|dd|truncate|
                    sed\s+-i)\b|open\([^)]*,\s*(?:mode\s*=\s*)?['"][rbt]*[wax]|
                    \.write_(?:text|bytes)\(|\.(?:mkdir|touch|unlink|rename|replace)\(|
                    shutil\.(?:copy\w*|move|rmtree)\(|os\.(?:remove|rename|makedirs|mkdir)\(""",
                    re.X)
_REDIRECT = re.compile(r"(?<![<>=\-])>>?\s*$")
# Paths that are read or written everywhere without touching the user's files.
_HARMLESS = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/tmp",
             "/var/tmp", "/usr/bin/env", "/bin/sh", "/bin/bash", "/usr/bin/python",
             "/proc/self")


def raise_to(risk: Risk, level: RiskLevel, reason: str) -> None:
    """Add a reason and raise the level to at least `level`."""
    if reason not in risk.reasons:
        risk.reasons.append(reason)
    if _ORDER.index(level) > _ORDER.index(risk.level):
        risk.level = level


def assess(code: str, workspace: Path, restricted: bool) -> Risk:
    """The risk of running `code` in `workspace`. Writes outside the workspace are high risk;
    with `restricted` (restrictToWorkspace) any path outside it is."""
    risk = Risk()
    for pattern, level, reason in _RULES:
        if pattern.search(code):
            raise_to(risk, level, reason)
    for line in code.splitlines():
        writes = bool(_WRITE.search(line))
        for match in _PATH.finditer(line):
            raw = match.group(1)
            target = writes or bool(_REDIRECT.search(line[:match.start()]))
            if not (restricted or target) or _harmless(raw):
                continue
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = workspace / path
            if _inside(path, workspace):
                continue
            if target:
                raise_to(risk, "high", f"may write outside the workspace ({raw})")
            else:
                raise_to(risk, "high", f"uses a path outside the workspace ({raw})")
    return risk


def _harmless(raw: str) -> bool:
    return (raw.startswith(_HARMLESS) or len(raw) < 3 or raw.startswith("//")
            or re.fullmatch(r"/[\d.]+", raw) is not None)  # `x /2`, a URL's //host


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


# Safe mode: semgrep ---------------------------------------------------------------------------

RULES_FILE = Path(__file__).with_name("semgrep-rules.yaml")  # local rules: no network needed
SEMGREP_MISSING = ("safe mode: semgrep is not installed (pip install semgrep), so only oi-lsp's "
                   "built-in risk check ran")

def semgrep_path() -> str | None:
    return shutil.which("semgrep")


async def semgrep_scan(code: str, language: str, timeout: float = 60) -> list[str] | None:
    """semgrep's findings for `code` with oi-lsp's own rules ([] when it finds nothing), or
    None when semgrep is not installed. A scan that fails is reported as a finding."""
    exe = semgrep_path()
    if exe is None:
        return None
    suffix = languages.suffix(language)
    fd, name = await asyncio.to_thread(tempfile.mkstemp, suffix, "oi-scan-")
    try:
        await asyncio.to_thread(_write, fd, code)
        proc = await asyncio.create_subprocess_exec(
            exe, "scan", "--config", str(RULES_FILE), "--json", "--quiet", "--metrics", "off",
            "--disable-version-check", name,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            stdin=asyncio.subprocess.DEVNULL)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return ["safe mode: semgrep did not finish in time"]
        try:
            results = json.loads(out or b"{}").get("results", [])
        except ValueError:
            return ["safe mode: semgrep's output could not be read"]
        return [f"semgrep: {r.get('extra', {}).get('message') or r.get('check_id')}"
                for r in results]
    finally:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(os.unlink, name)


def _write(fd: int, text: str) -> None:
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
