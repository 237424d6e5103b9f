"""What the core needs from the front end it serves (the LSP server today; an ACP agent or a
shared server tomorrow): a way to send notifications, to ask, and to tell the user."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol import InputParams, Proposal, ToolCall


@dataclass(frozen=True, slots=True)
class Answer:
    """The user's answer to a proposal, as the front end gives it to the core."""

    decision: str  # "run" | "skip" | "edit" | "outside" (only for a run the sandbox blocked)
    code: str | None = None
    auto: bool = False  # run without asking (autoRun, an allow rule)
    end_turn: bool = False  # skipped because the user sent a new message instead
    refusal: str | None = None  # skipped by a deny rule: why, for the user and the model


class NoInput(Exception):
    """The front end cannot ask the user for a program's input; the message says why."""


# (text, actions) -> the action the user chose (None: none / dismissed); no actions: just tell
Tell = Callable[[str, list[str]], Awaitable[str | None]]


class Link(Protocol):
    def send(self, method: str, params: dict[str, Any]) -> None:
        """An oi/* notification (oi/stream, oi/proposal, oi/turn)."""
        ...

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        """Show the proposal and return the user's answer (`answer` resolves on oi/approve)."""
        ...

    def show_text(self, text: str, error: bool = False) -> None:
        """Text for clients that do not render oi/stream (no-op for those that do)."""
        ...

    async def tell(self, text: str, actions: list[str]) -> str | None:
        """A warning for the user; with actions, the one they chose (None if none)."""
        ...

    def backlog(self) -> int:
        """Bytes sent that the client has not read yet (0 where the transport cannot tell)."""
        ...

    async def read_input(self, params: InputParams) -> str | None:
        """Ask the user for a line a running program reads (oi/input): the line, or None
        when they cancel. Raises NoInput when the client cannot be asked."""
        ...

    async def allow_tool(self, call: ToolCall, question: str) -> bool:
        """Ask the user whether the running code may make `call` (an MCP tool that asks
        first: `question` says which, with its arguments): True only if they allow it."""
        ...
