"""Building the command line (every `oi-lsp` start parses it) loads neither rich nor pygls: the
terminal client imports them only when it runs. (tests/test_layout.py keeps the import rules
and sizes of tui/ with the rest.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_command_line_does_not_load_rich_or_pygls() -> None:
    code = ("import sys; from oi_lsp.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pygls')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_command_line_does_not_load_the_terminal_client() -> None:
    # The server parses the same command line: the client's modules would only take memory.
    code = ("import sys; from oi_lsp.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('oi_lsp.tui.') "
            "and m != 'oi_lsp.tui.args'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
