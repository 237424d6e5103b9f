"""The risk check's view of shell commands: words as the shell would see them, not as typed.

Tokenized as POSIX shells do (quotes and backslashes removed, so `r''m -rf` is `rm -rf`), split
into pipelines and simple commands at the shell's operators, with command substitutions and
`sh -c` strings looked into. Not a full shell parser: bashlex, the one on PyPI, is unmaintained
since 2023 and gives up on much of what bash accepts, where a check must read anything and may
only ever add caution. The tokenizer is one regex rather than the standard library's shlex,
which gives the same words for what is checked here but reads a character at a time in Python
(a fifth of the time on a 2000-line script).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..protocol import RiskLevel

Finding = tuple[RiskLevel, str]

_SEPARATORS = {";", ";;", "&", "&&", "||", "\n", "(", ")", "()", "{", "}", "|&"}
# Words before the command that leave it the same command (`sudo` is judged on its own).
_WRAPPERS = {"sudo", "doas", "env", "nohup", "time", "nice", "exec", "command", "builtin",
             "xargs", "timeout", "stdbuf", "ionice", "setsid", "chronic", "unbuffer", "then",
             "do", "else", "!", "if", "while", "until"}
INTERPRETERS = {"sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "python", "python2",
                "python3", "perl", "ruby", "node", "php", "pwsh", "lua", "Rscript", "osascript"}
_FETCHERS = {"curl", "wget", "fetch", "aria2c", "http", "xh"}
_DECODERS = {"base64", "base32", "xxd", "openssl", "uudecode", "gunzip", "zcat", "rev", "tr",
             "printf"}
# Commands that delete, move or change what their arguments name.
_CHANGERS = {"rm", "rmdir", "mv", "chmod", "chown", "chgrp", "shred", "truncate", "find",
             "rsync", "unlink", "srm", "wipe", "cp", "ln", "tee", "dd", "install", "chattr"}
HOME_WORDS = {"~", "~/", "~/*", "~/.", "$HOME", "${HOME}", "$HOME/", "${HOME}/", "$HOME/*",
              "${HOME}/*", "/home", "/home/*", "/root", "/Users", "/Users/*"}
_SYSTEM_WORDS = {"/", "/*", "/etc", "/usr", "/bin", "/boot", "/var", "/lib", "/opt", "/sbin",
                 "/System", "/Library", "C:\\", "C:\\Windows"}
# Folders a build or a tool makes and that are safe to delete (inside the workspace).
_SCRATCH = re.compile(r"(?:build|_build|dist|out|target|node_modules|__pycache__|\.\w*cache|"
                      r"\.cache|\.tox|\.nox|htmlcov|\.coverage|coverage|tmp|temp|\.tmp|"
                      r"[\w.*-]+\.egg-info|\.next|\.gradle|obj|\.eggs|\.ipynb_checkpoints)")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")


# A shell word (unquoted runs, quoted strings and escapes, glued together), an operator, or a
# comment; one regex pass in C instead of shlex's character-at-a-time Python loop.
_TOKEN = re.compile(r"""(?P<comment>(?<![^\s;&|()<>])\#[^\n]*)"""
                    r"""|(?P<word>(?:[^\s'"\\;&|()<>`]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.|`[^`]*`)+)"""
                    r"""|(?P<op>\|\||&&|;;|\|&|>>|[;&|()<>\n])|(?P<stray>['"`\\])""")
