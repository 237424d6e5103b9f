"""Approval: the server-wide table of pending proposals (each a future behind a random,
single-use id bound to one workspace), and each workspace's gate that checks the risk of a
proposal and decides whether it needs the user at all."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..protocol import PROPOSAL, Proposal, Risk
from . import risk, rules
from .aio import in_thread
from .link import Answer

if TYPE_CHECKING:
    from .activity import Activity
    from .link import Link
    from .settings import Settings


class UnknownProposal(LookupError):
    """The id was never issued, was already answered, or belongs to another workspace."""


class WrongDecision(ValueError):
    """"outside" for a proposal that is not a run the sandbox blocked."""


class Approvals:
    """The server-wide table of open proposals (ids are unguessable and used once)."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, asyncio.Future[Answer]]] = {}
        self._escalations: set[str] = set()  # ids that ask to run outside the sandbox
        self._code: dict[str, tuple[str, str]] = {}  # proposal id -> (language, code)

    def open(self, workspace: str, language: str = "", code: str = "",
             escalation: bool = False) -> tuple[str, asyncio.Future[Answer]]:
        proposal_id = secrets.token_urlsafe(12)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._open[proposal_id] = (workspace, future)
        self._code[proposal_id] = (language, code)
        if escalation:
            self._escalations.add(proposal_id)

        def forget(_: object) -> None:
            self._open.pop(proposal_id, None)
            self._code.pop(proposal_id, None)
            self._escalations.discard(proposal_id)

        future.add_done_callback(forget)
        return proposal_id, future

    def proposal(self, proposal_id: str,
                 workspace: str | None = None) -> tuple[str, str, str]:
        """(workspace, language, code) of an open proposal; raises UnknownProposal."""
        entry = self._open.get(proposal_id)
        if entry is None or (workspace is not None and entry[0] != workspace):
            raise UnknownProposal(f"no open proposal {proposal_id!r}"
                                  + (" in this workspace" if workspace else ""))
        return (entry[0], *self._code[proposal_id])

    def answer(self, proposal_id: str, answer: Answer, workspace: str | None = None) -> None:
        self.proposal(proposal_id, workspace)
        if answer.decision == "outside" and proposal_id not in self._escalations:
            raise WrongDecision("decision 'outside' answers only a proposal to run code the "
                                "sandbox blocked (one with sandboxBlocked)")
        self._open[proposal_id][1].set_result(answer)

    def drop(self, workspace: str) -> None:
        """Cancel every open proposal of a workspace (its turn was stopped)."""
        for ws, future in list(self._open.values()):
            if ws == workspace:
                future.cancel()

    def decline(self, workspace: str) -> bool:
        """Skip every open proposal of a workspace and end its turn (the user wrote a new
        message instead); whether there was one."""
        futures = [f for ws, f in list(self._open.values()) if ws == workspace and not f.done()]
        for future in futures:
            future.set_result(Answer("skip", end_turn=True))
        return bool(futures)


class Gate:
    """One workspace's side of approval: the risk check (and safe mode's semgrep scan) of each
    proposal, whether it may run without asking, and the proposal sent to the client."""

    def __init__(self, workspace: str, folder: Path, approvals: Approvals, link: Link,
                 activity: Activity) -> None:
        self.workspace = workspace
        self.folder = folder
        self.approvals = approvals
        self.link = link
        self.activity = activity
        self._told_semgrep_missing = False

    def for_turn(self, turn_id: str, settings: Settings,
                 current: Callable[[], Settings]) -> TurnGate:
        return TurnGate(self, turn_id, settings, current)

    async def ask(self, turn_id: str, language: str, code: str, found: Risk,
                  auto_run: bool, blocked: str | None = None) -> Answer:
        """The user's answer to running `code`; `run` at once when `auto_run` (the risk and
        the rules allow it). Meanwhile the workspace's activity is `waiting`. With `blocked`,
        it asks to run, outside the sandbox, code the sandbox just blocked: never without the
        user."""
        if auto_run and blocked is None:
            self.link.send(PROPOSAL, Proposal(
                turn_id=turn_id, workspace=self.workspace,
                proposal_id=f"auto-{secrets.token_hex(6)}", language=language, code=code,
                auto_run=True, risk=found).wire())
            return Answer("run", auto=True)
        proposal_id, future = self.approvals.open(self.workspace, language, code,
                                                  escalation=blocked is not None)
        proposal = Proposal(turn_id=turn_id, workspace=self.workspace, proposal_id=proposal_id,
                            language=language, code=code, auto_run=False, risk=found,
                            sandbox_blocked=blocked,
                            command=None if blocked else rules.command_word(language, code))
        self.activity.set(turn_id, "waiting")
        try:
            return await self.link.ask(proposal, future)
        finally:
            future.cancel()  # answered or not, the id is used up

    async def risk(self, settings: Settings, language: str, code: str) -> Risk:
        """The static check, plus semgrep's findings in safe mode (flagged code is high risk
        in `auto`, so it runs only when the user approves it)."""
        found = await in_thread(risk.assess, code, self.folder,
                                        bool(settings.restrict_to_workspace), language)
        if settings.safe_mode == "off":
            return found
        findings = await risk.semgrep_scan(code, language.strip().lower())
        if findings is None:
            risk.raise_to(found, "low", risk.SEMGREP_MISSING)
            if not self._told_semgrep_missing:
                self._told_semgrep_missing = True
                self.link.show_text(risk.SEMGREP_MISSING, error=True)
        for finding in findings or ():
            risk.raise_to(found, "high" if settings.safe_mode == "auto" else "medium", finding)
        return found


class TurnGate:
    """The gate as one turn uses it: the risk checked with the turn's settings; autoRun and
    autoRunRules read when each proposal comes, so turning autoRun on during a turn, or a
    rule an "always for this command" answer adds, covers the turn's next proposals too."""

    def __init__(self, gate: Gate, turn_id: str, settings: Settings,
                 current: Callable[[], Settings]) -> None:
        self._gate = gate
        self._turn_id = turn_id
        self._settings = settings
        self._current = current

    async def check(self, language: str, code: str) -> Risk:
        return await self._gate.risk(self._settings, language, code)

    async def ask(self, language: str, code: str, found: Risk) -> Answer:
        # rules.decide: deny refuses; high risk, safe mode `ask` and untrusted always ask;
        # medium risk runs by itself only inside the OS sandbox, which bounds what it can do.
        decision = rules.decide(self._current(), language, code, found)
        if decision.verdict == "deny":
            return Answer("skip", refusal=decision.reason)
        return await self._gate.ask(self._turn_id, language, code, found,
                                    decision.verdict == "run")

    async def ask_outside(self, language: str, code: str, blocked: str) -> Answer:
        """May code the sandbox blocked run once outside it (a fresh process)? Always asked."""
        found = Risk(level="high", reasons=[
            f"blocked by the sandbox: {blocked}",
            "approving runs it once OUTSIDE the sandbox, in a fresh process without the "
            "REPL's variables"])
        return await self._gate.ask(self._turn_id, language, code, found, False, blocked)
