"""One turn: model → text / proposal → approval → execution → result back to the model → ...

The turn knows nothing of LSP or kernels: its workspace hands it callables for asking approval
and running code, and a streamer for what the client sees.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..executors.base import Chunk, RunResult
from ..protocol import CodeOutcome, EditorContext, ErrorKind, Message, MessageContext, TurnStatus
from . import context_window, llm, run_output, vision
from .activity import Activity
from .approval import TurnGate
from .conversation import Conversation
from .prompt import to_model_messages
from .settings import Settings
from .streamer import Streamer

log = logging.getLogger(__name__)

# (language, code, chunks) -> result; every chunk printed is appended to `chunks` as it comes
RunCode = Callable[[str, str, list[Chunk]], Awaitable[RunResult]]


@dataclass(slots=True)
class Outcome:
    status: TurnStatus
    error: str | None = None
    kind: ErrorKind | None = None  # why it failed, when the model or a limit ended it


class _Declined(Exception):
    """The user sent a new message instead of answering the proposal: the turn ends."""




class Turn:
    def __init__(self, turn_id: str, settings: Settings, conversation: Conversation, *,
                 streamer: Streamer, activity: Activity,
                 gate: TurnGate, run_code: RunCode, runnable: set[str],
                 on_text: Callable[[str], None], spent: context_window.Spend,
                 spill_dir: Path) -> None:
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
                async for delta in llm.stream(self.settings, sent, reply):
                    self.streamer.content(self.turn_id, "assistant", "message", None, delta)
            finally:
                self.streamer.close()
                if reply.text:  # keep what streamed, even when stopped mid-way
                    self._say("assistant", "message", reply.text)
                    self.on_text(reply.text)
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
        if not self.settings.model:
            return to_model_messages(self.messages, self.settings)  # llm.stream says what to set
        litellm = await llm.warm_up()
        sees = vision.enabled(litellm, self.settings)
        kept = list(self.messages)  # read in a thread (images are shrunk there) as they are now

        def build() -> list[dict[str, Any]]:
            return context_window.fit(litellm, self.settings,
                                      to_model_messages(kept, self.settings, sees))

        return await asyncio.to_thread(build)

    async def _account(self, sent: list[dict[str, Any]], reply: llm.Reply) -> None:
        """Count the call's tokens and price them (estimates, with litellm's tables)."""
        litellm = llm.loaded()
        if litellm is None or not (reply.text or reply.tool_calls or reply.finish_reason):
            return  # no call was made, or it failed before answering
        text = reply.text + "".join(call.arguments for call in reply.tool_calls)
        used = await asyncio.to_thread(context_window.measure, litellm, self.settings, sent, text)
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
        problem = None
        language = code = ""
        if call.name != "execute":
            problem = f"Unknown tool {call.name!r}; the only tool is execute(language, code)."
        else:
            try:
                args = json.loads(call.arguments or "{}")
                language, code = str(args["language"]), str(args["code"])
            except (ValueError, KeyError, TypeError):
                problem = ("The arguments were not valid JSON with `language` and `code`: "
                           f"{call.arguments[:200]!r}")
        if problem is not None:
            # The model is told in the tool result and the turn goes on.
            self._say("assistant", "code", call.arguments, "text", call_id, outcome="error")
            self._say("computer", "console", problem, "output", call_id)
            return ("", "", None)
        return (language, code, call_id)

    async def _propose(self, language: str, code: str, call_id: str | None) -> None:
        if not language:  # an invalid tool call, already answered
            return
        proposed = self._say("assistant", "code", code, language, call_id)
        proposed.risk = await self.gate.check(language, code)
        self.conversation.changed()
        # Stopped while it waits, the proposal's fate is set by the workspace: stopped by the
        # user, or expired with the server.
        answer = await self.gate.ask(language, code, proposed.risk)
        if answer.decision == "skip":
            self._settle(proposed, "skipped")
            if answer.end_turn:
                raise _Declined
            return
        ran = answer.code if answer.decision == "edit" and answer.code is not None else code
        if ran != code:
            proposed.edited_code = ran
        self._say("computer", "confirmation", ran, language, call_id)
        self.streamer.whole(self.turn_id, "computer", "confirmation", language, ran)
        try:
            result = await self._run(ran, language, call_id)
        except asyncio.CancelledError:
            self._settle(proposed, "stopped")  # the run was interrupted: by a stop, or closing
            raise
        fate = run_output.outcome_of(result)
        if fate == "ran":
            fate = "edited" if ran != code else "autoRan" if answer.auto else "ran"
        self._settle(proposed, fate)

    async def _run(self, code: str, language: str, call_id: str | None) -> RunResult:
        """Run approved code; record what the model sees of its output, and what it showed."""
        chunks: list[Chunk] = []
        result = RunResult("error", "the run did not finish")
        try:
            result = await self.run_code(language, code, chunks)
        except asyncio.CancelledError:
            result = RunResult("stopped")
            raise
        finally:
            spill = None
            text = run_output.as_text(chunks)
            if len(text) > self.settings.max_output:
                spill = self.spill_dir / f"{self.turn_id}-{self.steps}.txt"
                run_output.spill(spill, text)
            view = run_output.model_view(result, chunks, self.settings.max_output, spill)
            self._say("computer", "console", view, "output", call_id)
            self.conversation.record_displays(chunks, self.turn_id, call_id)
        return result

    def _settle(self, proposed: Message, fate: CodeOutcome) -> None:
        proposed.outcome = fate
        self.conversation.changed()


def _kept(context: EditorContext | None) -> MessageContext | None:
    """The editor's context as the conversation keeps it (None when it adds nothing)."""
    if context is None or not (context.uri or context.selection):
        return None
    return MessageContext(uri=context.uri, range=context.range, language=context.language,
                          text=context.selection)
