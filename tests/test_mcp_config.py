"""The mcpServers setting (issue 39) as a user writes it, in every shape it comes in: errors
that name the key, credentials masked, an ACP client's servers, and what asks first."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import pytest

from oi_lsp.core import mcp_bridge
from oi_lsp.core.mcp_config import McpServer, from_acp, module_name
from oi_lsp.core.mcp_servers import McpServers, Tool, _first_line
from oi_lsp.core.settings import Settings, SettingsError, check


@pytest.mark.parametrize(("servers", "said"), [
    ({"fs": {"args": ["x"]}}, "setting 'mcpServers.fs': Value error, give either 'command'"),
    ({"fs": {"command": "x", "url": "http://h"}}, "not both or neither"),
    ({"my files": {"command": "x"}}, "'my files' is not a server name"),
    ({"a-b": {"command": "x"}, "a_b": {"command": "y"}}, "are both oi_mcp.a_b"),
    ({"web": {"type": "sse", "url": "http://h/sse"}}, "the SSE transport is not supported"),
    ({"web": {"url": "ftp://h"}}, "setting 'mcpServers.web.url'"),
    ({"fs": {"command": "x", "comand": "y"}}, "'mcpServers.fs.comand': Extra inputs"),
    ({"fs": {"command": "x", "confirm": "sometimes"}}, "'mcpServers.fs.confirm'"),
    ({"fs": {"command": "x", "timeout": 0}}, "'mcpServers.fs.timeout'"),
    ({"fs": {"command": "x", "args": "one"}}, "'mcpServers.fs.args'"),
])
def test_a_bad_server_is_named(servers: dict[str, object], said: str) -> None:
    with pytest.raises(SettingsError) as err:
        check({"mcpServers": servers})
    assert said in str(err.value)


def test_credentials_are_masked_and_names_become_modules() -> None:
    settings = Settings.model_validate({"mcpServers": {
        "git-hub": {"command": "npx", "env": {"GITHUB_TOKEN": "ghp_secret"}},
        "docs": {"type": "http", "url": "https://h/mcp",
                 "headers": {"Authorization": "Bearer abc"}}}})
    shown = settings.public()["mcpServers"]
    assert shown["git-hub"]["env"] == {"GITHUB_TOKEN": "********"}
    assert shown["docs"]["headers"] == {"Authorization": "********"}
    assert "ghp_secret" not in repr(settings) and "abc" not in repr(settings)
    assert [module_name(n) for n in ("git-hub", "a.b", "import")] == ["git_hub", "a_b",
                                                                      "import_"]


def test_an_acp_clients_servers_and_the_ones_it_cannot_have() -> None:
    usable, problems = from_acp([
        {"name": "memory", "command": "/usr/bin/node", "args": ["m.js"],
         "env": [{"name": "MEMORY_FILE_PATH", "value": "/tmp/m"}]},
        {"type": "http", "name": "docs", "url": "https://h/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer x"}]},
        {"type": "sse", "name": "old", "url": "https://h/sse", "headers": []},
        {"name": "my files", "command": "x", "args": [], "env": []},
        {"command": "nameless"}])
    assert usable["memory"].env == {"MEMORY_FILE_PATH": "/tmp/m"}
    assert usable["docs"].headers == {"Authorization": "Bearer x"}
    assert sorted(usable) == ["docs", "memory"]
    assert problems[0].startswith("MCP server 'old'") and "SSE" in problems[0]
    assert "'my files' is not a server name" in problems[1]
    assert problems[2] == "an MCP server without a name"


def test_which_calls_ask_first() -> None:
    configs = {"fs": McpServer(command="x"), "all": McpServer(command="y", confirm="always"),
               "none": McpServer(command="z", confirm="never")}
    servers = McpServers(lambda: configs, "/tmp")

    def tool(server: str, destructive: bool) -> Tool:
        return Tool(server, "t", "", {}, destructive=destructive, read_only=False)

    assert servers.asks(tool("fs", True)) and not servers.asks(tool("fs", False))
    assert servers.asks(tool("all", False))
    assert not servers.asks(tool("none", True))
    assert _first_line("Read a file. Handles encodings.\nMore.") == "Read a file"
    assert len(_first_line("x" * 300)) == 90


async def test_a_changed_server_is_started_anew_and_the_acp_ones_join() -> None:
    configs = {"fs": McpServer(command="x")}
    servers = McpServers(lambda: configs, "/tmp")
    first = servers.server("fs")
    assert servers.server("fs") is first
    configs["fs"] = McpServer(command="x", args=["--other"])
    assert servers.server("fs") is not first
    servers.extra = {"memory": McpServer(command="m")}
    assert list(servers.configured()) == ["fs", "memory"]
    assert servers.by_module("memory") == "memory"
    configs["fs"] = McpServer(command="x", disabled=True)
    assert list(servers.configured()) == ["memory"]
    await servers.close()


async def test_the_index_names_a_broken_server_once_and_does_not_wait_for_it_again() -> None:
    import shutil
    import time

    if shutil.which("node") is None:
        pytest.skip("needs node")
    configs = {"broken": McpServer(command="node", args=["-e", "process.exit(3)"]),
               "mute": McpServer(command="sleep", args=["600"], timeout=1)}
    servers = McpServers(lambda: configs, "/tmp")
    try:
        index = await servers.index()
        assert "- `oi_mcp.broken`: unavailable (MCP server 'broken' (node -e" in index
        assert "- `oi_mcp.mute`: unavailable (MCP server 'mute' (sleep 600) did not start " \
               "within 1 s)" in index
        started = time.monotonic()
        assert await servers.index() == index  # remembered, not tried again
        assert time.monotonic() - started < 0.5
    finally:
        await servers.close()


def test_what_a_killed_servers_bridge_left_is_swept(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """A SIGKILLed server leaves its bridge's folder and socket in the temporary folder; the
    next server's first bridge removes those no one listens on, and nothing else."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(mcp_bridge, "_swept", False)
    old = time.time() - 2 * mcp_bridge.STALE_AFTER

    def folder(name: str, *, listening: bool | None, aged: bool = True) -> Path:
        path = tmp_path / name
        path.mkdir(mode=0o700)
        if listening is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path / "socket"))
            sock.listen(1)
            if listening:
                kept.append(sock)
            else:
                sock.close()  # the socket file stays, as after a SIGKILL
        if aged:
            os.utime(path, (old, old))
        return path

    kept: list[socket.socket] = []
    dead = folder("oi-mcp-dead", listening=False)
    empty = folder("oi-mcp-empty", listening=None)
    live = folder("oi-mcp-live", listening=True)
    young = folder("oi-mcp-young", listening=False, aged=False)
    other = folder("not-oi", listening=False)
    try:
        mcp_bridge._sweep_once()
        assert not dead.exists() and not empty.exists()
        assert live.exists() and young.exists() and other.exists()
        os.utime(young, (old, old))
        mcp_bridge._sweep_once()  # once a process
        assert young.exists()
    finally:
        for sock in kept:
            sock.close()
