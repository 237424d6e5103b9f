"""`oi-lsp acp` with clients nobody here wrote: the ACP Python SDK's client side, and the
reference TypeScript client (tests/acp/client.mjs). The model is the scripted server; code
runs in real kernels."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    McpServerStdio,
    RequestPermissionResponse,
)
from acp.stdio import spawn_agent_process

from oi_lsp.client import to_uri
from oi_lsp.core.store import Batch, Store
from oi_lsp.protocol import Message
from tests import modelserver as ms
from tests.modelserver import ModelServer

ROOT = Path(__file__).resolve().parent.parent


def agent_env(model: ModelServer, data_dir: Path) -> dict[str, str]:
    return {"OI_MODEL": "openai/scripted", "OI_API_BASE": model.url, "OI_API_KEY": "sk-test",
            "OI_LSP_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT),
            "PATH": os.environ.get("PATH", "")}


class Recorder:
    """An ACP client that records updates and answers permission requests from a script."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.choices: list[str] = []  # option ids, in order; "hold" waits to be cancelled
        self.changed = asyncio.Event()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.asked.append((tool_call, options))
        self.changed.set()
        choice = self.choices.pop(0) if self.choices else "hold"
        if choice == "hold":
            await asyncio.sleep(3600)  # answered by session/cancel's cancellation
        if choice == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=choice))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.changed.set()

    async def create_elicitation(self, message: str, mode: Any,
                                 **kwargs: Any) -> AcceptElicitationResponse:
        self.asked.append(("elicitation", mode))
        code = mode.requested_schema.properties["code"].default
        return AcceptElicitationResponse(action="accept",
                                         content={"code": code.replace("draft", "edited")})

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def text(self) -> str:
        return "".join(u.content.text for u in self.updates
                       if u.session_update == "agent_message_chunk")

    def output(self) -> str:
        """Every text the tool calls showed."""
        return "\n".join(c.content.text for u in self.updates
                         if u.session_update in ("tool_call", "tool_call_update")
                         for c in u.content or [] if getattr(c.content, "type", "") == "text")

    async def until(self, check: Any, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while not check():
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def agent(model: ModelServer, data_dir: Path, recorder: Recorder,
                forms: bool = False, with_process: bool = False) -> AsyncIterator[Any]:
    """A connection to a real `oi-lsp acp` (with its process, when asked)."""
    async with spawn_agent_process(recorder, sys.executable, "-m", "oi_lsp", "acp",
                                   env=agent_env(model, data_dir), use_unstable_protocol=forms,
                                   transport_kwargs={"stderr": None}) as (conn, process):
        capabilities = ClientCapabilities(elicitation=ElicitationCapabilities(
            form=ElicitationFormCapabilities())) if forms else None
        await conn.initialize(protocol_version=1, client_capabilities=capabilities)
        yield (conn, process) if with_process else conn


async def test_python_client_prompt_allow_reject_load(model: ModelServer, data_dir: Path,
                                                      workspace: Path) -> None:
    recorder = Recorder()
    async with agent(model, data_dir, recorder, with_process=True) as (conn, process):
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        assert session.modes.current_mode_id == "ask"
        # The client's pipes are private: what the agent or its children print to fds 1 goes
        # to stderr, and fd 0 reads nothing.
        fds = Path(f"/proc/{process.pid}/fd")
        assert (fds / "1").readlink() == (fds / "2").readlink()
        assert str((fds / "0").readlink()) == "/dev/null"
        model.script(ms.tool("python", "print('hello from acp')", say="Running it."),
                     ms.text("It printed hello."))
        recorder.choices = ["allow_once"]
        done = await conn.prompt(session_id=session.session_id,
                                 prompt=[text_block("say hello")])
        assert done.stop_reason == "end_turn"
        assert "Running it." in recorder.text() and "It printed hello." in recorder.text()
        assert "hello from acp" in recorder.output()
        calls = [u for u in recorder.updates if u.session_update == "tool_call"]
        assert calls[0].kind == "execute" and calls[0].title.startswith("python: print(")
        assert recorder.updates[-1].session_update in ("agent_message_chunk",
                                                       "tool_call_update")
        finals = [u for u in recorder.updates if u.session_update == "tool_call_update"
                  and u.status in ("completed", "failed")]
        assert [u.status for u in finals] == ["completed"]
        assert [o.option_id for o in recorder.asked[0][1]] == [
            "allow_once", "allow_always", "allow_command", "reject_once"]
        assert recorder.asked[0][1][2].name == "Always run this code here"

        model.script(ms.tool("python", "print('never')"), ms.text("Skipped then."))
        recorder.choices = ["reject_once"]
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block("again")])
        assert done.stop_reason == "end_turn"
        finals = [u.status for u in recorder.updates if u.session_update == "tool_call_update"
                  and u.status in ("completed", "failed")]
        assert finals == ["completed", "failed"]
        assert "never\n" not in recorder.output().replace("print('never')", "")
        listed = await conn.list_sessions(cwd=str(workspace))
        assert [s.session_id for s in listed.sessions] == [session.session_id]
        assert listed.sessions[0].title == "say hello"

    replayed = Recorder()
    async with agent(model, data_dir, replayed) as conn:
        await conn.load_session(cwd=str(workspace), session_id=session.session_id,
                                mcp_servers=[])
        kinds = replayed.kinds()
        assert kinds.count("user_message_chunk") == 2 and kinds.count("tool_call") == 2
        assert "hello from acp" in replayed.output()
        assert "It printed hello." in replayed.text()


