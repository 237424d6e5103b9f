"""A Jupyter kernel on a Jupyter Kernel Gateway or Enterprise Gateway, as a persistent REPL.

The documented REST API starts, interrupts, restarts and deletes the kernel; its channels are
one WebSocket carrying the Jupyter messages as JSON. Messages are built by jupyter_client's
Session, so they are the same as a local kernel's. The kernel id is kept in a small file under
the data folder, so a restarted server reattaches to the same kernel and its variables.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from ...files import atomic_write, data_dir, digest
from ..base import Emit, Executor, RunResult
from ..jupyter.messages import Cell, Gone, Notice, collect, settle
from ..kernelspecs import SPECS_TTL, TtlCache, by_language
from .config import GatewayConfig

log = logging.getLogger(__name__)

# A dropped WebSocket is reopened this many times, waiting this long before each try
# (about 7.5 s in all): long enough for a network blip, short enough to report a dead gateway.
_RECONNECT_DELAYS = (0.25, 0.5, 1.0, 2.0, 3.75)
_READY_TIMEOUT = 60.0
# websockets logs the request headers (the token among them) at DEBUG: keep its logger above.
_WS_LOG = logging.getLogger(__name__ + ".ws")
_WS_LOG.setLevel(logging.INFO)


class GatewayError(RuntimeError):
    """The gateway cannot be used: unreachable, refusing the token, or answering an error.
    The message names the gateway's URL and never the token."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status the gateway answered, if it answered


