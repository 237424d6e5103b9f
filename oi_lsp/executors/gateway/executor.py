"""A Jupyter kernel on a Jupyter Kernel Gateway or Enterprise Gateway, as a persistent REPL.

The kernel is started, interrupted, restarted and deleted through the gateway's REST API and
run through its channels (client.py). The kernel id is kept in a small file under the data
folder, so a restarted server reattaches to the same kernel and its variables.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import anyio

from ...common.files import atomic_write, data_dir, digest
from ...protocol import SandboxState
from ..base import Emit, Executor, RunResult
from ..jupyter.messages import Answers, Cell, Gone, Notice, NotTaken, collect, settle
from .client import GatewayClient, GatewayError
from .config import GatewayConfig

log = logging.getLogger(__name__)


class GatewayKernelExecutor(Executor):
    """One kernel on the gateway, for one workspace folder and language."""

    def sandbox_state(self) -> SandboxState | None:
        return "gateway"  # the gateway's side decides what its kernels may do

    def __init__(self, language: str, kernel_name: str, cwd: Path, config: GatewayConfig) -> None:
        self.language = language
        self.kernel_name = config.kernel_name or kernel_name
        self.cwd = cwd
        self.config = config
        self.state_path = data_dir() / "gateway" / f"{digest(str(cwd), language)}.json"
        self.kernel_id: str | None = None
        self.reattached = False  # the last start found the saved kernel alive
        self._notice = Notice()
        self._client = GatewayClient(config)
        self._ready: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # Lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start or reattach once; after a failure or a lost gateway the next call tries
        again, so the session works again once the gateway is back."""
        if self._ready is not None and self._ready.done() and (
                self._client.lost is not None or self._ready.cancelled()
                or self._ready.exception() is not None):
            await self._client.close()
            self._ready = None
        if self._ready is None:
            self._client.lost = None
            self._ready = asyncio.create_task(self._start())
        await asyncio.shield(self._ready)

    async def _start(self) -> None:
        cfg = self.config
        self._client.open()
        self.reattached = False
        saved = self._load_state()
        previous = self.kernel_id or saved
        if saved is not None and await self._client.kernel_exists(saved):
            self.kernel_id, self.reattached = saved, True
        else:
            reply = await self._client.request("POST", "/api/kernels",
                                               json={"name": self.kernel_name})
            self.kernel_id = str(reply.json()["id"])
            self._save_state()
            if previous is not None:
                self._notice.replaced(f"the kernel on {cfg.host} was gone")
        await self._client.open_channels(self.kernel_id)
        await self._client.wait_ready()
        log.info("%s kernel %s %s on %s", self.kernel_name, self.kernel_id,
                 "reattached" if self.reattached else "started", cfg.host)

    async def interrupt(self) -> None:
        if self.kernel_id is not None and self._client.lost is None:
            await self._client.request("POST", f"/api/kernels/{self.kernel_id}/interrupt")

    async def restart(self) -> None:
        await self.start()
        await self._client.request("POST", f"/api/kernels/{self.kernel_id}/restart")
        await self._client.wait_ready()

    async def shutdown(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
            with contextlib.suppress(BaseException):
                await self._ready
        if self.kernel_id is not None and not self.config.keep_kernel and self._client.is_open:
            try:
                await self._client.request("DELETE", f"/api/kernels/{self.kernel_id}")
                self._forget_state()
            except GatewayError as exc:
                if exc.status == 404:  # gone already
                    self._forget_state()
                else:  # the id stays saved: a later start reattaches
                    log.warning("could not shut the kernel down: %s", exc)
        await self._client.close()
        self.kernel_id = None

    async def is_alive(self) -> bool:
        if self.kernel_id is None or self._client.lost is not None:
            return False
        try:
            return await self._client.kernel_exists(self.kernel_id)
        except GatewayError:
            return False

    @property
    def pid(self) -> int | None:
        return None  # the process is on another machine; the gateway owns it

    # Running -------------------------------------------------------------------------------

    async def run(self, code: str, emit: Emit) -> RunResult:
        await self.start()
        async with self._lock:
            self._notice.tell(emit)
            while True:  # again only when the request was lost with a dropped connection
                result = await self._run_cell(code, emit)
                if result is not None:
                    return result
                log.info("an execute request was lost with the connection; sending it again")

    async def _run_cell(self, code: str, emit: Emit) -> RunResult | None:
        """One execute request; None when it never reached the kernel."""
        client = self._client
        cell = Cell()
        msg = client.session.msg("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": self.read_input is not None, "stop_on_error": True})
        msg_id = msg["header"]["msg_id"]
        client.routes[msg_id] = cell.queue
        answers = Answers(self.read_input, self._reply, emit)
        before = client.execution_count

        def notified(channel: str, notice: dict[str, Any]) -> Gone | None:
            if channel == "reconnected" and cell.reply is None:
                # The kernel answered the client's probe, so it is done with this request
                # if it ever got it: an unchanged count says it did not.
                if (not cell.busy and before is not None
                        and notice["content"].get("execution_count") == before):
                    raise NotTaken
                return Gone(f"the connection to the kernel gateway at {self.config.url} "
                            f"dropped during this run and its end was lost",
                            "the connection dropped during this run: it ran, but what it "
                            "printed after the drop was lost; the kernel and its variables "
                            "are kept")
            return self._notified(channel)

        try:
            await client.send("shell", msg)
            return await collect(cell, emit, self._quiet, notified, stdin=answers.request)
        except NotTaken:
            return None
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):  # the kernel is idle again first
                await self._settle(cell)
            raise
        finally:
            answers.close()
            client.unroute(msg_id)

    async def _reply(self, value: str) -> None:
        """An input_reply, on the stdin channel of the kernel's WebSocket."""
        await self._client.send("stdin", self._client.session.msg("input_reply",
                                                                  {"value": value}))

    async def _quiet(self) -> Gone | None:
        """A run heard nothing for a while: the reader tells when the gateway is lost."""
        lost = self._client.lost
        return Gone(lost) if lost is not None else None

    def _notified(self, channel: str) -> Gone | None:
        """The client's own messages to the runs (see GatewayClient._read and _route)."""
        if channel == "lost":
            return Gone(self._client.lost or "lost the kernel")
        if channel == "died":
            return Gone("the kernel died", "the kernel died during this run; the gateway "
                        "restarted it, earlier variables are gone")
        return None

    async def _settle(self, cell: Cell) -> None:
        """After a cancelled run: the shared Jupyter settle, with interrupt and restart through
        REST; a lost connection ends the wait."""

        async def interrupt() -> None:
            try:
                await self.interrupt()
            except GatewayError as exc:
                log.warning("%s", exc)

        async def restart() -> None:
            log.warning("kernel %s ignored the interrupt; restarting it", self.kernel_id)
            await self.restart()

        await settle(cell, interrupt, restart, gone=lambda: self._client.lost is not None)

    # The saved kernel id -------------------------------------------------------------------

    def _load_state(self) -> str | None:
        """The saved kernel id, when it was started on this gateway with this kernelspec."""
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None
        if (isinstance(data, dict) and data.get("url") == self.config.url
                and data.get("kernelName") == self.kernel_name):
            kernel_id = data.get("kernelId")
            return kernel_id if isinstance(kernel_id, str) else None
        return None

    def _save_state(self) -> None:
        """Atomically (the kernel id of a lost file would be a kernel left running); the token
        is never part of it."""
        try:
            atomic_write(self.state_path, json.dumps({
                "url": self.config.url, "kernelName": self.kernel_name,
                "kernelId": self.kernel_id, "folder": str(self.cwd)}).encode())
        except OSError as exc:
            log.warning("could not save the kernel id to %s: %s", self.state_path, exc)

    def _forget_state(self) -> None:
        with contextlib.suppress(OSError):
            self.state_path.unlink()

