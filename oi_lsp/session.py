"""One workspace: its conversation, its REPLs, its running turn and its settings overrides."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from . import context, profiles, protocol, risk
from .approval import Answer, Approvals
from .executors import registry
from .executors.base import Chunk, Executor, RunResult
from .model import ModelError
from .notify import Streamer
from .protocol import (
    ChatParams,
    ChatResult,
    ExecuteParams,
    ExecuteResult,
    Message,
    Output,
    Proposal,
    Risk,
    TurnEvent,
    Usage,
)
from .settings import Settings, SettingsError, check, combine, split_known
from .store import Store
from .turn import Outcome, Turn

log = logging.getLogger(__name__)


class Link(Protocol):
    """What a session needs from the editor it serves."""

    def send(self, method: str, params: dict[str, Any]) -> None: ...

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        """Show the proposal and return the user's answer (`answer` resolves on oi/approve)."""
        ...

    def show_text(self, text: str, error: bool = False) -> None:
        """Text for clients that do not render oi/stream (no-op for those that do)."""
        ...


class Busy(RuntimeError):
    """A turn already runs in this workspace."""


class Session:
    def __init__(self, workspace: str, folder: Path, link: Link, approvals: Approvals,
                 store: Store, base_layers: Callable[[], list[dict[str, Any]]]) -> None:
        self.workspace = workspace
        self.folder = folder
        self.link = link
        self.approvals = approvals
        self.store = store
        self.base_layers = base_layers
        self.overrides: dict[str, Any] = {}
        self.profile_layers: list[dict[str, Any]] = []  # user profile, then .oi/profile.yaml
        self.messages, notice = store.load(workspace)
        if notice:
            link.show_text(notice, error=True)
        self.streamer = Streamer(link.send, workspace)
        self.executors: dict[str, Executor] = {}
        self._turn: asyncio.Task[Outcome] | None = None
        self._runs: set[asyncio.Task[RunResult]] = set()
        self._saving: asyncio.Task[None] | None = None
        self._dirty = False
        self._told_semgrep_missing = False
        self.spent = context.Usage()  # model usage since the session opened (for maxBudget)

    # Settings ----------------------------------------------------------------------------

    def settings(self) -> Settings:
        return combine(*self.base_layers(), *self.profile_layers, self.overrides)

    def _read_profiles(self, overrides: dict[str, Any]) -> list[dict[str, Any]]:
        """The profile layers these overrides select (blocking: YAML files)."""
        base = combine(*self.base_layers(), overrides)
        return profiles.layers(base.profile, self.folder, base.trusted)

    async def load_profiles(self) -> None:
        """Read the selected profile and the workspace's own again (they may have changed);
        raises ProfileError naming the file and the key, and keeps the old layers then."""
        self.profile_layers = await asyncio.to_thread(self._read_profiles, self.overrides)

    async def configure(self, values: dict[str, Any]) -> tuple[Settings, list[str]]:
        """Apply settings to this workspace only; raises SettingsError and changes nothing
        when a value has the wrong type or the profile it selects is bad."""
        known, unknown = split_known(values)
        if "trusted" in known:
            raise SettingsError("setting 'trusted': only the editor sets it, at initialize")
        check(known)
        candidate = {**self.overrides, **known}
        layers = await asyncio.to_thread(self._read_profiles, candidate)
        combine(*self.base_layers(), *layers, candidate)  # the merged result must be valid too
        self.overrides = candidate
        self.profile_layers = layers
        return self.settings(), unknown

    # REPLs -------------------------------------------------------------------------------

    def open(self) -> None:
        """Start the Python kernel now, in the background, so the first run is fast."""
        executor = self._executor("python")
        task = asyncio.create_task(executor.start())
        task.add_done_callback(_log_failure)

    def _executor(self, language: str) -> Executor:
        executor = self.executors.get(language)
        if executor is None:
            settings = self.settings()
            executor = registry.create(language, self.folder, settings.kernel_name, settings)
            self.executors[language] = executor
        return executor

    async def _run_code(self, turn_id: str, language: str, code: str, chunks: list[Chunk],
                        timeout: float | None) -> RunResult:
        """Run code in this workspace's REPL for `language`, streaming its output."""

        def emit(chunk: Chunk) -> None:
            if chunk.format == "active_line":  # for the client's highlight only
                self.streamer.line(turn_id, chunk.content)
                return
            chunks.append(chunk)
            if chunk.type == "console":
                self.streamer.content(turn_id, "computer", "console", chunk.format,
                                      chunk.content)
            else:
                self.streamer.whole(turn_id, "computer", chunk.type, chunk.format, chunk.content)

        self.streamer.status(turn_id, "running")
        try:
            executor = self._executor(registry.canonical(language))
            executor.active_line = self.settings().active_line
            return await executor.execute(code, emit, timeout)
        except registry.UnknownLanguage as exc:
            emit(Chunk("console", "output", f"{exc}\n"))
            return RunResult("error", str(exc))
        except Exception as exc:  # a REPL that cannot start: say so, keep serving
            log.exception("could not run %s code", language)
            emit(Chunk("console", "output", f"could not start {language}: {exc}\n"))
            return RunResult("error", f"could not start {language}: {exc}")
        finally:
            self.streamer.close()
            self.streamer.status(turn_id, "idle")

    # Conversation ------------------------------------------------------------------------

    def record(self, message: Message) -> None:
        self.messages.append(message)
        self._save_soon()

    def _save_soon(self) -> None:
        """Save in a thread, never on the event loop; one writer, always the newest state."""
        self._dirty = True
        if self._saving is None or self._saving.done():
            self._saving = asyncio.create_task(self._save_loop())

    async def _save_loop(self) -> None:
        while self._dirty:
            self._dirty = False
            snapshot = list(self.messages)
            try:
                await asyncio.to_thread(self.store.save, self.workspace, snapshot)
            except OSError:
                log.exception("could not save the session of %s", self.workspace)

    async def flush(self) -> None:
        if self._saving is not None:
            await self._saving

    # Requests ----------------------------------------------------------------------------

    async def chat(self, params: ChatParams) -> ChatResult:
        if self._turn is not None and not self._turn.done():
            raise Busy("a turn is already running in this workspace; stop it (oi/stop) or wait")
        await self.load_profiles()
        turn_id = new_id()
        settings = self.settings()
        # autoRun is read when each proposal comes, so turning it on during a turn (a client's
        # "always") covers the turn's next proposals too.
        turn = Turn(turn_id, settings, self.messages, self.record, self.streamer,
                    lambda lang, code, _auto: self._ask(turn_id, settings, lang, code,
                                                        self.settings().auto_run),
                    lambda lang, code, chunks: self._run_code(
                        turn_id, lang, code, chunks, settings.execution_timeout),
                    registry.runnable(), on_text=self.link.show_text, spent=self.spent,
                    spill_dir=self.store.spill_dir(self.workspace))
        self._event(turn_id, "chat", "running")
        task = self._turn = asyncio.create_task(turn.run(params.message, params.context))
        try:
            outcome = await _outcome(task)
        except asyncio.CancelledError:  # the request itself was cancelled: stop the turn
            await asyncio.wait([task])
            self._event(turn_id, "chat", "stopped")
            raise
        finally:
            self.streamer.status(turn_id, "idle")
        await self.flush()  # a turn reported finished is on disk: a crash now loses nothing
        if outcome.error:
            self.link.show_text(outcome.error, error=True)
        if settings.max_budget is not None and turn.usage.calls and turn.usage.cost is None:
            self.link.show_text(f"maxBudget cannot be enforced: litellm has no price for model "
                                f"{settings.model!r}", error=True)
        self._event(turn_id, "chat", outcome.status, outcome.error, self._usage(turn.usage))
        return ChatResult(turn_id=turn_id, status=outcome.status, error=outcome.error)

    async def _ask(self, turn_id: str, settings: Settings, language: str, code: str,
                   auto_run: bool) -> Answer:
        found = await self._risk(settings, language, code)
        if found.level == "high" or settings.safe_mode == "ask":
            auto_run = False  # high risk code, and safe mode `ask`, always wait for the user
        if auto_run:
            self.link.send(protocol.PROPOSAL, Proposal(
                turn_id=turn_id, workspace=self.workspace, proposal_id=f"auto-{new_id()}",
                language=language, code=code, auto_run=True, risk=found).wire())
            return Answer("run")
        proposal_id, future = self.approvals.open(self.workspace)
        proposal = Proposal(turn_id=turn_id, workspace=self.workspace, proposal_id=proposal_id,
                            language=language, code=code, auto_run=False, risk=found)
        try:
            return await self.link.ask(proposal, future)
        finally:
            future.cancel()  # answered or not, the id is used up

    async def _risk(self, settings: Settings, language: str, code: str) -> Risk:
        """The static check, plus semgrep's findings in safe mode (flagged code is high risk
        in `auto`, so it runs only when the user approves it)."""
        found = await asyncio.to_thread(risk.assess, code, self.folder,
                                        bool(settings.restrict_to_workspace))
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

    async def execute(self, params: ExecuteParams) -> ExecuteResult:
        turn_id = new_id()
        chunks: list[Chunk] = []
        timeout = params.timeout or self.settings().execution_timeout
        self._event(turn_id, "execute", "running")
        task = asyncio.create_task(
            self._run_code(turn_id, params.language, params.code, chunks, timeout))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        try:
            result = await task
        except asyncio.CancelledError:
            if _cancelling():
                await asyncio.wait([task])
                self._event(turn_id, "execute", "stopped")
                raise
            result = RunResult("stopped", "stopped by the user")
        status = "done" if result.status in ("ok", "error", "timeout") else "stopped"
        self._event(turn_id, "execute", status)
        return ExecuteResult(turn_id=turn_id, status=result.status, error=result.error,
                             outputs=merge_outputs(chunks))

    async def stop(self) -> bool:
        tasks = [t for t in (self._turn, *self._runs) if t is not None and not t.done()]
        self.approvals.drop(self.workspace)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        return bool(tasks)

    async def reset(self) -> None:
        await self.stop()
        self.messages.clear()
        self._save_soon()
        await asyncio.gather(*(ex.restart() for ex in self.executors.values()))

    async def close(self) -> None:
        await self.stop()
        await asyncio.gather(*(ex.shutdown() for ex in self.executors.values()),
                             return_exceptions=True)
        await self.flush()

    def pids(self) -> list[int]:
        """The processes to kill when the server must stop at once (kept kernels stay)."""
        return [pid for ex in self.executors.values()
                if (pid := ex.pid) is not None and not ex.keep]

    def _usage(self, used: context.Usage) -> Usage:
        return Usage(prompt_tokens=used.prompt_tokens, completion_tokens=used.completion_tokens,
                     calls=used.calls, cost=used.cost, session_cost=self.spent.cost)

    def _event(self, turn_id: str, kind: Any, status: Any, error: str | None = None,
               usage: Usage | None = None) -> None:
        self.link.send(protocol.TURN, TurnEvent(turn_id=turn_id, workspace=self.workspace,
                                                kind=kind, status=status, error=error,
                                                usage=usage).wire())


async def _outcome(task: asyncio.Task[Outcome]) -> Outcome:
    """The turn's outcome; a turn stopped by oi/stop is an outcome, not an exception."""
    try:
        return await task
    except asyncio.CancelledError:
        if _cancelling():
            raise
        return Outcome("stopped")
    except ModelError as exc:
        return Outcome("error", str(exc))
    except Exception as exc:
        log.exception("turn failed")
        return Outcome("error", f"internal error: {type(exc).__name__}: {exc}")


def _cancelling() -> bool:
    """True when the current task itself is being cancelled (not just what it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def merge_outputs(chunks: list[Chunk]) -> list[Output]:
    """Consecutive console text as one output; images and HTML as they came."""
    groups: list[tuple[Chunk, list[str]]] = []
    for chunk in chunks:
        if groups and chunk.type == "console" and groups[-1][0].type == "console":
            groups[-1][1].append(chunk.content)
        else:
            groups.append((chunk, [chunk.content]))
    return [Output(type=first.type, format=first.format, content="".join(parts))
            for first, parts in groups]


def new_id() -> str:
    return secrets.token_hex(6)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("could not start the kernel: %s", task.exception())

