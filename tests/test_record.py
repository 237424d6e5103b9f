"""The conversation keeps what the user saw (displays, each proposal's fate, the editor's context,
the user's own runs, turn errors), the turn's state is explicit, and errors speak to people.
Over stdio, against the scripted model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.client import OIClient, to_uri
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, saved_messages, tool_results
from tests.modelserver import ModelServer

# A 1x1 PNG, as IPython's display sends it (base64).
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
       "rkJggg==")
SHOW_PNG = ("import base64\nfrom IPython.display import Image, display\n"
            f"display(Image(data=base64.b64decode({PNG!r})))\nprint('shown')")
STATES = {"idle", "thinking", "waiting", "running"}


async def history(client: OIClient) -> list[dict[str, Any]]:
    return (await client.request("oi/history", {}))["messages"]


async def approve_next(client: OIClient, decision: str, since: int = 0, **extra: Any) -> None:
    proposal = await next_proposal(client, since=since)
    await client.approve(proposal["proposalId"], decision, **extra)


def statuses(client: OIClient, turn_id: str | None = None) -> list[str]:
    return [p.get("format") or "" for m, p in client.notifications
            if m == "oi/stream" and p["type"] == "status"
            and (turn_id is None or p["turnId"] == turn_id)]


async def test_a_displayed_png_survives_a_restart(start_server: StartServer, model: ModelServer,
                                                 workspace: Path, data_dir: Path) -> None:
    first = await start_server(workspace)
    model.script(ms.tool("python", SHOW_PNG), ms.text("Shown."))
    chat = asyncio.create_task(first.chat("show a picture"))
    await approve_next(first, "run")
    assert (await chat)["status"] == "done"
    await first.close()

    second = await start_server(workspace)
    images = [m for m in await history(second) if m["type"] == "image"]
    assert images == [{"role": "computer", "type": "image", "format": "base64.png",
                       "content": PNG, "turnId": images[0]["turnId"],
                       "toolCallId": images[0]["toolCallId"]}]
    # Kept in a file of its own beside the conversation, not inline in its JSON.
    image, files = saved_displays(data_dir)
    assert image["content"] == "" and image["file"].endswith(".base64.png")
    assert files == {image["file"]: PNG}
    # The model was told in words, not sent the picture.
    result = tool_results(model.requests[-1])[0]
    assert "[an image was displayed to the user]" in result and PNG not in result


def saved_displays(data_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The image entry of the saved conversation, and the files beside it (name -> text)."""
    saved = next(data_dir.glob("sessions/*/*.jsonl"))
    image = next(m for m in saved_messages(saved) if m["type"] == "image")
    folder = saved.with_name(saved.stem + ".files")
    return image, {f.name: f.read_text() for f in folder.iterdir()}


async def test_a_display_over_the_limit_leaves_a_note(client: OIClient) -> None:
    result = await client.execute("python", "from IPython.display import HTML, display\n"
                                            "display(HTML('<b>' + 'x' * 5_000_000 + '</b>'))")
    assert result["status"] == "ok"
    kept = await history(client)
    assert not any(m["type"] == "code" and m["role"] == "computer" for m in kept)
    note = [m["content"] for m in kept if "not kept" in m["content"]]
    assert note and "html output (4.8 MB)" in note[0] and "4.0 MB kept per item" in note[0]


async def test_every_outcome(start_server: StartServer, model: ModelServer,
                             workspace: Path) -> None:
    client = await start_server(workspace)
    model.script(ms.tools(("python", "print('as proposed')"), ("python", "print('to edit')"),
                          ("python", "print('skip me')"), ("python", "1/0"),
                          ("python", "import time; time.sleep(5)")),
                 ms.text("All five done."))
    await client.request("oi/configure", {"executionTimeout": 1.5})
    chat = asyncio.create_task(client.chat("five things"))
    seen = 0
    for decision, extra in (("run", {}), ("edit", {"code": "print('edited')"}), ("skip", {}),
                            ("run", {}), ("run", {})):
        proposal = await next_proposal(client, since=seen)
        seen = client.notifications.index(("oi/proposal", proposal)) + 1
        await client.approve(proposal["proposalId"], decision, **extra)
    assert (await chat)["status"] == "done"
    await client.request("oi/configure", {"autoRun": True, "executionTimeout": None})
    model.script(ms.tool("python", "print('by itself')"), ms.text("Ran."))
    assert (await client.chat("auto"))["status"] == "done"
    await client.request("oi/configure", {"autoRun": False})
    since = len(client.notifications)
    model.script(ms.tool("python", "import time\nprint('sleeping', flush=True)\ntime.sleep(30)"))
    stopped = asyncio.create_task(client.chat("sleep"))
    await approve_next(client, "run", since=since)
    await client.wait_for("oi/stream", lambda p: p["type"] == "console"
                          and "sleeping" in (p.get("content") or ""), since=since)
    await client.request("oi/stop", {})
    assert (await stopped)["status"] == "stopped"

    codes = [m for m in await history(client) if m["type"] == "code"
             and m["role"] == "assistant"]
    assert [m["outcome"] for m in codes] == ["ran", "edited", "skipped", "error", "timedOut",
                                             "autoRan", "stopped"]
    assert codes[1]["editedCode"] == "print('edited')" and "editedCode" not in codes[0]
    assert all(m["risk"]["level"] == "low" for m in codes)


