"""Magic commands typed as the chat message: answered by the server, never sent to the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import StartServer
from tests.hardening import record
from tests.modelserver import ModelServer


async def magic(client: OIClient, command: str, status: str = "done") -> str:
    """Run a command; return what it streamed."""
    result = await client.chat(command)
    assert result["status"] == status, (command, result)
    return client.stream(result["turnId"])


async def history(client: OIClient) -> list[tuple[str, str]]:
    messages = (await client.request("oi/history", {}))["messages"]
    return [(m["role"], m["content"]) for m in messages]


async def settings(client: OIClient) -> dict[str, Any]:
    return (await client.request("oi/configure", {}))["settings"]


async def test_every_magic_command(start_server: StartServer, model: ModelServer,
                                   workspace: Path) -> None:
    client = await start_server(workspace)
    root = str(workspace)  # pytest's tmp_path is already resolved
    assert "%save_message [path]" in await magic(client, "%help")
    unknown = await magic(client, "%bogus thing")
    assert unknown.startswith("Unknown command %bogus.") and "%jupyter [path]" in unknown

    model.script(ms.text("first answer"))
    await client.chat("first question")

    result = await client.chat("%% echo hi-$((6*7)) && pwd")
    assert result["status"] == "done"
    assert "hi-42\n" + root in client.stream(result["turnId"], "console")
    confirmation = [p for m, p in client.notifications if m == "oi/stream"
                    and p["turnId"] == result["turnId"] and p["type"] == "confirmation"]
    assert confirmation[1]["format"] == "shell"
    assert confirmation[1]["content"] == "echo hi-$((6*7)) && pwd"
    assert "usage: %% <shell command>" in (await magic(client, "%%", "error")).lower()

    tokens = await magic(client, "%tokens")
    count = int(tokens.split(" tokens")[0].split()[-1].replace(",", ""))
    assert count > 50 and "price of 'openai/scripted' is unknown" in tokens
    await client.request("oi/configure", {"model": "gpt-4o-mini"})
    priced = await magic(client, "%tokens and a much longer extra prompt to count as well")
    assert int(priced.split(" tokens")[0].split()[-1].replace(",", "")) > count
    assert "of the 128,000-token context window" in priced and "cost about $0.0000" in priced
    await client.request("oi/configure", {"model": "openai/scripted"})

    await client.execute("python", "x = 1")  # the user's own run is kept too: 2 messages
    info = await magic(client, "%info")
    assert f"Workspace: {root}" in info and "Model: openai/scripted at" in info
    assert "python (pid " in info and "“first question”, 4 messages" in info

    assert "Verbose mode is on" in await magic(client, "%verbose")
    assert (await settings(client))["verbose"] is True
    model.script(ms.text("second answer"))
    await client.chat("second question")
    assert b"request to openai/scripted" in client.stderr
    assert b"second question" in client.stderr
    assert "off" in await magic(client, "%verbose false")
    assert (await settings(client))["verbose"] is False
    assert "Usage: %verbose" in await magic(client, "%verbose maybe", "error")

    assert "Auto-run is on" in await magic(client, "%auto_run true")
    assert (await settings(client))["autoRun"] is True
    await magic(client, "%auto_run false")
    assert (await settings(client))["autoRun"] is False

    saved = await magic(client, "%save_message")
    assert f"Saved 6 messages to {root}/messages.json" in saved
    on_disk = json.loads((workspace / "messages.json").read_text())
    assert [m["content"] for m in on_disk] == ["first question", "first answer", "x = 1",
                                               "(no output)", "second question", "second answer"]

    undone = await magic(client, "%undo")
    assert "“second question”" in undone and "1 message after it" in undone
    assert await history(client) == [("user", "first question"), ("assistant", "first answer"),
                                     ("user", "x = 1"), ("computer", "(no output)")]

    loaded = await magic(client, "%load_message")
    assert "Loaded 6 messages" in loaded and "the previous one is kept" in loaded
    assert [c for _, c in await history(client)][-1] == "second answer"
    assert len((await client.request("oi/sessions", {}))["sessions"]) == 2
    assert "Cannot read" in await magic(client, "%load_message nope.json", "error")
    (workspace / "bad.json").write_text('[{"role": "robot"}]')
    assert "not a JSON list of messages" in await magic(client, "%load_message bad.json",
                                                        "error")

    await magic(client, "%markdown")
    markdown = (workspace / "first-question.md").read_text()
    assert "first answer" in markdown and "second answer" in markdown
    await magic(client, "%markdown")  # a default name never overwrites
    assert (workspace / "first-question-2.md").exists()
    await magic(client, "%jupyter notes/out.ipynb")
    nb = nbformat.read(workspace / "notes" / "out.ipynb", as_version=4)
    nbformat.validate(nb)
    assert any("second question" in c.source for c in nb.cells)

    assert "Started a new conversation" in await magic(client, "%reset")
    assert await history(client) == []
    after = await client.execute("python", "print(x)")  # the REPL was restarted
    assert "NameError" in after["outputs"][0]["content"]

    # Only the two real questions reached the model, and no command ever did.
    assert len(model.requests) == 2
    sent = json.dumps(model.requests)
    assert "%" not in sent.replace("%)", "")


async def test_auto_run_respects_trust(start_server: StartServer, model: ModelServer,
                                       workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(trusted=False))
    refused = await magic(client, "%auto_run", "error")
    assert "not trusted" in refused
    assert (await settings(client))["autoRun"] is False
    assert "Auto-run is off" in await magic(client, "%auto_run false")
    assert model.requests == []


async def refused(client: OIClient, command: str) -> str:
    result = await client.chat(command)
    assert result["status"] == "error", (command, result)
    return str(result["error"])


async def test_magic_writes_follow_no_link(client: OIClient, workspace: Path,
                                           tmp_path: Path) -> None:
    """Issue 21, item 11: %save_message through a dangling link wrote outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "messages.json").symlink_to(outside / "victim.json")  # dangling
    assert "symbolic link" in await refused(client, "%save_message")
    assert not (outside / "victim.json").exists()
    (outside / "kept.md").write_text("keep")
    (workspace / "notes.md").symlink_to(outside / "kept.md")
    assert "symbolic link" in await refused(client, "%markdown notes.md")
    assert (outside / "kept.md").read_text() == "keep"
    # A relative path leads nowhere outside: not through a linked folder, not with `..`.
    (workspace / "out").symlink_to(outside)
    assert "outside the workspace" in await refused(client, "%jupyter out/x.ipynb")
    assert "outside the workspace" in await refused(client, "%save_message ../escape.json")
    assert sorted(p.name for p in outside.iterdir()) == ["kept.md"]
    # A default export name skips a dangling link; an absolute path the user gave is written.
    (workspace / "conversation.md").symlink_to(outside / "dangling.md")
    assert "conversation-2.md" in await magic(client, "%markdown")
    assert not (outside / "dangling.md").exists()
    assert "Saved 0 messages" in await magic(client, f"%save_message {outside / 'mine.json'}")
    assert json.loads((outside / "mine.json").read_text()) == []
    assert "Saved" in await magic(client, "%save_message sub/dir/m.json")
    assert (workspace / "sub" / "dir" / "m.json").is_file()
    record("trust", magic_writes_through_links_tried=5,
           magic_files_written_outside=len(list(outside.iterdir())) - 2)  # kept.md, mine.json


