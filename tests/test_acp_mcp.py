"""An ACP client's mcpServers (session/new) are used: the servers become modules of the kernel,
each MCP call is a tool call of its own, and a destructive one asks with
session/request_permission first. Real npm servers, the ACP Python SDK's client side."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from acp import text_block
from acp.schema import EnvVariable, McpServerStdio

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.test_acp import Recorder, agent

SERVERS = Path(__file__).parent / "mcp" / "node_modules" / "@modelcontextprotocol"
pytestmark = pytest.mark.skipif(not (SERVERS / "server-memory").is_dir(),
                                reason="scripts/setup.d/65-mcp-servers did not install them")

CODE = """\
from oi_mcp import filesystem, memory
import oi_mcp
memory.create_entities(entities=[{{"name": "notes", "entityType": "file", "observations": []}}])
try:
    filesystem.write_file(path={path!r}, content="written over ACP")
    print("wrote it")
except oi_mcp.CallDenied as exc:
    print("refused:", exc)
print("entities:", len(memory.read_graph()["entities"]))
"""


def server(name: str, *args: str, env: dict[str, str] | None = None) -> McpServerStdio:
    node = shutil.which("node")
    assert node is not None
    return McpServerStdio(name=name, command=node,
                          args=[str(SERVERS / f"server-{name}" / "dist" / "index.js"), *args],
                          env=[EnvVariable(name=k, value=v) for k, v in (env or {}).items()])


async def test_the_clients_mcp_servers_are_modules_and_their_calls_tool_calls(
        model: ModelServer, data_dir: Path, workspace: Path) -> None:
    recorder = Recorder()
    target = workspace / "notes.md"
    async with agent(model, data_dir, recorder) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[
            server("filesystem", str(workspace)),
            server("memory", env={"MEMORY_FILE_PATH": str(data_dir / "memory.jsonl")})])
        sid = session.session_id

        # Run the code, then deny the destructive call.
        model.script(ms.tool("python", CODE.format(path=str(target))), ms.text("done"))
        recorder.choices = ["allow_once", "reject_once"]
        await conn.prompt(session_id=sid, prompt=[text_block("write the notes")])
        system = model.requests[0]["messages"][0]["content"]
        assert "`oi_mcp.filesystem` (14 tools):" in system and "`oi_mcp.memory`" in system
        asked = recorder.asked[1][0]
        assert asked.tool_call_id.startswith("mcp-") and asked.title == "filesystem.write_file"
        assert "marks destructive" in asked.content[0].content.text
        assert "written over ACP" in asked.content[0].content.text  # its arguments
        assert {o.option_id for o in recorder.asked[1][1]} == {"allow_once", "reject_once"}
        assert not target.exists()
        assert "refused: the user did not allow filesystem.write_file" in recorder.output()

        # Each MCP call: a tool call started in progress, then completed or failed.
        calls = [u for u in recorder.updates if u.session_update in ("tool_call",
                                                                      "tool_call_update")
                 and u.tool_call_id.startswith("mcp-")]
        started = {u.tool_call_id: u.title for u in calls if u.session_update == "tool_call"}
        assert sorted(started.values()) == ["filesystem.write_file", "memory.create_entities",
                                            "memory.read_graph"]
        ended = {started[u.tool_call_id]: u.status for u in calls
                 if u.session_update == "tool_call_update" and u.status}
        assert ended == {"memory.create_entities": "completed",
                         "filesystem.write_file": "failed", "memory.read_graph": "completed"}
        create = next(u for u in calls if u.session_update == "tool_call"
                      and u.title == "memory.create_entities")
        assert create.raw_input["entities"][0]["name"] == "notes"

        # Allowed, it writes.
        model.script(ms.tool("python", CODE.format(path=str(target))), ms.text("done"))
        recorder.choices = ["allow_once", "allow_once"]
        await conn.prompt(session_id=sid, prompt=[text_block("again")])
        assert target.read_text() == "written over ACP"
        assert "wrote it" in recorder.output() and "entities: 1" in recorder.output()
