"""YAML profiles: precedence of user and workspace profiles, and bad profiles named clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from oi_lsp.core import profiles
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.modelserver import ModelServer


@pytest.fixture
def config_dir(tmp_path: Path, model: ModelServer) -> Path:
    folder = tmp_path / "config"
    (folder / "profiles").mkdir(parents=True)
    # An Open Interpreter style profile: an llm block, custom instructions, keys OI has.
    (folder / "profiles" / "fast.yaml").write_text(f"""\
version: 0.2.5
offline: true
llm:
  model: openai/scripted
  api_base: {model.url}
  context_window: 5000
  max_tokens: 111
auto_run: false
custom_instructions: Answer in French.
""")
    (folder / "profiles" / "bad.yml").write_text("max_tokens: -5\n")
    (folder / "profiles" / "typo.yaml").write_text("modle: gpt-4o\n")
    return folder


async def test_profile_precedence(start_server: StartServer, model: ModelServer,
                                  workspace: Path, config_dir: Path) -> None:
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("maxTokens: 222\nloop: false\n")
    env = {"OI_LSP_CONFIG_DIR": str(config_dir)}
    # The client sets the key and a few values, and selects the profile; it says the workspace
    # is trusted (as VS Code does), so its profile applies.
    client = await start_server(workspace, env=env, options={
        "trusted": True, "apiKey": "sk-test-key", "maxTokens": 50, "temperature": 0.3,
        "contextWindow": 900, "profile": "fast"})
    settings = (await client.request("oi/configure", {}))["settings"]
    assert settings["profile"] == "fast"
    assert settings["model"] == "openai/scripted"  # from the user profile
    assert settings["contextWindow"] == 5000  # the profile beats the client's setting
    assert settings["maxTokens"] == 222  # the workspace profile beats the user profile
    assert settings["temperature"] == 0.3  # no profile sets it: the client's value stays
    assert settings["systemMessage"] == "Answer in French."

    model.script(ms.text("Bonjour."))
    assert (await client.chat("hi"))["status"] == "done"
    body = model.requests[0]
    assert body["max_tokens"] == 222 and body["temperature"] == 0.3
    assert body["messages"][0]["content"].endswith("Answer in French.")

    # oi/configure beats every profile.
    settings = (await client.request("oi/configure", {"maxTokens": 333}))["settings"]
    assert settings["maxTokens"] == 333
    found = await client.request("oi/models", {})
    assert found["profiles"] == ["bad", "fast", "typo"]

    # A workspace profile changed on disk is read again by the next turn.
    (workspace / ".oi" / "profile.yaml").write_text("temperature: 1.5\n")
    model.script(ms.text("ok"))
    assert (await client.chat("again"))["status"] == "done"
    assert model.requests[1]["temperature"] == 1.5


async def test_untrusted_workspace_profile_is_ignored(start_server: StartServer,
                                                      model: ModelServer, workspace: Path,
                                                      config_dir: Path) -> None:
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("maxTokens: 222\nautoRun: true\n")
    client = await start_server(workspace, env={"OI_LSP_CONFIG_DIR": str(config_dir)},
                                options={"apiKey": "k", "trusted": False})
    settings = (await client.request("oi/configure", {"profile": "fast"}))["settings"]
    assert settings["maxTokens"] == 111 and settings["autoRun"] is False


async def test_bad_profiles_are_named(start_server: StartServer, model: ModelServer,
                                      workspace: Path, config_dir: Path) -> None:
    client = await start_server(workspace, env={"OI_LSP_CONFIG_DIR": str(config_dir)},
                                options=model.settings(trusted=True))
    await client.request("oi/configure", {"profile": "fast"})
    for name, words in (("bad", ["bad.yml", "max_tokens", "greater than 0"]),
                        ("typo", ["typo.yaml", "unknown setting 'modle' (did you mean 'model'?)"]),
                        ("nope", ["no profile 'nope'"]),
                        ("../etc", ["not a profile name"])):
        with pytest.raises(JsonRpcException) as err:
            await client.request("oi/configure", {"profile": name, "maxTokens": 7})
        assert err.value.code == -32602
        for word in words:
            assert word in str(err.value), (name, str(err.value))
    # Nothing changed: the good profile still applies, maxTokens was not taken either.
    settings = (await client.request("oi/configure", {}))["settings"]
    assert settings["profile"] == "fast" and settings["maxTokens"] == 111

    # A broken workspace profile stops the turn before the model is called, with its name.
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("autoRun: [not, yaml\n")
    with pytest.raises(JsonRpcException) as err:
        await client.chat("hi")
    assert "profile.yaml" in str(err.value) and model.requests == []
    (workspace / ".oi" / "profile.yaml").write_text("autoRun: yes please\n")
    with pytest.raises(JsonRpcException) as err:
        await client.chat("hi")
    assert "'autoRun'" in str(err.value) and "boolean" in str(err.value)
    (workspace / ".oi" / "profile.yaml").write_text("autoRun: false\n")
    model.script(ms.text("fine now"))
    assert (await client.chat("hi"))["status"] == "done"


def test_profile_layer_units(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("llm:\n  supports_functions: false\nsystem_message: Be brief.\n"
                    "custom_instructions: Use metric units.\n")
    assert profiles.load(path) == {"tool_calls": False,
                                   "system_message": "Be brief.\n\nUse metric units."}
    path.write_text("trusted: true\n")
    with pytest.raises(profiles.ProfileError, match="'trusted': not allowed"):
        profiles.load(path)
    path.write_text("apiKey: 12345\n")
    with pytest.raises(profiles.ProfileError, match="'apiKey': invalid value") as err:
        profiles.load(path)
    assert "12345" not in str(err.value)
    # A typo is named with the setting it is probably of, in the spelling it was written in.
    path.write_text("reasoning_efort: high\n")
    with pytest.raises(profiles.ProfileError,
                       match=r"'reasoning_efort' \(did you mean 'reasoning_effort'"):
        profiles.load(path)
    path.write_text("reasoningEfort: high\n")
    with pytest.raises(profiles.ProfileError, match=r"did you mean 'reasoningEffort'"):
        profiles.load(path)
    # MCP servers, as Claude Desktop's JSON has them; a typo inside one is named in full.
    path.write_text("mcp_servers:\n  notes:\n    command: npx\n    args: [-y, x]\n"
                    "    confirm: always\n")
    assert profiles.load(path) == {"mcp_servers": {"notes": {
        "command": "npx", "args": ["-y", "x"], "confirm": "always"}}}
    path.write_text("mcp_servers:\n  notes:\n    comand: npx\n")
    with pytest.raises(profiles.ProfileError,
                       match=r"'mcp_servers.notes.comand': Extra inputs are not permitted"):
        profiles.load(path)
    path.write_text("- a list\n")
    with pytest.raises(profiles.ProfileError, match="a mapping"):
        profiles.load(path)
    path.write_text("")
    assert profiles.load(path) == {}
