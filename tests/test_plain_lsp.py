"""Plain LSP clients (no `experimental.oi`): code actions, oi.* commands that answer at once,
work-done progress, the live transcript, Run / Skip / Edit message boxes. Driven over stdio by
the test client announcing the standard window capabilities an editor does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import converters, types

from oi_lsp.client import OIClient, to_uri
from oi_lsp.common.uris import to_fs_path
from oi_lsp.core import transcript
from oi_lsp.executors.sandbox import landlock
from oi_lsp.protocol import Message, Risk
from tests import modelserver as ms
from tests.conftest import StartServer, tool_results
from tests.modelserver import ModelServer

WINDOW = types.WindowClientCapabilities(
    work_done_progress=True, show_message=types.ShowMessageRequestClientCapabilities(),
    show_document=types.ShowDocumentClientCapabilities(support=True))


async def plain(start_server: StartServer, workspace: Path, **settings: Any) -> OIClient:
    model = settings.pop("model")
    return await start_server(workspace, oi=False, window=WINDOW,
                              options=model.settings(**settings))


async def command(client: OIClient, name: str, *args: Any) -> Any:
    return plainify(await client.lsp.workspace_execute_command_async(
        types.ExecuteCommandParams(command=name, arguments=list(args))))


async def code_actions(client: OIClient, uri: str, where: dict[str, Any],
                       diagnostics: list[dict[str, Any]] | None = None,
                       only: list[str] | None = None) -> list[dict[str, Any]]:
    """The server's code actions, as plain JSON."""
    def r(x: dict[str, Any]) -> types.Range:
        return types.Range(start=types.Position(**x["start"]), end=types.Position(**x["end"]))
    found = await client.lsp.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=r(where),
        context=types.CodeActionContext(
            diagnostics=[types.Diagnostic(range=r(d["range"]), message=d["message"],
                                          source=d.get("source"))
                         for d in diagnostics or ()], only=only)))
    return [plainify(a) for a in found or ()]


def plainify(value: Any) -> Any:
    """pygls hands results over as lsprotocol objects or named tuples: back to JSON."""
    if hasattr(value, "__attrs_attrs__"):
        return converters.get_converter().unstructure(value)
    if hasattr(value, "_asdict"):
        return {k: plainify(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plainify(v) for v in value]
    return value


async def turn_end(client: OIClient, turn_id: str, timeout: float = 60) -> dict[str, Any]:
    return await client.wait_for("oi/turn", lambda p: p["turnId"] == turn_id
                                 and p["status"] != "running", timeout=timeout)


def open_doc(client: OIClient, path: Path, text: str, language: str = "python") -> str:
    path.write_text(text)
    uri = to_uri(path)
    client.lsp.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1,
                                             text=text)))
    return uri


def read(uri: str) -> str:
    return Path(to_fs_path(uri) or "").read_text()


def write(uri: str, text: str) -> None:
    Path(to_fs_path(uri) or "").write_text(text)


def rng(a: int, b: int, c: int, d: int) -> dict[str, Any]:
    return {"start": {"line": a, "character": b}, "end": {"line": c, "character": d}}


async def test_capabilities_for_plain_and_oi_clients(start_server: StartServer,
                                                     model: ModelServer,
                                                     workspace: Path) -> None:
    client = await start_server(initialize=False)
    result = await client.initialize([workspace], options=model.settings(), oi=False)
    caps = result.capabilities
    assert sorted(caps.execute_command_provider.commands) == sorted(
        ["oi.chat", "oi.stop", "oi.reset", "oi.execute", "oi.newConversation",
         "oi.showTranscript"])
    assert set(caps.code_action_provider.code_action_kinds) == {"quickfix", "refactor",
                                                                "source"}
    # oi clients (VS Code registers its own oi.stop) are told of oi.chat only.
    oi = await start_server(initialize=False)
    result = await oi.initialize([workspace], options=model.settings(), oi=True)
    assert list(result.capabilities.execute_command_provider.commands) == ["oi.chat"]


