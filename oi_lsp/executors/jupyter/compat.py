"""What oi-lsp changes in jupyter_client's behaviour: all of it here, tested by
tests/test_jupyter_compat.py (which fails loudly when a release moves what this relies on)."""

from __future__ import annotations

from typing import Any

import jupyter_client.session


def _as_sent(obj: Any) -> Any:
    return obj


def keep_dates_as_text() -> None:
    """Kernel messages keep their header dates as the ISO strings the kernel sent.

    Session.deserialize runs every string of every message's header and parent header through
    a date regex and dateutil's parser (`extract_dates`): a warm run's four to six messages
    paid for it, about a twentieth of the server's own CPU for the run (py-spy), and nothing in
    oi-lsp reads a date. deserialize looks the name up in its module at every call, so
    replacing it there is enough; the server process is ours alone."""
    jupyter_client.session.extract_dates = _as_sent
