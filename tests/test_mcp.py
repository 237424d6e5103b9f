"""MCP servers as code (issue 39), with real servers nobody on this project wrote (npm's
@modelcontextprotocol/server-filesystem, server-memory and server-everything, installed by
scripts/setup.d/65-mcp-servers), over stdio and streamable HTTP, a real oi-lsp and a real
kernel: the model's Python calls the tools, loops over their results and prints a summary."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, tool_results
from tests.modelserver import ModelServer

SERVERS = Path(__file__).parent / "mcp" / "node_modules" / "@modelcontextprotocol"
pytestmark = pytest.mark.skipif(not (SERVERS / "server-memory").is_dir(),
                                reason="scripts/setup.d/65-mcp-servers did not install them")


def stdio(name: str, *args: str, **more: Any) -> dict[str, Any]:
    return {"command": "node", "args": [str(SERVERS / name / "dist" / "index.js"), *args],
            **more}


def servers(workspace: Path, **more: Any) -> dict[str, Any]:
    return {"filesystem": stdio("server-filesystem", str(workspace)),
            "memory": stdio("server-memory", env={
                "MEMORY_FILE_PATH": str(workspace.parent / "memory.jsonl")}), **more}


async def start(start_server: StartServer, model: ModelServer, workspace: Path,
                **more: Any) -> OIClient:
    return await start_server(workspace, options=model.settings(
        mcpServers=servers(workspace, **more.pop("extra", {})), **more))


def tool_events(client: OIClient, status: str | None = None) -> list[dict[str, Any]]:
    return [p for m, p in client.notifications
            if m == "oi/tool" and (status is None or p["status"] == status)]


LOOP = """\
from oi_mcp import filesystem, memory
listing = filesystem.list_directory(path={folder!r})["content"].splitlines()
names = sorted(line.split(" ", 1)[1] for line in listing if line.startswith("[FILE]"))
memory.create_entities(entities=[{{"name": n, "entityType": "file", "observations": []}}
                                 for n in names])
sizes = {{}}
for n in names:
    sizes[n] = len(filesystem.read_text_file(path={folder!r} + "/" + n)["content"])