async def test_code_actions(start_server: StartServer, model: ModelServer,
                            workspace: Path) -> None:
    client = await plain(start_server, workspace, model=model)
    uri = open_doc(client, workspace / "calc.py", "import math\ndef area(r):\n"
                   "    return math.pi * r * r\nprint(area(2))\n")
    actions = await code_actions(client, uri, rng(1, 0, 3, 0))
    assert [(a["title"], a["kind"], a["command"]["command"]) for a in actions] == [
        ("Open Interpreter: explain this", "refactor", "oi.chat"),
        ("Open Interpreter: run this in the workspace REPL", "source", "oi.execute"),
        ("Open Interpreter: do what this selection says", "refactor", "oi.chat")]
    assert actions[0]["command"]["arguments"][0]["range"] == rng(1, 0, 3, 0)
    assert await code_actions(client, uri, rng(1, 2, 1, 2)) == []
    diagnostic = {"range": rng(2, 11, 2, 15), "message": "\"math\" is not defined",
                  "source": "pyright", "severity": 1}
    fix = await code_actions(client, uri, rng(1, 2, 1, 2), [diagnostic], ["quickfix"])
    assert [(a["title"], a["kind"]) for a in fix] == [("Open Interpreter: fix this",
                                                       "quickfix")]
    assert fix[0]["diagnostics"][0]["message"] == diagnostic["message"]

    # The fix goes to the model with the problem, the file and its lines.
    model.script(ms.text("Import math first."))
    started = await command(client, "oi.chat", *fix[0]["command"]["arguments"])
    assert (await turn_end(client, started["turnId"]))["status"] == "done"
    sent = [m["content"] for m in model.requests[0]["messages"] if m["role"] == "user"][-1]
    assert sent.startswith("Fix this problem (pyright) at line 3: \"math\" is not defined")
    assert f"File: {to_fs_path(uri)} (lines 3-3), language: python" in sent
    assert "```python\n    return math.pi * r * r\n```" in sent


async def test_chat_command_answers_at_once(start_server: StartServer, model: ModelServer,
                                            workspace: Path) -> None:
    client = await plain(start_server, workspace, model=model)
    answer = "The first line of the answer.\nSecond.\nThird.\nFourth.\nFifth, not shown."
    model.script(ms.text(answer, pieces=6, delay=0.5))  # a 3 s turn
    t0 = time.monotonic()
    started = await command(client, "oi.chat", {"message": "take your time"})
    assert time.monotonic() - t0 < 2 and started["status"] == "running"
    with pytest.raises(Exception, match=r"oi\.stop") as refused:
        await command(client, "oi.chat", "another")
    assert getattr(refused.value, "code", None) == -32803
    shown = await client.wait_for("window/showDocument")
    assert shown["takeFocus"] is False and shown["uri"].endswith(".md")
    end = await turn_end(client, started["turnId"])
    assert end["status"] == "done" and time.monotonic() - t0 > 2.5
    told = await client.wait_for("window/showMessage", lambda p: "see the transcript" in
                                 p["message"])
    assert told["type"] == int(types.MessageType.Info)
    assert told["message"].startswith("The first line of the answer.\nSecond.\nThird.\n"
                                      "Fourth. …")
    text = read(shown["uri"])
    assert "## You\n\ntake your time" in text and "Fifth, not shown." in text

    # One progress for the turn: created, begun, reported, ended.
    progress = [p for m, p in client.notifications if m == "$/progress"]
    kinds = [p["kind"] for p in progress]
    assert kinds[0] == "begin" and kinds[-1] == "end" and kinds.count("begin") == 1
    assert progress[0]["title"] == "Open Interpreter" and progress[0]["cancellable"] is True
    assert {p["token"] for p in progress} == {f"oi-{started['turnId']}"}


