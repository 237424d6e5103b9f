"""Serving over --tcp / --ws: one client at a time, admitted by a token in `initialize`.

Anyone on the machine can connect to a local port, and this server runs code: so until a client
sends `initialize` with `initializationOptions.token` equal to the server's token, every request
is refused and every notification dropped. A second connection while one is open is closed at
once (pygls has one writer: a second client would receive the first one's replies).

The one client slot must not be held by someone without the token: a connection that has not
logged in within LOGIN_TIMEOUT seconds is closed, and so is one that sends more than
LOGIN_MAX_MESSAGES messages without it; before the token a message may be at most
LOGIN_MAX_BODY bytes (a larger one closes the connection before its body is read); after it,
the limit is stdio's. A client that leaves without logging in leaves the server serving the
next one; the client that logged in ends the server when it leaves, as over stdio.

Over --ws, a connection from a web page (an `Origin` header) is refused unless that origin was
allowed with --allow-origin: any page the user opens could otherwise reach the port.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import WebSocketWriter, run_async

from .jsonrpc import WholeMessageProtocol
from .pygls_compat import new_stop_event, set_listener
from .stdio import MAX_BODY, READ_LIMIT, FramedReader, connection_over

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer
    from websockets.asyncio.server import ServerConnection

log = logging.getLogger(__name__)

UNAUTHORIZED = -32001  # a server-defined JSON-RPC error code
LOGIN_TIMEOUT = 5.0  # seconds from connecting to a good `initialize`
# The longest message before the token: an editor's `initialize` is a few KB (its capabilities
# and settings; tests/test_network.py passes one of over 20 KB); room for more, nowhere near
# memory.
LOGIN_MAX_BODY = 64 * 1024
# Messages a connection may send before the token: each refusal is answered, and a client that
# sends without reading would have the answers pile up in the server's memory.
LOGIN_MAX_MESSAGES = 16


class Gate:
    """The token a client must present, and whether the current connection presented it."""

    def __init__(self) -> None:
        self.token: str | None = None  # None: no token needed (stdio: the editor is our parent)
        self.admitted = False
        self.connected = False
        self.unadmitted = 0  # messages the current connection sent without the token
        self.hung_up = False
        self._hang_up: Callable[[], None] = lambda: None

    def open(self, hang_up: Callable[[], None]) -> None:
        """A connection starts (`hang_up` closes it): nobody is admitted yet."""
        self.connected, self.admitted, self.unadmitted = True, False, 0
        self.hung_up, self._hang_up = False, hang_up

    def hang_up(self) -> None:
        """Close the current connection; what it sent and was not read yet is not read."""
        self.hung_up = True
        self._hang_up()

    def max_body(self) -> int:
        """The longest message the current connection may send now."""
        if self.hung_up:
            return 0
        return MAX_BODY if self.token is None or self.admitted else LOGIN_MAX_BODY

    def check(self, options: Any) -> bool:
        given = options.get("token") if isinstance(options, dict) else None
        if not isinstance(given, str) and isinstance(options, dict):
            oi = options.get("oi")
            given = oi.get("token") if isinstance(oi, dict) else None
        return (self.token is not None and isinstance(given, str)
                and secrets.compare_digest(given.encode(), self.token.encode()))


def new_token() -> str:
    return secrets.token_urlsafe(24)


class GatedProtocol(WholeMessageProtocol):
    """LanguageServerProtocol that serves nothing before a good token (when one is set)."""

    gate: Gate

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.gate = Gate()

    def handle_structured(self, message: Any) -> None:
        gate = self.gate
        if gate.token is None or gate.admitted:
            super().handle_structured(message)
            return
        gate.unadmitted += 1
        if gate.unadmitted > LOGIN_MAX_MESSAGES:
            if gate.unadmitted == LOGIN_MAX_MESSAGES + 1:
                log.warning("closed a connection that sent %d messages without the token",
                            LOGIN_MAX_MESSAGES + 1)
                gate.hang_up()
            return
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        if method is None or msg_id is None:  # a notification or a response: drop it
            log.warning("dropped %s from a client that has not presented the token",
                        method or "a response")
            return
        if method == types.INITIALIZE and gate.check(
                getattr(message.params, "initialization_options", None)):
            gate.admitted = True
            super().handle_structured(message)
            return
        log.warning("refused %s: wrong or missing token", method)
        self.send_response(msg_id, None, JsonRpcException(
            "unauthorized: send initialize with initializationOptions.token set to the "
            "server's token", code=UNAUTHORIZED).to_response_error())


def gate_of(server: LanguageServer) -> Gate:
    protocol = server.protocol
    assert isinstance(protocol, GatedProtocol)
    return protocol.gate


async def _log_in_or_close(gate: Gate) -> None:
    """Close the connection unless its client presents the token within LOGIN_TIMEOUT."""
    await asyncio.sleep(LOGIN_TIMEOUT)
    if not gate.admitted:
        log.warning("closed a connection that did not log in within %g s", LOGIN_TIMEOUT)
        gate.hang_up()


def serve_tcp(server: LanguageServer, host: str, port: int) -> None:
    gate = gate_of(server)
    stop = new_stop_event(server)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if gate.connected:
            log.warning("refused a second connection from %s", writer.get_extra_info("peername"))
            writer.close()
            return
        gate.open(writer.close)  # the read loop then sees the end of its stream
        server.protocol.set_writer(writer)
        deadline = asyncio.create_task(_log_in_or_close(gate))
        try:
            await run_async(stop_event=stop, reader=FramedReader(reader, gate.max_body),
                            protocol=server.protocol, logger=log,
                            error_handler=server.report_server_error)
        finally:
            deadline.cancel()
            gate.connected = False
            if gate.admitted:  # the client's session is over: so is the server's
                await connection_over(server)
                server.shutdown()
            writer.close()

    async def main() -> None:
        listener = await asyncio.start_server(connection, host, port, limit=READ_LIMIT)
        set_listener(server, listener)
        async with listener:
            await listener.serve_forever()

    _run(main())


def serve_ws(server: LanguageServer, host: str, port: int,
             origins: Sequence[str] = ()) -> None:
    """Serve over WebSocket; `origins`: the web pages (`Origin` headers) allowed besides
    clients that send none."""
    from websockets.asyncio.server import serve
    from websockets.typing import Origin

    gate = gate_of(server)
    stop = new_stop_event(server)

    async def connection(websocket: ServerConnection) -> None:
        if gate.connected:
            log.warning("refused a second WebSocket connection")
            await websocket.close()
            return
        closing: set[asyncio.Task[None]] = set()

        def hang_up() -> None:
            task = asyncio.ensure_future(websocket.close(1008, "not logged in"))
            closing.add(task)
            task.add_done_callback(closing.discard)

        gate.open(hang_up)
        deadline = asyncio.create_task(_log_in_or_close(gate))
        try:
            await _read_websocket(server, websocket, stop)
        finally:
            deadline.cancel()
            gate.connected = False
            if gate.admitted:
                await connection_over(server)
                server.shutdown()

    async def main() -> None:
        ws_server = await serve(connection, host, port, origins=[None, *map(Origin, origins)],
                                max_size=LOGIN_MAX_BODY)
        set_listener(server, ws_server)
        await ws_server.serve_forever()

    _run(main())


async def _read_websocket(server: LanguageServer, websocket: ServerConnection,
                          stop: threading.Event) -> None:
    """pygls' run_websocket, but a client that leaves ends only its own connection (pygls'
    sets the server's stop event, and so closed every later client at once), and the message
    size limit rises to stdio's once the client has logged in."""
    from websockets.exceptions import ConnectionClosed

    protocol = server.protocol
    gate = gate_of(server)
    protocol.set_writer(WebSocketWriter(websocket), include_headers=False)
    raised = False
    while not stop.is_set():  # after a hang-up too: what comes is dropped, the close completes
        try:
            data = await websocket.recv(decode=False)
        except ConnectionClosed:
            break
        try:
            protocol.handle_message(json.loads(data, object_hook=protocol.structure_message))
        except Exception as exc:
            log.exception("could not handle a message")
            server.report_server_error(exc, JsonRpcException)
        if gate.admitted and not raised:
            raised = True
            _set_max_message(websocket, MAX_BODY)
    await websocket.close()


def _set_max_message(websocket: ServerConnection, size: int) -> None:
    # websockets reads its limit for each frame from its Sans-I/O protocol object, which has
    # no public setter (tests/test_network.py sends a message over the login limit after login).
    websocket.protocol.max_message_size = size


def _run(main: Any) -> None:
    try:
        asyncio.run(main)
    except asyncio.CancelledError:  # server.shutdown() closed the listening socket
        pass