class GatewayKernelExecutor(Executor):
    """One kernel on the gateway, for one workspace folder and language."""

    def __init__(self, language: str, kernel_name: str, cwd: Path, config: GatewayConfig,
                 state_dir: Path | None = None) -> None:
        self.language = language
        self.kernel_name = config.kernel_name or kernel_name
        self.cwd = cwd
        self.config = config
        state_dir = state_dir or data_dir() / "gateway"
        self.state_path = state_dir / f"{digest(str(cwd), language)}.json"
        self.kernel_id: str | None = None
        self.reattached = False  # the last start found the saved kernel alive
        self._notice = Notice()
        self._session = Session(key=b"", username="oi-lsp")
        self._http: httpx.AsyncClient | None = None
        self._ws: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._lost: str | None = None  # why the kernel cannot be reached any more
        self._closing = False
        self._ready: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._routes: dict[str, asyncio.Queue[tuple[str, dict[str, Any]]]] = {}
        self._lock = asyncio.Lock()

    # Lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start or reattach once; after a failure or a lost gateway the next call tries
        again, so the session works again once the gateway is back."""
        if self._ready is not None and self._ready.done() and (
                self._lost is not None or self._ready.cancelled()
                or self._ready.exception() is not None):
            await self._disconnect()
            self._ready = None
        if self._ready is None:
            self._lost = None
            self._ready = asyncio.create_task(self._start())
        await asyncio.shield(self._ready)

    async def _start(self) -> None:
        cfg = self.config
        self._http = _client(cfg)
        self.reattached = False
        saved = self._load_state()
        previous = self.kernel_id or saved
        if saved is not None and await self._kernel_exists(saved):
            self.kernel_id, self.reattached = saved, True
        else:
            reply = await self._request("POST", "/api/kernels", json={"name": self.kernel_name})
            self.kernel_id = str(reply.json()["id"])
            self._save_state()
            if previous is not None:
                self._notice.replaced(f"the kernel on {cfg.host} was gone")
        await self._connect()
        self._reader = asyncio.create_task(self._read())
        await self._wait_ready()
        log.info("%s kernel %s %s on %s", self.kernel_name, self.kernel_id,
                 "reattached" if self.reattached else "started", cfg.host)

    async def interrupt(self) -> None:
        if self.kernel_id is not None and self._lost is None:
            await self._request("POST", f"/api/kernels/{self.kernel_id}/interrupt")

    async def restart(self) -> None:
        await self.start()
        await self._request("POST", f"/api/kernels/{self.kernel_id}/restart")
        await self._wait_ready()

    async def shutdown(self) -> None:
        if self._ready is not None and not self._ready.done():
            self._ready.cancel()
            with contextlib.suppress(BaseException):
                await self._ready
        if self.kernel_id is not None and not self.config.keep_kernel and self._http is not None:
            try:
                await self._request("DELETE", f"/api/kernels/{self.kernel_id}")
                self._forget_state()
            except GatewayError as exc:
                if exc.status == 404:  # gone already
                    self._forget_state()
                else:  # the id stays saved: a later start reattaches
                    log.warning("could not shut the kernel down: %s", exc)
        await self._disconnect()
        self.kernel_id = None

    async def is_alive(self) -> bool:
        if self.kernel_id is None or self._lost is not None:
            return False
        try:
            return await self._kernel_exists(self.kernel_id)
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
            cell = Cell()
            msg = self._session.msg("execute_request", {
                "code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True})
            msg_id = msg["header"]["msg_id"]
            self._routes[msg_id] = cell.queue
            try:
                await self._send("shell", msg)
                return await collect(cell, emit, self._quiet, self._notified)
            except asyncio.CancelledError:
                await self._settle(cell)
                raise
            finally:
                del self._routes[msg_id]

    async def _quiet(self) -> Gone | None:
        """A run heard nothing for a while: the reader tells when the gateway is lost."""
        return Gone(self._lost) if self._lost is not None else None

    def _notified(self, channel: str) -> Gone | None:
        """The reader's own messages to the runs (see _read and _route)."""
        if channel == "lost":
            return Gone(self._lost or "lost the kernel")
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

        await settle(cell, interrupt, restart, gone=lambda: self._lost is not None)

    # REST ----------------------------------------------------------------------------------

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One REST call; every failure becomes a GatewayError that names the gateway."""
        assert self._http is not None
        return await _call(self._http, self.config, method, path, **kwargs)

    async def _kernel_exists(self, kernel_id: str) -> bool:
        try:
            await self._request("GET", f"/api/kernels/{kernel_id}")
        except GatewayError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # WebSocket -----------------------------------------------------------------------------

    async def _connect(self) -> None:
        """Open the channels; the session id lets the gateway replay what a drop missed."""
        url = self.config.ws_url(f"/api/kernels/{quote(str(self.kernel_id))}/channels"
                                 f"?session_id={self._session.session}")
        context: ssl.SSLContext | None = None
        if url.startswith("wss:") and not self.config.validate_cert:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            self._ws = await connect(url, additional_headers=self.config.http_headers(),
                                     ssl=context, open_timeout=self.config.request_timeout,
                                     max_size=None, logger=_WS_LOG)
        except InvalidStatus as exc:
            code = exc.response.status_code
            what = "refused the token" if code in (401, 403) else f"answered HTTP {code}"
            raise GatewayError(f"the kernel gateway at {self.config.url} {what} when "
                               f"opening the kernel's channels") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise GatewayError(f"cannot open the kernel's channels on the kernel gateway at "
                               f"{self.config.url}: {type(exc).__name__}: {exc}") from None
        self._connected.set()

    async def _send(self, channel: str, msg: dict[str, Any]) -> None:
        body = json.dumps({**msg, "channel": channel}, default=json_default)
        while True:
            # Wait for the channels, but not past the moment reconnecting gives up.
            while not self._connected.is_set():
                if self._lost is not None:
                    raise GatewayError(self._lost)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await self._connected.wait()
            ws = self._ws
            assert ws is not None
            try:
                await ws.send(body)
                return
            except WebSocketException:
                await asyncio.sleep(0.05)  # the reader notices the drop and reconnects

    async def _read(self) -> None:
        """Route every message to the run that sent its parent request; reopen a dropped
        connection with bounded retries, and tell the runs when that fails."""
        while True:
            ws = self._ws
            assert ws is not None
            try:
                async for raw in ws:
                    self._route(json.loads(raw))
            except (WebSocketException, OSError, ValueError) as exc:
                log.warning("kernel channels on %s dropped: %s", self.config.host, exc)
            self._connected.clear()
            if self._closing:
                return
            reason = await self._reconnect()
            if reason is not None:
                self._lost = reason
                log.error("%s", reason)
                for queue in self._routes.values():
                    queue.put_nowait(("lost", {"msg_type": "lost", "content": {}}))
                return

    async def _reconnect(self) -> str | None:
        """None once reconnected, else why not."""
        last = "the connection dropped"
        for delay in _RECONNECT_DELAYS:
            await asyncio.sleep(delay)
            try:
                if not await self._kernel_exists(str(self.kernel_id)):
                    return f"the kernel on the kernel gateway at {self.config.url} is gone"
                await self._connect()
                log.info("kernel channels on %s reopened", self.config.host)
                return None
            except GatewayError as exc:
                last = str(exc)
        return f"lost the kernel gateway at {self.config.url}: {last}"

    def _route(self, msg: dict[str, Any]) -> None:
        channel = msg.get("channel", "")
        parent = (msg.get("parent_header") or {}).get("msg_id", "")
        route = self._routes.get(parent)
        if route is not None:
            route.put_nowait((channel, msg))
        elif (msg.get("msg_type") == "status" and not parent
              and msg["content"].get("execution_state") in ("restarting", "dead")):
            # The gateway saw the kernel die (and restarts it): no run of ours will end.
            for queue in self._routes.values():
                queue.put_nowait(("died", msg))

    async def _wait_ready(self) -> None:
        """Ask kernel_info until the kernel answers (a kernel just started or restarted
        drops requests made before it listens)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _READY_TIMEOUT
        while True:
            msg = self._session.msg("kernel_info_request", {})
            msg_id = msg["header"]["msg_id"]
            queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
            self._routes[msg_id] = queue
            try:
                await self._send("shell", msg)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        while True:
                            channel, reply = await queue.get()
                            if channel == "lost":
                                raise GatewayError(self._lost or "lost the kernel")
                            if channel == "shell" and reply["msg_type"] == "kernel_info_reply":
                                return
            finally:
                del self._routes[msg_id]
            if loop.time() > deadline:
                raise GatewayError(f"the kernel on the kernel gateway at {self.config.url} "
                                   f"did not answer within {_READY_TIMEOUT:g} s")

    async def _disconnect(self) -> None:
        self._closing = True
        try:
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(BaseException):
                    await self._reader
            if self._ws is not None:
                with contextlib.suppress(Exception):
                    await self._ws.close()
            if self._http is not None:
                await self._http.aclose()
        finally:
            self._reader = self._ws = self._http = None
            self._connected.clear()
            self._closing = False

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


