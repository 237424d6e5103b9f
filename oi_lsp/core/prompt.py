"""What the model is sent: the system message, and the conversation in chat-completions form.

The conversation is kept in Open Interpreter's LMC shape (protocol.Message); this module turns it
into the messages litellm takes, pairing every tool call with its result.
"""

from __future__ import annotations

import json
from typing import Any

from ..protocol import Message, MessageContext
from . import vision as images
from .settings import Settings
from .situation import Situation

SYSTEM_MESSAGE = """\
You are Open Interpreter, a world-class programmer that can complete any goal by executing code.
First, write a plan. Always recap the plan between each code block.
When you execute code, it will be executed on the user's machine, in a persistent session: \
variables and imports survive between runs. The user has given you full and complete permission \
to execute any code necessary to complete the task; they approve each run.
To run code, call the `execute` tool with a language and the code. Its result is the output.
You can install new packages. You can access the internet only if the user's machine can.
The working directory is the user's workspace folder. Write messages to the user in Markdown.
In general, try to make plans with as few steps as possible. Try to do things in small, \
informed steps: run a little code, look at the result, then continue.
You are capable of almost any task, but you may be wrong: check your work."""

MACHINE_HEADING = ("Where you work (the user's messages may also carry their editor's file and "
                   "selection):")
INSTRUCTIONS_HEADING = "The user's instructions for this workspace (.oi/instructions.md):"

TOOLS_HEADING = """\
The user's MCP servers are Python modules in the kernel: `from oi_mcp import <server>`, then \
call a tool as a function, `<server>.<tool>(...)`; it returns the tool's structured content (a \
dict), else its text (JSON parsed). Work on the results in Python (loops, filters, joins) and \
print only what you need: each call prints one line, the results reach you only as you print \
them. `help(<server>.<tool>)` shows a tool's parameters. A call that fails raises \
oi_mcp.ServerUnavailable, oi_mcp.ToolError or oi_mcp.CallDenied (the user said no). Tools \
marked [asks the user first] make the user confirm each call. The servers and their tools:"""

CODE_BLOCK_SYSTEM_MESSAGE = """\
To run code, write it in a fenced Markdown code block with its language, e.g. ```python. \
Each such block is proposed to the user, run when they approve, and its output sent back to you."""

# How the result of fenced code (no tool call) goes back to the model, as user text; the
# context window recognises old outputs by it.
OUTPUT_PREFIX = "Output of the "


# The most of a user's own run's output the model is told about, with the next message.
USER_RUN_OUTPUT = 1000


def with_context(text: str, context: MessageContext | None) -> str:
    """The user's message with the editor's context (file, language, selection) attached:
    how the model reads it (the conversation keeps the two apart)."""
    if context is None or not (context.uri or context.text):
        return text
    parts = [text, "", "Context from the editor:"]
    if context.uri:
        where = context.uri.removeprefix("file://")
        if context.range is not None:
            where += f" (lines {context.range.start.line + 1}-{context.range.end.line + 1})"
        parts.append(f"File: {where}" + (f", language: {context.language}"
                                         if context.language else ""))
    if context.text:
        parts += [f"```{context.language or ''}", context.text, "```"]
    return "\n".join(parts)


def system_message(settings: Settings, situation: Situation | None = None) -> str:
    """The built-in text, where it runs, then `systemMessage`, then the workspace's
    instructions (most specific last)."""
    situation = situation or Situation()
    parts = [SYSTEM_MESSAGE]
    if situation.machine:
        parts.append(f"{MACHINE_HEADING}\n{situation.machine}")
    if situation.tools:
        parts.append(f"{TOOLS_HEADING}\n{situation.tools}")
    if not settings.tool_calls:
        parts.append(CODE_BLOCK_SYSTEM_MESSAGE)
    if settings.system_message:
        parts.append(settings.system_message)
    if situation.instructions:
        parts.append(f"{INSTRUCTIONS_HEADING}\n{situation.instructions}")
    return "\n\n".join(parts)


def to_model_messages(messages: list[Message], settings: Settings,
                      situation: Situation | None = None,
                      vision: bool = False) -> list[dict[str, Any]]:
    """The conversation in chat-completions form; every tool call gets its tool result. With
    `vision`, the images a run displayed follow its result (in a user message: not every
    provider takes images in a tool result), and the user's attachments are in their message."""
    builder = _Builder(settings, situation, vision)
    for m in messages:
        builder.add(m)
    builder.settle()
    builder.flush_images()
    return builder.out


