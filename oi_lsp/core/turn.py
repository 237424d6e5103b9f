"""One turn: model → text / proposal → approval → execution → result back to the model → ...

The turn knows nothing of LSP or kernels: its workspace hands it callables for asking approval
and running code, and a streamer for what the client sees.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread

from ..executors.base import RunResult
from ..protocol import CodeOutcome, EditorContext, ErrorKind, Message, MessageContext, TurnStatus
from . import context_window, llm, run_output, tool_calls, vision
from .activity import Activity
from .approval import TurnGate
from .conversation import Conversation
from .prompt import to_model_messages
from .settings import Settings
from .situation import Situation
from .streamer import Streamer

log = logging.getLogger(__name__)

# (language, code, output) -> result; every chunk printed is appended to `output` as it comes
class RunCode(Protocol):
    async def __call__(self, language: str, code: str, output: run_output.RunOutput,
                       outside: bool = False) -> RunResult: ...


@dataclass(slots=True)
class Outcome:
    status: TurnStatus
    error: str | None = None
    kind: ErrorKind | None = None  # why it failed, when the model or a limit ended it


_TYPES: dict[str, Any] = {"text": "message", "reasoning": "reasoning"}  # the chunk of a piece


class _Declined(Exception):
    """The user sent a new message instead of answering the proposal: the turn ends."""




class Turn:
    def __init__(self, turn_id: str, settings: Settings, conversation: Conversation, *,
                 streamer: Streamer, activity: Activity,
                 gate: TurnGate, run_code: RunCode, runnable: set[str],
                 on_text: Callable[[str], None], spent: context_window.Spend,
                 spill_dir: Path,
                 situation: Callable[[], Awaitable[Situation]] | None = None) -> None:
        self.turn_id = turn_id
        self.settings = settings
        self.conversation = conversation
        self.messages = conversation.messages  # read; appended to through the conversation
        self.streamer = streamer
        self.activity = activity
        self.gate = gate
        self.run_code = run_code
        self.runnable = runnable
        self.on_text = on_text  # the model's text, for clients that do not render oi/stream
        self.spill_dir = spill_dir  # where the whole of a trimmed output is kept
        self.steps = 0
        self.usage = context_window.Spend()  # this turn's model calls
        self.spent = spent  # the workspace's, since it opened (for maxBudget)
        self._situate = situation  # where it works, for the system message
        self.situation = Situation()

    def _say(self, role: Any, type_: Any, content: str, format_: str | None = None,
             tool_call_id: str | None = None, **extra: Any) -> Message:
        message = Message(role=role, type=type_, format=format_, content=content,
                          turn_id=self.turn_id, tool_call_id=tool_call_id, **extra)
        self.conversation.record(message)
        return message

    async def run(self, text: str, context: EditorContext | None,
                  images: list[tuple[str, str]] | None = None) -> Outcome:
        self._say("user", "message", text, context=_kept(context))
        for format_, content in images or []:  # attached: (format, base64)
            self._say("user", "image", content, format_)
        if self._situate is not None:
            self.situation = await self._situate()
        try:
            return await self._loop()
        except _Declined:
            return Outcome("done")

    async def _loop(self) -> Outcome:
        while True:
            over = self._over_budget()
            if over:
                return Outcome("error", over, "budget")
            reply = llm.Reply()
            self.activity.set(self.turn_id, "thinking")
            sent = await self._fitted()
            try:
                async for piece in llm.stream(self.settings, sent, reply):
                    if piece.kind == "retry":  # not a block: what is open stays open
                        self.streamer.status(self.turn_id, "retrying", piece.text)
                    else:
                        self.streamer.content(self.turn_id, "assistant", _TYPES[piece.kind],
                                              None, piece.text)
            finally:
                self.streamer.close()
                # Keep what streamed, even when stopped mid-way; the reasoning first, as shown.
                if reply.reasoning or reply.thinking_blocks:
                    self._say("assistant", "reasoning", reply.reasoning,
                              thinking_blocks=reply.thinking_blocks or None)
                if reply.text:
                    self._say("assistant", "message", reply.text)
                    self.on_text(reply.text)
                with anyio.CancelScope(shield=True):  # a stopped call was paid for too
                    await self._account(sent, reply)
            proposals = self._proposals(reply)
            if not proposals:
                if not self._loops_on(reply.text):
                    return Outcome("done")
                if self.steps >= self.settings.max_steps:
                    return self._too_many_steps()
                self.steps += 1
                # Loop mode: answer for the user, as Open Interpreter's --loop does.
                self._say("user", "message", self.settings.loop_message)
                self.streamer.whole(self.turn_id, "user", "message", None,
                                    self.settings.loop_message)
                continue
            for language, code, call_id in proposals:
                if self.steps >= self.settings.max_steps:
                    return self._too_many_steps()
                self.steps += 1
                await self._propose(language, code, call_id)

    def _loops_on(self, text: str) -> bool:
        """Loop mode goes on after a reply without code until it says a loop breaker."""
        return self.settings.loop and not any(
            breaker in text for breaker in self.settings.loop_breakers)

    def _too_many_steps(self) -> Outcome:
        return Outcome("error", f"stopped after {self.settings.max_steps} steps (code runs and "
                       "loop prompts) in one turn, the most maxSteps allows. Send a message to "
                       "go on.", "maxSteps")

    async def _fitted(self) -> list[dict[str, Any]]:
        """The conversation for the model, trimmed to its context window."""
        if not self.settings.model:  # llm.stream says what to set
            return to_model_messages(self.messages, self.settings, self.situation)
        litellm = await llm.warm_up()
        sees = vision.enabled(litellm, self.settings)
        # read in a thread (images are shrunk there) as they are now
        kept = await self.conversation.recent(context_window.reach(litellm, self.settings))

        def build() -> list[dict[str, Any]]:
            return context_window.fit(litellm, self.settings, to_model_messages(
                kept, self.settings, self.situation, vision=sees))

        return await anyio.to_thread.run_sync(build, abandon_on_cancel=True)

    async def _account(self, sent: list[dict[str, Any]], reply: llm.Reply) -> None:
        """Count the call's tokens and price them (estimates, with litellm's tables)."""
        litellm = llm.loaded()
        if litellm is None or not (reply.text or reply.reasoning or reply.tool_calls
                                   or reply.finish_reason or reply.usage):
            return  # no call was made, or it failed before answering
        text = reply.reasoning + reply.text + "".join(call.arguments
                                                      for call in reply.tool_calls)
        used = await anyio.to_thread.run_sync(context_window.measure, litellm, self.settings,
                                              sent, text, reply.usage)
        self.usage.add(used)
        self.spent.add(used)

    def _over_budget(self) -> str | None:
        limit = self.settings.max_budget
        if limit is None or self.spent.cost is None or self.spent.cost < limit:
            return None
        return (f"Stopped: this session has spent about ${self.spent.cost:.4f} on the model, "
                f"which reaches its maxBudget of ${limit:g}. Raise maxBudget to go on.")

    def _proposals(self, reply: llm.Reply) -> list[tuple[str, str, str | None]]:
        """(language, code, tool call id) of each run the model asks for, in order."""
        if reply.tool_calls:
            return [self._parse_call(call) for call in reply.tool_calls]
        if not self.settings.tool_calls or not self._used_tools():
            return [(lang, code, None) for lang, code in llm.code_blocks(reply.text,
                                                                           self.runnable)]
        return []

    def _used_tools(self) -> bool:
        """A model that has called the tool in this conversation writes code blocks as prose."""
        return any(m.tool_call_id for m in self.messages if m.type == "code")

    def _parse_call(self, call: llm.ToolCall) -> tuple[str, str, str | None]:
        call_id = call.id or f"call_{self.turn_id}_{self.steps}"
        try:
            run = tool_calls.repair(call.name, call.arguments)
        except tool_calls.Unusable as problem:
            # The model is told in the tool result and the turn goes on.
            self._say("assistant", "code", call.arguments, "text", call_id, outcome="error")
            self._say("computer", "console", str(problem), "output", call_id)
            return ("", "", None)
        return (run.language, run.code, call_id)

    async def _propose(self, language: str, code: str, call_id: str | None) -> None:
        if not language:  # an invalid tool call, already answered
            return
        proposed = self._say("assistant", "code", code, language, call_id)
        proposed.risk = await self.gate.check(language, code)
        self.conversation.changed(proposed)
        # Stopped while it waits, the proposal's fate is set by the workspace: stopped by the
        # user, or expired with the server.
        answer = await self.gate.ask(language, code, proposed.risk)
        if answer.decision == "skip":
            if answer.refusal:  # a deny rule: the user sees why, the model is told
                self._say("computer", "console", answer.refusal, "output", call_id)
                self.streamer.whole(self.turn_id, "computer", "console", "output",
                                    answer.refusal + "\n")
            self._settle(proposed, "skipped")
            if answer.end_turn:
                raise _Declined
            return
        ran = answer.code if answer.decision == "edit" and answer.code is not None else code
        if ran != code:
            proposed.edited_code = ran
            self.conversation.changed(proposed)
        self._say("computer", "confirmation", ran, language, call_id)
        self.streamer.whole(self.turn_id, "computer", "confirmation", language, ran)
        try:
            result = await self._run(ran, language, call_id)
            if result.blocked is not None:
                result = await self._outside(language, ran, result.blocked, call_id) or result
        except asyncio.CancelledError:
            self._settle(proposed, "stopped")  # the run was interrupted: by a stop, or closing
            raise
        fate = run_output.outcome_of(result)
        if fate == "ran":
            fate = "edited" if ran != code else "autoRan" if answer.auto else "ran"
        self._settle(proposed, fate)

    async def _outside(self, language: str, code: str, blocked: str,
                       call_id: str | None) -> RunResult | None:
        """The sandbox blocked a run: ask whether it may run once outside the sandbox; its
        result there, or None when the user said no."""
        answer = await self.gate.ask_outside(language, code, blocked)
        if answer.decision == "skip":
            if answer.end_turn:
                raise _Declined
            return None
        ran = answer.code if answer.decision == "edit" and answer.code is not None else code
        self._say("computer", "confirmation", ran, language, call_id)
        self.streamer.whole(self.turn_id, "computer", "confirmation", language, ran)
        return await self._run(ran, language, call_id, outside=True)

    async def _run(self, code: str, language: str, call_id: str | None,
                   outside: bool = False) -> RunResult:
        """Run approved code; record what the model sees of its output, and what it showed."""
        output = run_output.RunOutput(self.spill_dir / f"{self.turn_id}-{self.steps}.txt",
                                      spill_from=self.settings.max_output)
        result = RunResult("error", "the run did not finish")
        try:
            result = await self.run_code(language, code, output, outside)
        except asyncio.CancelledError:
            result = RunResult("stopped")
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await output.finish()  # the model is pointed to a whole file
            view = run_output.model_view(result, output, self.settings.max_output)
            self._say("computer", "console", view, "output", call_id)
            self.conversation.record_displays(output.displays(), self.turn_id, call_id)
        return result

    def _settle(self, proposed: Message, fate: CodeOutcome) -> None:
        proposed.outcome = fate
        self.conversation.changed(proposed)


def _kept(context: EditorContext | None) -> MessageContext | None:
    """The editor's context as the conversation keeps it (None when it adds nothing)."""
    if context is None or not (context.uri or context.selection):
        return None
    return MessageContext(uri=context.uri, range=context.range, language=context.language,
                          text=context.selection)
