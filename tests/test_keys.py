"""The keys the server reads (OI_API_KEY, the providers' *_API_KEY, the gateway and --tcp
tokens) never reach a REPL's environment, where code the model writes could print them into the
conversation, unless `passKeysToRepls` asks for them; and no error text shows one."""

from __future__ import annotations

from pathlib import Path

from tests import modelserver as ms
from tests.conftest import StartServer
from tests.modelserver import ModelServer

SECRETS = {"OPENAI_API_KEY": "sk-openai-secret", "OI_API_KEY": "sk-oi-secret",
           "OI_LSP_TOKEN": "token-secret", "GROQ_API_KEY": "gsk-secret"}
PY = ("import os\nprint(sorted(k for k in os.environ if k in "
      f"{sorted(SECRETS)!r}), os.environ.get('PLAIN_SETTING'))")
SH = "echo \"[$OPENAI_API_KEY|$OI_API_KEY|$GROQ_API_KEY|$PLAIN_SETTING]\""


async def test_keys_stay_out_of_repls(start_server: StartServer, workspace: Path) -> None:
    client = await start_server(workspace, env={**SECRETS, "PLAIN_SETTING": "kept"})
    python = await client.execute("python", PY)
    assert python["outputs"][0]["content"] == "[] kept\n"
    shell = await client.execute("shell", SH)
    assert shell["outputs"][0]["content"] == "[|||kept]\n"
    node = await client.execute("javascript", "console.log(process.env.OPENAI_API_KEY ?? 'none')")
    assert node["outputs"][0]["content"] == "none\n"


async def test_passed_when_asked(start_server: StartServer, workspace: Path,
                                 model: ModelServer) -> None:
    client = await start_server(workspace, env={**SECRETS, "PLAIN_SETTING": "kept"},
                                options=model.settings(passKeysToRepls=True))
    shell = await client.execute("shell", SH)
    assert shell["outputs"][0]["content"] == "[sk-openai-secret|sk-oi-secret|gsk-secret|kept]\n"


async def test_a_change_applies_from_the_next_restart(start_server: StartServer,
                                                      workspace: Path) -> None:
    client = await start_server(workspace, env=SECRETS)
    await client.request("oi/configure", {"passKeysToRepls": True})
    await client.request("oi/reset", {})
    python = await client.execute("python", PY)
    assert python["outputs"][0]["content"] == f"{sorted(SECRETS)!r} None\n"


async def test_error_texts_mask_every_key_by_value(start_server: StartServer, workspace: Path,
                                                   model: ModelServer) -> None:
    """A model server that echoes the Authorization header: a key from the environment,
    whatever its shape, never shows in the turn's error."""
    client = await start_server(workspace, env={"GROQ_API_KEY": "gsk_Zq81vTr5secret",
                                                "OI_LSP_TOKEN": "tok-9f8e7d6c5b"})
    model.script(ms.error(400, "bad request from Bearer gsk_Zq81vTr5secret (tok-9f8e7d6c5b)"))
    result = await client.chat("hi")
    assert result["status"] == "error" and "bad request from Bearer ***" in result["error"]
    assert "gsk_Zq81vTr5secret" not in result["error"] and "tok-9f8e7d6c5b" not in result["error"]
