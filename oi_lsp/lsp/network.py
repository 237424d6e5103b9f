"""Serving over --tcp / --ws: one client at a time, admitted by a token in `initialize`.

Anyone on the machine can connect to a local port, and this server runs code: so until a client
sends `initialize` with `initializationOptions.token` equal to the server's token, every request
is refused and every notification dropped. A second connection while one is open is closed at
once (pygls has one writer: a second client would receive the first one's replies).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import run_async, run_websocket

from .jsonrpc import WholeMessageProtocol
from .pygls_compat import new_stop_event, set_listener

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

UNAUTHORIZED = -32001  # a server-defined JSON-RPC error code


class Gate:
    """The token a client must present, and whether the current connection presented it."""

    def __init__(self) -> None:
        self.token: str | None = None  # None: no token needed (stdio: the editor is our parent)
        self.admitted = False
        self.connected = False

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


def serve_tcp(server: LanguageServer, host: str, port: int) -> None:
    gate = gate_of(server)
    stop = new_stop_event(server)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if gate.connected:
            log.warning("refused a second connection from %s", writer.get_extra_info("peername"))
            writer.close()
            return
        gate.connected, gate.admitted = True, False
        server.protocol.set_writer(writer)
        try:
            await run_async(stop_event=stop, reader=reader, protocol=server.protocol,
                            logger=log, error_handler=server.report_server_error)
        finally:
            gate.connected = False
            if gate.admitted:  # the client's session is over: so is the server's
                server.shutdown()
            writer.close()

    async def main() -> None:
        listener = await asyncio.start_server(connection, host, port)
        set_listener(server, listener)
        async with listener:
            await listener.serve_forever()

    _run(main())


def serve_ws(server: LanguageServer, host: str, port: int) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    gate = gate_of(server)
    stop = new_stop_event(server)

    async def connection(websocket: ServerConnection) -> None:
        if gate.connected:
            log.warning("refused a second WebSocket connection")
            await websocket.close()
            return
        gate.connected, gate.admitted = True, False
        try:
            await run_websocket(websocket=websocket, stop_event=stop, protocol=server.protocol,
                                logger=log, error_handler=server.report_server_error)
        finally:
            gate.connected = False
            if gate.admitted:
                server.shutdown()

    async def main() -> None:
        ws_server = await serve(connection, host, port)
        set_listener(server, ws_server)
        await ws_server.serve_forever()

    _run(main())


def _run(main: Any) -> None:
    try:
        asyncio.run(main)
    except asyncio.CancelledError:  # server.shutdown() closed the listening socket
        pass
