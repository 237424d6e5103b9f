"""The languages oi-lsp knows: names, aliases, how each runs, the file suffix of its code and
the highlighter that colours it. One table for every layer (the executors run by it, the risk
scan and the terminal client name files and pick colours by it); it imports nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["kernel", "subprocess", "compile", "display"]


@dataclass(frozen=True, slots=True)
class Language:
    """A language we know how to run: by a Jupyter kernel when one is installed for it, else
    by `kind` with the first of `programs` found on PATH."""

    name: str
    aliases: tuple[str, ...]
    kind: Kind
    programs: tuple[str, ...]
    install_hint: str
    suffix: str  # of a file holding its code
    lexer: str  # Pygments' name for it
    fallback: str | None = None  # the language to run instead when this one is not installed


LANGUAGES: dict[str, Language] = {lang.name: lang for lang in (
    Language("python", ("py", "python3", "ipython"), "kernel", (),
             "pip install ipykernel", ".py", "python"),
    Language("shell", ("bash", "sh", "console", "terminal"), "subprocess", ("bash",),
             "install bash", ".sh", "bash"),
    Language("zsh", (), "subprocess", ("zsh",), "install zsh", ".sh", "bash",
             fallback="shell"),
    Language("fish", (), "subprocess", ("fish",), "install fish", ".fish", "fish",
             fallback="shell"),
    Language("javascript", ("js", "node", "nodejs"), "subprocess", ("node", "nodejs"),
             "install Node.js (Debian: apt install nodejs)", ".js", "javascript"),
    Language("ruby", ("rb",), "subprocess", ("ruby",), "install Ruby (Debian: apt install ruby)",
             ".rb", "ruby"),
    Language("r", ("rscript",), "subprocess", ("R",),
             "install R (Debian: apt install r-base-core)", ".R", "r"),
    Language("powershell", ("pwsh", "ps1"), "subprocess", ("pwsh",),
             "install PowerShell 7 (pwsh)", ".ps1", "powershell"),
    Language("java", (), "compile", ("javac",),
             "install a JDK 11+ (Debian: apt install default-jdk-headless)", ".java", "java"),
    Language("applescript", ("osascript",), "compile", ("osascript",),
             "AppleScript runs only on macOS (osascript)", ".applescript", "applescript"),
    Language("html", ("htm",), "display", (), "", ".html", "html"),
)}

ALIASES: dict[str, str] = {alias: lang.name for lang in LANGUAGES.values()
                           for alias in (lang.name, *lang.aliases)}


def find(name: str) -> Language | None:
    """The language `name` (any alias, any case) means, if it is one of ours."""
    key = ALIASES.get(name.strip().lower())
    return LANGUAGES[key] if key is not None else None


def suffix(name: str) -> str:
    """The file suffix for code in `name` (".txt" for a language we do not know)."""
    lang = find(name)
    return lang.suffix if lang is not None else ".txt"


def lexer(name: str) -> str:
    """The highlighter's name for `name` (the name itself for one we do not know)."""
    lang = find(name)
    return lang.lexer if lang is not None else name.strip().lower()
