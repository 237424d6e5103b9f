"""One workspace: its conversation, its REPLs, its running turn and its settings overrides."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from . import context, export, magic, profiles, protocol, risk
from .approval import Answer, Approvals
from .executors import registry
from .executors.base import Chunk, Executor, RunResult
from .model import ModelError
from .monitor import MemoryRestart, Watch
from .notify import Streamer
from .protocol import (
    ChatParams,
    ChatResult,
    ConversationInfo,
    ExecuteParams,
    ExecuteResult,
    ExportFormat,
    Message,
    Output,
    Proposal,
    Risk,
    SessionExportResult,
    StatusResult,
    TurnEvent,
    TurnState,
    Usage,
)
from .settings import Settings, SettingsError, check, combine, split_known
from .store import Store, Summary, title_of
from .store import new_id as new_conversation_id
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

    async def tell(self, text: str, actions: list[str]) -> str | None:
        """A warning for the user; with actions, the one they chose (None if none)."""
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
        self._layers: list[dict[str, Any]] | None = None  # what self._settings was made of
        self._settings: Settings | None = None
        loaded = store.load(workspace)
        self.conversation_id = loaded.id
        self.messages = loaded.messages
        self.created = loaded.created
        if loaded.notice:
            link.show_text(loaded.notice, error=True)
        self.streamer = Streamer(self._send, workspace)
        self.watch = Watch(self.settings, link.tell)
        self._state = TurnState(state="idle")
        self.executors: dict[str, Executor] = {}
        self._turn: asyncio.Task[Outcome] | None = None
        self._runs: set[asyncio.Task[RunResult]] = set()
        self._saving: asyncio.Task[None] | None = None
        self._dirty = False
        self._told_semgrep_missing = False
        self.opening: asyncio.Task[None] | None = None  # the kernel start open() began
        self.spent = context.Usage()  # model usage since the session opened (for maxBudget)

    # Settings ----------------------------------------------------------------------------

    def settings(self) -> Settings:
        layers = [*self.base_layers(), *self.profile_layers, self.overrides]
        if layers != self._layers:  # comparing a few small dicts costs less than validating
            self._settings = combine(*layers)
            self._layers = [dict(layer) for layer in layers]
        assert self._settings is not None
        return self._settings

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
        task = self.opening = asyncio.create_task(executor.start())
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
            name = registry.canonical(language)
            executor = self._executor(name)
            executor.active_line = self.settings().active_line
            return await self.watch.run(
                name, executor, executor.execute(code, emit, timeout),
                lambda repl, text: self.streamer.resources(turn_id, repl, text))
        except MemoryRestart as exc:
            emit(Chunk("console", "output", f"\n[stopped: {exc}]\n"))
            return RunResult("error", str(exc))
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
                await asyncio.to_thread(self.store.save, self.workspace, self.conversation_id,
                                        snapshot, self.created)
            except OSError:
                log.exception("could not save the session of %s", self.workspace)

    async def flush(self) -> None:
        if self._saving is not None:
            await self._saving

    # Conversations -----------------------------------------------------------------------

    async def conversations(self) -> list[ConversationInfo]:
        """The saved conversations, the open one (as it is now) first, then newest first."""
        saved = await asyncio.to_thread(self.store.summaries, self.workspace)
        mine = next((s for s in saved if s.id == self.conversation_id), None)
        current = Summary(self.conversation_id, title_of(self.messages), self.created,
                          mine.updated if mine else self.created, len(self.messages))
        return [ConversationInfo(id=s.id, title=s.title, created=_iso(s.created),
                                 updated=_iso(s.updated), message_count=s.message_count,
                                 current=s is current)
                for s in [current, *(s for s in saved if s.id != self.conversation_id)]]

    async def export(self, conversation_id: str | None, fmt: ExportFormat) -> SessionExportResult:
        conversation_id, messages = await self.conversation(conversation_id)
        title = title_of(messages)
        content = await asyncio.to_thread(export.render, messages, fmt, title)
        return SessionExportResult(id=conversation_id, format=fmt, title=title, content=content)

    async def open_conversation(self, conversation_id: str) -> None:
        """Switch to a saved conversation (the REPLs and their variables stay). Raises Busy,
        UnknownConversation, or DamagedConversation (the file then has been moved aside)."""
        self._check_idle()
        if conversation_id == self.conversation_id:
            return
        messages = await asyncio.to_thread(self.store.read, self.workspace, conversation_id)
        self._check_idle()
        await self.flush()
        await asyncio.to_thread(self.store.set_current, self.workspace, conversation_id)
        self._switch(conversation_id, messages)

    async def new_conversation(self) -> None:
        """Start an empty conversation; the open one stays saved. An empty one is reused."""
        self._check_idle()
        await self.begin_conversation([])

    async def begin_conversation(self, messages: list[Message]) -> None:
        """Open a new conversation holding `messages` (the open one stays saved; an empty one
        is reused). The caller makes sure no turn runs but its own."""
        await self.flush()
        conversation_id = self.conversation_id if not self.messages else new_conversation_id()
        await asyncio.to_thread(self.store.set_current, self.workspace, conversation_id)
        self._switch(conversation_id, messages)
        if messages:
            self._save_soon()

    def keep_messages(self, count: int) -> None:
        """Drop every message after the first `count` (%undo)."""
        del self.messages[count:]
        self._save_soon()

    def conversation_file(self) -> Path:
        return self.store.path(self.workspace, self.conversation_id)

    def _switch(self, conversation_id: str, messages: list[Message]) -> None:
        self.conversation_id = conversation_id
        self.messages = messages
        self.created = time.time()

    async def conversation(self, conversation_id: str | None) -> tuple[str, list[Message]]:
        """The id and messages of the open conversation, or of a saved one."""
        if conversation_id is None or conversation_id == self.conversation_id:
            return self.conversation_id, list(self.messages)
        return conversation_id, await asyncio.to_thread(self.store.read, self.workspace,
                                                        conversation_id)

    def _check_idle(self) -> None:
        if self._turn is not None and not self._turn.done():
            raise Busy("a turn is already running in this workspace; stop it (oi/stop) or wait")

    # Requests ----------------------------------------------------------------------------

    async def chat(self, params: ChatParams) -> ChatResult:
        self._check_idle()
        await self.load_profiles()
        turn_id = new_id()
        settings = self.settings()
        work: Coroutine[Any, Any, Outcome]
        turn: Turn | None = None  # magic commands are no model turn: no usage
        if magic.is_command(params.message):  # answered here, never sent to the model
            work = self._magic(turn_id, params.message, settings)
        else:
            # autoRun is read when each proposal comes, so turning it on during a turn (a
            # client's "always") covers the turn's next proposals too.
            turn = Turn(turn_id, settings, self.messages, self.record, self.streamer,
                        lambda lang, code, _auto: self._ask(turn_id, settings, lang, code,
                                                            self.settings().auto_run),
                        lambda lang, code, chunks: self._run_code(
                            turn_id, lang, code, chunks, settings.execution_timeout),
                        registry.runnable(), on_text=self.link.show_text, spent=self.spent,
                        spill_dir=self.store.spill_dir(self.workspace))
            work = turn.run(params.message, params.context)
        self._event(turn_id, "chat", "running")
        task = self._turn = asyncio.create_task(work)
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
        if settings.max_budget is not None and turn is not None and turn.usage.calls \
                and turn.usage.cost is None:
            self.link.show_text(f"maxBudget cannot be enforced: litellm has no price for model "
                                f"{settings.model!r}", error=True)
        self._event(turn_id, "chat", outcome.status, outcome.error,
                    self._usage(turn.usage) if turn is not None else None)
        return ChatResult(turn_id=turn_id, status=outcome.status, error=outcome.error)

    async def _magic(self, turn_id: str, message: str, settings: Settings) -> Outcome:
        said: list[str] = []

        def say(text: str) -> None:
            said.append(text)
            self.streamer.content(turn_id, "computer", "console", "output", text)

        async def shell(command: str) -> RunResult:
            self.streamer.whole(turn_id, "computer", "confirmation", "shell", command)
            return await self._run_code(turn_id, "shell", command, [],
                                        settings.execution_timeout)

        try:
            return await magic.run(message, self, magic.Console(say, shell))
        finally:
            self.streamer.close()
            if said:
                self.link.show_text("".join(said))

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
        self._state = TurnState(state="waiting", turn_id=turn_id)
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
        """Stop, start a new empty conversation (the old one stays saved), restart the REPLs."""
        await self.stop()
        await self.new_conversation()
        await self.restart_repls()

    async def close(self) -> None:
        await self.stop()
        self.watch.close()
        await asyncio.gather(*(ex.shutdown() for ex in self.executors.values()),
                             return_exceptions=True)
        await self.flush()

    async def restart_repls(self) -> None:
        await asyncio.gather(*(ex.restart() for ex in self.executors.values()))

    def repls(self) -> list[tuple[str, int | None]]:
        return [(language, ex.pid) for language, ex in self.executors.items()]

    def pids(self) -> list[int]:
        """The processes to kill when the server must stop at once (kept kernels stay)."""
        return [pid for ex in self.executors.values()
                if (pid := ex.pid) is not None and not ex.keep]

    async def status(self) -> StatusResult:
        return StatusResult(workspace=self.workspace, turn=self._state,
                            repls=await self.watch.status(self.executors))

    def _send(self, method: str, params: dict[str, Any]) -> None:
        """Everything the streamer sends; the status chunks also tell oi/status the state."""
        if method == protocol.STREAM and params.get("type") == "status" \
                and params.get("format") in ("idle", "thinking", "running"):
            state = params["format"]
            self._state = TurnState(state=state,
                                    turn_id=None if state == "idle" else params["turnId"])
        self.link.send(method, params)

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


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_id() -> str:
    return secrets.token_hex(6)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("could not start the kernel: %s", task.exception())

