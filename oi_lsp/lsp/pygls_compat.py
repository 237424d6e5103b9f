"""pygls' private names, in one place.

oi-lsp's transports and its fast writer hook into pygls where it has no public API: the
handlers of each kind of incoming message, the method every outgoing message passes through,
the initialize method that builds the capabilities, the one that answers a request, the
server's error report, the stop event its read loops watch and the listener its shutdown()
closes, the child process of its client, the futures of the requests it sent (a cancelled one
is forgotten) and the logger its request handlers' errors go to.
tests/test_pygls_compat.py checks each name against the pygls installed, so an upgrade that
renames one fails there, loudly, and not in a user's editor.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Generator
from typing import Any

from lsprotocol import types
from pygls.client import JsonRPCClient
from pygls.exceptions import JsonRpcException
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCProtocol,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
    lsp_method,
)
from pygls.server import JsonRPCServer


class Dispatch(LanguageServerProtocol):
    """pygls' dispatch of a message by its kind, for the messages of methods it has no type of
    its own for (every oi/* request, notification and response): their class says the kind.
    pygls asks with isinstance against runtime-checkable Protocols, ~9 µs a check and up to
    three a message on Python 3.11; the rest (typed LSP messages, errors, a message after
    shutdown) goes its way."""

    def handle_message(self, message: Any) -> None:
        kind = type(message)
        if kind not in _GENERIC or self._shutdown or message.jsonrpc != JsonRPCProtocol.VERSION:
            super().handle_message(message)
            return
        context = contextvars.copy_context()  # each handler in its own, as pygls runs it
        if kind is JsonRPCRequestMessage:
            context.run(self._handle_request, message.id, message.method, message.params)
        elif kind is JsonRPCNotification:
            context.run(self._handle_notification, message.method, message.params)
        else:
            context.run(self._handle_response, message.id, message.result)

    def _handle_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        # pygls sets a late answer on its future even when the request was given up (the
        # awaiting task cancelled, which cancels the future): InvalidStateError, logged with
        # its traceback. A given-up request's answer is dropped.
        future = self._request_futures.get(msg_id)
        if future is not None and future.done():
            del self._request_futures[msg_id]
            return
        super()._handle_response(msg_id, result, error)


_GENERIC = frozenset({JsonRPCRequestMessage, JsonRPCNotification, JsonRPCResponseMessage})


class Protocol(Dispatch):
    """LanguageServerProtocol with pygls' private hooks under names of our own."""

    def _send_data(self, data: Any) -> None:  # pygls: every outgoing message comes here
        self.send_message(data)

    def send_message(self, data: Any) -> None:
        """Serialize and write one outgoing message; pygls' own way unless overridden."""
        super()._send_data(data)

    def send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        """Answer request `msg_id` with a result or an error."""
        self._send_response(msg_id, result, error)

    def report_error(self, error: Exception, source: Any) -> None:
        """Tell the server (and so the client) that something failed, as pygls does."""
        self._server._report_server_error(error, source)

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams,
                       ) -> Generator[Any, Any, types.InitializeResult]:
        """pygls builds the capabilities after our initialize handler, from every feature
        registered: the server's `capabilities_built(capabilities)` may then adjust them."""
        result: types.InitializeResult = yield from super().lsp_initialize(params)
        adjust = getattr(self._server, "capabilities_built", None)
        if adjust is not None:
            adjust(result.capabilities)
        return result


def cancel_request(protocol: LanguageServerProtocol, msg_id: str) -> None:
    """Tell the client we no longer want the answer to our request `msg_id` ($/cancelRequest),
    and forget it: pygls would set the late answer on a future that was cancelled."""
    protocol._request_futures.pop(msg_id, None)
    protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))


def new_stop_event(server: JsonRPCServer) -> threading.Event:
    """A stop event for a read loop we run ourselves; the server's shutdown() sets it."""
    event = threading.Event()
    server._stop_event = event
    return event


def set_listener(server: JsonRPCServer, listener: Any) -> None:
    """The listening server of --tcp/--ws; the server's shutdown() closes it."""
    server._server = listener


def client_process(client: JsonRPCClient) -> asyncio.subprocess.Process | None:
    """The server process a pygls client started (start_io)."""
    return client._server


# pygls logs every exception a request handler raises with its traceback, deliberate
# JSON-RPC refusals included (bad params, a workspace busy with a turn).
_HANDLER_LOG = "pygls.protocol.json_rpc"
REFUSALS = (-32602, -32803)  # InvalidParams; LSP's RequestFailed


class _OneLineRefusals(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, JsonRpcException) and error.code in REFUSALS:
            record.msg, record.args = "refused a request (%s): %s", (error.code, error.message)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def quiet_refusals() -> None:
    """Log the refusals a handler raises as one line, not a traceback (once per process)."""
    logger = logging.getLogger(_HANDLER_LOG)
    if not any(isinstance(f, _OneLineRefusals) for f in logger.filters):
        logger.addFilter(_OneLineRefusals())


def copy_features(source: Any, target: Any) -> None:
    """Register on `target` every feature and command registered on `source` (the daemon's
    servers, one per connection, take their handlers from lsp/server.py's SERVER). pygls binds
    each handler to its server at registration; `.func` is the unbound handler."""
    fm = source.protocol.fm
    for name, handler in fm.features.items():
        target.feature(name, fm.feature_options.get(name))(getattr(handler, "func", handler))
    for name, handler in fm.commands.items():
        target.command(name)(getattr(handler, "func", handler))
