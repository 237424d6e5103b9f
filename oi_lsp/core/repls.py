"""A workspace's REPLs: one executor per language, started when first needed (Python when the
workspace opens), each run streamed to the client and watched."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from ..executors import registry
from ..executors.base import Chunk, Emit, Executor, ReadInput, RunResult
from ..executors.gateway.config import GatewayConfig
from ..protocol import LanguageInfo, ReplStatus
from .activity import Activity
from .aio import log_failure
from .link import Tell
from .settings import Settings
from .streamer import Streamer
from .watch import MemoryRestart, Watch

log = logging.getLogger(__name__)


def options_of(settings: Settings) -> registry.ReplOptions:
    """What the settings say about starting REPLs."""
    gateway = settings.kernel_gateway
    config = None if gateway is None else GatewayConfig(
        url=gateway.url, token=gateway.token.get_secret_value() if gateway.token else None,
        headers=dict(gateway.headers), validate_cert=gateway.validate_cert,
        kernel_name=gateway.kernel_name, request_timeout=gateway.request_timeout,
        keep_kernel=settings.keep_kernel)
    return registry.ReplOptions(kernel_name=settings.kernel_name,
                                keep_kernel=settings.keep_kernel,
                                pass_keys=settings.pass_keys_to_repls, gateway=config)


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

    def open(self) -> None:
        """Start the Python kernel now, in the background, so the first run is fast."""
        task = self.opening = asyncio.create_task(self._executor("python").start())
        task.add_done_callback(log_failure("could not start the kernel"))

    def _executor(self, language: str) -> Executor:
        executor = self.executors.get(language)
        if executor is None:
            executor = registry.create(language, self.folder, options_of(self._settings()))
            self.executors[language] = executor
        return executor

    async def run(self, turn_id: str, language: str, code: str, chunks: list[Chunk],
                  timeout: float | None) -> RunResult:
        """Run code in the REPL for `language`, streaming its output; every chunk shown is
        also appended to `chunks`."""
        streamer = self._streamer

        def emit(chunk: Chunk) -> None:
            if chunk.format == "active_line":  # for the client's highlight only
                streamer.line(turn_id, chunk.content)
                return
            chunks.append(chunk)
            if chunk.type == "console":
                streamer.content(turn_id, "computer", "console", chunk.format, chunk.content)
            else:
                streamer.whole(turn_id, "computer", chunk.type, chunk.format, chunk.content)

        self._activity.set(turn_id, "running")
        try:
            name = registry.canonical(language)
            executor = self._executor(name)
            settings = self._settings()
            executor.active_line = settings.active_line
            executor.pass_keys = settings.pass_keys_to_repls  # for its next (re)start
            executor.read_input = None if self._asker is None else self._ask(turn_id, emit)
            return await self.watch.run(
                name, executor, executor.execute(code, emit, timeout),
                lambda repl, elapsed: streamer.resources(turn_id, repl, elapsed))
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
            streamer.close()
            self._activity.set(turn_id, "idle")

    def _ask(self, turn_id: str, emit: Emit) -> ReadInput:
        assert self._asker is not None
        ask = self._asker(turn_id, emit)

        async def read_input(prompt: str, password: bool) -> str | None:
            self._streamer.flush()  # the prompt, shown before the client is asked
            return await ask(prompt, password)

        return read_input

    async def restart_all(self) -> None:
        pass_keys = self._settings().pass_keys_to_repls
        for executor in self.executors.values():
            executor.pass_keys = pass_keys
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
        options = options_of(self._settings())
        remote = await registry.remote_kernels(options)
        return registry.describe(options, remote)
