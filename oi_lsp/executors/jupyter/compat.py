"""What oi-lsp changes in jupyter_client's and ipykernel's behaviour: all of it here, tested by
tests/test_jupyter_compat.py (which fails loudly when a release moves what this relies on)."""

from __future__ import annotations

from typing import Any

import jupyter_client.session

# Added to the command of every ipykernel oi-lsp starts (not to other kernels: they would refuse
# them). Together they take about a fifth off a warm run (~1.2 ms of ~6: in bench/RESULTS.md,
# baseline A′ of row 8h against A).
IPYKERNEL_OPTIONS = (
    # ipykernel sleeps 0.5 ms before each execute_reply (a private setting), so that a front end
    # that stops reading at the reply has the cell's last output. oi-lsp reads iopub until the
    # kernel's idle status, which ipykernel sends after flushing every output: nothing is lost.
    "--Kernel._execute_sleep=0",
    # IPython's sqlite history: a thread writes each cell to ~/.ipython (or the sandbox's private
    # folder) while the cell runs, and the kernels outside the sandbox share one database. The
    # conversation is oi-lsp's record of what ran; `In`, `Out`, `_i` and %history of the
    # kernel's own session stay, kept in memory.
    "--HistoryManager.enabled=False",
)


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