async def test_approval_edit_runs_the_saved_file(start_server: StartServer,
                                                 model: ModelServer, workspace: Path) -> None:
    client = await plain(start_server, workspace, model=model)
    code = "import os\n" + "".join(f"x{i} = {i}\n" for i in range(8)) + "print('original')"
    model.script(ms.tool("python", code), ms.text("Ran your version."))
    boxes: list[tuple[str, list[str]]] = []

    async def answer(message: str, actions: list[str]) -> str:
        boxes.append((message, actions))
        if actions[0] == "Run":
            return "Edit"
        shown = await client.wait_for("window/showDocument", lambda p: "proposal-" in p["uri"])
        assert shown["takeFocus"] is True
        write(shown["uri"], "print('edited', 40 + 2)\n")
        return "Run edited"

    client.message_box = answer
    started = await command(client, "oi.chat", "run it")
    assert (await turn_end(client, started["turnId"]))["status"] == "done"
    first, second = boxes
    assert first[1] == ["Run", "Skip", "Edit", "Always this code"]
    assert first[0] == ("Run this python code? (low risk)\nimport os\nx0 = 0\nx1 = 1\n"
                        "… (10 lines)")
    assert second[1] == ["Run edited", "Skip"]
    assert "edited 42" in tool_results(model.requests[1])[0]
    text = (await client.wait_for("window/showDocument", lambda p: p["uri"].endswith(".md")))
    body = read(text["uri"])
    assert "_→ ran as edited_" in body and "What ran (edited):" in body
    assert "Output (1 line):\n\n```text\nedited 42\n```" in body


async def test_approval_always_for_this_command(start_server: StartServer,
                                               model: ModelServer, workspace: Path) -> None:
    client = await plain(start_server, workspace, model=model)
    model.script(ms.tool("shell", "echo one"), ms.tool("shell", "echo two"),
                 ms.tool("shell", "ls -d ."), ms.text("Done."))
    boxes: list[list[str]] = []

    async def answer(message: str, actions: list[str]) -> str:
        boxes.append(actions)
        return actions[-1] if len(boxes) == 1 else "Skip"

    client.message_box = answer
    started = await command(client, "oi.chat", "echo things")
    assert (await turn_end(client, started["turnId"]))["status"] == "done"
    # Asked twice: echo one ("Always `echo`"), then ls; echo two ran by itself.
    assert boxes == [["Run", "Skip", "Edit", "Always `echo`"],
                     ["Run", "Skip", "Edit", "Always `ls`"]]
    told = await client.wait_for("window/showMessage", lambda p: "from now on" in p["message"])
    assert "`echo` commands run without asking" in told["message"]
    assert tool_results(model.requests[3])[:2] == ["one", "two"]
    assert "declined" in tool_results(model.requests[3])[2]


async def test_progress_figures_and_cancel_stops(start_server: StartServer,
                                                 model: ModelServer, workspace: Path) -> None:
    client = await plain(start_server, workspace, model=model, autoRun=True)
    model.script(ms.tool("python", "import time\nprint('sleeping', flush=True)\n"
                                   "time.sleep(30)"))
    started = await command(client, "oi.chat", "sleep")
    report = await client.wait_for("$/progress", lambda p: p.get("kind") == "report"
                                   and "% CPU" in (p.get("message") or ""), timeout=30)
    assert report["message"].startswith("running python ") and " MB" in report["message"]
    messages = [p.get("message") for m, p in client.notifications if m == "$/progress"]
    assert "thinking" in messages and "running python" in messages
    assert "idle" not in messages  # the moment between a run and the model is no state
    t0 = time.monotonic()
    client.lsp.window_work_done_progress_cancel(
        types.WorkDoneProgressCancelParams(token=report["token"]))
    assert (await turn_end(client, started["turnId"], timeout=20))["status"] == "stopped"
    assert time.monotonic() - t0 < 10
    end = await client.wait_for("$/progress", lambda p: p.get("kind") == "end")
    assert end["message"] == "stopped"


