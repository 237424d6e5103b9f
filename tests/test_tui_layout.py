"""The shape `oi_lsp/tui/` keeps: it reaches the server only through the protocol, its parts stay
small, and building the command line does not load rich or pygls."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TUI = ROOT / "oi_lsp" / "tui"
SERVER_SIDE = ("core", "executors", "lsp")  # the server's own packages


def imported(tree: ast.Module) -> set[str]:
    """Modules a file imports, relative ones made absolute from oi_lsp.tui."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ["oi_lsp", "tui"][:max(0, 2 - node.level + 1)] if node.level else []
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_tui_reaches_the_server_only_through_the_protocol() -> None:
    for path in TUI.glob("*.py"):
        for name in imported(ast.parse(path.read_text())):
            parts = name.split(".")
            assert not (parts[0] == "oi_lsp" and len(parts) > 1 and parts[1] in SERVER_SIDE), \
                f"{path.name} imports {name}"


def test_tui_classes_and_functions_stay_small() -> None:
    for path in TUI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                size = node.end_lineno - node.lineno + 1
                limit = 300 if isinstance(node, ast.ClassDef) else 60
                assert size <= limit, f"{path.name}: {node.name} is {size} lines"


def test_the_command_line_does_not_load_rich_or_pygls() -> None:
    code = ("import sys; from oi_lsp.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pygls')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
