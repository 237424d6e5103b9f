"""Pending proposals: each a future behind a random, single-use id bound to one workspace."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Answer:
    decision: str  # "run" | "skip" | "edit"
    code: str | None = None


class UnknownProposal(LookupError):
    """The id was never issued, was already answered, or belongs to another workspace."""


class Approvals:
    """The server-wide table of open proposals (ids are unguessable and used once)."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, asyncio.Future[Answer]]] = {}

    def open(self, workspace: str) -> tuple[str, asyncio.Future[Answer]]:
        proposal_id = secrets.token_urlsafe(12)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._open[proposal_id] = (workspace, future)
        future.add_done_callback(lambda _: self._open.pop(proposal_id, None))
        return proposal_id, future

    def answer(self, proposal_id: str, answer: Answer, workspace: str | None = None) -> None:
        entry = self._open.get(proposal_id)
        if entry is None or (workspace is not None and entry[0] != workspace):
            raise UnknownProposal(f"no open proposal {proposal_id!r}"
                                  + (" in this workspace" if workspace else ""))
        entry[1].set_result(answer)

    def drop(self, workspace: str) -> None:
        """Cancel every open proposal of a workspace (its turn was stopped)."""
        for ws, future in list(self._open.values()):
            if ws == workspace:
                future.cancel()
