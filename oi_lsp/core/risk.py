"""A cheap static risk check of proposed code: destructive or far-reaching commands, with reasons.

It reads the text, not the meaning: it can be fooled, so it only ever adds caution (a high risk
proposal is never auto-run); it never replaces the user's approval, and the OS sandbox is the
real guard. Three readers: patterns over the text (any language), Python's syntax tree
(risk_python) and the shell's words (risk_shell). Safe mode adds semgrep's findings when
semgrep is installed.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..common import languages
from ..protocol import Risk, RiskLevel
from . import risk_python, risk_shell
from .aio import to_disk

_ORDER: tuple[RiskLevel, ...] = ("low", "medium", "high")

# A command word: at the start of a line or after a shell separator, sudo, or an opening quote
# (so `subprocess.run(["reboot"])` counts but `server.shutdown()` does not).
_CMD = r"""(?:^|[;&|(`]\s*|\bsudo\s+|["'])"""

# (needles, pattern, level, reason). Patterns look at shell commands and at Python calls alike.
# A pattern is only tried on code that holds one of its needles: `in` is about a hundred times
# faster than a search starting with \b or an alternation, which re tries at every position.
# What a pattern looks for after a command's name it looks for within 2,000 characters of the
# same command: unbounded, a line of thousands of `curl`s took a minute.
_RAW_RULES: list[tuple[tuple[str, ...], str, RiskLevel, str]] = [
    (("chmod", "chown", "chgrp"),
     r"\bch(?:mod|own|grp)\s+(?:-\w+\s+)*(?:-[a-zA-Z]*R|--recursive)", "high",
     "changes permissions or owners recursively"),
    (("dd",), r"\bdd\s+[^\n|;&]{0,2000}\bof=", "high", "writes raw data to a device or file (dd)"),
    (("mkfs", "fdisk", "parted", "wipefs"),
     _CMD + r"(?:mkfs(?:\.\w+)?|fdisk|sfdisk|parted|wipefs)\b", "high",
     "formats or partitions a disk"),
    (("curl", "wget", "DownloadString"),
     r"\b(?:curl|wget)\b[^\n|]{0,2000}\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b|"
     r"\b(?:ba)?sh\s+<\(\s*(?:curl|wget)\b|\biex\b[^\n|;&]{0,2000}\bDownloadString\b", "high",
     "runs a script straight from the internet (curl | sh)"),
    (("shutdown", "reboot", "poweroff", "halt", "init", "Stop-Computer", "Restart-Computer"),
     _CMD + r"(?:shutdown|reboot|poweroff|halt)\b|\binit\s+[06]\b|"
     r"\bsystemctl\s+(?:reboot|poweroff|halt)\b|\bStop-Computer\b|\bRestart-Computer\b",
     "high", "shuts down or reboots the machine"),
    (("()",), r"(\b\w+|:)\s*\(\)\s*\{[^}]{0,200}?(?<![\w:])\1\s*\|\s*\1\s*&", "high",
     "a fork bomb"),  # bounded: `f() {` thousands of times must not take seconds
    (("<(",), r"\b(?:source|\.|(?:ba|z|da|k)?sh)\s+<\(\s*(?:curl|wget)\b", "high",
     "runs a script straight from the internet (curl | sh)"),
    (("rmSync", "rmdirSync", "rm(", "rmdir(", "FileUtils", "rimraf", "unlink(", "Remove-Item"),
     r"\b(?:fs\.(?:promises\.)?)?(?:rmSync|rmdirSync|rm|rmdir)\s*\([^;\n]{0,2000}"
     r"recursive\s*:\s*true|\bFileUtils\.(?:rm_rf|rm_r|remove_dir|remove_entry\w*|rmtree)\b|"
     r"\brimraf\b|\bunlink\([^)\n]{0,2000}recursive\s*=\s*(?:TRUE|T)\b|"
     r"\bRemove-Item\b[^\n|;&]{0,2000}-Recurse", "high", "deletes a directory tree"),
    (("homedir", "HOME", "Dir.home", "path.expand", "Path.home", "USERPROFILE", "expanduser"),
     r"(?:\.homedir\(\)|process\.env\.HOME\b|\bDir\.home\b|ENV\[[\"']HOME|"
     r"Sys\.getenv\([\"']HOME|path\.expand\([\"']~|Path\.home\(\)|\$env:USERPROFILE|"
     r"expanduser\([\"']~[/\\]?[\"']\))[^\n]{0,2000}?"
     r"(?:rm|rmSync|rmdirSync|rm_rf|rm_r|unlink|rmtree|remove|delete|rename|move|chmod)\b|"
     r"\b(?:rm|rmSync|rmdirSync|rm_rf|rm_r|rmtree|Remove-Item)\b[^\n]{0,2000}?(?:\.homedir\(\)|"
     r"process\.env\.HOME\b|\bDir\.home\b|ENV\[[\"']HOME|Path\.home\(\)|\$env:USERPROFILE)",
     "high", "deletes or moves in the home folder"),
    (("curl", "wget", "nc", "scp", "rsync"),
     r"\bcurl\b[^\n|;&]{0,2000}\s(?:-[dF]\s*\S*@|--data(?:-binary|-urlencode|-raw)?[= ]\S*@|-T\s|"
     r"--upload-file)|\bwget\b[^\n|;&]{0,2000}--(?:post|body)-file|\b(?:nc|ncat|netcat)\b[^\n|;&]{0,2000}<\s*\S|"
     r"\bscp\b[^\n|;&]{0,2000}\s\S+:|\brsync\b[^\n|;&]{0,2000}\s\S+:\S*\s*$", "high",
     "sends files over the network"),
    (("sudo", "doas"), r"\bsudo\b|\bdoas\b", "high", "runs a command as root (sudo)"),
    (("/dev/",), r">\s*/dev/(?:sd[a-z]|nvme\d|hd[a-z]|disk\d|mmcblk\d)", "high",
     "writes to a disk device"),
    (("pip", "uv", "conda", "mamba", "poetry", "npm", "yarn", "gem", "cargo", "apt", "dnf",
      "yum", "brew", "pacman", "apk", "zypper", "install.packages"),
     r"\b(?:pip3?|uv\s+pip|conda|mamba|poetry|pipx)\s+(?:add|install)\b|"
     r"\b(?:npm|pnpm|yarn)\s+(?:i|install|add)\b|\bgem\s+install\b|\bcargo\s+install\b|"
     r"\b(?:apt(?:-get)?|dnf|yum|brew|pacman|apk|zypper)\s+(?:-\S+\s+)*(?:install|add|-S)\b|"
     r"\binstall\.packages\(|%pip\s+install\b", "medium", "installs packages"),
    (("curl", "scp", "rsync", "ftp", "urlopen", "requests.", "httpx.", "nc"),
     r"\bcurl\b[^\n|;&]{0,2000}\s(?:-d|--data\S*|-F|--form|-T|--upload-file)\b|\bscp\b|"
     r"\brsync\b[^\n|;&]{0,2000}\S:|\bsftp\b|\bftp\s|\burlopen\([^)\n]{0,2000}data\s*=|"
     r"requests\.(?:post|put|patch)\(|httpx\.(?:post|put|patch)\(|\bnc\s+\S+\s+\d+",
     "medium", "sends data over the network"),
    (("git",), r"\bgit\s+push\b[^\n|;&]{0,2000}(?:--force|\s-f)\b|\bgit\s+reset\s+--hard\b|"
     r"\bgit\s+clean\s+-[a-z]*f", "medium", "rewrites or discards git history or files"),
    (("remove", "unlink", "rmdir", "Remove-Item"),
     r"\bos\.(?:remove|unlink|rmdir)\(|\.unlink\(|\bRemove-Item\b|\bunlink\(",
     "medium", "deletes files"),
    (("kill",), r"\bkill(?:all)?\s+-(?:9|KILL)\b|\bpkill\b|\bos\.kill\(", "medium",
     "kills processes"),
    (("crontab", "systemctl"), r"\bcrontab\b|\bsystemctl\s+(?:enable|disable|stop|mask)\b",
     "medium", "changes how the system or the shell starts"),
]
# Files that hold credentials: reading one hands it to the model (and its provider), sending
# one hands it to anyone. (Public keys, `.pub`, are not secret.)
_CREDENTIALS = re.compile(
    r"\bid_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?\b(?!\.pub)|\.ssh/(?:config|known_hosts)\b|"
    r"\.ssh/?(?=[\"'\s)]|$)|\.aws/credentials|\.aws/?(?=[\"'\s)]|$)|\.netrc\b|\.pgpass\b|"
    r"\.git-credentials\b|"
    r"\.docker/config\.json|\.kube/config|\.gnupg\b|\.config/gcloud\b|\.azure\b|\.pypirc\b|"
    r"\bKeychains?\b|\.password-store\b|(?<![\w.])\.env\.(?:local|production)\b")
# Files that decide what runs at login or who may log in: a write there outlives the session.
_STARTUP = re.compile(
    r"\.(?:bashrc|bash_profile|bash_login|zshrc|zprofile|zshenv|zlogin|profile|cshrc|tcshrc|"
    r"inputrc)\b|config/fish/config\.fish|\bauthorized_keys\b|\.config/autostart|"
    r"\bLaunchAgents\b|/etc/cron|\bsystemd/user\b")
_WRITES_ANY = re.compile(
    r""">>?|\btee\b|\bopen\([^)]{0,2000}['"][rbt+]*[wax]|\.write(?:_text|_bytes|lines)?\(|"""
    r"""\b(?:appendFile|writeFile|appendFileSync|writeFileSync)\b|\bFile\.(?:write|open)\b|"""
    r"""\b(?:cp|mv|ln|install|sed\s+-i)\b|Add-Content|Set-Content|Out-File""")

_RULES = [(n, re.compile(p, re.M), level, why) for n, p, level, why in _RAW_RULES]
# `rm -rf` anywhere (a shell line, a string in any language; not docker's `--rm`); what
# follows, up to the end of the command, are its targets: only build, cache and temp folders in
# the workspace are fine.
_RM = re.compile(r"(?<![-\w.])rm\s+((?:-[-\w]+\s+)*)([^\n;&|)`\"']{0,2000})")

# Absolute, home or parent-relative paths a piece of code mentions (in quotes, after a space,
# an `=` or a redirection, or at the start of a line).
_PATH = re.compile(r"""(?:(?<=["'=>\s])|^)(~(?:/[^\s"'`;|&)]*)?|\.\./[^\s"'`;|&)]*|"""
                   r"""/[A-Za-z_.~-][^\s"'`;|&)]*)""", re.M)
# What makes the line a path sits on a write: a writing command, or a Python call that opens
# for writing or writes. (A shell redirection counts only for the path it points at.)
_WRITE = re.compile(r"""\b(?:cp|mv|tee|touch|mkdir|rm|rmdir|install|ln|chmod|chown|dd|truncate|
                    sed\s+-i)\b|open\([^)]{0,2000},\s*(?:mode\s*=\s*)?['"][rbt]*[wax]|
                    \.write_(?:text|bytes)\(|\.(?:mkdir|touch|unlink)\(|
                    \.(?:rename|replace)\([^,()]*\)|  # Path's; str.replace takes two
                    \bfind\b[^\n|;&]{0,2000}-delete|
                    shutil\.(?:copy\w*|move|rmtree)\(|os\.(?:remove|rename|makedirs|mkdir)\(""",
                    re.X)
_MAX_PATHS = 200  # distinct paths outside the workspace judged per proposal
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


def assess(code: str, workspace: Path, restricted: bool, language: str | None = None) -> Risk:
    """The risk of running `code` (in `language`, when known) in `workspace`. Writes outside
    the workspace are high risk; with `restricted` (restrictToWorkspace) any path outside
    it is."""
    risk = Risk()
    for needles, pattern, level, reason in _RULES:
        if any(n in code for n in needles) and pattern.search(code):
            raise_to(risk, level, reason)
    _files(risk, code)
    for match in _RM.finditer(code) if "rm" in code else ():
        flags, targets = match.group(1), match.group(2).split()
        if targets and all(map(risk_shell.is_scratch, targets)):
            continue
        if re.search(r"(?:^|\s)-[a-zA-Z]*[rRf]|--recursive|--force", flags):
            raise_to(risk, "high", "deletes files recursively or by force (rm -rf)")
        else:
            raise_to(risk, "medium", "deletes files")
    python, found = _structure(code, language)
    # shutil.rmtree is read from Python's syntax tree when the code is Python (which follows
    # aliases and knows a temporary folder from the home folder).
    if not python and ("rmtree" in code or "removedirs" in code):
        raise_to(risk, "high", "deletes a directory tree")
    for level, reason in found:
        raise_to(risk, level, reason)
    _paths(risk, code, workspace, restricted)
    return risk


_CREDENTIAL_NEEDLES = ("id_", ".ssh", ".aws", ".netrc", ".pgpass", ".git-credentials", ".docker",
                      ".kube", ".gnupg", "gcloud", ".azure", ".pypirc", "Keychain",
                      ".password-store", ".env.")
_STARTUP_NEEDLES = (".bash", ".zsh", ".zprofile", ".zlogin", ".profile", ".cshrc", ".tcshrc",
                    ".inputrc", "config.fish", "authorized_keys", "autostart", "LaunchAgents",
                    "/etc/cron", "systemd/user")


def _files(risk: Risk, code: str) -> None:
    credential = (any(n in code for n in _CREDENTIAL_NEEDLES)
                  and _CREDENTIALS.search(code))
    if credential:
        raise_to(risk, "high", f"reads or writes a credential file ({credential.group(0)}): "
                 "its contents would reach the model, or leave the machine")
    startup = any(n in code for n in _STARTUP_NEEDLES) and _STARTUP.search(code)
    if startup and _WRITES_ANY.search(code):
        what = startup.group(0)
        raise_to(risk, "high", "lets a key log in over SSH (authorized_keys)"
                 if what == "authorized_keys" else
                 f"changes what runs when the shell or the session starts ({what})")


_SHELLS = ("shell", "zsh", "fish")
# IPython lines that are shell commands (`!cmd`, `%sx cmd`) and cells that are (`%%bash`).
_BANG = re.compile(r"^\s*(?:!|%sx\s|%system\s)(.*)$", re.M)
_SHELL_CELL = re.compile(r"\A\s*%%(?:bash|sh|script\s+\S*sh)\b[^\n]*\n?")


def _structure(code: str, language: str | None) -> tuple[bool, list[risk_shell.Finding]]:
    """Whether the code was read as Python, and what the Python and shell readers find, for
    the language the code is in (both when it is not known)."""
    known = languages.find(language) if language else None
    name = known.name if known else None
    found: list[risk_shell.Finding] = []
    python = None
    cell = _SHELL_CELL.match(code) if name in (None, "python") else None
    if cell:  # a %%bash cell is a shell script
        return False, risk_shell.check(code[cell.end():])
    if name in (None, "python"):
        shell_lines = [m.group(1) for m in _BANG.finditer(code)]
        python = risk_python.check(_BANG.sub("pass", code) if shell_lines else code)
        found += python or []
        for line in shell_lines:
            found += risk_shell.check(line)
        if name == "python":
            return python is not None, found
    if name is None or name in _SHELLS:
        found += risk_shell.check(code)
    return python is not None, found


def _paths(risk: Risk, code: str, workspace: Path, restricted: bool) -> None:
    """Paths outside the workspace that the code writes (or, when restricted, mentions)."""
    writes: dict[int, bool] = {}  # by the start of the line: whether the line writes
    judged: set[tuple[str, bool]] = set()  # (path, written): each resolved once
    root = _resolved(workspace)
    ends = [m.start() for m in re.finditer("\n", code)] if "\n" in code else []
    for match in _PATH.finditer(code):  # one pass over the text, not one per line
        if len(judged) >= _MAX_PATHS:  # enough to say it; resolving each path costs syscalls
            break
        raw = match.group(1)
        if _harmless(raw):
            continue
        line = bisect.bisect(ends, match.start())
        start = ends[line - 1] + 1 if line else 0
        if start not in writes:
            end = ends[line] if line < len(ends) else len(code)
            writes[start] = bool(_WRITE.search(code, start, end))
        # A redirection points at the path right after it: a short look back is enough.
        target = writes[start] or bool(
            _REDIRECT.search(code, max(start, match.start() - 64), match.start()))
        if not (restricted or target) or (raw, target) in judged:
            continue
        judged.add((raw, target))
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = workspace / path
        resolved = _resolved(path)
        if root is not None and resolved is not None and resolved.is_relative_to(root):
            continue
        if target:
            raise_to(risk, "high", f"may write outside the workspace ({raw})")
        else:
            raise_to(risk, "high", f"uses a path outside the workspace ({raw})")


def _harmless(raw: str) -> bool:
    if raw in ("~", "~/"):  # the home folder itself
        return False
    return (raw.startswith(_HARMLESS) or len(raw) < 3 or raw.startswith("//")
            or re.fullmatch(r"/[\d.]+", raw) is not None)  # `x /2`, a URL's //host


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


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
    fd, name = await to_disk(tempfile.mkstemp, suffix, "oi-scan-")
    try:
        await to_disk(_write, fd, code)
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
            await to_disk(os.unlink, name)


def _write(fd: int, text: str) -> None:
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
