"""The workspace files a piece of code names, as ACP tool call `locations`: an editor that
follows the agent opens them. A word counts when it reads as a path (quoted, or with a `/` or
a `.`) and names a file inside the workspace folder, relative to it (where the REPL runs) or
absolute."""

from __future__ import annotations

import re
from pathlib import Path

from acp.schema import ToolCallLocation

_WORD = re.compile(r""""([^"\n]{1,300})"|'([^'\n]{1,300})'|([\w./~+-]{1,300})""")
MAX_WORDS = 64  # a stat each: the check stays cheap on the event loop for any code
MAX_LOCATIONS = 10


def named_files(code: str, folder: Path) -> list[ToolCallLocation]:
    root = folder.resolve()
    found: list[ToolCallLocation] = []
    seen: set[Path] = set()
    words = (next(g for g in m.groups() if g) for m in _WORD.finditer(code))
    candidates = [w for w in words if "/" in w or "." in w.strip(".")]
    for word in candidates[:MAX_WORDS]:
        path = Path(word).expanduser()
        try:
            path = (path if path.is_absolute() else root / path).resolve()
            if path in seen or not path.is_relative_to(root) or not path.is_file():
                continue
        except (OSError, RuntimeError, ValueError):  # a loop of links, a NUL: no file
            continue
        seen.add(path)
        found.append(ToolCallLocation(path=str(path)))
        if len(found) == MAX_LOCATIONS:
            break
    return found