async def saved(data_dir: Path, text: str, timeout: float = 30) -> None:
    """Wait until a conversation file in `data_dir` holds `text` (a save has happened)."""
    async with asyncio.timeout(timeout):
        while not any(text in p.read_text(encoding="utf-8", errors="replace")  # noqa: ASYNC110 (a file: no event)
                      for p in (data_dir / "sessions").rglob("*.jsonl")):
            await asyncio.sleep(0.05)


async def test_a_proposal_pending_when_the_server_stops_expires(
        start_server: StartServer, model: ModelServer, workspace: Path, data_dir: Path) -> None:
    first = await start_server(workspace)
    model.script(ms.tool("python", "print('never')"))
    chat = asyncio.create_task(first.chat("wait for me"))
    await next_proposal(first)
    await first.close()  # shutdown while the proposal waits
    chat.cancel()
    second = await start_server(workspace)
    code = next(m for m in await history(second) if m["type"] == "code")
    assert code["outcome"] == "expired"

    # Killed outright, it reads expired too (the next server finds it pending).
    model.script(ms.tool("python", "print('never either')"))
    chat = asyncio.create_task(second.chat("and me"))
    await next_proposal(second)
    await saved(data_dir, "never either")  # killed before its save, it would not be there
    assert second.process is not None
    os.kill(second.process.pid, signal.SIGKILL)
    with pytest.raises(BaseException):  # noqa: B017 (the server is gone: any error)
        await asyncio.wait_for(chat, 10)
    third = await start_server(workspace)
    fates = [m["outcome"] for m in await history(third) if m["type"] == "code"]
    assert fates == ["expired", "expired"]


