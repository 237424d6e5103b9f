"""A workspace's REPLs: one executor per language, started when first needed (Python when the
workspace opens), each run streamed to the client and watched."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..executors import interpreter, registry
from ..executors.base import Chunk, Emit, Executor, ReadInput, RunResult
from ..executors.gateway.config import GatewayConfig
from ..executors.sandbox import blocked
from ..executors.sandbox.policy import Sandbox
from ..protocol import LanguageInfo, ReplStatus
from .activity import Activity
from .aio import Soon, log_failure
from .link import Tell
from .run_output import RunOutput
from .settings import Settings
from .streamer import Streamer
from .watch import MemoryRestart, Watch

log = logging.getLogger(__name__)


def options_of(settings: Settings, folder: Path) -> registry.ReplOptions:
    """What the settings say about starting `folder`'s REPLs."""
    gateway = settings.kernel_gateway
    config = None if gateway is None else GatewayConfig(
        url=gateway.url, token=gateway.token.get_secret_value() if gateway.token else None,
        headers=dict(gateway.headers), validate_cert=gateway.validate_cert,
        kernel_name=gateway.kernel_name, request_timeout=gateway.request_timeout,
        keep_kernel=settings.keep_kernel)
    return registry.ReplOptions(kernel_name=settings.kernel_name,
                                keep_kernel=settings.keep_kernel,
                                pass_keys=settings.pass_keys_to_repls, gateway=config,
                                sandbox=sandbox_of(settings),
                                python=interpreter.choose(settings.python, folder))


def sandbox_of(settings: Settings) -> Sandbox:
    return Sandbox(settings.sandbox or "off", settings.sandbox_network)


# (turn id, the run's emit) -> how that run's programs read input
Asker = Callable[[str, Emit], ReadInput]


