"""Where a language other than Python runs in a workspace that uses a kernel gateway: on the
gateway when it has a kernel for the language, else in the local REPL."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

from ...protocol import SandboxState
from ..base import Emit, Executor, RunResult
from ..sandbox.policy import Sandbox
from .client import remote_kernelspecs
from .config import GatewayConfig
from .executor import GatewayKernelExecutor


class GatewayOrLocal(Executor):
    """A language other than Python in a workspace that uses a gateway: the gateway's kernel
    for it when the gateway offers one (bash_kernel, IRkernel, ...), else the local REPL.
    Decided at the first start; a gateway that cannot be asked is an error naming its URL,
    never a silent local run of code meant for the remote machine."""

    def __init__(self, language: str, cwd: Path, config: GatewayConfig,
                 local: Callable[[], Executor]) -> None:
        self.language = language
        self.cwd = cwd
        # kernelGateway.kernelName names the Python kernelspec, not this language's
        self.config = dataclasses.replace(config, kernel_name=None)
        self._local = local
        self.inner: Executor | None = None
        self._choosing = asyncio.Lock()

    async def _choose(self) -> Executor:
        async with self._choosing:
            if self.inner is None:
                kernels = await remote_kernelspecs(self.config)
                kernel = kernels.get(self.language)
                self.inner = (GatewayKernelExecutor(self.language, kernel, self.cwd, self.config)
                              if kernel is not None else self._local())
            return self.inner

    async def start(self) -> None:
        await (await self._choose()).start()

    async def run(self, code: str, emit: Emit) -> RunResult:
        inner = await self._choose()
        inner.active_line = self.active_line
        inner.pass_keys = self.pass_keys
        inner.sandbox = self.sandbox
        return await inner.run(code, emit)

    def sandbox_state(self) -> SandboxState | None:
        return self.inner.sandbox_state() if self.inner is not None else None

    async def interrupt(self) -> None:
        if self.inner is not None:
            await self.inner.interrupt()

    async def restart(self) -> None:
        inner = await self._choose()
        inner.sandbox = self.sandbox
        await inner.restart()

    async def shutdown(self) -> None:
        if self.inner is not None:
            await self.inner.shutdown()

    async def is_alive(self) -> bool:
        return self.inner is not None and await self.inner.is_alive()

    @property
    def pid(self) -> int | None:
        return self.inner.pid if self.inner is not None else None

    @property
    def started_sandbox(self) -> Sandbox | None:  # type: ignore[override]
        return self.inner.started_sandbox if self.inner is not None else None


def remote_or_local(language: str, cwd: Path, config: GatewayConfig,
                    local: Callable[[], Executor]) -> GatewayOrLocal:
    return GatewayOrLocal(language, cwd, config, local)
