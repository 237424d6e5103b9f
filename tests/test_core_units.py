"""Unit tests of the dense logic: code-block parsing, the model's view, streaming, settings."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oi_lsp.core import llm as model
from oi_lsp.core.aio import Soon
from oi_lsp.core.prompt import to_model_messages
from oi_lsp.core.settings import SettingsError, check, client_section, combine, env_layer
from oi_lsp.core.streamer import INTERVAL, Streamer
from oi_lsp.protocol import Message

RUNNABLE = {"python", "py", "shell", "bash"}


def test_code_blocks_takes_complete_runnable_blocks() -> None:
    text = ("Plan:\n```python\nprint(1)\n```\nthen\n~~~bash\nls\n~~~\n"
            "```json\n{\"a\": 1}\n```\n```\nplain\n```\n```python\nunfinished")
    assert model.code_blocks(text, RUNNABLE) == [("python", "print(1)"), ("bash", "ls")]


def test_code_blocks_keeps_inner_fences_and_skips_empty() -> None:
    text = "````python\nprint('```')\n````\n```python\n   \n```\n"
    assert model.code_blocks(text, RUNNABLE) == [("python", "print('```')")]


def msg(role: Any, type_: Any, content: str, format_: str | None = None,
        call: str | None = None) -> Message:
    return Message(role=role, type=type_, content=content, format=format_, tool_call_id=call)


def test_model_view_pairs_every_tool_call_with_a_result() -> None:
    settings = combine({"model": "m", "systemMessage": "Be brief."})
    messages = [
        msg("user", "message", "do two things"),
        msg("assistant", "message", "Sure."),
        msg("assistant", "code", "print(1)", "python", "c1"),
        msg("computer", "confirmation", "print(1)", "python", "c1"),
        msg("computer", "console", "1", "output", "c1"),
        msg("assistant", "code", "rm -rf /", "shell", "c2"),  # skipped: no confirmation
        msg("assistant", "code", "print(2)", "python", "c3"),
        msg("computer", "confirmation", "print(3)", "python", "c3"),  # edited
        msg("computer", "console", "3", "output", "c3"),
        msg("assistant", "code", "sleep 100", "shell", "c4"),  # the turn was stopped here
    ]
    out = to_model_messages(messages, settings)
    assert out[0]["role"] == "system" and out[0]["content"].endswith("Be brief.")
    assert [m["role"] for m in out[1:]] == ["user", "assistant", "tool", "tool", "tool", "tool"]
    assert [c["id"] for c in out[2]["tool_calls"]] == ["c1", "c2", "c3", "c4"]
    results = {m["tool_call_id"]: m["content"] for m in out if m["role"] == "tool"}
    assert results["c1"] == "1"
    assert "declined" in results["c2"] and "declined" in results["c4"]
    assert "edited" in results["c3"] and "print(3)" in results["c3"]


def test_model_view_of_fenced_code_uses_user_messages() -> None:
    settings = combine({"model": "m", "toolCalls": False})
    messages = [
        msg("user", "message", "compute"),
        msg("assistant", "message", "```python\nprint(42)\n```"),
        msg("assistant", "code", "print(42)", "python"),
        msg("computer", "confirmation", "print(42)", "python"),
        msg("computer", "console", "42", "output"),
    ]
    out = to_model_messages(messages, settings)
    assert "fenced Markdown code block" in out[0]["content"]
    assert [m["role"] for m in out[1:]] == ["user", "assistant", "user"]
    assert "tool_calls" not in out[2] and "42" in out[3]["content"]


async def test_streamer_blocks_and_coalescing() -> None:
    sent: list[dict[str, Any]] = []
    streamer = Streamer(lambda method, params: sent.append(params), "file:///w")
    streamer.content("t", "assistant", "message", None, "Hel")  # first piece: at once
    assert [p.get("content") for p in sent] == [None, "Hel"] and sent[0]["start"] is True
    for piece in ("lo", " wor", "ld"):
        streamer.content("t", "assistant", "message", None, piece)  # within INTERVAL: held
    assert len(sent) == 2
    await asyncio.sleep(INTERVAL * 3)
    assert sent[-1]["content"] == "lo world"
    streamer.content("t", "computer", "console", "output", "out")  # another kind closes
    streamer.whole("t", "computer", "image", "base64.png", "iVBOR")
    streamer.status("t", "idle")
    streamer.close()
    kinds = [(p["type"], p.get("start"), p.get("end"), p.get("content")) for p in sent[2:]]
    assert kinds == [
        ("message", None, None, "lo world"),
        ("message", None, True, None),
        ("console", True, None, None), ("console", None, None, "out"),
        ("console", None, True, None),
        ("image", True, None, None), ("image", None, None, "iVBOR"), ("image", None, True, None),
        ("status", None, None, None),
    ]


async def test_soon_calls_once_when_the_task_waits_or_when_told() -> None:
    said: list[str] = []
    Soon(said.append, "waited")
    told = Soon(said.append, "told")
    assert said == []  # nothing before the task waits
    told.now()
    told.now()
    assert said == ["told"]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert said == ["told", "waited"]  # each once


def test_settings_precedence_and_errors() -> None:
    env = env_layer({"OI_MODEL": "env-model", "OI_API_KEY": "sk-env"})
    client = client_section({"oi": {"model": "client-model", "maxOutput": 100}})
    merged = combine(env, client, {"max_output": 5})
    assert merged.model == "client-model" and merged.max_output == 5
    assert merged.api_key is not None and merged.public()["apiKeySet"] is True
    assert "sk-env" not in str(merged.public())
    with pytest.raises(SettingsError, match="maxSteps"):
        check({"maxSteps": "many"})
    with pytest.raises(SettingsError) as info:
        check({"apiKey": 12345})
    assert "12345" not in str(info.value)


def test_a_relays_provider_keys_are_named_never_shown() -> None:
    relay = env_layer({"OPENAI_API_KEY": "sk-relay-openai", "OI_MODEL": "m", "PATH": "/bin",
                       "EMPTY_API_KEY": ""}, provider_keys=True)
    assert "providerKeys" not in env_layer({"OPENAI_API_KEY": "sk-x"})  # the process's own
    merged = combine(relay)
    assert merged.provider_keys is not None
    assert merged.provider_keys["OPENAI_API_KEY"].get_secret_value() == "sk-relay-openai"
    assert merged.public()["providerKeys"] == ["OPENAI_API_KEY"]
    assert "sk-relay-openai" not in str(merged.public())
    with pytest.raises(SettingsError) as info:
        check({"providerKeys": {"OPENAI_API_KEY": 98765}})
    assert "98765" not in str(info.value)


def test_untrusted_workspace_settings_never_auto_run() -> None:
    assert combine({"autoRun": True}).auto_run is True
    untrusted = combine({"trusted": False}, {"autoRun": True})
    assert untrusted.auto_run is False and untrusted.public()["autoRun"] is False
