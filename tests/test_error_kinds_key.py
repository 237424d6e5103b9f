"""A 401 from a model server the user set no key for reads as a missing key (`noApiKey`, whose
way out is Set API Key), also when the server is a known local one (LM Studio, Ollama, ...)
that oi-lsp sends a placeholder key; with a key the user set, a 401 is a refused key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.conftest import StartServer
from tests.modelserver import ModelServer


@pytest.fixture
def local_preset(model: ModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted server is where a local preset (LM Studio) lives; no key anywhere."""
    monkeypatch.setenv("OI_LSP_LOCAL_PRESETS", json.dumps({"lmstudio": model.url}))
    for name in ("OPENAI_API_KEY", "OI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


async def test_a_local_server_that_wants_a_key_is_a_missing_key(
        local_preset: None, start_server: StartServer, model: ModelServer,
        workspace: Path) -> None:
    client = await start_server(workspace, options={"model": "openai/scripted",
                                                    "apiBase": model.url})
    model.script(ms.error(401, "Incorrect API key provided: local."))
    result = await client.chat("hello")
    assert result["status"] == "error"
    assert result["errorKind"] == "noApiKey", result
    assert "No API key is set" in result["error"] and "`" not in result["error"]


async def test_a_key_the_user_set_and_the_server_refused_is_auth_failed(
        local_preset: None, start_server: StartServer, model: ModelServer,
        workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings())  # apiKey sk-test-key
    model.script(ms.error(401, "Incorrect API key provided."))
    result = await client.chat("hello")
    assert result["errorKind"] == "authFailed", result
    assert model.headers[-1].get("Authorization", model.headers[-1].get("authorization")) \
        == "Bearer sk-test-key"


@pytest.mark.parametrize("environment", ["sk-the-users-real-key", ""])
async def test_a_server_on_this_machine_never_gets_the_environments_key(
        environment: str, start_server: StartServer, model: ModelServer,
        workspace: Path) -> None:
    """Not a preset, but on 127.0.0.1: the user's OPENAI_API_KEY stays home (apiKey sends one
    on purpose), and an empty variable, being no key, does not stop a keyless server."""
    client = await start_server(workspace, options={"model": "openai/scripted",
                                                    "apiBase": model.url},
                                env={"OPENAI_API_KEY": environment, "OI_API_KEY": ""})
    model.script(ms.text("Hello from a keyless server."))
    result = await client.chat("hello")
    assert result["status"] == "done", result
    sent = model.headers[-1].get("Authorization", model.headers[-1].get("authorization"))
    assert "sk-the-users-real-key" not in str(sent)


@pytest.mark.parametrize(("base", "keyless"), [
    ("http://127.0.0.1:8000/v1", True), ("http://127.8.9.1/v1", True),
    ("http://localhost:1234/v1", True), ("http://models.localhost/v1", True),
    ("http://[::1]:8000/v1", True), ("http://[::ffff:127.0.0.1]:8000/v1", True),
    ("http://0.0.0.0:8000/v1", True), ("http://192.0.2.7:8000/v1", False),
    ("https://api.openai.com/v1", False), ("http://[bad", False), (None, False)])
def test_which_servers_never_get_the_environments_key(base: str | None, keyless: bool) -> None:
    from oi_lsp.core import model_presets
    assert model_presets.keyless("openai/some-model", base) is keyless
