"""One workspace: orchestration only. Its settings layers, conversation, REPLs and approval
gate are objects of their own; this class runs turns and runs across them, one at a time."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from .. import protocol
from ..executors import registry
from ..executors.base import Chunk, RunResult
from ..protocol import (
    ChatParams,
    ChatResult,
    CodeOutcome,
    ErrorKind,
    ExecuteParams,
    ExecuteResult,
    Message,
    StatusResult,
    TurnEvent,
    Usage,
)
from . import attachments, magic, user_input
from .activity import Activity
from .aio import Soon
from .approval import Approvals, Gate
from .context_window import Spend
from .conversation import Conversation
from .layers import SettingsLayers
from .link import Link
from .llm import ModelError
from .mcp_bridge import Bridge
from .repls import Repls, options_of
from .run_output import KEEP, RunOutput, merge_outputs, model_view, outcome_of
from .settings import Settings
from .situation import Situation, Surveyor
from .store import Store
from .streamer import Streamer
from .transcript import Transcript
from .trust_prompt import TrustPrompt
from .turn import Outcome, Turn

log = logging.getLogger(__name__)


class Busy(RuntimeError):
    """A turn already runs in this workspace (the message says what it is doing)."""


_BUSY = {
    "thinking": "The model is still answering in this workspace. Wait for it to finish, or "
                "stop it first.",
    "running": "Code is still running in this workspace. Wait for it to finish, or stop it "
               "first.",
}
_BUSY_OTHER = "A turn is already running in this workspace. Wait for it, or stop it first."


def new_turn_id() -> str:
    return secrets.token_hex(6)


class Workspace:
    def __init__(self, uri: str, folder: Path, link: Link, approvals: Approvals,
                 store: Store, base_layers: Callable[[], list[dict[str, Any]]]) -> None:
        self.uri = uri
        self.folder = folder
        self.link = link
        self.layers = SettingsLayers(folder, base_layers)
        self.trust = TrustPrompt(folder, self.layers, link.tell)  # its own settings files
        self.conversation = Conversation(uri, store, lambda text: link.show_text(text, error=True))
        self.transcript = Transcript(self.conversation, uri)
        self.streamer = Streamer(self._send, uri, link.backlog)
        self.activity = Activity(self.streamer)
        self.repls = Repls(folder, self.settings, link.tell, self.streamer, self.activity,
                           lambda turn_id, emit: user_input.asker(
                               link, uri, turn_id, self.settings().input_timeout, emit))
        self.mcp = Bridge.of_workspace(uri, str(folder), link, self._send, self.settings,
                                       lambda: self.repls.running,  # MCP servers as code
                                       self.streamer.settled)
        self.repls.env = self.mcp.environ()
        self.gate = Gate(uri, folder, approvals, link, self.activity)
        self.approvals = approvals
        self._turn: anyio.CancelScope | None = None  # the running turn's: a stop cancels it
        self._ending: asyncio.Task[ChatResult] | None = None  # the turn, then its reporting
        self._turn_id = ""
        self._stop_fate: CodeOutcome | None = None  # how the running turn is being stopped
        self._runs: dict[asyncio.Future[Any], anyio.CancelScope] = {}  # direct runs' ends, scopes
        self.spent = Spend()  # model usage since the workspace opened (for maxBudget)
        self.opened = False  # in use: its kernel started, its settings files asked about
        self.surveyor = Surveyor(folder, lambda: options_of(self.settings(), folder))

    def settings(self) -> Settings:
        return self.layers.settings()

    def _send(self, method: str, params: dict[str, Any]) -> None:
        """What the workspace streams goes to the front end, and into the transcript."""
        self.link.send(method, params)
        self.transcript.saw(method, params)

    async def configure(self, values: dict[str, Any]) -> tuple[Settings, list[str]]:
        await self.trust.check()
        result = await self.layers.configure(values)
        await self.settings_changed()
        return result

    async def settings_changed(self) -> None:
        """A REPL started in another sandbox restarts now (saying so), or, while a turn runs,
        before its next run."""
        if not self.busy():
            await self.repls.apply_sandbox(self.link.tell)
            await self.repls.apply_python(self.link.tell)

    async def situation(self) -> Situation:
        """Where the model works: this machine's facts, the workspace's instructions, the
        MCP servers its code can call."""
        situation = await self.surveyor.situation(self.settings().trusted)
        return dataclasses.replace(situation, tools=await self.mcp.servers.index())

    def open(self) -> None:
        """Start the Python kernel now, in the background, so the first run is fast; ask
        about the folder's own settings if nobody trusted them; gather what the model is told
        of this machine."""
        self.opened = True
        self.trust.start()
        self.repls.open(self.trust.read.wait)
        self.surveyor.start()
        self.mcp.serve_soon()

    def busy(self) -> bool:
        """A turn runs, or has not finished ending (saved, reported)."""
        return self._ending is not None and not self._ending.done()

    def check_idle(self) -> None:
        """Raise Busy, saying what runs, while a turn runs."""
        if self.busy():
            raise Busy(_BUSY.get(self.activity.state.state, _BUSY_OTHER))

    # Conversations -----------------------------------------------------------------------

    async def open_conversation(self, conversation_id: str) -> None:
        """Switch to a saved conversation (the REPLs and their variables stay). Raises Busy,
        UnknownConversation, or DamagedConversation (the file then has been moved aside)."""
        self.check_idle()
        await self.conversation.open(conversation_id, self.check_idle)
        self.transcript.update()

    async def new_conversation(self) -> None:
        """Start an empty conversation; the open one stays saved. An empty one is reused."""
        self.check_idle()
        await self.conversation.begin([])
        self.transcript.update()

    # Turns -------------------------------------------------------------------------------

    async def chat(self, params: ChatParams) -> ChatResult:
        """Run a turn to its end (oi/chat). Cancelling this stops the turn."""
        turn_id, ending = await self.start_chat(params)
        try:
            return await asyncio.shield(ending)
        except asyncio.CancelledError:  # the request itself was cancelled: stop the turn
            if self._turn is not None and self._turn_id == turn_id:
                self._stop_fate = "stopped"
                self._turn.cancel()  # its scope: everything the turn started ends
            await asyncio.wait([ending])
            self.conversation.settle(turn_id, "stopped")
            raise

    async def start_chat(self, params: ChatParams) -> tuple[str, asyncio.Task[ChatResult]]:
        """Start a turn: its id, and the task that ends it with its result (a front end may
        answer at once and let the turn go on)."""
        if self.busy() and self.activity.state.state == "waiting" \
                and self.approvals.decline(self.uri):
            # A new message instead of an answer: the proposal is skipped and its turn ends.
            assert self._ending is not None
            await asyncio.wait([self._ending])
        self.check_idle()
        images = await attachments.load(params.attachments)  # refused before anything starts
        await self.trust.check()  # the profiles again; asks about new untrusted ones
        self.check_idle()  # another turn may have started while the user was asked
        turn_id = new_turn_id()
        settings = self.settings()
        turn: Turn | None = None  # magic commands are no model turn: no usage
        work: Coroutine[Any, Any, Outcome]
        if magic.is_command(params.message):  # answered here, never sent to the model
            work = self._magic(turn_id, params.message, settings)
        else:
            turn = self._new_turn(turn_id, settings)
            work = turn.run(params.message, params.context, images)
        self._event(turn_id, "chat", "running")
        self._turn_id = turn_id
        self._turn = anyio.CancelScope()  # set now: a stop may come before the task starts
        ending = self._ending = asyncio.create_task(self._drive(turn_id, work, turn, settings))
        return turn_id, ending

    async def _drive(self, turn_id: str, work: Coroutine[Any, Any, Outcome],
                     turn: Turn | None, settings: Settings) -> ChatResult:
        """The turn in a cancel scope of its own, which a stop cancels: whatever the turn
        started (the model stream, a run and the task groups of its readers and monitors,
        nested in it) ends with it. Then its end is recorded, saved and reported, shielded:
        a stop never cuts that short."""
        outcome = Outcome("stopped")  # when stopped before it began
        scope = self._turn
        assert scope is not None
        try:
            with scope:
                outcome = await _outcome(work)
        finally:
            if self._turn is scope:
                self._turn = None
            self.activity.set(turn_id, "idle")
        with anyio.CancelScope(shield=True):
            result = await self._end_turn(turn_id, outcome, turn, settings)
        return result

    async def _end_turn(self, turn_id: str, outcome: Outcome, turn: Turn | None,
                        settings: Settings) -> ChatResult:
        """Record why the turn failed, save, and report its end."""
        if outcome.error and turn is not None:  # why a question has no answer, kept
            self.conversation.record(Message(role="computer", type="error",
                                             content=outcome.error, turn_id=turn_id,
                                             error_kind=outcome.kind))
        if turn is not None and turn.usage.calls:
            self.conversation.note_usage(turn_id, _usage(turn.usage, self.spent).model_copy(
                update={"session_cost": None}))
        if turn is not None and outcome.status == "stopped" and self._stop_fate == "stopped":
            self.conversation.note_stopped(turn_id)
        self._stop_fate = None
        await self.conversation.flush()  # a turn reported finished is on disk
        if self.transcript.enabled:
            await self.transcript.flush()  # so is what a plain client is pointed to
        if outcome.error:
            self.link.show_text(outcome.error, error=True)
        elif self.conversation.save_error:  # shown once as a message; every turn's end says so
            outcome = Outcome(outcome.status, self.conversation.save_error, "notSaved")
        if settings.max_budget is not None and turn is not None and turn.usage.calls \
                and turn.usage.cost is None:
            self.link.show_text(f"maxBudget cannot be enforced: litellm has no price for model "
                                f"{settings.model!r}", error=True)
        self._event(turn_id, "chat", outcome.status, outcome.error, outcome.kind,
                    _usage(turn.usage, self.spent) if turn is not None else None)
        return ChatResult(turn_id=turn_id, status=outcome.status, error=outcome.error,
                          error_kind=outcome.kind)

    def _new_turn(self, turn_id: str, settings: Settings) -> Turn:
        conversation = self.conversation

        async def run_code(language: str, code: str, output: RunOutput,
                           outside: bool = False) -> RunResult:
            return await self.repls.run(turn_id, language, code, output,
                                        settings.execution_timeout, outside)

        gate = self.gate.for_turn(turn_id, settings, self.settings)
        return Turn(turn_id, settings, conversation, streamer=self.streamer,
                    activity=self.activity, gate=gate,
                    run_code=run_code, runnable=registry.runnable(),
                    on_text=self.link.show_text, spent=self.spent,
                    spill_dir=conversation.spill_dir(), situation=self.situation)

    async def _magic(self, turn_id: str, message: str, settings: Settings) -> Outcome:
        said: list[str] = []

        def say(text: str) -> None:
            said.append(text)
            self.streamer.content(turn_id, "computer", "console", "output", text)

        async def shell(command: str) -> RunResult:
            self.streamer.whole(turn_id, "computer", "confirmation", "shell", command)
            return await self.repls.run(turn_id, "shell", command, RunOutput(),
                                        settings.execution_timeout)

        try:
            return await magic.run(message, self, magic.Console(say, shell))
        finally:
            self.streamer.close()
            if said:
                self.link.show_text("".join(said))

    async def execute(self, params: ExecuteParams) -> ExecuteResult:
        """A direct run in the caller's task: one task and loop iteration less per round trip
        than start_execute. A stop cancels its scope, then waits for `ended`."""
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runs[ended] = scope = anyio.CancelScope()
        try:
            return await self._execute(new_turn_id(), params, scope)
        finally:
            del self._runs[ended]
            ended.set_result(None)

    def start_execute(self, params: ExecuteParams) -> tuple[str, asyncio.Task[ExecuteResult]]:
        """Start a direct run: its id, and the task that ends with its result."""
        turn_id, scope = new_turn_id(), anyio.CancelScope()  # a stop cancels the scope
        task = asyncio.create_task(self._execute(turn_id, params, scope))
        self._runs[task] = scope
        task.add_done_callback(self._runs.pop)
        return turn_id, task

    async def _execute(self, turn_id: str, params: ExecuteParams,
                       scope: anyio.CancelScope) -> ExecuteResult:
        if not self.trust.read.is_set():  # the sandbox a REPL starts in depends on them
            await (self.trust.read.wait() if self.opened else self.trust.check())
        output = RunOutput(self.conversation.spill_dir() / f"{turn_id}.txt", spill_from=2 * KEEP)
        timeout = params.timeout or self.settings().execution_timeout
        running = Soon(self._event, turn_id, "execute", "running")
        result = RunResult("stopped", "stopped by the user")
        try:
            with scope:
                result = await self.repls.run(turn_id, params.language, params.code, output,
                                              timeout)
        except asyncio.CancelledError:  # not a stop: the request itself was cancelled
            running.now()
            self._event(turn_id, "execute", "stopped")
            raise
        status = "done" if result.status in ("ok", "error", "timeout") else "stopped"
        await output.finish()
        running.now()
        _record_run(self.conversation, turn_id, params, result,
                    model_view(result, output, self.settings().max_output), output.displays())
        self._event(turn_id, "execute", status)
        return ExecuteResult(turn_id=turn_id, status=result.status, error=result.error,
                             outputs=merge_outputs(output.chunks()))

    async def stop(self, fate: CodeOutcome = "stopped") -> bool:
        """Stop the turn and the runs; a proposal left waiting gets `fate`."""
        if self._turn is not None:
            self._stop_fate = fate  # the turn's end, recorded before it is reported, says so
        scopes = [s for s in (self._turn, *self._runs.values()) if s is not None]
        for scope in scopes:
            scope.cancel()
        # After the scopes: a proposal's future cancelled first would wake the turn with a
        # cancellation its scope does not own, and the scope's own would then leak past it.
        self.approvals.drop(self.uri)
        # Stopped means ended: the turn saved and reported, the runs recorded.
        waiting = [t for t in (self._ending, *self._runs) if t is not None and not t.done()]
        if waiting:
            await asyncio.wait(waiting)
        if self._turn_id:
            self.conversation.settle(self._turn_id, fate)
        return bool(scopes)

    async def reset(self) -> None:
        """Stop, start a new empty conversation (the old one stays saved), restart the REPLs."""
        await self.stop()
        await self.new_conversation()
        await self.repls.restart_all()

    async def close(self) -> None:
        await self.stop("expired")  # a proposal waiting now can never be answered
        await self.repls.close()
        await self.mcp.close()
        await self.conversation.close()

    async def status(self) -> StatusResult:
        return StatusResult(workspace=self.uri, turn=self.activity.state,
                            repls=await self.repls.status())

    def _event(self, turn_id: str, kind: Any, status: Any, error: str | None = None,
               error_kind: ErrorKind | None = None, usage: Usage | None = None) -> None:
        self.link.send(protocol.TURN, TurnEvent(
            turn_id=turn_id, workspace=self.uri, kind=kind, status=status, error=error,
            error_kind=error_kind, usage=usage).wire())
        self.transcript.update()  # a run's record, a turn's end


def _usage(used: Spend, spent: Spend) -> Usage:
    return Usage(prompt_tokens=used.prompt_tokens, completion_tokens=used.completion_tokens,
                 calls=used.calls, cost=used.cost, session_cost=spent.cost,
                 reasoning_tokens=used.reasoning_tokens, cached_tokens=used.cached_tokens,
                 cache_write_tokens=used.cache_write_tokens, cache_saved=used.cache_saved)


def _record_run(conversation: Conversation, turn_id: str, params: ExecuteParams,
                result: RunResult, printed: str, displays: list[Chunk]) -> None:
    """The user's own run, kept in the conversation: its code, what it printed (as the model
    would see it) and what it displayed. The model hears of it with the next message
    (prompt.py)."""
    conversation.record(Message(role="user", type="code", format=params.language,
                                content=params.code, turn_id=turn_id,
                                outcome=outcome_of(result)))
    conversation.record(Message(role="computer", type="console", format="output",
                                turn_id=turn_id, content=printed))
    conversation.record_displays(displays, turn_id)


async def _outcome(work: Awaitable[Outcome]) -> Outcome:
    """The turn's outcome, or its error as an outcome (a stop ends its scope: see _drive)."""
    try:
        return await work
    except ModelError as exc:
        return Outcome("error", str(exc), exc.kind)
    except Exception as exc:
        log.exception("turn failed")
        return Outcome("error", f"internal error: {type(exc).__name__}: {exc}")
