"""What oi-lsp changes in httpx: all of it here, tested by tests/test_httpx_compat.py (which
fails loudly when a release moves what this relies on)."""

from __future__ import annotations

import sys


def skip_cli() -> None:
    """httpx's package import also imports its command-line tool (`httpx._main`) whenever
    click, rich and pygments are installed, as they are here (the terminal chat uses rich):
    ~96 modules and ~5.7 MiB in a server that never runs it. A None in sys.modules makes that
    import fail as if they were missing, and httpx puts its small stand-in `main` there
    instead. Only before httpx is first imported; afterwards nothing changes."""
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
