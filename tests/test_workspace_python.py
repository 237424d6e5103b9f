"""The workspace's own Python: the kernel runs in the interpreter the `python` setting names, else
$VIRTUAL_ENV's, else the workspace's .venv, else oi-lsp's own; one without ipykernel is
answered with the command that installs it.

The virtual environments are real (`python -m venv`); the one "with ipykernel" gets it from this
checkout's environment through a .pth file, as a pip install would, without the network."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.executors import interpreter
from tests.conftest import StartServer
from tests.modelserver import ModelServer

WHERE = "import sys\nprint(sys.executable)"


def make_venv(path: Path, ipykernel: bool) -> Path:
    """A virtual environment at `path` with a module only it has (`only_here`), and, with
    `ipykernel`, this checkout's packages (ipykernel among them). Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   capture_output=True)
    python = path / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    (site / "only_here.py").write_text("WHO = 'the project venv'\n")
    if ipykernel:
        ours = sysconfig.get_paths()["purelib"]
        (site / "oi_test_borrow.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


def printed(result: dict[str, Any]) -> str:
    return "".join(o.get("content") or "" for o in result["outputs"])


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's environment without a VIRTUAL_ENV of the test runner's."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    return {}


async def test_the_python_setting_runs_the_kernel_in_that_venv(
        start_server: StartServer, model: ModelServer, workspace: Path, tmp_path: Path,
        clean_env: dict[str, str]) -> None:
    python = make_venv(tmp_path / "project-env", ipykernel=True)
    client = await start_server(workspace, options=model.settings(python=str(python)))
    result = await client.execute("python", WHERE + "\nimport only_here\nprint(only_here.WHO)")
    assert printed(result) == f"{python}\nthe project venv\n"
    langs = {i["name"]: i for i in (await client.request("oi/languages", {}))["languages"]}
    assert langs["python"]["interpreter"] == f"{python} (the python setting)"
    info = await client.chat("%info")
    assert f"Python kernel in {python} (the python setting)" in client.stream(info["turnId"])
    # Back to oi-lsp's own: the kernel restarts there, and says its variables are gone.
    await client.execute("python", "kept = 1")
    await client.request("oi/configure", {"python": None})
    again = await client.execute("python", WHERE + "\nprint('kept' in globals())")
    assert printed(again).endswith(f"{sys.executable}\nFalse\n")


async def test_a_venv_without_ipykernel_says_how_to_install_it(
        start_server: StartServer, model: ModelServer, workspace: Path, tmp_path: Path,
        clean_env: dict[str, str]) -> None:
    python = make_venv(tmp_path / "bare-env", ipykernel=False)
    client = await start_server(workspace, options=model.settings(python=str(python)))
    result = await client.execute("python", "print(1)")
    text = printed(result)
    assert result["status"] == "error"
    assert "has no ipykernel" in text
    assert f"Install it with: {python} -m pip install ipykernel" in text
    # The shell still runs, so the install the message names can be approved and run.
    shell = await client.execute("shell", "echo still here")
    assert printed(shell) == "still here\n"


async def test_the_workspace_venv_is_found_and_virtual_env_wins(
        start_server: StartServer, model: ModelServer, workspace: Path, tmp_path: Path,
        clean_env: dict[str, str]) -> None:
    own_venv = make_venv(workspace / ".venv", ipykernel=True)
    client = await start_server(workspace)
    assert printed(await client.execute("python", WHERE)) == f"{own_venv}\n"
    await client.close()
    active = make_venv(tmp_path / "active", ipykernel=True)
    client = await start_server(workspace, env={"VIRTUAL_ENV": str(tmp_path / "active")})
    assert printed(await client.execute("python", WHERE)) == f"{active}\n"


def test_choose_order(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    (folder / "venv" / "bin").mkdir(parents=True)
    (folder / "venv" / "bin" / "python").touch()
    assert interpreter.choose(None, folder, {}).source == "the workspace's venv"
    assert interpreter.choose(None, tmp_path, {}) == interpreter.OWN
    # A relative setting is the workspace's; a folder is a virtual environment's.
    chosen = interpreter.choose("venv", folder, {"VIRTUAL_ENV": "/nowhere"})
    assert chosen == interpreter.Interpreter(str(folder / "venv" / "bin" / "python"),
                                             "the python setting")
    # A VIRTUAL_ENV that is gone is passed over.
    assert interpreter.choose(None, folder, {"VIRTUAL_ENV": "/nowhere"}).source == \
        "the workspace's venv"


def test_only_a_python_kernel_command_is_changed() -> None:
    other = interpreter.Interpreter("/p/bin/python", "the python setting")
    cmd = ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "c.json"]
    assert interpreter.kernel_command(cmd, other) == ["/p/bin/python", *cmd[1:]]
    assert interpreter.kernel_command(cmd, interpreter.OWN) == cmd
    assert interpreter.kernel_command(["R", "--slave"], other) == ["R", "--slave"]