largest = max(sizes, key=sizes.get)
print(f"{{len(names)}} files, {{sum(sizes.values())}} characters, the largest {{largest}}")
print("in memory:", len(memory.read_graph()["entities"]))
"""


async def test_a_turn_loops_over_a_tools_results_and_prints_a_summary(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    for i in range(4):
        (workspace / f"note{i}.txt").write_text("x" * (10 * (i + 1)))
    # Confined: the kernel reaches oi-lsp's socket from inside the Landlock sandbox.
    client = await start(start_server, model, workspace, sandbox="workspace-write")
    model.script(ms.tool("python", LOOP.format(folder=str(workspace))), ms.text("Summarised."))
    chat = asyncio.create_task(client.chat("summarise the notes"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "run")
    assert (await asyncio.wait_for(chat, 90))["status"] == "done"

    # The model was told of the servers in a compact index: names and one line each.
    system = model.requests[0]["messages"][0]["content"]
    assert "`oi_mcp.filesystem` (14 tools):" in system
    assert "- filesystem.list_directory(): Get a detailed listing" in system
    assert "`oi_mcp.memory` (9 tools):" in system
    assert "[asks the user first]" in system.split("filesystem.write_file()")[1].split("\n")[0]
    assert '"properties"' not in system and "inputSchema" not in system  # no schemas
    assert len(system.split("The servers and their tools:")[1]) < 4000

    # What went back to the model: the summary, and a line per call.
    result = tool_results(model.requests[1])[0]
    assert "4 files, 100 characters, the largest note3.txt" in result
    assert "in memory: 4" in result
    assert result.count("⚙ filesystem.read_text_file(path=") == 4
    assert "⚙ memory.create_entities(entities=[" in result
    # The clients heard of each call as it began and ended (oi/tool), with its arguments.
    done = tool_events(client, "done")
    assert [e["tool"] for e in done] == ["list_directory", "create_entities",
                                         *["read_text_file"] * 4, "read_graph"]
    assert len(tool_events(client, "running")) == 7
    assert all(e["turnId"] == proposal["turnId"] and e["seconds"] >= 0 for e in done)
    assert done[0]["arguments"] == {"path": str(workspace)}
    assert "⚙ filesystem.list_directory(path=" in client.stream(proposal["turnId"])


async def test_a_destructive_tool_asks_first_and_a_no_is_an_exception(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    client = await start(start_server, model, workspace)
    answers = ["Deny", "Allow"]
    client.message_box = lambda message, actions: answers.pop(0)
    code = (f"from oi_mcp import filesystem\nimport oi_mcp\n"
            f"for attempt in (1, 2):\n"
            f"    try:\n"
            f"        filesystem.write_file(path={str(workspace / 'out.txt')!r}, "
            f"content=f'attempt {{attempt}}')\n"
            f"        print('written', attempt)\n"
            f"    except oi_mcp.CallDenied as exc:\n"
            f"        print('denied:', exc)\n")
    result = await client.execute("python", code)
    assert result["status"] == "ok", result
    asked = [p for m, p in client.notifications if m == "window/showMessageRequest"]
    assert len(asked) == 2
    assert "filesystem.write_file, which its server marks destructive" in asked[0]["message"]
    assert '"content": "attempt 1"' in asked[0]["message"] and asked[0]["actions"] == [
        "Allow", "Deny"]
    output = client.stream(result["turnId"])
    assert "denied: the user did not allow filesystem.write_file" in output
    assert "written 2" in output
    assert (workspace / "out.txt").read_text() == "attempt 2"
    assert [e["status"] for e in tool_events(client) if e["status"] != "running"] == [
        "denied", "done"]
    # A tool the server marks read-only never asks; `confirm: always` asks for every one.
    before = len(asked)
    await client.execute("python", f"filesystem.list_directory(path={str(workspace)!r})")
    assert len([m for m, _ in client.notifications if m == "window/showMessageRequest"]) == before


@contextlib.contextmanager
def http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """server-everything over streamable HTTP, on a free port of 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(["node", str(SERVERS / "server-everything" / "dist" / "index.js"),
                             "streamableHttp"], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, "it did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


async def test_over_http_a_hang_and_a_crash_are_python_exceptions_never_a_hung_kernel(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    with http_server() as (url, proc):
        client = await start(start_server, model, workspace, extra={
            "everything": {"type": "http", "url": url, "timeout": 3}})
        result = await client.execute("python", (
            "from oi_mcp import everything\nimport oi_mcp, time\n"
            "print(everything.get_sum(a=2, b=3))\n"
            "print(everything.get_structured_content(location='New York'))\n"
            "started = time.monotonic()\n"
            "try:\n"
            "    everything.trigger_long_running_operation(duration=30, steps=3)\n"
            "except oi_mcp.ServerUnavailable as exc:\n"
            "    print('hang:', exc, round(time.monotonic() - started))\n"))
        output = client.stream(result["turnId"])
        assert result["status"] == "ok", output
        assert "The sum of 2 and 3 is 5." in output
        assert "'temperature'" in output  # structured content: a dict
        assert "did not answer within 3 s (running trigger-long-running-operation)" in output
        assert "hang: " in output and output.split("hang: ")[1].split()[-1] in ("3", "4", "5")
        proc.kill()
        proc.wait()
        result = await client.execute("python", (
            "try:\n    everything.echo(message='hi')\n"
            "except oi_mcp.ServerUnavailable as exc:\n    print('gone:', exc)\n"
            "print(6 * 7)"))
        output = client.stream(result["turnId"])
        assert "gone: MCP server 'everything' (http://127.0.0.1:" in output
        assert "42" in output  # the kernel goes on


async def test_a_server_that_dies_or_never_starts_is_said_and_started_again(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    client = await start(start_server, model, workspace, extra={
        "broken": {"command": "node", "args": ["-e", "console.error('no token given'); "
                                                     "process.exit(3)"]},
        "mute": {"command": "sleep", "args": ["600"], "timeout": 2},
        "everything": stdio("server-everything", "stdio")})
    result = await client.execute("python", (
        "import oi_mcp\n"
        "for name in ('broken', 'mute'):\n"
        "    try:\n        __import__('oi_mcp.' + name)\n"
        "    except oi_mcp.ServerUnavailable as exc:\n        print(name, '->', exc)\n"
        "try:\n    from oi_mcp import nothing\n"
        "except ImportError as exc:\n    print('nothing ->', exc)\n"))
    output = client.stream(result["turnId"])
    assert "broken -> MCP server 'broken' (node -e" in output
    assert "could not start" in output and "it said: no token given" in output
    assert "mute -> MCP server 'mute' (sleep 600) did not start within 2 s" in output
    assert "the mcpServers setting names filesystem, memory, broken, mute, everything" in output

    # Killed in the middle of a call: the call raises; the next one starts it again.
    run = asyncio.create_task(client.execute("python", (
        "from oi_mcp import everything\n"
        "print(everything.echo(message='up'))\n"
        "try:\n    everything.trigger_long_running_operation(duration=20, steps=2)\n"
        "except oi_mcp.ServerUnavailable as exc:\n    print('died:', exc)\n"
        "print(everything.echo(message='back'))\n")))
    await client.wait_for("oi/tool", lambda p: p["tool"] == "trigger-long-running-operation")
    assert client.process is not None
    ours = [p for p in psutil.Process(client.process.pid).children(recursive=True)
            if "server-everything" in " ".join(p.cmdline())]
    assert len(ours) == 1
    os.kill(ours[0].pid, signal.SIGKILL)
    result = await asyncio.wait_for(run, 60)
    output = client.stream(result["turnId"])
    assert "Echo: up" in output
    assert "died: MCP server 'everything'" in output and "exited while running" in output
    assert "Echo: back" in output


async def test_help_shows_a_tools_signature_and_interrupting_a_call_cancels_it(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    client = await start(start_server, model, workspace,
                         extra={"everything": stdio("server-everything", "stdio")})
    result = await client.execute("python", (
        "import inspect\nfrom oi_mcp import filesystem, everything\n"
        "print(inspect.signature(filesystem.read_text_file))\n"
        "help(filesystem.read_text_file)\n"
        "print(everything.get_tiny_image())\n"
        "import oi_mcp\nprint([s['module'] for s in oi_mcp.servers()])\n"))
    output = client.stream(result["turnId"])
    assert "(path: 'str', *, tail: 'float' = None, head: 'float' = None)" in output
    assert "Read the complete contents of a file" in output
    assert "path (string, required)" in output
    assert ["filesystem", "memory", "everything"] == json.loads(
        output.strip().splitlines()[-1].replace("'", '"'))
    images = [p for m, p in client.notifications
              if m == "oi/stream" and p.get("type") == "image" and p.get("content")]
    assert images  # the tool's image was displayed

    run = asyncio.create_task(client.execute("python", (
        "everything.trigger_long_running_operation(duration=30, steps=3)")))
    await client.wait_for("oi/tool", lambda p: p["status"] == "running"
                          and p["tool"] == "trigger-long-running-operation")
    started = time.monotonic()
    await client.request("oi/stop", {})
    result = await asyncio.wait_for(run, 30)
    assert time.monotonic() - started < 15
    ended = await client.wait_for("oi/tool", lambda p: p["status"] == "error")
    assert ended["error"] == "interrupted"
    result = await client.execute("python", "print(everything.echo(message='still here'))")
    assert "Echo: still here" in client.stream(result["turnId"])
