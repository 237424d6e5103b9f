"""Issue 39: the tokens sent to the model for one 3-tool task over a real MCP server (npm's
@modelcontextprotocol/server-memory), done as code (oi-lsp: one run calls the three tools,
only its print goes back) and as one tool call per step (the way agents that take MCP tools
as model tools work: every request carries every tool's schema, every result goes through the
model).

The code side is measured from the scripted model's request log of a real oi-lsp session. The
tool-call side is built from the same server's real tool schemas and the real results of the
same three calls (made here with oi-lsp's MCP client), in chat-completions form with the same
system message (less oi-lsp's index of the servers) and the same user message. Both are counted
with litellm's token counter (gpt-4o's tokenizer), tool schemas included.

The task: record ten files as entities, add an observation to each, then read the graph back
and report how many observations it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import modelserver as ms
from tests.modelserver import ModelServer

from .driver import Server

ROOT = Path(__file__).resolve().parent.parent
MEMORY = ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol" / "server-memory" / \
    "dist" / "index.js"
TASK = "Record the ten files as entities, note their size on each, and tell me the total."
FILES = [{"name": f"file{i}.txt", "entityType": "file", "observations": []} for i in range(10)]
NOTES = [{"entityName": f"file{i}.txt", "contents": [f"{100 * (i + 1)} bytes"]}
         for i in range(10)]
CODE = f"""\
from oi_mcp import memory
memory.create_entities(entities={FILES!r})
memory.add_observations(observations={NOTES!r})
graph = memory.read_graph()
notes = [o for e in graph["entities"] for o in e["observations"]]
print(len(graph["entities"]), "entities,", len(notes), "observations,",
      sum(int(o.split()[0]) for o in notes), "bytes")
"""
ANSWER = "The ten files are recorded: 5,500 bytes in all."


def _config(folder: Path) -> dict[str, Any]:
    """server-memory, its graph kept in `folder` (made here): each side starts empty."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"memory": {"command": "node", "args": [str(MEMORY)],
                       "env": {"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}}}


def count(request: dict[str, Any]) -> int:
    import litellm

    tools = request.get("tools")
    return int(litellm.token_counter(model="gpt-4o", messages=request["messages"])) + (
        int(litellm.token_counter(model="gpt-4o", text=json.dumps(tools))) if tools else 0)


async def as_code(data: Path, workspace: Path) -> tuple[list[dict[str, Any]], int]:
    """The requests oi-lsp sent for the task, and the tool calls its run made."""
    model = ModelServer().start()
    server = Server(data)
    try:
        await server.start()
        await server.initialize([workspace], model.settings(
            autoRun=True, sandbox="off", mcpServers=_config(data / "mcp-code")))
        model.script(ms.tool("python", CODE, say="I will do it in one run."), ms.text(ANSWER))
        result = await server.client.chat(TASK)
        if result["status"] != "done":
            raise RuntimeError(f"the MCP bench turn ended {result}")
        calls = sum(1 for m, p in server.client.notifications
                    if m == "oi/tool" and p["status"] == "done")
        return list(model.requests), calls
    finally:
        await server.close()
        model.stop()


async def as_tool_calls(data: Path, system: str) -> list[dict[str, Any]]:
    """The requests of the same task done as one MCP tool call per model step."""
    from oi_lsp.core.mcp_config import McpServer
    from oi_lsp.core.mcp_servers import McpServers

    servers = McpServers(lambda: {n: McpServer.model_validate(c)
                                  for n, c in _config(data / "mcp-calls").items()}, str(data))
    try:
        tools = await servers.tools("memory")
        schema = [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.input_schema}}
            for t in tools]
        messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                          {"role": "user", "content": TASK}]
        requests = []
        steps = [("create_entities", {"entities": FILES}),
                 ("add_observations", {"observations": NOTES}), ("read_graph", {})]
        for i, (name, arguments) in enumerate(steps):
            requests.append({"messages": list(messages), "tools": schema})
            result = await servers.server("memory").call(name, arguments)
            text = "".join(getattr(c, "text", "") for c in result.content)
            messages += [{"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{i}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": text}]
        requests.append({"messages": list(messages), "tools": schema})  # the answer's
        return requests
    finally:
        await servers.close()


def without_index(system: str) -> str:
    """oi-lsp's system message less its MCP section (the tool-call side has schemas)."""
    from oi_lsp.core.prompt import TOOLS_HEADING

    head, _, rest = system.partition(TOOLS_HEADING)
    parts = rest.split("\n\n", 1)
    return head.rstrip() + ("\n\n" + parts[1] if len(parts) > 1 else "")


async def measure(data: Path, workspace: Path) -> dict[str, Any]:
    code_requests, calls = await as_code(data, workspace)
    system = code_requests[0]["messages"][0]["content"]
    tool_requests = await as_tool_calls(data, without_index(system))
    code = [count(r) for r in code_requests]
    tool = [count(r) for r in tool_requests]
    return {"code": sum(code), "code_requests": len(code), "code_calls": calls,
            "tool_calls": sum(tool), "tool_requests": len(tool)}