async def test_two_runs_back_to_back_each_end_as_they_went_and_name_their_files(
        model: ModelServer, data_dir: Path, workspace: Path) -> None:
    (workspace / "data.csv").write_text("a,b\n1,2\n")
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        # No text between the two proposals: the second opens while the first just ended.
        model.script(ms.tool("python", "open('notes.txt', 'w').write('x')\nprint('first')"),
                     ms.tool("python", "print(open('data.csv').read())"), ms.text("Done."))
        recorder.choices = ["allow_once", "allow_once"]
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        assert done.stop_reason == "end_turn"
        assert "first" in recorder.output() and "1,2" in recorder.output()
        starts = [u for u in recorder.updates if u.session_update == "tool_call"]
        finals = [u for u in recorder.updates if u.session_update == "tool_call_update"
                  and u.status in ("completed", "failed")]
        assert [(u.tool_call_id, u.status) for u in finals] == [
            (starts[0].tool_call_id, "completed"), (starts[1].tool_call_id, "completed")]
        # Locations: the files each code names in the workspace; one the run made, at its end.
        assert not starts[0].locations
        assert [x.path for x in finals[0].locations] == [str(workspace / "notes.txt")]
        assert [x.path for x in starts[1].locations] == [str(workspace / "data.csv")]
        assert recorder.asked[1][0].locations == starts[1].locations

    replayed = Recorder()
    async with agent(model, data_dir, replayed) as conn:
        await conn.load_session(cwd=str(workspace), session_id=session.session_id,
                                mcp_servers=[])
        calls = [u for u in replayed.updates if u.session_update == "tool_call"]
        assert [[x.path for x in c.locations] for c in calls] == [
            [str(workspace / "notes.txt")], [str(workspace / "data.csv")]]
        assert [c.status for c in calls] == ["completed", "completed"]


NODE_CLIENT = ROOT / "tests" / "acp" / "client.mjs"
NODE_SDK = ROOT / "tests" / "acp" / "node_modules" / "@agentclientprotocol" / "sdk"


@pytest.mark.skipif(not NODE_SDK.is_dir(), reason="npm ci in tests/acp (scripts/setup.d)")
async def test_always_run_this_command_here(model: ModelServer, data_dir: Path,
                                            workspace: Path) -> None:
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        model.script(ms.tool("shell", "echo one"), ms.tool("shell", "echo two"),
                     ms.tool("shell", "ls -d ."), ms.text("Done."))
        recorder.choices = ["allow_command", "reject_once"]
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        assert done.stop_reason == "end_turn"
        # Asked for echo one (the option names the command) and for ls; echo two ran unasked.
        assert [o.name for o in recorder.asked[0][1]][2] == "Always run `echo` here"
        assert len(recorder.asked) == 2 and "ls -d ." in recorder.asked[1][0].title
        assert "one" in recorder.output() and "two" in recorder.output()
        assert "autoRunRules" in (workspace / ".oi" / "profile.yaml").read_text()