_QUOTED = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)""", re.S)


def _unquote(match: re.Match[str]) -> str:
    single, double, escaped = match.groups()
    if single is not None:
        return single
    if double is not None:
        return re.sub(r"\\(.)", r"\1", double, flags=re.S)
    return escaped or ""


def words(text: str) -> list[str]:
    """The shell words of `text` as the shell would see them (quotes and backslashes removed:
    `r''m` is `rm`), and its operators; newlines are kept as separators."""
    tokens = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "word":
            word = match.group()
            tokens.append(_QUOTED.sub(_unquote, word) if "'" in word or '"' in word
                          or "\\" in word else word)
        elif kind == "op":
            tokens.append(match.group())
    return tokens


def pipelines(tokens: list[str]) -> Iterator[list[list[str]]]:
    """Pipelines (lists of commands, each a list of words, redirections kept)."""
    pipeline: list[list[str]] = []
    command: list[str] = []
    for word in tokens:
        if word == "|":
            pipeline.append(command)
            command = []
        elif word in _SEPARATORS:
            if command:
                pipeline.append(command)
            if pipeline:
                yield pipeline
            pipeline, command = [], []
        elif word:
            command.append(word)
    if command:
        pipeline.append(command)
    if pipeline:
        yield pipeline


def argv(command: list[str]) -> list[str]:
    """The command as run: without leading assignments and wrappers, its name a basename."""
    rest = list(command)
    while rest and (rest[0] in _WRAPPERS or re.fullmatch(r"\w+=\S*", rest[0])
                    or (rest[0].startswith("-") and len(rest) > 1)
                    or (rest[0].isdigit() and len(rest) > 1)):  # `timeout 5 ...`
        rest.pop(0)
    if rest:
        rest[0] = posixpath.basename(rest[0].lstrip("\\"))
    return rest


# A logical line is only tokenized when, quotes and backslashes removed, it names a command
# the checks below look at, or the home folder. (Words by str.split after str.translate, both
# in C: a regex of the names with \b tries its alternation at every character.)
_TRIGGERS = frozenset(_CHANGERS | INTERPRETERS | {"eval", "source", "exec", "sudo", "doas"})
_APART = str.maketrans({c: " " for c in ";&|()<>`{}=$!"} | {"'": None, '"': None, "\\": None})
_CONTINUED = re.compile(r"(?:\\|\||&&|\|\|)\s*$")


def _triggered(text: str) -> bool:
    if "~" in text or "HOME" in text or text.lstrip().startswith(". ") or "\n. " in text:
        return True
    return any(word.rsplit("/", 1)[-1] in _TRIGGERS
               for word in set(text.translate(_APART).split()))


def relevant(text: str) -> str:
    r"""`text` with the logical lines no check can flag left out (a line continued with `\`,
    `|`, `&&` or an open quote is one with the next)."""
    if not _triggered(text):
        return ""  # the common case: nothing to look at
    kept: list[str] = []
    logical: list[str] = []
    for line in text.split("\n"):
        logical.append(line)
        joined = "\n".join(logical)
        open_quote = joined.count("'") % 2 or joined.count('"') % 2
        if _CONTINUED.search(line) or (open_quote and len(logical) < 50):
            continue
        if _triggered(joined):
            kept.append(joined)
        logical = []
    if logical:
        kept.append("\n".join(logical))
    return "\n".join(kept)


def check(text: str, depth: int = 0) -> list[Finding]:
    """What a shell would do with `text` that needs caution."""
    found: list[Finding] = []
    tokens = words(relevant(text) if depth == 0 else text)
    for pipeline in pipelines(tokens):
        found += _pipeline(pipeline)
        for command in pipeline:
            found += check_argv(argv(command))
            found += _redirections(command)
    if depth < 3:  # what $(...) and `...` run, and `sh -c '...'`
        for word in tokens:
            for match in _SUBSTITUTION.finditer(word):
                found += check(match.group(1) or match.group(2) or "", depth + 1)
        for pipeline in pipelines(tokens):
            for command in pipeline:
                found += _shell_c(argv(command), depth)
    return found


def _pipeline(pipeline: list[list[str]]) -> list[Finding]:
    found: list[Finding] = []
    before: set[str] = set()  # the commands earlier in the pipeline
    for command in pipeline:
        args = argv(command)
        if not before or not args or args[0] not in INTERPRETERS or _has_script(args):
            before.add(args[0] if args else "")
            continue
        before.add(args[0])
        if before & _FETCHERS:
            found.append(("high", "runs a script straight from the internet (curl | sh)"))
        elif before & _DECODERS:
            found.append(("high", "runs decoded text (base64 -d | sh)"))
        else:
            found.append(("high", f"pipes text into an interpreter (| {args[0]})"))
    return found


def _has_script(args: list[str]) -> bool:
    """Whether an interpreter was given a script or code to run (not stdin)."""
    for arg in args[1:]:
        if arg in ("-", "-s"):
            return False
        if not arg.startswith("-"):
            return True
        if arg in ("-c", "-e", "-m", "-E", "--eval", "-r"):
            return True
    return False


def _shell_c(args: list[str], depth: int) -> list[Finding]:
    """`sh -c CODE` and `eval CODE`: CODE's own risk, and where CODE comes from."""
    if len(args) >= 3 and args[0] in INTERPRETERS and args[1] == "-c":
        code = args[2]
    elif len(args) >= 2 and args[0] in ("eval", "source", "."):
        code = " ".join(args[1:])
    else:
        return []
    found = check(code, depth + 1)
    for match in _SUBSTITUTION.finditer(code):
        names = {(argv(c) or [""])[0] for p in pipelines(words(match.group(1) or match.group(2)))
                 for c in p}
        if names & _FETCHERS:
            found.append(("high", "runs a script straight from the internet (curl | sh)"))
        elif names & _DECODERS:
            found.append(("high", "runs decoded text (base64 -d | sh)"))
    return found


def check_argv(args: list[str]) -> list[Finding]:
    """One simple command, as a list of words (also a Python subprocess call's list)."""
    if not args:
        return []
    name, rest = args[0], args[1:]
    found: list[Finding] = []
    flags = "".join(a[1:] for a in rest if a.startswith("-") and not a.startswith("--"))
    if name == "rm" and ("r" in flags or "R" in flags or "f" in flags
                         or {"--recursive", "--force"} & set(rest)):
        targets = [a for a in rest if not a.startswith("-")]
        if not targets or not all(is_scratch(t) for t in targets):
            found.append(("high", "deletes files recursively or by force (rm -rf)"))
    if name == "find" and ("-delete" in rest or _find_runs_rm(rest)):
        found.append(("medium", "deletes files (find -delete)"))
    if name in ("chmod", "chown", "chgrp") and ("R" in flags or "--recursive" in rest):
        found.append(("high", "changes permissions or owners recursively"))
    if name in _CHANGERS or name == "find":
        for arg in rest:
            target = arg.rstrip("/") or "/"
            if arg in HOME_WORDS or target in HOME_WORDS:
                found.append(("high", f"{name} on the home folder ({arg})"))
            elif arg in _SYSTEM_WORDS or target in _SYSTEM_WORDS:
                found.append(("high", f"{name} on a system folder ({arg})"))
    if name in ("source", ".") and rest and rest[0].startswith("/dev/fd"):
        found.append(("high", "runs a script it reads from another command"))
    return found


def _find_runs_rm(rest: list[str]) -> bool:
    for i, arg in enumerate(rest[:-1]):
        if arg in ("-exec", "-execdir", "-ok") and posixpath.basename(rest[i + 1]) in (
                "rm", "shred", "unlink"):
            return True
    return False


def _redirections(command: list[str]) -> list[Finding]:
    found: list[Finding] = []
    for i, word in enumerate(command[:-1]):
        if word in (">", ">>", ">|", "&>") and command[i + 1] in HOME_WORDS:
            found.append(("high", f"writes over the home folder ({command[i + 1]})"))
    return found


def is_scratch(path: str) -> bool:
    """Whether `path` is a relative path to a build, cache or temp folder (`build/`,
    `./node_modules`, `docs/_build`, `dist/*`): deleting it loses nothing a build cannot make."""
    if path.startswith(("/", "~", "-")) or any(c in path for c in "$`?[{\\"):
        return False
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if parts and parts[-1] == "*":  # build/*
        parts.pop()
    return (bool(parts) and ".." not in parts and "*" not in "".join(parts[:-1])
            and _SCRATCH.fullmatch(parts[-1]) is not None)
