"""The REST API and the WebSocket channels of a Jupyter Kernel Gateway (or Enterprise Gateway).

The documented REST API starts, interrupts, restarts and deletes a kernel, and lists the
kernelspecs; a kernel's channels are one WebSocket carrying the Jupyter messages as JSON,
built by jupyter_client's Session like a local kernel's. Every failure is a GatewayError that
names the gateway's URL, never the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from typing import Any
from urllib.parse import quote

import httpx
from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from ..jupyter.messages import Message
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


class GatewayClient:
    """One kernel on the gateway, as REST calls and its channels: each message goes to the
    queue in `routes` of the request it answers; a dropped WebSocket is reopened, and when
    that fails `lost` says why and the waiting runs are told (a ("lost", ...) message)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.session = Session(key=b"", username="oi-lsp")  # kept across reconnects (_connect)
        self.kernel_id: str | None = None  # of the open channels
        self.lost: str | None = None  # why the kernel cannot be reached any more
        self.routes: dict[str, asyncio.Queue[Message]] = {}  # request msg_id -> its queue
        self.execution_count: int | None = None  # the kernel's, from the last execute_reply
        # A request sent on a connection that then dropped may be lost with it, or only its
        # answers may be: each connection has a number, and each request the one it went on.
        self._generation = 0
        self._sent: dict[str, int] = {}
        self._recheck: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self._ws: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._reader: asyncio.Task[None] | None = None

    def open(self) -> None:
        """Ready for REST calls (close() ends them with the channels)."""
        self._http = _client(self.config)

    @property
    def is_open(self) -> bool:
        return self._http is not None

    async def open_channels(self, kernel_id: str) -> None:
        """Connect to the kernel's channels and route what comes from now on."""
        self.kernel_id = kernel_id
        await self._connect()
        self._reader = asyncio.create_task(self._read())

    # REST ----------------------------------------------------------------------------------

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One REST call; every failure becomes a GatewayError that names the gateway."""
        assert self._http is not None
        return await _call(self._http, self.config, method, path, **kwargs)

    async def kernel_exists(self, kernel_id: str) -> bool:
        try:
            await self.request("GET", f"/api/kernels/{kernel_id}")
        except GatewayError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # WebSocket -----------------------------------------------------------------------------

    async def _connect(self) -> None:
        """Open the channels; the session id lets the gateway replay what a drop missed."""
        url = self.config.ws_url(f"/api/kernels/{quote(str(self.kernel_id))}/channels"
                                 f"?session_id={self.session.session}")
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
        self._generation += 1
        self._connected.set()

    async def send(self, channel: str, msg: dict[str, Any]) -> None:
        body = json.dumps({**msg, "channel": channel}, default=json_default)
        while True:
            # Wait for the channels, but not past the moment reconnecting gives up.
            while not self._connected.is_set():
                if self.lost is not None:
                    raise GatewayError(self.lost)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await self._connected.wait()
            ws, generation = self._ws, self._generation
            assert ws is not None
            try:
                await ws.send(body)
                msg_id = msg["header"]["msg_id"]
                if msg_id in self.routes:
                    self._sent[msg_id] = generation
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
            self._stop_recheck()
            if self._closing:
                return
            reason = await self._reconnect()
            if reason is not None:
                self.lost = reason
                log.error("%s", reason)
                for queue in self.routes.values():
                    queue.put_nowait(("lost", {"msg_type": "lost", "content": {}}))
                return
            self._recheck = asyncio.create_task(self._tell_unanswered())

    async def _tell_unanswered(self) -> None:
        """After a reconnect: a silent empty execute, which the kernel answers only after
        every earlier request (its shell channel takes them in order), gives the kernel's
        execution count. Each run still waiting on a request sent before the drop gets it as
        a ("reconnected", ...) message: from the count it tells whether its request ever
        arrived (executor.py)."""
        generation = self._generation
        msg = self.session.msg("execute_request", {
            "code": "", "silent": True, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": False})
        msg_id = msg["header"]["msg_id"]
        queue: asyncio.Queue[Message] = asyncio.Queue()
        self.routes[msg_id] = queue
        try:
            await self.send("shell", msg)
            while True:
                channel, reply = await queue.get()
                if channel in ("lost", "died"):
                    return
                if channel == "shell" and reply["msg_type"] == "execute_reply":
                    break
        finally:
            self.unroute(msg_id)
        count = reply["content"].get("execution_count")
        for waiting, route in self.routes.items():
            if self._sent.get(waiting, generation) < generation:
                route.put_nowait(("reconnected", {"msg_type": "reconnected",
                                                  "content": {"execution_count": count}}))

    def _stop_recheck(self) -> None:
        """Its count would answer for a connection gone again; cancelled, its own `finally`
        drops its route (nothing to wait for)."""
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    def unroute(self, msg_id: str) -> None:
        """The request is answered or given up: its messages go nowhere any more."""
        del self.routes[msg_id]
        self._sent.pop(msg_id, None)

    async def _reconnect(self) -> str | None:
        """None once reconnected, else why not."""
        last = "the connection dropped"
        for delay in _RECONNECT_DELAYS:
            await asyncio.sleep(delay)
            try:
                if not await self.kernel_exists(str(self.kernel_id)):
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
        route = self.routes.get(parent)
        if channel == "shell" and msg.get("msg_type") == "execute_reply":
            count = msg["content"].get("execution_count")
            if isinstance(count, int):
                self.execution_count = count
        if route is not None:
            route.put_nowait((channel, msg))
        elif (msg.get("msg_type") == "status" and not parent
              and msg["content"].get("execution_state") in ("restarting", "dead")):
            # The gateway saw the kernel die (and restarts it): no run of ours will end.
            for queue in self.routes.values():
                queue.put_nowait(("died", msg))

    async def wait_ready(self) -> None:
        """Ask kernel_info until the kernel answers (a kernel just started or restarted
        drops requests made before it listens)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _READY_TIMEOUT
        while True:
            msg = self.session.msg("kernel_info_request", {})
            msg_id = msg["header"]["msg_id"]
            queue: asyncio.Queue[Message] = asyncio.Queue()
            self.routes[msg_id] = queue
            try:
                await self.send("shell", msg)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        while True:
                            channel, reply = await queue.get()
                            if channel == "lost":
                                raise GatewayError(self.lost or "lost the kernel")
                            if channel == "shell" and reply["msg_type"] == "kernel_info_reply":
                                return
            finally:
                self.unroute(msg_id)
            if loop.time() > deadline:
                raise GatewayError(f"the kernel on the kernel gateway at {self.config.url} "
                                   f"did not answer within {_READY_TIMEOUT:g} s")

    async def close(self) -> None:
        """Close the channels and the REST session; open() and open_channels() start anew."""
        self._closing = True
        try:
            self._stop_recheck()
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
