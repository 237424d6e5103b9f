"""Per-folder settings end to end: a two-folder workspace whose folders set different
`oi.model` in their own .vscode/settings.json; each folder's chat uses its own model (sent
with oi/configure for that folder), and the header says which."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.vscode.conftest import code_server
from tests.vscode.test_e2e_ext import OI_LSP, shots
from tests.vscode.workbench import Workbench

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def two_folders(vscode_stack: Path, stack_env: dict[str, str], vsix: Path,
                model_server: ModelServer,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workbench]:
    base = tmp_path_factory.mktemp("two-folders")
    for name in ("alpha", "beta"):
        (base / name / ".vscode").mkdir(parents=True)
        (base / name / ".vscode" / "settings.json").write_text(
            json.dumps({"oi.model": f"openai/model-{name}"}))
    workspace = base / "two.code-workspace"
    workspace.write_text(json.dumps({"folders": [{"path": "alpha"}, {"path": "beta"}]}))
    with code_server(vscode_stack, stack_env, vsix, base / "cs", open_path=workspace,
                     settings={"oi.serverPath": str(OI_LSP), "oi.apiBase": model_server.url,
                               "oi.model": "openai/model-of-the-user",
                               "workbench.colorTheme": "Default Dark Modern"},
                     extra_env={"OI_API_KEY": "sk-folders"}) as wb:
        wb("command", title="Open Interpreter: Open Chat")
        wb("chatWait", selector="#oi-header:not([hidden])")
        yield wb


def switch(wb: Workbench, name: str) -> None:
    wb("chatEval", expression=f"""(() => {{
        const select = document.getElementById('oi-folder');
        select.value = [...select.options].find((o) => o.textContent === {json.dumps(name)}).value;
        select.dispatchEvent(new Event('change')); }})()""")


def test_each_folder_chats_with_its_own_model(two_folders: Workbench, model: ModelServer) -> None:
    wb = two_folders
    model.script(ms.text("Alpha here."), ms.text("Beta here."))
    wb("chatWait", selector="#oi-model", hasText="Model: openai/model-alpha")
    wb("chatSend", text="which model, alpha?")
    wb("chatWait", selector=".oi-assistant", hasText="Alpha here.")
    switch(wb, "beta")
    wb("chatWait", selector="#oi-model", hasText="Model: openai/model-beta")
    wb("chatSend", text="which model, beta?")
    wb("chatWait", selector=".oi-assistant", hasText="Beta here.")
    assert [r["model"] for r in model.requests] == ["model-alpha", "model-beta"]
    shots(wb, "two-folders")