def test_write_in_replaces_a_link_and_never_writes_through_it(tmp_path: Path) -> None:
    from oi_lsp.common.files import write_in

    (tmp_path / "f").symlink_to(tmp_path / "target")
    write_in(tmp_path, "f", b"data")  # the rename replaces the link itself
    assert not (tmp_path / "target").exists() and not (tmp_path / "f").is_symlink()
    assert (tmp_path / "f").read_bytes() == b"data"
    (tmp_path / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir()
    with pytest.raises(OSError):  # a linked folder is not followed
        write_in(tmp_path / "linked", "g", b"x")
    assert not (tmp_path / "real" / "g").exists()


async def test_info_says_where_the_api_key_comes_from_never_its_value(
        start_server: StartServer, model: ModelServer, workspace: Path) -> None:
    hosted = {"model": "openai/gpt-4o-mini", "apiBase": "https://models.example.invalid/v1"}
    from_env = await start_server(workspace, options=hosted,
                                  env={"OPENAI_API_KEY": "sk-from-the-environment-1234"})
    info = await magic(from_env, "%info")
    assert "API key from the server's environment (OPENAI_API_KEY)" in info
    assert "sk-from-the-environment" not in info
    # An empty variable is no key.
    empty = await start_server(workspace, options=hosted, env={"OPENAI_API_KEY": ""})
    assert "API key not set (no OPENAI_API_KEY in the environment)" in await magic(empty, "%info")
    local = {"model": "openai/scripted", "apiBase": model.url}
    given = await start_server(workspace, options={**local, "apiKey": "sk-given-5678"})
    assert "API key from the settings (apiKey)" in await magic(given, "%info")
    mine = await start_server(workspace, options=local, env={"OPENAI_API_KEY": "sk-real-9"})
    assert "API key none sent (a server on this machine" in await magic(mine, "%info")
