"""Model text, proposed code and run output cannot drive the user's terminal: every control
character but newline and tab is removed before `oi-lsp chat` writes them, one by one (so no
escape is rebuilt from pieces, nor across chunks), and the REPLs' output loses them too."""

from __future__ import annotations

from pathlib import Path

import pytest

from oi_lsp.executors.base import strip_ansi
from oi_lsp.tui.render import safe, safe_output
from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.test_chat import chat_env, run_chat

ESC, BEL = "\x1b", "\x07"
ATTACKS = [
    f"{ESC}{ESC}]0;x{BEL}]52;c;ZXZpbA=={BEL}",  # OSC 52 rebuilt by a one-pass cleaner
    f"{ESC}c", f"{ESC}7hidden{ESC}8", f"{ESC}(0", f"{ESC}[>0c", "\x9b2J", "\x9d0;t\x9c",
    f"print('x'){ESC}[2K{ESC}[1A{ESC}[2K", "a\rb", "\u202eevil\u202c",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_nothing_a_terminal_obeys_survives(attack: str) -> None:
    for clean in (safe(attack), safe_output(attack)):
        assert not any(ord(c) < 32 and c not in "\n\t" for c in clean), repr(clean)
        assert not any(0x7f <= ord(c) < 0xa0 or 0x202a <= ord(c) <= 0x202e for c in clean)
    cleaned = strip_ansi(attack)
    assert ESC not in cleaned and BEL not in cleaned and "\x9b" not in cleaned


def test_split_across_chunks() -> None:
    # An escape cut between two chunks: each piece is cleaned on its own, nothing joins.
    first, second = safe(f"text{ESC}"), safe("]52;c;ZXZpbA==\x07")
    assert ESC not in first + second
    assert strip_ansi(f"out{ESC}") + strip_ansi("[2Kmore") == "out[2Kmore"


def test_the_chat_writes_no_escape(model: ModelServer, data_dir: Path, workspace: Path) -> None:
    code = ("print('visible line')\n# hidden line\x1b[2K\x1b[1A\x1b[2K\n"
            "print('\\x1b]52;c;ZXZpbA==\\x07osc')")
    model.script(ms.tool("python", code, say=f"Look {ESC}]0;pwned{BEL}here \x9b31m."),
                 ms.text("Done."))
    done = run_chat(["-y", "go"], workspace, chat_env(data_dir, model))
    assert done.returncode == 0, done.stderr
    assert ESC not in done.stdout and "\x9b" not in done.stdout and BEL not in done.stdout
    # What was hidden is shown as text.
    assert "# hidden line[2K[1A[2K" in done.stdout
    assert "]0;pwned" in done.stdout
    assert "\nosc\n" in done.stdout  # the run's own escape was removed whole by the REPL reader