class Repls:
    def __init__(self, folder: Path, settings: Callable[[], Settings], tell: Tell,
                 streamer: Streamer, activity: Activity, asker: Asker | None = None) -> None:
        self.folder = folder
        self._asker = asker
        self._settings = settings
        self._streamer = streamer
        self._activity = activity
        self.watch = Watch(settings, tell)
        self.executors: dict[str, Executor] = {}
        self.opening: asyncio.Task[None] | None = None  # the kernel start open() began
        self._ran: set[str] = set()  # languages whose REPL has run code: state to lose
        # A REPL restarted for a sandbox change between runs: what its next run's output says,
        # so the model hears of the lost variables whichever came first, the change or the run.
        self._restarted: dict[str, str] = {}
        self._python = interpreter.OWN  # what the Python executor was made with
        self.env: dict[str, str] = {}  # more of the Python kernel's environment (oi_mcp's)
        self.running = ""  # the turn whose code runs now ("" when none does)

    def open(self, settled: Callable[[], Awaitable[object]]) -> None:
        """Start the Python kernel now, in the background, so the first run is fast; once
        `settled` (the workspace's settings files read: the sandbox depends on them)."""

        async def start() -> None:
            await settled()
            await self._executor("python").start()

        task = self.opening = asyncio.create_task(start())
        task.add_done_callback(log_failure("could not start the kernel"))

    def _executor(self, language: str) -> Executor:
        executor = self.executors.get(language)
        if executor is None:
            options = options_of(self._settings(), self.folder)
            executor = registry.create(language, self.folder, options)
            self.executors[language] = executor
            if language == "python":
                self._python = options.python
                executor.env = self.env
        return executor

    def _emitter(self, turn_id: str, output: RunOutput) -> Callable[[Chunk], None]:
        streamer = self._streamer

        def emit(chunk: Chunk) -> None:
            if chunk.format == "active_line":  # for the client's highlight only
                streamer.line(turn_id, chunk.content)
                return
            output.append(chunk)
            if chunk.type == "console":
                streamer.content(turn_id, "computer", "console", chunk.format, chunk.content)
            else:
                streamer.whole(turn_id, "computer", chunk.type, chunk.format, chunk.content)

        return emit

    async def run(self, turn_id: str, language: str, code: str, output: RunOutput,
                  timeout: float | None, outside: bool = False) -> RunResult:
        """Run code in the REPL for `language`, streaming its output; every chunk shown is
        also appended to `output`. With `outside`, in a fresh unconfined process instead (the
        user let this one run out of the sandbox). A confined run the sandbox refused says
        so, in its output and its result's `blocked`."""
        emit = self._emitter(turn_id, output)
        running = Soon(self._activity.set, turn_id, "running")
        self.running = turn_id
        try:
            name = registry.canonical(language)
            if name == "python" and not outside:
                await self.apply_python(_told(emit))
            executor = registry.outside(name, self.folder) if outside else self._executor(name)
            settings = self._settings()
            executor.active_line = settings.active_line
            executor.pass_keys = settings.pass_keys_to_repls  # for its next (re)start
            executor.read_input = None if self._asker is None else self._ask(turn_id, emit)
            if not outside:
                await self._sandbox_to(executor, sandbox_of(settings), emit)
                if (note := self._restarted.pop(name, None)) is not None:
                    emit(Chunk("console", "output", note))
                self._ran.add(name)
            result = await self.watch.run(
                name, executor, executor.execute(code, emit, timeout),
                lambda repl, elapsed: self._streamer.resources(turn_id, repl, elapsed))
            return _refused(executor, result, output, emit)
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
            self.running = ""
            running.now()
            self._streamer.close()
            self._activity.set(turn_id, "idle")

    async def _sandbox_to(self, executor: Executor, sandbox: Sandbox,
                          say: Callable[[Chunk], None]) -> None:
        """A REPL started in another sandbox than the settings now say is started anew."""
        executor.sandbox = sandbox
        started = executor.started_sandbox
        if started is not None and started != sandbox:
            self._restarted.pop(executor.language, None)  # said here instead
            if executor.language in self._ran:  # else there is nothing to lose, nor to say
                say(Chunk("console", "output", _changed(executor.language, started, sandbox)))
            await executor.restart()

    async def apply_sandbox(self, tell: Tell) -> None:
        """After a settings change: the REPLs started in another sandbox than the settings
        now say are restarted, the user told first."""
        sandbox = sandbox_of(self._settings())
        if self.opening is not None and not self.opening.done():
            await asyncio.wait([self.opening])  # started in the old sandbox: restarted below
        stale = [ex for ex in self.executors.values()
                 if ex.started_sandbox not in (None, sandbox)]
        for executor in self.executors.values():
            executor.sandbox = sandbox
        if not stale:
            return
        lost = [ex for ex in stale if ex.language in self._ran]
        for ex in lost:  # stale: started in another sandbox, so started_sandbox is set
            assert ex.started_sandbox is not None
            self._restarted[ex.language] = _changed(ex.language, ex.started_sandbox, sandbox)
        names = ", ".join(ex.language for ex in lost)
        if names:
            await tell(f"The sandbox is now {sandbox.describe()}: restarting the REPLs started "
                       f"otherwise ({names}); their variables are lost.", [])
        await asyncio.gather(*(ex.restart() for ex in stale))

    def python(self) -> interpreter.Interpreter:
        """The interpreter the Python kernel runs in (or will, at its next start)."""
        return options_of(self._settings(), self.folder).python

    async def apply_python(self, tell: Tell) -> None:
        """After a settings change: a Python kernel started in another interpreter than the
        settings now choose is ended (saying so); the next run starts it in the new one."""
        chosen = self.python()
        executor = self.executors.get("python")
        if executor is None or chosen == self._python:
            return
        if self.opening is not None and not self.opening.done():
            await asyncio.wait([self.opening])
        if "python" in self._ran:
            await tell(f"Python now runs in {chosen.describe()}: the kernel restarts there; "
                       "its variables are lost.", [])
        del self.executors["python"]
        self._ran.discard("python")
        await executor.shutdown()

    def _ask(self, turn_id: str, emit: Emit) -> ReadInput:
        assert self._asker is not None
        ask = self._asker(turn_id, emit)

        async def read_input(prompt: str, password: bool) -> str | None:
            self._streamer.flush()  # the prompt, shown before the client is asked
            return await ask(prompt, password)

        return read_input

    async def restart_all(self) -> None:
        settings = self._settings()
        self._ran.clear()  # nothing left to lose
        self._restarted.clear()
        for executor in self.executors.values():
            executor.pass_keys = settings.pass_keys_to_repls
            executor.sandbox = sandbox_of(settings)
        await asyncio.gather(*(ex.restart() for ex in self.executors.values()))

    async def close(self) -> None:
        self.watch.close()
        await asyncio.gather(*(ex.shutdown() for ex in self.executors.values()),
                             return_exceptions=True)

    def started(self) -> list[tuple[str, int | None]]:
        """(language, pid) of each REPL started so far."""
        return [(language, ex.pid) for language, ex in self.executors.items()]

    def pids(self) -> list[int]:
        """The processes to kill when the server must stop at once (kept kernels stay)."""
        return [pid for ex in self.executors.values()
                if (pid := ex.pid) is not None and not ex.keep]

    async def status(self) -> list[ReplStatus]:
        return await self.watch.status(self.executors)

    async def languages(self) -> list[LanguageInfo]:
        """What runs each language here (oi/languages), a kernel gateway's kernels included."""
        options = options_of(self._settings(), self.folder)
        remote = await registry.remote_kernels(options)
        return registry.describe(options, remote)


def _told(emit: Emit) -> Tell:
    """A Tell that puts what it says into a run's output."""

    async def tell(text: str, actions: list[str]) -> str | None:
        emit(Chunk("console", "output", f"[{text}]\n"))
        return None

    return tell


def _changed(language: str, old: Sandbox, new: Sandbox) -> str:
    return (f"[the sandbox changed ({old.describe()} -> {new.describe()}): restarting the "
            f"{language} REPL; its variables are lost]\n")


def _refused(executor: Executor, result: RunResult, output: RunOutput,
             emit: Callable[[Chunk], None]) -> RunResult:
    """`result`, with what the sandbox refused (told in the output too), if it did."""
    started = executor.started_sandbox
    if started is None or not started.confined:
        return result
    what = blocked.refusal("".join(c.content for c in output.chunks() if c.type == "console"))
    if what is None:
        return result
    emit(Chunk("console", "output", f"\n[blocked by the sandbox: {what}]\n"))
    return dataclasses.replace(result, blocked=what)
