"""Local model presets and oi/models, with one scripted local server up and the others down."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from oi_lsp.core import model_presets as local
from tests.conftest import StartServer
from tests.modelserver import ModelServer


def closed_port() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_models_probe_and_local_preset(start_server: StartServer, model: ModelServer,
                                             workspace: Path) -> None:
    moved = {"lmstudio": model.url, "ollama": closed_port(), "llamafile": closed_port(),
             "jan": closed_port()}
    client = await start_server(workspace, options={},
                                env={"OI_LSP_LOCAL_PRESETS": json.dumps(moved)})
    found = await client.request("oi/models", {})
    servers = {s["name"]: s for s in found["local"]}
    assert list(servers) == ["ollama", "lmstudio", "llamafile", "jan"]
    assert servers["lmstudio"] == {"name": "lmstudio", "url": model.url, "up": True,
                                   "models": ["openai/scripted"]}
    for name in ("ollama", "llamafile", "jan"):
        assert servers[name]["up"] is False and servers[name]["models"] == []
        assert servers[name]["url"] == moved[name].rstrip("/")
        assert "Connect" in servers[name]["error"]
    assert "model" not in found  # nothing configured yet

    # Choose the local server and one of its models: URL, prefix and small defaults follow.
    configured = await client.request("oi/configure", {"local": "lmstudio", "model": "scripted"})
    settings = configured["settings"]
    assert settings["model"] == "openai/scripted" and settings["apiBase"] == model.url
    assert settings["contextWindow"] == local.LOCAL_CONTEXT_WINDOW == 3000
    assert settings["maxTokens"] == local.LOCAL_MAX_TOKENS == 1000
    model.script({"kind": "text", "content": "local hello", "pieces": 2, "delay": 0.0})
    assert (await client.chat("hi"))["status"] == "done"
    body = model.requests[0]
    assert body["model"] == "scripted" and body["max_tokens"] == 1000
    # No key is configured: a placeholder goes to the local server, never a real one.
    assert model.headers[0].get("authorization") == "Bearer local"

    # Explicit values beat the local defaults.
    settings = (await client.request("oi/configure", {"contextWindow": 6000,
                                                      "maxTokens": 500}))["settings"]
    assert settings["contextWindow"] == 6000 and settings["maxTokens"] == 500
    assert (await client.request("oi/models", {}))["model"] == "openai/scripted"


async def test_models_when_no_local_server_runs(start_server: StartServer,
                                               workspace: Path) -> None:
    moved = {name: closed_port() for name in ("ollama", "lmstudio", "llamafile", "jan")}
    client = await start_server(workspace, env={"OI_LSP_LOCAL_PRESETS": json.dumps(moved)})
    found = await client.request("oi/models", {})
    assert [s["up"] for s in found["local"]] == [False] * 4
    assert found["model"] == "openai/scripted"


def test_presets_and_defaults() -> None:
    assert local.presets()["ollama"].url == "http://localhost:11434"
    assert local.presets()["jan"].url == "http://localhost:1337/v1"
    filled = local.apply_preset({"local": "ollama", "model": "llama3.1"})
    assert filled["model"] == "ollama_chat/llama3.1"
    assert filled["api_base"] == "http://localhost:11434"
    assert (filled["context_window"], filled["max_tokens"]) == (3000, 1000)
    kept = local.apply_preset({"model": "ollama/llama3.1", "context_window": 8000})
    assert kept["context_window"] == 8000 and kept["max_tokens"] == 1000
    assert local.apply_preset({"model": "gpt-4o-mini"}) == {"model": "gpt-4o-mini"}
    lm = local.apply_preset({"local": "lmstudio", "model": "org/some-model-GGUF"})
    assert lm["model"] == "openai/org/some-model-GGUF"
