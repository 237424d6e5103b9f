"""AcpLink: the core's Link for ACP. The oi/* notifications become session updates (model
text, tool calls and their output), sent in order by one writer task; a proposal becomes a
tool call and a session/request_permission."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from acp import Client, update_agent_message_text, update_agent_thought_text
from acp.schema import (
    AcceptElicitationResponse,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    PermissionOption,
    ToolCallLocation,
)

from .. import protocol
from ..common.uris import to_fs_path
from ..core import rules
from ..core.link import Answer, NoInput
from ..protocol import InputParams, Message, Proposal, ToolCall
from . import tools
from .calls import Call
from .locations import named_files

log = logging.getLogger(__name__)

OUTPUT_INTERVAL = 0.1  # seconds between two output updates of one running tool call
OPTIONS = [PermissionOption(option_id="allow_once", name="Run", kind="allow_once"),
           PermissionOption(option_id="allow_always", name="Always run (auto mode)",
                            kind="allow_always"),
           PermissionOption(option_id="reject_once", name="Skip", kind="reject_once")]
# "Always for this command": an allow rule saved in the workspace (core/rules.py), after these.
COMMAND = "allow_command"
# Offered only to clients with form elicitation (unstable ACP): the code opens in a form.
EDIT = PermissionOption(option_id="edit", name="Edit, then run", kind="allow_once")


class AcpLink:
    def __init__(self, max_output: Callable[[str], int],
                 proposed: Callable[[str], Message | None],
                 always: Callable[[str], Awaitable[None]],
                 remember: Callable[[str, str, str], Awaitable[str | None]]) -> None:
        self.conn: Client | None = None
        self.sessions: dict[str, str] = {}  # workspace URI → the ACP session shown there
        self.active: str | None = None  # the session that prompted last: where notes go
        self.can_edit = False  # the client said it fills in elicitation forms
        self._max_output = max_output  # workspace URI → its maxOutput
        # workspace URI → its latest proposed code message: a tool call keeps its own, so its
        # status comes from its outcome even when the next proposal follows at once
        self._proposed = proposed
        self._always = always  # session id: the user chose "always run"
        # (workspace, language, code): save an allow rule; why it could not be, or None
        self._remember = remember
        self._calls: dict[str, Call] = {}  # workspace URI → its open tool call
        self._last: dict[str, float] = {}  # tool call id → when its output was last sent
        self._flushes: dict[str, asyncio.TimerHandle] = {}
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    # The writer: updates leave in the order the core made them -------------------------

    def update(self, session_id: str, update: Any) -> None:
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())
        self._queue.put_nowait((session_id, update))

    async def _write(self) -> None:
        while True:
            session_id, update = await self._queue.get()
            try:
                if self.conn is not None:
                    await self.conn.session_update(session_id, update)
            except Exception as exc:  # a client gone or refusing: the turn goes on
                log.warning("session/update failed: %s", exc)
            finally:
                self._queue.task_done()

    async def drain(self, workspace: str) -> None:
        """Close the workspace's tool call and wait until every update has been written."""
        self._finish(workspace)
        await self._queue.join()

    # Link ------------------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any]) -> None:
        workspace = params.get("workspace", "")
        session_id = self.sessions.get(workspace)
        if session_id is None:
            return
        if method == protocol.PROPOSAL and params.get("autoRun"):
            proposal = Proposal.model_validate(params)
            self.update(session_id, self._open(proposal).start(proposal, "in_progress"))
        elif method == protocol.STREAM:
            self._stream(workspace, session_id, params)
        elif method == protocol.TOOL:
            call = ToolCall.model_validate(params)
            self.update(session_id, tools.start(call) if call.status == "running"
                        else tools.end(call))

    def _stream(self, workspace: str, session_id: str, chunk: dict[str, Any]) -> None:
        kind, fmt, content = chunk.get("type"), chunk.get("format"), chunk.get("content")
        call = self._calls.get(workspace)
        if kind == "message" and chunk.get("role") == "assistant" and content:
            # The model speaks again: the run before has ended and its outcome is recorded.
            self._finish(workspace)
            self.update(session_id, update_agent_message_text(content))
        elif kind == "reasoning" and content:
            self._finish(workspace)
            self.update(session_id, update_agent_thought_text(content))
        elif call is None:
            if kind == "console" and fmt == "output" and content:  # a % command's answer
                self.update(session_id, update_agent_message_text(content))
        elif kind == "confirmation" and chunk.get("start"):
            call.ran = True
            self.update(session_id, call.progress(self._max_output(workspace), "in_progress"))
        elif kind == "console" and fmt == "output" and content:
            call.output += content
            self._output_soon(workspace, session_id, call)
        elif kind == "image" or (kind == "code" and fmt == "html"):
            call.add_image(fmt, content, bool(chunk.get("start")), bool(chunk.get("end")))
            self._output_soon(workspace, session_id, call)

    def _output_soon(self, workspace: str, session_id: str, call: Call) -> None:
        """Throttled: at once after a quiet spell, then at most every OUTPUT_INTERVAL."""
        if call.id in self._flushes:
            return
        wait = self._last.get(call.id, 0.0) + OUTPUT_INTERVAL - time.monotonic()

        def flush() -> None:
            self._flushes.pop(call.id, None)
            self._last[call.id] = time.monotonic()
            if self._calls.get(workspace) is call:
                self.update(session_id, call.progress(self._max_output(workspace)))

        if wait <= 0:
            flush()
        else:
            self._flushes[call.id] = asyncio.get_running_loop().call_later(wait, flush)

    def _open(self, proposal: Proposal) -> Call:
        """The proposal's tool call, after the one before it ends."""
        self._finish(proposal.workspace)
        call = self._calls[proposal.workspace] = Call(
            proposal.proposal_id, proposal.language, proposal.code,
            message=self._proposed(proposal.workspace))
        call.locations = self._named(proposal.workspace, call.code)
        return call

    def _named(self, workspace: str, code: str) -> list[ToolCallLocation]:
        folder = to_fs_path(workspace)
        return named_files(code, Path(folder)) if folder else []

    def _finish(self, workspace: str) -> None:
        """The open tool call ends: its last output and its status from the proposal's
        outcome (ran → completed; skipped, failed, stopped → failed)."""
        call = self._calls.pop(workspace, None)
        session_id = self.sessions.get(workspace)
        if call is None or session_id is None:
            return
        handle = self._flushes.pop(call.id, None)
        if handle is not None:
            handle.cancel()
        self._last.pop(call.id, None)
        named = self._named(workspace, call.code) if call.ran else call.locations
        self.update(session_id, call.progress(self._max_output(workspace), call.status(),
                                              named if named != call.locations else None))

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        session_id = self.sessions.get(proposal.workspace)
        if session_id is None or self.conn is None:
            return Answer("skip")
        call = self._open(proposal)
        start = call.start(proposal, "pending")
        self.update(session_id, start)
        await self._queue.join()  # the client knows the tool call before it is asked
        asked: asyncio.Future[Answer] = asyncio.ensure_future(
            self._decision(session_id, call, start, proposal.workspace))
        waiting: list[asyncio.Future[Any]] = [asked, answer]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            asked.cancel()
        if answer.done():
            return answer.result()
        if asked.cancelled() or asked.exception() is not None:
            log.warning("permission request failed: %s",
                        None if asked.cancelled() else asked.exception())
            return Answer("skip")
        return asked.result()

    async def _decision(self, session_id: str, call: Call, start: Any,
                        workspace: str) -> Answer:
        assert self.conn is not None
        word = rules.command_word(call.language, call.code)
        command = PermissionOption(
            option_id=COMMAND, kind="allow_always",
            name=f"Always run `{word}` here" if word else "Always run this code here")
        options = [*OPTIONS[:2], command, OPTIONS[2]] + ([EDIT] if self.can_edit else [])
        response = await self.conn.request_permission(
            session_id=session_id, tool_call=call.permission(start), options=options)
        chosen = getattr(response.outcome, "option_id", None)  # None: cancelled
        if chosen == "allow_always":
            await self._always(session_id)
        if chosen == COMMAND:
            refused = await self._remember(workspace, call.language, call.code)
            if refused is not None:  # nothing saved, nothing ran: say why and ask again
                self.show_text(refused, error=True)
                return await self._decision(session_id, call, start, workspace)
        if chosen == "edit":
            return await self._edit(session_id, call)
        return Answer("run" if chosen in ("allow_once", "allow_always", COMMAND) else "skip")

    async def _edit(self, session_id: str, call: Call) -> Answer:
        """The code in a form the user edits; what they submit runs (declined: skipped)."""
        assert self.conn is not None
        schema = ElicitationSchema(properties={"code": ElicitationStringPropertySchema(
            type="string", title=f"{call.language} code", default=call.code)},
            required=["code"])
        response = await self.conn.create_elicitation(
            message="Edit the code, then run it", mode=ElicitationFormSessionMode(
                session_id=session_id, tool_call_id=call.id, requested_schema=schema))
        code = (response.content or {}).get("code") \
            if isinstance(response, AcceptElicitationResponse) else None
        if not isinstance(code, str) or not code.strip():
            return Answer("skip")
        call.code = code  # the tool call shows what runs
        return Answer("edit", code=code)

    async def allow_tool(self, call: ToolCall, question: str) -> bool:
        session_id = self.sessions.get(call.workspace)
        if self.conn is None or session_id is None:
            return False
        await self._queue.join()  # its tool call is known to the client first
        response = await self.conn.request_permission(
            session_id=session_id, tool_call=tools.permission(call, question),
            options=tools.OPTIONS)
        return getattr(response.outcome, "option_id", None) == "allow_once"

    async def read_input(self, params: InputParams) -> str | None:
        raise NoInput("an ACP client has no request for a program's input")

    def show_text(self, text: str, error: bool = False) -> None:
        if error and self.active is not None:  # the rest reaches the client as the stream
            self.update(self.active, update_agent_message_text(f"\n\n**oi-lsp:** {text}\n"))

    def backlog(self) -> int:
        return 0  # tool call updates are throttled and trimmed already (calls.py)

    async def tell(self, text: str, actions: list[str]) -> str | None:
        self.show_text(text, error=True)
        return None  # ACP has no question with free actions: nobody agreed