async def test_typescript_reference_client(model: ModelServer, data_dir: Path,
                                           workspace: Path) -> None:
    model.script(ms.tool("python", "print('hello from node')",
                         reasoning="I will print a greeting."), ms.text("Done hello."),
                 ms.tool("python", "print('never')"), ms.text("Skipped."),
                 ms.tool("python", "import time\nprint('sleeping', flush=True)\n"
                                   "time.sleep(30)"))
    memory = ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol" / \
        "server-memory" / "dist" / "index.js"
    extra = {}
    if memory.is_file():  # the client's MCP server: its calls are tool calls too
        extra = {"OI_TEST_MCP_MEMORY": str(memory)}
        model.script(ms.tool("python", (
            "from oi_mcp import memory\n"
            "memory.create_entities(entities=[{'name': 'typescript', 'entityType': 'client',"
            " 'observations': []}])\n"
            "print('entities:', len(memory.read_graph()['entities']))")), ms.text("Remembered."))
    node = await asyncio.create_subprocess_exec(
        "node", str(NODE_CLIENT), str(workspace), sys.executable, "-m", "oi_lsp", "acp",
        env={**os.environ, **agent_env(model, data_dir), **extra}, cwd=NODE_CLIENT.parent,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(node.communicate(), 120)
    assert node.returncode == 0, out.decode()
    assert out.decode().startswith("mcp ok\nok " if extra else "ok "), out.decode()


async def test_modes_commands_risk_and_cancel_while_asking(model: ModelServer, data_dir: Path,
                                                           workspace: Path) -> None:
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[McpServerStdio(
            name="my files", command="/bin/true", args=[], env=[])])
        sid = session.session_id
        await recorder.until(lambda: "available_commands_update" in recorder.kinds())
        await recorder.until(lambda: "not used: MCP server 'my files'" in recorder.text())
        commands = next(u for u in recorder.updates
                        if u.session_update == "available_commands_update").available_commands
        assert {"reset", "undo", "tokens"} <= {c.name for c in commands}

        # Risk: the permission request's title and content say it.
        model.script(ms.tool("shell", "rm -rf ./src"), ms.text("ok"))
        recorder.choices = ["reject_once"]
        await conn.prompt(session_id=sid, prompt=[text_block("clean")])
        asked = recorder.asked[-1][0]
        assert "high risk" in asked.title and "rm -rf" in asked.title
        assert "deletes files" in asked.content[0].content.text

        # "Always run": this proposal runs, the session goes to auto, the next one runs unasked.
        model.script(ms.tool("python", "print('one')"), ms.tool("python", "print('two')"),
                     ms.text("both ran"))
        recorder.choices = ["allow_always"]
        asked_before = len(recorder.asked)
        done = await conn.prompt(session_id=sid, prompt=[text_block("twice")])
        assert done.stop_reason == "end_turn" and len(recorder.asked) == asked_before + 1
        assert "current_mode_update" in recorder.kinds()
        assert "one" in recorder.output() and "two" in recorder.output()

        # Back to ask mode through session/set_mode: the next proposal asks; cancelling while it
        # waits ends the turn as cancelled and its tool call failed.
        await conn.set_session_mode(session_id=sid, mode_id="ask")
        model.script(ms.tool("python", "print('held')"))
        recorder.choices = ["hold"]
        asked_before = len(recorder.asked)
        turn = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("wait")]))
        await recorder.until(lambda: len(recorder.asked) > asked_before)
        await conn.cancel(session_id=sid)
        done = await asyncio.wait_for(turn, 10)
        assert done.stop_reason == "cancelled"
        last = [u for u in recorder.updates if u.session_update == "tool_call_update"][-1]
        assert last.status == "failed"

        # A slash command is the magic command: answered without the model.
        calls = len(model.requests)
        done = await conn.prompt(session_id=sid, prompt=[text_block("/tokens")])
        assert done.stop_reason == "end_turn" and len(model.requests) == calls
        assert "token" in recorder.text().lower()

        # Auto mode through session/set_mode: no permission request at all.
        await conn.set_session_mode(session_id=sid, mode_id="auto")
        model.script(ms.tool("python", "print('unasked')"), ms.text("fine"))
        asked_before = len(recorder.asked)
        done = await conn.prompt(session_id=sid, prompt=[text_block("auto")])
        assert done.stop_reason == "end_turn" and len(recorder.asked) == asked_before
        assert "unasked" in recorder.output()


async def test_edit_through_an_elicitation_form(model: ModelServer, data_dir: Path,
                                                workspace: Path) -> None:
    recorder = Recorder()
    async with agent(model, data_dir, recorder, forms=True) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        model.script(ms.tool("python", "print('draft')"), ms.text("edited ran"))
        recorder.choices = ["edit"]
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block("edit")])
        assert done.stop_reason == "end_turn"
        assert "edit" in [o.option_id for o in recorder.asked[0][1]]
        assert recorder.asked[1][0] == "elicitation"
        assert "edited" in recorder.output().replace("print('edited')", "")
        history = model.requests[-1]["messages"]
        assert any("edited" in str(m.get("content")) for m in history if m["role"] == "tool")
    plain = Recorder()
    async with agent(model, data_dir, plain) as conn:  # no forms: no Edit option
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        model.script(ms.tool("python", "print(1)"), ms.text("ok"))
        plain.choices = ["reject_once"]
        await conn.prompt(session_id=session.session_id, prompt=[text_block("x")])
        assert "edit" not in [o.option_id for o in plain.asked[0][1]]


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAA"
       "AABJRU5ErkJggg==")