async def test_editor_context_is_kept_apart(client: OIClient, model: ModelServer,
                                           workspace: Path) -> None:
    uri = to_uri(workspace / "a.py")
    context = {"uri": uri, "language": "python", "selection": "x = 1",
               "range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 5}}}
    model.script(ms.text("Noted."))
    assert (await client.chat("explain this", context=context))["status"] == "done"
    user = (await history(client))[0]
    assert user["content"] == "explain this"
    assert user["context"] == {"uri": uri, "language": "python", "text": "x = 1",
                               "range": context["range"]}
    sent = model.requests[-1]["messages"][-1]["content"]
    assert sent.startswith("explain this") and "Context from the editor:" in sent
    assert "x = 1" in sent and "(lines 3-3)" in sent


async def test_the_users_own_runs_are_kept_and_told(client: OIClient,
                                                    model: ModelServer) -> None:
    result = await client.execute("python", "y = 6 * 7\nprint(y)")
    assert result["status"] == "ok"
    failed = await client.execute("python", "undefined_name")
    assert failed["status"] == "error"
    kept = await history(client)
    assert [(m["role"], m["type"], m.get("outcome")) for m in kept] == [
        ("user", "code", "ran"), ("computer", "console", None),
        ("user", "code", "error"), ("computer", "console", None)]
    assert kept[0]["content"] == "y = 6 * 7\nprint(y)" and kept[1]["content"] == "42"
    assert kept[0]["turnId"] == result["turnId"] == kept[1]["turnId"]
    model.script(ms.text("I see y."))
    await client.chat("what is y?")
    user = model.requests[-1]["messages"][-1]["content"]
    assert "I ran this code myself" in user and "y = 6 * 7" in user and "42" in user
    assert "NameError" in user and user.endswith("what is y?")
    assert [m["role"] for m in model.requests[-1]["messages"]] == ["system", "user"]


async def test_a_model_error_is_kept(client: OIClient, model: ModelServer) -> None:
    model.script(ms.error(400, "the model fell over"))
    result = await client.chat("hello?")
    assert result["status"] == "error" and result["errorKind"] == "modelError"
    last = (await history(client))[-1]
    assert last["type"] == "error" and last["errorKind"] == "modelError"
    assert last["content"] == result["error"] and "fell over" in last["content"]
    turn = await client.wait_for("oi/turn", lambda p: p["status"] == "error")
    assert turn["errorKind"] == "modelError"
    model.script(ms.text("Back."))
    await client.chat("again")
    assert "fell over" not in json.dumps(model.requests[-1]["messages"])


async def test_magic_output_has_its_own_turn(client: OIClient, model: ModelServer) -> None:
    model.script(ms.tool("python", "print('a run')"), ms.text("Ran."))
    chat = asyncio.create_task(client.chat("run something"))
    await approve_next(client, "run")
    ran = await chat
    since = len(client.notifications)
    helped = await client.chat("%help")
    chunks = [p for m, p in client.notifications[since:]
              if m == "oi/stream" and p["type"] == "console"]
    assert chunks and {p["turnId"] for p in chunks} == {helped["turnId"]} != {ran["turnId"]}
    assert chunks[0].get("start") and "Magic commands" in "".join(
        p.get("content") or "" for p in chunks)


async def test_waiting_is_a_state_of_its_own(client: OIClient, model: ModelServer) -> None:
    model.script(ms.tool("python", "print(1)"), ms.text("Done."))
    chat = asyncio.create_task(client.chat("one"))
    proposal = await next_proposal(client)
    turn = proposal["turnId"]
    await client.wait_for("oi/stream", lambda p: p["type"] == "status"
                          and p.get("turnId") == turn and p.get("format") == "waiting")
    assert statuses(client, turn) == ["thinking", "waiting"]
    status = await client.request("oi/status", {})
    assert status["turn"] == {"state": "waiting", "turnId": turn}
    await client.approve(proposal["proposalId"], "run")
    await chat
    assert statuses(client, turn) == ["thinking", "waiting", "running", "idle", "thinking",
                                      "idle"]


async def test_resources_have_their_own_notification(client: OIClient) -> None:
    spin = asyncio.create_task(client.execute(
        "python", "import time\nend = time.time() + 5\nwhile time.time() < end: pass"))
    figures = await client.wait_for("oi/resources", timeout=30)
    assert figures["repl"]["language"] == "python" and figures["repl"]["busy"] is True
    assert figures["elapsed"] >= 3 and figures["repl"]["rss"] > 0
    assert figures["workspace"] == (await client.request("oi/status", {}))["workspace"]
    result = await spin
    assert figures["turnId"] == result["turnId"]
    assert set(statuses(client)) <= STATES


async def test_a_message_while_a_proposal_waits_declines_it(client: OIClient,
                                                           model: ModelServer) -> None:
    model.script(ms.tool("python", "print('not wanted')"), ms.text("Fine, doing that instead."))
    first = asyncio.create_task(client.chat("do a thing"))
    await next_proposal(client)
    second = await client.chat("no, do the other thing")
    assert second["status"] == "done" and (await first)["status"] == "done"
    sent = model.requests[-1]["messages"]
    assert sent[-2]["role"] == "tool" and "declined" in sent[-2]["content"]
    assert sent[-1] == {"role": "user", "content": "no, do the other thing"}
    code = next(m for m in await history(client) if m["type"] == "code")
    assert code["outcome"] == "skipped"
    assert "not wanted" not in client.stream(type_="console")


async def test_a_second_message_while_the_model_answers_is_refused(
        client: OIClient, model: ModelServer) -> None:
    model.script(ms.text("slow " * 20, pieces=20, delay=0.1))
    first = asyncio.create_task(client.chat("talk"))
    await client.wait_for("oi/stream", lambda p: "slow" in (p.get("content") or ""))
    with pytest.raises(Exception) as refused:
        await client.chat("interrupting")
    assert getattr(refused.value, "code", None) == -32803
    assert "The model is still answering" in str(refused.value)
    assert (await first)["status"] == "done"
    assert "Traceback" not in client.stderr.decode(errors="replace")


async def test_error_kinds_for_keys(start_server: StartServer, model: ModelServer,
                                    workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OI_API_KEY", raising=False)
    client = await start_server(workspace, options={"model": "gpt-4o-mini"})
    missing = await client.chat("hi")
    assert missing["errorKind"] == "noApiKey" and "No API key is set" in missing["error"]
    assert "`" not in missing["error"] and "litellm" not in missing["error"]

    refused = await start_server(workspace, options=model.settings())
    model.script(ms.error(401, "invalid api key"))
    result = await refused.chat("hi")
    assert result["errorKind"] == "authFailed" and "refused the API key" in result["error"]


async def test_a_keyless_local_server(start_server: StartServer, model: ModelServer,
                                      workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OI_API_KEY", raising=False)
    client = await start_server(workspace, options={"model": "openai/scripted",
                                                    "apiBase": model.url})
    model.script(ms.text("No key needed."))
    assert (await client.chat("hi"))["status"] == "done"
    # A server that does want a key says so: that is a missing key, not a wrong one.
    model.script(ms.error(401, "an API key is required"))
    result = await client.chat("again")
    assert result["errorKind"] == "noApiKey"


async def test_refusals_are_one_line_in_the_log(start_server: StartServer,
                                                workspace: Path, model: ModelServer) -> None:
    client = await start_server(workspace)
    with pytest.raises(Exception):  # noqa: B017
        await client.request("oi/chat", {"message": ""})
    with pytest.raises(Exception):  # noqa: B017
        await client.request("oi/session/open", {"id": "no-such-conversation"})
    await client.execute("python", "1")  # the log has caught up
    log = client.stderr.decode(errors="replace")
    assert "Traceback" not in log
