"""`oi-lsp chat` when the sandbox blocks a run: it says what was blocked and asks whether to run
that code once outside the sandbox; -y never answers that question by itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from oi_lsp.executors.sandbox import landlock
from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.test_chat import ROOT, Term, chat_env

pytestmark = pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 or later")

OUTSIDE = "[o]utside / [n]o:"


def test_blocked_run_asks_to_run_outside(model: ModelServer, data_dir: Path, workspace: Path,
                                         tmp_path: Path) -> None:
    target = tmp_path / "outside" / "note.txt"
    target.parent.mkdir()
    code = f"open({str(target)!r}, 'w').write('hi')"
    model.script(ms.tool("python", code), ms.text("Written."),
                 ms.tool("python", code.replace("hi", "again")), ms.text("Not written."))
    # -y: autoRun, so the sandbox is on by default, and the code runs by itself in it.
    chat = Term(["-y", "write the note"], workspace, chat_env(data_dir, model))
    try:
        shown = chat.until(OUTSIDE)
        assert "blocked by the sandbox" in shown and "Permission denied" in shown
        assert "sandbox changed" not in shown  # nothing had run: restarted without a word
        assert not target.exists()
        chat.send("o")
        chat.until("Written.")
        assert target.read_text() == "hi"
        chat.until("> ")
        chat.send("once more")  # confined again; this time the user says no
        chat.until(OUTSIDE)
        chat.send("n")
        chat.until("Not written.")
        assert target.read_text() == "hi"
        artifacts = ROOT / "test-artifacts" / "sandbox"
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "chat-blocked-run.txt").write_text(chat.text)
    finally:
        chat.kill()
