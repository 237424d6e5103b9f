"""One workspace's Link to every client attached to it (the shared daemon): notifications go
to all; a proposal is shown to all and the first answer wins; a question for the user (a
message box, a program's input) goes to the client whose request started the work, else to
any. Which client that is travels in a context variable the front end sets per connection:
every task a connection's requests start (a turn, a run) inherits it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, Protocol

from ..protocol import ANSWERED, PROPOSAL, Answered, InputParams, Proposal, ToolCall
from .link import Answer, Link, NoInput


class Member(Link, Protocol):
    def settings_layers(self) -> list[dict[str, Any]]:
        """This client's settings layers (its environment's, its editor's), lowest first."""
        ...


# The client whose request is being served (or started the task running now).
origin: contextvars.ContextVar[Member | None] = contextvars.ContextVar("origin", default=None)


class Fanout:
    def __init__(self, on_empty: Callable[[], None] = lambda: None) -> None:
        self.members: list[Member] = []
        self._on_empty = on_empty
        self._last: Member | None = None  # whose settings apply when no request says
        self._pending: dict[str, Proposal] = {}  # asked, not answered yet

    def attach(self, member: Member) -> None:
        if member not in self.members:
            self.members.append(member)
            for proposal in self._pending.values():  # an editor restarted while it waited
                member.send(PROPOSAL, proposal.wire())
        self._last = member

    def detach(self, member: Member) -> None:
        if member in self.members:
            self.members.remove(member)
            if self._last is member:
                self._last = self.members[-1] if self.members else None
            if not self.members:
                self._on_empty()

    def _first(self) -> Member | None:
        """The client that started the current work, if still attached; else the latest."""
        own = origin.get()
        if own is not None and own in self.members:
            return own
        return self._last if self._last in self.members else (
            self.members[-1] if self.members else None)

    def settings_layers(self) -> list[dict[str, Any]]:
        # The client whose request started this work, even if it has left since (a turn
        # keeps its starter's key); else the latest attached.
        member = origin.get() or self._first() or self._last
        return member.settings_layers() if member is not None else []

    # Link --------------------------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any]) -> None:
        for member in list(self.members):
            member.send(method, params)

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        """Every client is asked; the first answer (oi/approve from any, or a plain client's
        message box) wins, and the other clients' questions are withdrawn."""
        self._pending[proposal.proposal_id] = proposal
        try:
            return await self._ask_all(proposal, answer)
        finally:
            self._pending.pop(proposal.proposal_id, None)

    async def _ask_all(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        # Shielded: withdrawing a client's question must not cancel the answer itself; and
        # the answer is awaited too: a client that attaches later may give it (oi/approve).
        answered = asyncio.shield(answer)
        asks = [asyncio.ensure_future(m.ask(proposal, asyncio.shield(answer)))
                for m in list(self.members)]
        try:
            done, _ = await asyncio.wait([answered, *asks], return_when=asyncio.FIRST_COMPLETED)
            result = answer.result() if answer.done() else next(
                task for task in asks if task in done).result()
        finally:
            for task in asks:
                task.cancel()
            answered.cancel()
        self._answered(proposal, result)
        return result

    def _answered(self, proposal: Proposal, result: Answer) -> None:
        self.send(ANSWERED, Answered(workspace=proposal.workspace, turn_id=proposal.turn_id,
                                     proposal_id=proposal.proposal_id,
                                     decision=result.decision).wire())

    def show_text(self, text: str, error: bool = False) -> None:
        for member in list(self.members):
            member.show_text(text, error)

    async def tell(self, text: str, actions: list[str]) -> str | None:
        member = self._first()
        if member is None:
            return None
        return await member.tell(text, actions)

    async def allow_tool(self, call: ToolCall, question: str) -> bool:
        member = self._first()
        return member is not None and await member.allow_tool(call, question)

    def backlog(self) -> int:
        return max((m.backlog() for m in self.members), default=0)

    async def read_input(self, params: InputParams) -> str | None:
        member = self._first()
        candidates = [member] if member is not None else []
        candidates += [m for m in self.members if m is not member]
        last: NoInput | None = None
        for candidate in candidates:
            try:
                return await candidate.read_input(params)
            except NoInput as exc:
                last = exc
        raise last or NoInput("no client is attached to this workspace")
