"""The layering the tree shows is the one the code keeps: which package may import what, and
no class or function grown past what one can read at once."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "oi_lsp"
LSP_LIBRARIES = ("pygls", "lsprotocol")
MAX_CLASS = 300
MAX_FUNCTION = 60

# What each part of oi_lsp must never import (module prefixes). The core and the executors
# know nothing of LSP, so that other front ends (ACP, a shared server) can sit on them; the
# executors sit below the core; the terminal client reaches the server only through the
# protocol (its client); the shared leaf modules import nothing of oi-lsp's own.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "oi_lsp.core": (*LSP_LIBRARIES, "acp", "oi_lsp.lsp", "oi_lsp.acp", "oi_lsp.tui",
                    "oi_lsp.client", "oi_lsp.cli"),
    "oi_lsp.executors": (*LSP_LIBRARIES, "acp", "oi_lsp.core", "oi_lsp.lsp", "oi_lsp.acp",
                         "oi_lsp.tui", "oi_lsp.client", "oi_lsp.cli"),
    # The ACP front end sits on the core as the LSP one does, and never on the LSP one.
    "oi_lsp.acp": (*LSP_LIBRARIES, "oi_lsp.lsp", "oi_lsp.tui", "oi_lsp.client", "oi_lsp.cli"),
    "oi_lsp.tui": ("oi_lsp.core", "oi_lsp.executors", "oi_lsp.lsp"),
    "oi_lsp.protocol": ("oi_lsp",),
    "oi_lsp.common": ("oi_lsp",),
}
MAX_FLAT_MODULES = 6  # modules directly in oi_lsp/: the rest belongs in a package


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module `source` imports, anywhere in it (lazy and TYPE_CHECKING imports too),
    with relative imports resolved against `module`."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def violations(module: str, found: set[str]) -> list[str]:
    out = []
    for owner, banned in FORBIDDEN.items():
        if module != owner and not module.startswith(owner + "."):
            continue
        out += [f"{module} imports {name}" for name in sorted(found)
                if any(name == prefix or name.startswith(prefix + ".") for prefix in banned)]
    return out


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "drivers" not in p.parts)


def test_the_checker_catches_what_it_should() -> None:
    core = imports("from pygls import uris\nfrom ..lsp import server\n", "oi_lsp.core.x")
    assert violations("oi_lsp.core.x", core) == [
        "oi_lsp.core.x imports oi_lsp.lsp", "oi_lsp.core.x imports oi_lsp.lsp.server",
        "oi_lsp.core.x imports pygls", "oi_lsp.core.x imports pygls.uris"]
    lazy = "def f():\n    from ...core.settings import Settings\n"
    assert violations("oi_lsp.executors.jupyter.local",
                      imports(lazy, "oi_lsp.executors.jupyter.local"))
    assert violations("oi_lsp.tui.app", imports("from ..core import magic", "oi_lsp.tui.app"))
    assert not violations("oi_lsp.tui.app", imports("from .. import protocol, client",
                                                    "oi_lsp.tui.app"))
    assert not violations("oi_lsp.lsp.server", imports("import pygls", "oi_lsp.lsp.server"))
    assert violations("oi_lsp.common.files", imports("from .. import protocol",
                                                      "oi_lsp.common.files"))
    assert not violations("oi_lsp.common", imports('"""Doc."""', "oi_lsp.common", True))


def test_import_rules() -> None:
    found = []
    for path in sources():
        module = module_name(path)
        found += violations(module, imports(path.read_text(), module,
                                            path.name == "__init__.py"))
    assert found == []


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (module -> modules it imports): its strongly connected
    components of more than one module, or of one that imports itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_graph() -> dict[str, set[str]]:
    """oi_lsp's modules and which of them each imports (TYPE_CHECKING and lazy imports too:
    a circle there still means two modules that cannot be understood one without the other).
    `from pkg import name` counts as importing the module pkg.name when there is one, else pkg;
    a package's __init__ counts only for what its own code imports."""
    modules = {module_name(p): p for p in sources()}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = imports(path.read_text(), module, path.name == "__init__.py")
        graph[module] = {name for name in found if name in modules and name != module
                         and not any(other.startswith(name + ".") and other in modules
                                     for other in found)}
    return graph


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert circles({"a": {"a"}}) == [["a"]]


def test_no_import_circles() -> None:
    assert circles(module_graph()) == []


def test_few_modules_sit_flat_in_the_package() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= MAX_FLAT_MODULES, flat


def test_core_and_executors_load_without_lsp_libraries() -> None:
    """The same rule at run time: importing every module of core/ and executors/ (what an ACP
    front end would) loads neither pygls nor lsprotocol."""
    names = [module_name(p) for p in sources()
             if module_name(p).startswith(("oi_lsp.core", "oi_lsp.executors"))]
    code = (f"import importlib, sys\nfor n in {names!r}: importlib.import_module(n)\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {LSP_LIBRARIES!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_sizes(path: Path) -> None:
    too_big = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        limit = MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
        if lines > limit:
            too_big.append(f"{node.name} ({lines} lines, at most {limit})")
    assert too_big == []
