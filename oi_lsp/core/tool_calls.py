"""Tool calls as models really write them, repaired into (language, code).

Open Interpreter's users meet models that call `executeexecute` or `functions.execute`, name the
language as the function (`python`), wrap the JSON arguments in a Markdown fence, send the code
as a bare string, leave out `language` or spell it `Python3`. Each of these still means "run this
code", so it becomes a normal proposal (the user still approves it); only a call nothing can be
made of is refused, with a sentence for the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..common import languages

TOOL = "execute"

# A whole text that is one fenced block: ```lang\n...\n``` (the closing fence may be missing).
_FENCED = re.compile(r"\A\s*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:\n[ \t]*\1[ \t]*)?\s*\Z",
                     re.DOTALL)
# Language names models put in front of a call's name: `functions.execute`, `tools/execute`.
_NAMESPACE = re.compile(r"^.*[./:]")
_SHEBANG = re.compile(r"\A#!\s*(?:/usr)?(?:/local)?/bin/(?:env\s+)?(\w+)")
# First words that mark a line as a shell command, when the code is not Python.
_SHELL_WORDS = {"ls", "cd", "echo", "cat", "pip", "pip3", "git", "mkdir", "rm", "cp", "mv",
                "grep", "find", "curl", "wget", "apt", "apt-get", "brew", "sudo", "npm", "npx",
                "yarn", "export", "source", "chmod", "chown", "touch", "head", "tail", "which",
                "pwd", "python", "python3", "node", "conda", "uv", "make", "docker", "tar",
                "unzip", "sed", "awk", "du", "df", "ps", "kill", "open", "xdg-open", "whoami"}
# A first line shaped like a command: a word, then arguments (not `=`, `(`, `.attr`).
_COMMAND = re.compile(r"\A\s*(\./[\w.-]+|[\w-]+)(?:[ \t]+[-\w./~\"'$*]|[ \t]*(?:\n|\Z))")


@dataclass(frozen=True, slots=True)
class Repaired:
    language: str
    code: str


class Unusable(ValueError):
    """Nothing could be made of the call; the message is for the model."""


def repair(name: str, arguments: str) -> Repaired:
    """The run a tool call asks for, however sloppily written; raises Unusable."""
    hint = _language_of_name(name)
    if hint is None:
        raise Unusable(f"Unknown tool {name!r}; the only tool is "
                       f"{TOOL}(language, code).")
    language, code = _arguments(arguments)
    if not code.strip():
        raise Unusable("The call had no code to run: the arguments must be JSON with "
                       f"`language` and `code`; got {arguments[:200]!r}")
    fenced = _FENCED.match(code)
    if fenced is not None:  # code wrapped in a fence: the fence may name the language
        code = fenced[3]
        language = language or fenced[2]
    language = language or hint or guess(code)
    return Repaired(_canonical(language), code)


def _language_of_name(name: str) -> str | None:
    """"" for the execute tool under any of its sloppy names, the language for a call named
    after one (`python`), None for a tool that does not exist."""
    bare = _NAMESPACE.sub("", name.strip()).lower()
    # No name at all: some local servers drop it; execute is the only tool there is.
    if not bare or re.fullmatch(rf"(?:{TOOL})+", bare) or bare in ("run_code", "execute_code"):
        return ""
    return bare if languages.find(bare) is not None else None


def _arguments(text: str) -> tuple[str, str]:
    """(language or "", code) of the arguments: JSON, JSON in a fence, or the code itself."""
    raw = text.strip()
    fenced = _FENCED.match(raw)
    if fenced is not None and fenced[2].lower() in ("", "json", "json5"):
        inner = fenced[3].strip()
        if inner.startswith(("{", '"')):
            raw = inner  # JSON wrapped in a fence
    if raw.startswith(("{", '"')):
        try:
            value: Any = json.loads(raw)
        except ValueError:
            if raw.startswith("{"):  # broken JSON, not code: the model must send it again
                raise Unusable("The arguments were not valid JSON with `language` and "
                               f"`code`: {text[:200]!r}") from None
            value = raw
        return _from_json(value, text)
    return "", text  # a bare string: the code itself (perhaps fenced, with its language)


def _from_json(value: Any, text: str) -> tuple[str, str]:
    if isinstance(value, str):
        return "", value
    if not isinstance(value, dict) or not isinstance(value.get("code"), str):
        raise Unusable("The arguments were not valid JSON with `language` and `code`: "
                       f"{text[:200]!r}")
    language = value.get("language")
    return (language.strip() if isinstance(language, str) else ""), value["code"]


def guess(code: str) -> str:
    """The language of code given without one: a shebang's, shell for a command line (`ls
    -la`, which Python would parse too), else Python (as Open Interpreter assumes)."""
    shebang = _SHEBANG.match(code)
    if shebang is not None and languages.find(shebang[1]) is not None:
        return shebang[1].lower()
    command = _COMMAND.match(code)
    if command is not None and (command[1] in _SHELL_WORDS or command[1].startswith("./")):
        return "shell"
    return "python"


def _canonical(language: str) -> str:
    """An alias in any case (`Python3`, `BASH`) as the runner knows it; a name that is not a
    language here still goes on, and its run says what can run."""
    return language.strip().lower()