async def test_images_trimmed_output_and_max_steps(model: ModelServer, data_dir: Path,
                                                   workspace: Path) -> None:
    (workspace / ".oi").mkdir()  # the workspace's profile: the settings ACP has no channel for
    (workspace / ".oi" / "profile.yaml").write_text("max_output: 300\nmax_steps: 1\n")
    # ACP has no question to ask it with: the user trusts the folder's profile beforehand.
    await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "oi_lsp", "trust", str(workspace)], check=True,
        env={**os.environ, "OI_LSP_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)})
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="auto")
        code = ("import base64\nfrom IPython.display import Image, display\n"
                "for i in range(2000):\n    print(f'line {i}')\n"
                f"display(Image(data=base64.b64decode({PNG!r})))")
        model.script(ms.tool("python", code), ms.tool("python", "print('second')"))
        done = await conn.prompt(session_id=session.session_id, prompt=[text_block("draw")])
        assert done.stop_reason == "max_turn_requests"
        updates = [u for u in recorder.updates if u.session_update == "tool_call_update"]
        images = [c.content for u in updates for c in u.content or []
                  if c.content.type == "image"]
        assert images and images[-1].mime_type == "image/png" and images[-1].data == PNG
        shown = updates[-1].content[1].content.text
        assert "line 0" in shown and "line 1999" in shown and "characters omitted" in shown
        assert len(shown) < 600
        # Output streamed while it ran, throttled: more than one update, far fewer than lines.
        assert 1 < len(updates) < 200


async def test_a_model_error_is_a_request_error(model: ModelServer, data_dir: Path,
                                                workspace: Path) -> None:
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        model.script(ms.error(401, "bad key"))
        with pytest.raises(RequestError) as raised:
            await conn.prompt(session_id=session.session_id, prompt=[text_block("hi")])
        assert raised.value.code == -32603 and raised.value.data["errorKind"] == "authFailed"


async def test_two_sessions_in_one_folder_keep_their_conversations(
        model: ModelServer, data_dir: Path, workspace: Path) -> None:
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        first = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        model.script(ms.text("one"))
        await conn.prompt(session_id=first, prompt=[text_block("first topic")])
        second = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        assert second != first
        model.script(ms.text("two"), ms.text("three"))
        await conn.prompt(session_id=second, prompt=[text_block("second topic")])
        await conn.prompt(session_id=first, prompt=[text_block("first again")])
        sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"]
        assert any("first topic" in str(c) for c in sent)
        assert not any("second topic" in str(c) for c in sent)
        listed = await conn.list_sessions(cwd=str(workspace))
        assert {s.session_id for s in listed.sessions} == {first, second}

        # While one session's turn runs, the other is refused, and cannot cancel it.
        model.script(ms.text("slow answer", pieces=4, delay=0.5))
        turn = asyncio.create_task(conn.prompt(session_id=first, prompt=[text_block("slow")]))
        await recorder.until(lambda: "slow" in recorder.text())
        with pytest.raises(RequestError) as raised:
            await conn.prompt(session_id=second, prompt=[text_block("me too")])
        assert raised.value.code == -32803
        await conn.cancel(session_id=second)
        assert (await turn).stop_reason == "end_turn"



async def test_a_long_conversation_loads_its_last_page_and_earlier_ones_on_request(
        model: ModelServer, data_dir: Path, workspace: Path) -> None:
    store, uri = Store(data_dir), to_uri(workspace)
    conversation_id = "20261207-000000-abcdef"
    store.write(uri, conversation_id, Batch(1.0, "q0", 250, whole=[
        Message(role="user" if i % 2 == 0 else "assistant", type="message",
                content=f"q{i}" if i % 2 == 0 else f"a{i}", turn_id=f"t{i // 2}")
        for i in range(250)]))
    recorder = Recorder()
    async with agent(model, data_dir, recorder) as conn:
        await conn.load_session(cwd=str(workspace), session_id=conversation_id, mcp_servers=[])
        users = [u.content.text for u in recorder.updates
                 if u.session_update == "user_message_chunk"]
        assert users == [f"q{i}" for i in range(150, 250, 2)]  # the last 100 messages
        assert recorder.text().startswith("**oi-lsp:** 150 earlier messages of this "
                                          "conversation are kept")
        seen = len(recorder.updates)
        done = await conn.prompt(session_id=conversation_id, prompt=[text_block("/earlier")])
        assert done.stop_reason == "end_turn"
        users = [u.content.text for u in recorder.updates[seen:]
                 if u.session_update == "user_message_chunk"]
        assert users == [f"q{i}" for i in range(50, 150, 2)]
        assert "messages 51 to 150 of 250 (50 earlier messages before them" in recorder.text()
        await conn.prompt(session_id=conversation_id, prompt=[text_block("/earlier")])
        await conn.prompt(session_id=conversation_id, prompt=[text_block("/earlier")])
        assert recorder.text().endswith("nothing earlier: the whole conversation is shown.\n")
        assert model.requests == []  # none of it asked the model
