"""The server for you: with no oi-lsp anywhere, the extension offers "Install oi-lsp", creates a
virtual environment in its global storage, pip-installs oi-lsp into it with progress, and starts
it. Offline-friendly: pip installs a wheel of this checkout (OI_LSP_INSTALL_SPEC, --no-deps) and
the new environment finds the dependencies through PYTHONPATH (the project's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.vscode.conftest import code_server
from tests.vscode.test_e2e_ext import shots
from tests.vscode.workbench import ROOT, Workbench

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=600)
    [built] = out.glob("oi_lsp-*.whl")
    return built


@pytest.fixture(scope="module")
def no_server(vscode_stack: Path, stack_env: dict[str, str], vsix: Path, wheel: Path,
              model_server: ModelServer,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workbench, Path]]:
    base = tmp_path_factory.mktemp("no-server")
    workspace = base / "project"
    workspace.mkdir()
    path = os.pathsep.join(d for d in stack_env["PATH"].split(os.pathsep)
                           if not (Path(d) / "oi-lsp").exists())
    site = sysconfig.get_paths()["purelib"]
    with code_server(vscode_stack, {**stack_env, "PATH": path}, vsix, base / "cs",
                     open_path=workspace,
                     settings={"oi.model": "openai/scripted", "oi.apiBase": model_server.url,
                               "workbench.colorTheme": "Default Dark Modern"},
                     extra_env={"OI_LSP_INSTALL_SPEC": f"--no-deps {wheel}",
                                "PYTHONPATH": os.pathsep.join([str(ROOT), site]),
                                "OI_API_KEY": "sk-install"}) as wb:
        yield wb, base / "cs" / "ud" / "User" / "globalStorage"


def test_install_oi_lsp_when_it_is_not_found(no_server: tuple[Workbench, Path],
                                             model: ModelServer) -> None:
    wb, storage = no_server
    offer = ".notification-toast"
    wb("wait", selector=offer, hasText="needs oi-lsp", timeout=60000)
    text = wb("eval", expression="""[...document.querySelectorAll('.notification-toast')]
        .map((t) => t.textContent).join('\\n')""")
    assert text.count("needs oi-lsp") == 1, text  # one offer, however many requests tried
    shots(wb, "install-offer", chat=False)
    wb("click", selector=".notification-toast .monaco-button", hasText="Install oi-lsp")
    wb("wait", selector=offer, hasText="oi-lsp is installed and running", timeout=300000)
    assert (storage / "oi-lsp.oi-lsp" / "venv" / "bin" / "oi-lsp").exists()
    model.script(ms.text("Served by the installed oi-lsp."))
    wb("command", title="Open Interpreter: Open Chat")
    wb("chatSend", text="are you there?")
    wb("chatWait", selector=".oi-assistant", hasText="Served by the installed oi-lsp.")
    shots(wb, "installed")
