"""Only a message whose first line is a command is one: a pasted notebook cell never runs
unapproved, and a `%%` command runs its own line only."""

from __future__ import annotations

from pathlib import Path

import pytest

from oi_lsp.client import OIClient
from oi_lsp.core.magic import is_command
from tests import modelserver as ms
from tests.modelserver import ModelServer


@pytest.mark.parametrize(("message", "command"), [
    ("%help", True), ("  %undo  ", True), ("%% ls -l", True), ("%%", True),
    ("%save_message out.json", True), ("%bogus", True), ("%bogus thing", True),
    ("%%bash\necho pwned > f\nWhy does this cell fail?", False), ("%%bash", False),
    ("%matplotlib inline\nimport pylab\nwhy is it blank?", False), ("100% sure?", False),
    ("% not a command", False), ("%% ls\nrm -rf x", True), ("%help\nand then some", True),
])
def test_what_is_a_command(message: str, command: bool) -> None:
    assert is_command(message) is command


async def test_a_pasted_cell_goes_to_the_model(client: OIClient, model: ModelServer,
                                               workspace: Path) -> None:
    cell = "%%bash\necho pwned > f\nWhy does this cell fail?"
    model.script(ms.text("The cell magic needs IPython."))
    result = await client.chat(cell)
    assert result["status"] == "done"
    assert model.requests[-1]["messages"][-1]["content"] == cell
    assert not (workspace / "f").exists()


async def test_a_shell_command_runs_its_own_line_only(client: OIClient,
                                                      workspace: Path) -> None:
    result = await client.chat("%% echo one\necho two > f")
    assert result["status"] == "done"
    said = client.stream(result["turnId"], "console")
    assert "one" in said and "the lines after it were not run" in said
    assert not (workspace / "f").exists()
