"""Whether a confined run failed because the sandbox refused something, from its output.

Landlock refuses a file access or a TCP connect with EACCES and a signal out of the sandbox
with EPERM; each language words them its own way, always with one of these phrases. Only read
for runs of a confined REPL: there, a refusal is almost always the sandbox's (the user can see
the line and decide).
"""

from __future__ import annotations

import re

_REFUSAL = re.compile(r"permission denied|\beacces\b|operation not permitted|\beperm\b",
                      re.IGNORECASE)
_LONGEST = 300


def refusal(output: str) -> str | None:
    """The first line of `output` that reports a refusal (trimmed), or None."""
    for line in output.splitlines():
        if _REFUSAL.search(line):
            line = line.strip()
            return line if len(line) <= _LONGEST else line[:_LONGEST] + "…"
    return None