def _reason(response: httpx.Response) -> str:
    """The gateway's short explanation of an error answer (Jupyter servers send JSON)."""
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or response.reason_phrase)[:300]
    return response.reason_phrase


async def _call(http: httpx.AsyncClient, config: GatewayConfig, method: str, path: str,
                **kwargs: Any) -> httpx.Response:
    """One REST call; every failure becomes a GatewayError that names the gateway."""
    url = config.url
    try:
        response = await http.request(method, path, **kwargs)
    except httpx.TimeoutException:
        raise GatewayError(f"the kernel gateway at {url} did not answer within "
                           f"{config.request_timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise GatewayError(f"cannot reach the kernel gateway at {url}: "
                           f"{type(exc).__name__}: {exc}") from None
    if response.status_code in (401, 403):
        raise GatewayError(f"the kernel gateway at {url} refused the token "
                           f"(HTTP {response.status_code}); check kernelGateway.token",
                           response.status_code)
    if response.is_error:
        raise GatewayError(f"the kernel gateway at {url} answered {method} {path} with "
                           f"HTTP {response.status_code}: {_reason(response)}",
                           response.status_code)
    return response


def _client(config: GatewayConfig) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=config.url.rstrip("/"), headers=config.http_headers(),
                             verify=config.validate_cert, timeout=config.request_timeout,
                             trust_env=True)


_remote: TtlCache[str, dict[str, str]] = TtlCache(SPECS_TTL)  # by the gateway's URL


async def remote_kernelspecs(config: GatewayConfig) -> dict[str, str]:
    """The gateway's kernelspecs: canonical language -> kernel name. Raises GatewayError when
    the gateway cannot be asked."""

    async def read() -> dict[str, str]:
        async with _client(config) as http:
            body = (await _call(http, config, "GET", "/api/kernelspecs")).json()
        specs = body.get("kernelspecs") if isinstance(body, dict) else None
        return by_language(specs or {})

    return await _remote.get_async(config.url, read)


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
        return await inner.run(code, emit)

    async def interrupt(self) -> None:
        if self.inner is not None:
            await self.inner.interrupt()

    async def restart(self) -> None:
        await (await self._choose()).restart()

    async def shutdown(self) -> None:
        if self.inner is not None:
            await self.inner.shutdown()

    async def is_alive(self) -> bool:
        return self.inner is not None and await self.inner.is_alive()

    @property
    def pid(self) -> int | None:
        return self.inner.pid if self.inner is not None else None


def remote_or_local(language: str, cwd: Path, config: GatewayConfig,
                    local: Callable[[], Executor]) -> GatewayOrLocal:
    return GatewayOrLocal(language, cwd, config, local)
