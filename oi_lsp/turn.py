"""One turn: model → text / proposal → approval → execution → result back to the model → ...

The turn knows nothing of LSP or kernels: the session hands it callables for asking approval
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

from . import context, model, output
from .approval import Answer
from .executors.base import Chunk, RunResult
from .notify import Streamer
from .protocol import ChatContext, Message, TurnStatus
from .settings import Settings

log = logging.getLogger(__name__)

# (language, code, auto_run) -> the user's answer
Ask = Callable[[str, str, bool], Awaitable[Answer]]
# (language, code, chunks) -> result; every chunk printed is appended to `chunks` as it comes
RunCode = Callable[[str, str, list[Chunk]], Awaitable[RunResult]]


@dataclass(slots=True)
class Outcome:
    status: TurnStatus
    error: str | None = None


class Turn:
    def __init__(self, turn_id: str, settings: Settings, messages: list[Message],
                 record: Callable[[Message], None], streamer: Streamer, ask: Ask,
                 run_code: RunCode, runnable: set[str],
                 on_text: Callable[[str], None] | None = None,
                 spent: context.Usage | None = None,
                 spill_dir: Path | None = None) -> None:
        self.turn_id = turn_id
        self.settings = settings
        self.messages = messages  # the session's conversation; read, appended via record
        self.record = record
        self.streamer = streamer
        self.ask = ask
        self.run_code = run_code
        self.runnable = runnable
        self.on_text = on_text
        self.spill_dir = spill_dir  # where the whole of a trimmed output is kept
        self.steps = 0
        self.usage = context.Usage()  # this turn's model calls
        self.spent = spent if spent is not None else context.Usage()  # the session's

    def _say(self, role: Any, type_: Any, content: str, format_: str | None = None,
             tool_call_id: str | None = None) -> None:
        self.record(Message(role=role, type=type_, format=format_, content=content,
                            turn_id=self.turn_id, tool_call_id=tool_call_id))

    async def run(self, text: str, context: ChatContext | None) -> Outcome:
        self._say("user", "message", with_context(text, context))
        while True:
            over = self._over_budget()
            if over:
                return Outcome("error", over)
            reply = model.Reply()
            self.streamer.status(self.turn_id, "thinking")
            sent = await self._fitted()
            try:
                async for delta in model.stream(self.settings, sent, reply):
                    self.streamer.content(self.turn_id, "assistant", "message", None, delta)
            finally:
                self.streamer.close()
                if reply.text:  # keep what streamed, even when stopped mid-way
                    self._say("assistant", "message", reply.text)
                    if self.on_text is not None:
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
                       "loop prompts) in one turn (maxSteps); send a message to go on")

    async def _fitted(self) -> list[dict[str, Any]]:
        """The conversation for the model, trimmed to its context window."""
        messages = to_model_messages(self.messages, self.settings)
        if not self.settings.model:
            return messages  # model.stream says what to configure
        litellm = await model.warm_up()
        return await asyncio.to_thread(context.fit, litellm, self.settings, messages)

    async def _account(self, sent: list[dict[str, Any]], reply: model.Reply) -> None:
        """Count the call's tokens and price them (estimates, with litellm's tables)."""
        litellm = model.loaded()
        if litellm is None or not (reply.text or reply.tool_calls or reply.finish_reason):
            return  # no call was made, or it failed before answering
        text = reply.text + "".join(call.arguments for call in reply.tool_calls)
        used = await asyncio.to_thread(context.measure, litellm, self.settings, sent, text)
        self.usage.add(used)
        self.spent.add(used)

    def _over_budget(self) -> str | None:
        limit = self.settings.max_budget
        if limit is None or self.spent.cost is None or self.spent.cost < limit:
            return None
        return (f"stopped: this session has spent about ${self.spent.cost:.4f} on the model, "
                f"which reaches its maxBudget of ${limit:g}; raise maxBudget to go on")

    def _proposals(self, reply: model.Reply) -> list[tuple[str, str, str | None]]:
        """(language, code, tool call id) of each run the model asks for, in order."""
        if reply.tool_calls:
            return [self._parse_call(call) for call in reply.tool_calls]
        if not self.settings.tool_calls or not self._used_tools():
            return [(lang, code, None) for lang, code in model.code_blocks(reply.text,
                                                                           self.runnable)]
        return []

    def _used_tools(self) -> bool:
        """A model that has called the tool in this conversation writes code blocks as prose."""
        return any(m.tool_call_id for m in self.messages if m.type == "code")

    def _parse_call(self, call: model.ToolCall) -> tuple[str, str, str | None]:
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
            self._say("assistant", "code", call.arguments, "text", call_id)
            self._say("computer", "console", problem, "output", call_id)
            return ("", "", None)
        return (language, code, call_id)

    async def _propose(self, language: str, code: str, call_id: str | None) -> None:
        if not language:  # an invalid tool call, already answered
            return
        self._say("assistant", "code", code, language, call_id)
        answer = await self.ask(language, code, self.settings.auto_run)
        if answer.decision == "skip":
            return
        ran = answer.code if answer.decision == "edit" and answer.code is not None else code
        self._say("computer", "confirmation", ran, language, call_id)
        self.streamer.whole(self.turn_id, "computer", "confirmation", language, ran)
        chunks: list[Chunk] = []
        result = RunResult("error", "the run did not finish")
        try:
            result = await self.run_code(language, ran, chunks)
        except asyncio.CancelledError:
            result = RunResult("stopped")
            raise
        finally:
            spill = None
            text = output.as_text(chunks)
            if self.spill_dir is not None and len(text) > self.settings.max_output:
                spill = self.spill_dir / f"{self.turn_id}-{self.steps}.txt"
                output.spill(spill, text)
            self._say("computer", "console",
                      model_view(result, chunks, self.settings.max_output, spill), "output",
                      call_id)


def with_context(text: str, context: ChatContext | None) -> str:
    """The user's message with the editor's context (file, language, selection) attached."""
    if context is None or not (context.uri or context.selection):
        return text
    parts = [text, "", "Context from the editor:"]
    if context.uri:
        where = context.uri.removeprefix("file://")
        if context.range is not None:
            where += f" (lines {context.range.start.line + 1}-{context.range.end.line + 1})"
        parts.append(f"File: {where}" + (f", language: {context.language}"
                                         if context.language else ""))
    if context.selection:
        parts += [f"```{context.language or ''}", context.selection, "```"]
    return "\n".join(parts)


def model_view(result: RunResult, chunks: list[Chunk], limit: int,
               spill: Path | None = None) -> str:
    """A run's output as the model gets it: text trimmed head and tail, images named; when
    trimmed, where the whole output is (`spill`)."""
    whole = output.as_text(chunks)
    text = output.trim(whole, limit).strip()
    if spill is not None and len(whole) > limit:
        text += f"\n[the whole output, {len(whole)} characters, is in the file {spill}]"
    if result.status == "stopped":
        text += "\n[the user stopped this run]"
    elif result.status == "error" and result.error and result.error not in text:
        text += f"\n[{result.error}]"
    return text.strip() or "(no output)"


def to_model_messages(messages: list[Message], settings: Settings) -> list[dict[str, Any]]:
    """The conversation in chat-completions form; every tool call gets its tool result."""
    system = model.SYSTEM_MESSAGE
    if not settings.tool_calls:
        system += "\n\n" + model.CODE_BLOCK_SYSTEM_MESSAGE
    if settings.system_message:
        system += "\n\n" + settings.system_message
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    assistant: dict[str, Any] | None = None
    pending: list[Message] = []  # a code message and what followed it

    def settle() -> None:
        if not pending:
            return
        code, rest = pending[0], pending[1:]
        ran = next((m for m in rest if m.type == "confirmation"), None)
        results = [m.content for m in rest if m.type in ("console", "image")]
        if ran is None and not results:
            result = "The user declined to run this code; it did not run."
        else:
            result = "\n".join(results) or "(no output)"
            if ran is not None and ran.content != code.content:
                result = (f"The user edited the code before running it. This ran instead:\n"
                          f"```{ran.format or ''}\n{ran.content}\n```\nOutput:\n{result}")
        if code.tool_call_id and settings.tool_calls:
            out.append({"role": "tool", "tool_call_id": code.tool_call_id, "content": result})
        else:
            out.append({"role": "user", "content": f"Output of the {code.format} code:\n{result}"})
        pending.clear()

    for m in messages:
        if m.role == "user":
            settle()
            assistant = None
            out.append({"role": "user", "content": m.content})
        elif m.role == "assistant" and m.type == "message":
            settle()
            assistant = {"role": "assistant", "content": m.content}
            out.append(assistant)
        elif m.role == "assistant" and m.type == "code":
            settle()
            if m.tool_call_id and not settings.tool_calls:
                # Tools are off now (toolCalls: false): earlier calls read as fenced code.
                fenced = f"```{m.format or ''}\n{m.content}\n```"
                if assistant is None:
                    assistant = {"role": "assistant", "content": fenced}
                    out.append(assistant)
                else:
                    assistant["content"] = f"{assistant['content'] or ''}\n{fenced}".lstrip()
            elif m.tool_call_id:
                if assistant is None:
                    assistant = {"role": "assistant", "content": None}
                    out.append(assistant)
                args = (m.content if m.format == "text"
                        else json.dumps({"language": m.format, "code": m.content}))
                assistant.setdefault("tool_calls", []).append({
                    "id": m.tool_call_id, "type": "function",
                    "function": {"name": "execute", "arguments": args}})
            pending.append(m)
        elif pending:
            pending.append(m)
    settle()
    return out
