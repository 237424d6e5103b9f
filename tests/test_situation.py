"""It knows where it is: the system message names the OS, the shell, the workspace, the kernel's
Python, the languages and the date; `.oi/instructions.md` is added in trusted workspaces only.
Checked in what the scripted model was sent by a real server."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

from tests import modelserver as ms
from tests.conftest import StartServer
from tests.modelserver import ModelServer

INSTRUCTIONS = "Always answer in French. Marker: 7f3c9a."


def system_of(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list) and messages[0]["role"] == "system"
    return str(messages[0]["content"])


async def test_system_message_says_where_it_is(start_server: StartServer, model: ModelServer,
                                               workspace: Path) -> None:
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "instructions.md").write_text(f"# Rules\n{INSTRUCTIONS}\n")
    client = await start_server(workspace, options=model.settings(systemMessage="Be brief."))
    model.script(ms.text("Bonjour."))
    assert (await client.chat("hi"))["status"] == "done"
    system = system_of(model.requests[0])
    assert f"Operating system: {platform.system()} {platform.release()}" in system
    assert f"Workspace folder (the working directory): {workspace}." in system
    assert f"Python in the kernel: {platform.python_version()}." in system
    assert "Languages that can run here: python, shell" in system
    assert f"{datetime.date.today():%B %d, %Y}" in system
    # systemMessage still appends; the workspace's instructions come last.
    assert system.index("Be brief.") < system.index(INSTRUCTIONS)
    assert system.rstrip().endswith(INSTRUCTIONS)


async def test_instructions_only_in_trusted_workspaces(start_server: StartServer,
                                                      model: ModelServer,
                                                      workspace: Path) -> None:
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "instructions.md").write_text(INSTRUCTIONS)
    client = await start_server(workspace, options=model.settings(trusted=False))
    model.script(ms.text("Hello."))
    assert (await client.chat("hi"))["status"] == "done"
    system = system_of(model.requests[0])
    assert f"Workspace folder (the working directory): {workspace}." in system
    assert INSTRUCTIONS not in system and "instructions.md" not in system
