"""The extension's own checks, run by the project's test command: its unit tests (settings,
server path lookup, message routing, the page's CSP) under node's test runner, the type check
and eslint."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vscode.conftest import exclusive, run

pytestmark = pytest.mark.timeout(1800)  # the first test may install the stack


def test_unit_tests_pass(vscode_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    with exclusive(tmp_path_factory):  # it compiles out/, which other workers' tests read
        output = run(["npm", "run", "test:unit"])
    assert "# fail 0" in output
    assert "# pass 0" not in output


def test_typecheck_and_lint_are_clean(vscode_stack: Path) -> None:
    run(["npx", "tsc", "--noEmit"])
    run(["npx", "eslint", "src"])