async def test_execute_stop_reset_and_transcript_commands(start_server: StartServer,
                                                          model: ModelServer,
                                                          workspace: Path) -> None:
    client = await plain(start_server, workspace, model=model)
    uri = open_doc(client, workspace / "play.py", "x = 41\nprint(x + 1)\n")
    first = await command(client, "oi.execute", {"uri": uri, "range": rng(0, 0, 1, 0)})
    await turn_end(client, first["turnId"])
    second = await command(client, "oi.execute", {"uri": uri, "range": rng(1, 0, 2, 0)})
    await turn_end(client, second["turnId"])
    assert client.stream(second["turnId"], "console") == "42\n"

    shown = await command(client, "oi.showTranscript")
    opened = await client.wait_for("window/showDocument", lambda p: p["takeFocus"] is True)
    assert opened["uri"] == shown["uri"]
    body = read(shown["uri"])
    assert "## Run\n\n```python\nprint(x + 1)\n```\n\n_→ ran_" in body
    assert "```text\n42\n```" in body

    many = await command(client, "oi.execute", {"language": "python",
                                                "code": "for i in range(500): print(i)"})
    await turn_end(client, many["turnId"])
    await asyncio.sleep(0.5)
    body = read(shown["uri"])
    assert "Output (500 lines):" in body and "[... 450 lines not shown ...]" in body

    sleeping = await command(client, "oi.execute", {"language": "python",
                                                    "code": "import time; time.sleep(30)"})
    await client.wait_for("oi/stream", lambda p: p["turnId"] == sleeping["turnId"]
                          and p.get("format") == "running")
    t0 = time.monotonic()
    assert await command(client, "oi.stop") == {"stopped": True}
    assert time.monotonic() - t0 < 10
    assert (await turn_end(client, sleeping["turnId"]))["status"] == "stopped"

    before = (await client.request("oi/sessions", {}))["current"]
    new = await command(client, "oi.newConversation")
    assert new["id"] != before
    assert await command(client, "oi.reset") == {"ok": True}
    again = await command(client, "oi.execute", {"language": "python",
                                                 "code": "print(globals().get('x'))"})
    await turn_end(client, again["turnId"])
    assert client.stream(again["turnId"], "console") == "None\n"


def test_transcript_renders_fates_outputs_and_images(tmp_path: Path) -> None:
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9a"
           "wAAAABJRU5ErkJggg==")
    messages = [
        Message(role="user", type="message", content="plot it", turn_id="t"),
        Message(role="assistant", type="message", content="Here goes.", turn_id="t"),
        Message(role="assistant", type="code", format="python", content="rm_all()",
                turn_id="t", outcome="skipped",
                risk=Risk(level="high", reasons=["deletes files"])),
        Message(role="assistant", type="code", format="python", content="plot()",
                turn_id="t", tool_call_id="c2", outcome="ran"),
        Message(role="computer", type="confirmation", format="python", content="plot()",
                turn_id="t", tool_call_id="c2"),
        Message(role="computer", type="image", format="base64.png", content=png,
                turn_id="t"),
    ]
    snap = transcript.Snapshot(tmp_path / "conv.md", "plot it", "file:///ws", messages,
                               transcript.Live("computer", "console", "output", "a\nb\n"),
                               "running")
    transcript.write(snap)
    body = (tmp_path / "conv.md").read_text()
    assert "```python\nrm_all()\n```\n\n_→ skipped_ · _high risk: deletes files_" in body
    assert "```python\nplot()\n```\n\n_→ ran_" in body
    assert body.count("plot()") == 1  # what ran as proposed is not repeated
    image = next(line for line in body.splitlines() if line.startswith("![output]("))
    path = tmp_path / image.removeprefix("![output](").removesuffix(")")
    assert path.read_bytes().startswith(b"\x89PNG")
    assert body.rstrip().endswith("Output (2 lines, still running):\n\n```text\na\nb\n```")


@pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 or later")
async def test_blocked_run_asks_to_run_outside_the_sandbox(start_server: StartServer,
                                                           model: ModelServer, workspace: Path,
                                                           tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    client = await plain(start_server, workspace, model=model, sandbox="workspace-write")
    model.script(ms.tool("python", f"open({str(target)!r}, 'w').write('hi')"),
                 ms.text("Written."))
    boxes: list[tuple[str, list[str]]] = []

    async def answer(message: str, actions: list[str]) -> str:
        boxes.append((message, actions))
        return actions[0]

    client.message_box = answer
    started = await command(client, "oi.chat", "write it")
    assert (await turn_end(client, started["turnId"]))["status"] == "done"
    first, second = boxes
    assert first[1][0] == "Run" and second[1] == ["Run outside the sandbox", "Skip"]
    assert "blocked by the sandbox" in second[0] and "high risk" in second[0]
    assert target.read_text() == "hi"
