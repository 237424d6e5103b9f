"""Fixtures: the scripted model server, and real oi-lsp servers over stdio."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.modelserver import ModelServer

StartServer = Callable[..., Awaitable[OIClient]]

# Every `oi-lsp` a test starts (directly, or through an editor or `oi-lsp chat`) serves in its
# own process, as a private server: none shares the user's daemon, nor another test's.
# tests/test_daemon.py sets "0" (and a runtime folder of its own) for the daemon's tests.
os.environ.setdefault("OI_LSP_STANDALONE", "1")
# Nor loads litellm before its first turn (5.7 s of CPU, and most test servers never chat);
# tests/test_server_protocol.py checks the warm-up with "1".
os.environ.setdefault("OI_LSP_WARM_UP", "0")


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def model(model_server: ModelServer) -> ModelServer:
    """The scripted model, with an empty script and no recorded requests."""
    model_server.reset()
    return model_server


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
async def start_server(model: ModelServer, data_dir: Path) -> AsyncIterator[StartServer]:
    """Start a real `oi-lsp` over stdio and initialize it; every one is shut down after."""
    clients: list[OIClient] = []

    async def start(*workspaces: Path, options: dict[str, Any] | None = None, oi: bool = True,
                    env: dict[str, str] | None = None, initialize: bool = True,
                    window: Any = None) -> OIClient:
        client = OIClient()
        await client.start(env={"OI_LSP_DATA_DIR": str(data_dir), **(env or {})})
        clients.append(client)
        if initialize:
            await client.initialize(workspaces, options=model.settings() if options is None
                                    else options, oi=oi, window=window)
        return client

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
async def client(start_server: StartServer, workspace: Path) -> OIClient:
    """A server with one workspace folder, pointed at the scripted model."""
    return await start_server(workspace)


async def next_proposal(client: OIClient, since: int = 0, timeout: float = 30) -> dict[str, Any]:
    return await client.wait_for("oi/proposal", timeout=timeout, since=since)


async def start_sleeping_run(client: OIClient, model: ModelServer, kept: str) -> asyncio.Task[Any]:
    """Set `kept` in the REPL, then start a turn whose approved code prints and sleeps 30 s.
    Returns the chat once its code is running (or about to), for a test to stop it."""
    await client.execute("python", f"kept = {kept!r}")
    model.script(ms.tool("python", "import time\nprint('sleeping', flush=True)\n"
                                   "time.sleep(30)"))
    chat = asyncio.create_task(client.chat("sleep"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "run")
    # This also matches the code in the confirmation chunk: a stop may land before the cell
    # starts, which the kernel executors must handle as well.
    await client.wait_for("oi/stream", lambda p: "sleeping" in (p.get("content") or ""))
    return chat


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results a model request carried, in order."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def saved_messages(record: Path) -> list[dict[str, Any]]:
    """The messages of a conversation's record on disk, as saved (displays name their file)."""
    from oi_lsp.core import journal
    return journal.replay(record.read_bytes()).messages


def trust_folder(folder: Path, data_dir: Path) -> None:
    """What the user does with `oi-lsp trust`: the folder's own .oi/profile.yaml applies, and
    no client is asked about it."""
    subprocess.run([sys.executable, "-m", "oi_lsp", "trust", str(folder)], check=True,
                   capture_output=True, stdin=subprocess.DEVNULL,
                   env={**os.environ, "OI_LSP_DATA_DIR": str(data_dir),
                        "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})


@pytest.fixture
def nvim(tmp_path: Path, model: ModelServer, data_dir: Path) -> Iterator[Any]:
    """A headless Neovim with the plugin, against this checkout's oi-lsp (tests/neovim.py)."""
    from tests.neovim import Nvim
    runner = Nvim(tmp_path, model, data_dir)
    yield runner
    runner.kill_leftovers()


# The tiers (docs/testing.md): `scripts/test --quick` runs the tests not marked `slow`. A test
# is slow when it starts an oi-lsp server, an editor, a kernel or the terminal chat: through
# one of these fixtures, or, for a module that starts them itself, listed below.
SLOW_FIXTURES = {"start_server", "client", "nvim", "term", "relay", "vscode", "vscode_stack",
                 "built_extension", "playwright_env", "gateway", "make", "servers", "first_run"}
SLOW_MODULES = {"test_acp", "test_acp_images", "test_acp_mcp", "test_bench", "test_chat",
                "test_crash", "test_fuzz", "test_load", "test_network", "test_packaging",
                "test_perf", "test_plain_clients"}


# The longest modules of a full run (docs/testing.md), started first: one of them started
# last runs on alone at the end (test_crash did: 3 minutes more). The workers take modules in
# collection order with --no-loadscope-reorder (scripts/test passes it: xdist would otherwise
# put modules with many tests first, and test_crash has one). Others follow in their order.
HEAVIEST_FIRST = ("test_e2e_view", "test_chat", "test_crash", "test_neovim", "test_record",
                  "test_turns", "test_bench", "test_gateway", "test_e2e_merge", "test_daemon",
                  "test_neovim_chat", "test_providers", "test_acp", "test_structured",
                  "test_trust", "test_faults", "test_neovim_more", "test_neovim_reasoning",
                  "test_e2e", "test_executors", "test_e2e_ext")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.stem
        if module in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: order kept