class _Builder:
    """Walks the conversation once: a code message and what followed it (its confirmation and
    outputs) are held until the next message of the model or the user, then become one result."""

    def __init__(self, settings: Settings, situation: Situation | None,
                 vision: bool = False) -> None:
        self.tools = settings.tool_calls
        self.vision = vision
        # Runs' images, sent once the tool results of the model's message are all in.
        self.images: list[dict[str, Any]] = []
        self.out: list[dict[str, Any]] = [{"role": "system",
                                           "content": system_message(settings, situation)}]
        self.assistant: dict[str, Any] | None = None  # the model message being built
        self.pending: list[Message] = []  # a code message and what followed it
        self.user_runs: list[list[Message]] = []  # the user's own runs since the last message
        # The thinking blocks of the model's reasoning, for the model message that follows it:
        # a provider that signs them (Anthropic) wants them back unchanged, before its tool
        # calls. Reasoning without blocks is never sent back (DeepSeek refuses it).
        self.thinking: list[dict[str, Any]] | None = None

    def add(self, m: Message) -> None:
        if m.type == "image":
            self._image(m)
            return
        if m.type == "error" or (m.role == "computer" and m.type == "code"):
            return  # for the user's eyes: turn errors, displayed HTML
        if m.type == "reasoning":
            self.settle()
            self.assistant = None
            self.thinking = m.thinking_blocks
            return
        if m.role == "user" and m.type == "code":
            self.user_runs.append([m])
            return
        if self.user_runs and m.role == "computer" and m.turn_id == self.user_runs[-1][0].turn_id:
            self.user_runs[-1].append(m)
            return
        if m.role == "user":
            self.settle()
            self.assistant = None
            self.thinking = None
            content = with_context(m.content, m.context)
            if self.user_runs:
                content = f"{self._user_runs_note()}\n\n{content}"
            self._append({"role": "user", "content": content})
        elif m.role == "assistant" and m.type == "message":
            self.settle()
            self.assistant = self._assistant(m.content)
        elif m.role == "assistant" and m.type == "code":
            self.settle()
            self._code(m)
            self.pending.append(m)
        elif self.pending:
            self.pending.append(m)

    def _assistant(self, content: str | None) -> dict[str, Any]:
        """A new model message, with the thinking blocks of the reasoning before it."""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        # A block cut short by a stop has no signature: the provider would refuse it.
        signed = [b for b in self.thinking or () if b.get("signature")
                  or b.get("type") == "redacted_thinking"]
        if signed:
            message["thinking_blocks"] = signed
        self.thinking = None
        self._append(message)
        return message

    def _append(self, message: dict[str, Any]) -> None:
        self.flush_images()
        self.out.append(message)

    def flush_images(self) -> None:
        if self.images:
            self.out.append({"role": "user", "content": [
                {"type": "text", "text": images.IMAGES_NOTE}, *self.images]})
            self.images = []

    def _image(self, m: Message) -> None:
        """An image the user attached goes with their message; one a run displayed, with the
        run's result (vision only: the result's text names it anyway)."""
        if m.role == "user" and self.out and self.out[-1]["role"] == "user":
            last = self.out[-1]
            parts = (last["content"] if isinstance(last["content"], list)
                     else [{"type": "text", "text": last["content"]}] if last["content"]
                     else [])  # images alone: an empty text part is refused by some
            part = images.part(m.format, m.content) if self.vision else None
            parts.append(part or {"type": "text", "text": (
                "[the user attached an image; you cannot see it: "
                + ("vision is off]" if not self.vision else "its format cannot be sent]"))})
            last["content"] = parts
        elif m.role == "computer" and self.vision and self.pending \
                and m.turn_id == self.pending[0].turn_id:  # not a display of the user's run
            self.pending.append(m)

    def _user_runs_note(self) -> str:
        """What the user ran in the shared REPLs since their last message: they share its
        variables with the model, so the model hears of it with the next message."""
        parts = ["(Since your last turn, I ran this code myself in the same session:)"]
        for code, *outputs in self.user_runs:
            text = "\n".join(o.content for o in outputs if o.type == "console").strip()
            if len(text) > USER_RUN_OUTPUT:
                text = text[:USER_RUN_OUTPUT // 2] + "\n[...]\n" + text[-USER_RUN_OUTPUT // 2:]
            parts.append(f"```{code.format or ''}\n{code.content}\n```\nOutput:\n"
                         f"{text or '(no output)'}")
        self.user_runs = []
        return "\n\n".join(parts)

    def _code(self, m: Message) -> None:
        if not m.tool_call_id:
            return  # fenced code: it is in the text of the model's message already
        if not self.tools:
            # Tools are off now (toolCalls: false): earlier calls read as fenced code.
            fenced = f"```{m.format or ''}\n{m.content}\n```"
            if self.assistant is None:
                self.assistant = self._assistant(fenced)
            else:
                self.assistant["content"] = (
                    f"{self.assistant['content'] or ''}\n{fenced}".lstrip())
            return
        if self.assistant is None:
            self.assistant = self._assistant(None)
        args = (m.content if m.format == "text"
                else json.dumps({"language": m.format, "code": m.content}))
        self.assistant.setdefault("tool_calls", []).append({
            "id": m.tool_call_id, "type": "function",
            "function": {"name": "execute", "arguments": args}})

    def settle(self) -> None:
        """The held code message's result, as a tool result or (fenced code) user text."""
        if not self.pending:
            return
        code, rest = self.pending[0], self.pending[1:]
        self.pending = []
        ran = next((m for m in rest if m.type == "confirmation"), None)
        results = [m.content for m in rest if m.type == "console"]
        shown = [m for m in rest if m.type == "image"]
        if ran is None and not results:
            result = "The user declined to run this code; it did not run."
        else:
            result = "\n".join(results) or "(no output)"
            if ran is not None and ran.content != code.content:
                result = (f"The user edited the code before running it. This ran instead:\n"
                          f"```{ran.format or ''}\n{ran.content}\n```\nOutput:\n{result}")
        if code.tool_call_id and self.tools:
            self.out.append({"role": "tool", "tool_call_id": code.tool_call_id,
                             "content": result})
        else:
            self._append({"role": "user",
                          "content": f"{OUTPUT_PREFIX}{code.format} code:\n{result}"})
        parts = [p for m in shown if (p := images.part(m.format, m.content)) is not None]
        self.images += parts[:images.PER_RUN]
