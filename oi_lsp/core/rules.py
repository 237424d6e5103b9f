"""Approval rules finer than autoRun: the setting `autoRunRules` decides, first match wins,
whether proposed code runs without asking, waits for the user, or is refused; and the rule an
"always for this command" answer saves in the workspace's `.oi/profile.yaml`.

Precedence (docs/protocol.md): a matching `deny` refuses, whatever else is set; then high risk,
safe mode `ask` and an untrusted workspace always ask; then the first matching rule's `allow`
or `ask`; with no rule matching, `autoRun`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..common import files, languages
from ..protocol import AlwaysScope, AutoRunRule, Risk
from .profiles import ProfileError, layer_of
from .settings import Settings
from .trust import WORKSPACE_PROFILE

Verdict = Literal["run", "ask", "deny"]

# Languages whose code is a command line, where "always for `ls`" means something.
_SHELLS = {"shell", "zsh", "fish", "powershell"}
# A command's first word, and arguments without chaining, substitution or redirection.
_WORD = re.compile(r"[A-Za-z0-9_][\w.+-]*")
_ARGS = r"(?:[ \t]+[^\n;&|`$()<>]*)?"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str = ""  # for `deny`: what the user and the model are told


def canonical(language: str) -> str:
    lang = languages.find(language)
    return lang.name if lang is not None else language.strip().lower()


def first_match(rules: list[AutoRunRule] | None, language: str,
                code: str) -> tuple[int, AutoRunRule] | None:
    """The first rule (1-based index) for this language whose pattern is found in the code
    (its surrounding whitespace removed)."""
    text = code.strip()
    lang = canonical(language)
    for index, rule in enumerate(rules or (), 1):
        if rule.language is not None and canonical(rule.language) != lang:
            continue
        if re.search(rule.pattern, text):
            return index, rule
    return None


def decide(settings: Settings, language: str, code: str, risk: Risk) -> Decision:
    """Whether the code runs at once, waits for the user, or is refused (see the module)."""
    match = first_match(settings.auto_run_rules, language, code)
    if match is not None and match[1].action == "deny":
        index, rule = match
        first = code.strip().splitlines()[0] if code.strip() else ""
        shown = first if len(first) <= 80 else first[:77] + "..."
        return Decision("deny", f"Not run: autoRunRules rule {index} (deny `{rule.pattern}`) "
                                f"refuses this {language} code: {shown}")
    if risk.level == "high" or settings.safe_mode == "ask" or not settings.trusted:
        return Decision("ask")
    if match is not None:
        return Decision("run" if match[1].action == "allow" else "ask")
    # Medium risk runs by itself only inside the OS sandbox, which bounds what it can do.
    confined = settings.sandbox not in (None, "off")
    auto = settings.auto_run and (risk.level == "low" or confined)
    return Decision("run" if auto else "ask")


def command_word(language: str, code: str) -> str | None:
    """The first word of code that is one simple shell command (`ls -la src`), the word an
    "always for this command" rule allows; None for anything else."""
    if canonical(language) not in _SHELLS:
        return None
    word = _WORD.match(code.strip())
    if word is None or not re.fullmatch(_command_pattern(word[0]), code.strip()):
        return None
    return word[0]


def _command_pattern(word: str) -> str:
    return f"^{re.escape(word)}{_ARGS}$"


def rule_for(language: str, code: str, scope: AlwaysScope) -> AutoRunRule:
    """The allow rule "always" adds: the command's first word (when the code is one simple
    shell command), else the code's exact text."""
    word = command_word(language, code) if scope == "command" else None
    pattern = _command_pattern(word) if word else f"^{re.escape(code.strip())}$"
    return AutoRunRule(language=canonical(language), pattern=pattern, action="allow")


def save(folder: Path, rule: AutoRunRule) -> Path:
    """Add the rule to the end of the workspace's .oi/profile.yaml (blocking): appended as
    text when the file has no rules yet, so its comments stay; else the file is rewritten.
    Raises ProfileError, and writes nothing, when the file is broken."""
    import yaml  # lazy: only when a file is read or written (~8 ms of the server's start)

    path = folder / WORKSPACE_PROFILE
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        data = yaml.safe_load(text) if text.strip() else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProfileError(f"profile {path}: cannot read it: {exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping of keys to values")
    entry = rule.wire()
    key = next((k for k in ("autoRunRules", "auto_run_rules") if k in data), None)
    if key is None:
        fragment = yaml.safe_dump({"autoRunRules": [entry]}, sort_keys=False,
                                  allow_unicode=True)
        body = text + ("\n" if text and not text.endswith("\n") else "") + fragment
    elif not isinstance(data[key], list):
        raise ProfileError(f"profile {path}: key {key!r}: expected a list of rules")
    elif entry in data[key]:
        return path  # already there
    else:
        data[key].append(entry)
        body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    layer_of(yaml.safe_load(body), path)  # what is written must read back
    files.atomic_write(path, body.encode("utf-8"))
    return path
