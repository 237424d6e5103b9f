"""pygls wire plumbing shared by the server and the client."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from typing import Any

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)

from .pygls_compat import Protocol

log = logging.getLogger(__name__)


def _keep(obj: dict[str, Any], cls: type[Any]) -> Any:
    if cls is not JsonRPCResponseMessage:
        obj = {"params": None, **obj}  # JSON-RPC lets a request leave params out
    return cls(**obj)


def raw_params_converter() -> cattrs.Converter:
    """Keep params and results of custom methods as plain JSON, for pydantic to validate.

    pygls' default turns them into namedtuples, which renames or drops some keys.
    """
    converter = default_converter()
    for cls in (JsonRPCRequestMessage, JsonRPCNotification, JsonRPCResponseMessage):
        converter.register_structure_hook(cls, _keep)

    def command_or_action(obj: Any, _: type) -> types.Command | types.CodeAction:
        # lsprotocol takes any object with a `command` for a Command, though a CodeAction
        # carries its Command there too (an object; a Command's is the command's name).
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, types.Command)
        return converter.structure(obj, types.CodeAction)

    converter.register_structure_hook(types.Command | types.CodeAction, command_or_action)
    return converter


class PlainJsonProtocol(Protocol):
    """Sends the oi/* notifications and results, which are plain JSON already, with a single
    json.dumps; pygls would first unstructure each message through cattrs (profiled: most
    of the cost of sending one). Everything else goes through pygls unchanged."""

    _headers = True

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.sending: set[asyncio.Future[Any]] = set()  # WebSocket sends not finished yet

    def set_writer(self, writer: Any, include_headers: bool = True) -> None:
        super().set_writer(writer, include_headers)
        self._headers = include_headers

    def send_message(self, data: Any) -> None:
        kind = type(data)
        response = False
        if kind is JsonRPCNotification and isinstance(data.params, dict):
            message: dict[str, Any] = {"jsonrpc": "2.0", "method": data.method,
                                       "params": data.params}
        elif kind is JsonRPCResponseMessage and isinstance(data.result, dict | None):
            message = {"jsonrpc": "2.0", "id": data.id, "result": data.result}
            response = True
        else:
            super().send_message(data)
            return
        if self.writer is None:
            log.error("unable to send data: no transport")
            return
        try:
            body = json.dumps(message, ensure_ascii=False, separators=(",", ":"),
                              default=self._serialize_message).encode()
            if self._headers:
                body = (f"Content-Length: {len(body)}\r\nContent-Type: {self.CONTENT_TYPE}; "
                        f"charset={self.CHARSET}\r\n\r\n").encode() + body
            res = self.writer.write(body)
            if inspect.isawaitable(res):  # a WebSocket send: keep it until done
                future = asyncio.ensure_future(res)
                self.sending.add(future)
                future.add_done_callback(self.sending.discard)
            elif response and callable(answered := getattr(self.writer, "answered", None)):
                answered()  # stdio.BatchingWriter: the answer need not wait for more
        except BrokenPipeError:
            log.exception("could not send: broken pipe")
            raise
        except Exception as error:
            log.exception("could not send")
            self.report_error(error, JsonRpcInternalError)


class WholeMessageProtocol(PlainJsonProtocol):
    """Structure only the top-level JSON object into a message.

    pygls hands `structure_message` to json.loads as its object hook, so every nested object
    with a "jsonrpc" key (say, in a request's params) was taken for a message of its own; one
    that did not fit failed the whole message, and the request was never answered. Here the
    hook leaves every object plain and `handle_message` structures the outer one; a request
    whose structure fails is answered with the error.
    """

    def structure_message(self, data: dict[str, Any]) -> Any:
        return data

    def handle_message(self, message: Any) -> None:
        if not isinstance(message, dict) or "jsonrpc" not in message:
            log.warning("ignored a body that is not a JSON-RPC message: %.200r", message)
            return
        try:
            structured = super().structure_message(message)
        except JsonRpcException as exc:
            msg_id, method = message.get("id"), message.get("method")
            log.warning("could not read %s: %s", method or "a message", exc)
            if msg_id is not None and method is not None:
                self.send_response(msg_id, None, exc.to_response_error())
            return
        self.handle_structured(structured)

    def handle_structured(self, message: Any) -> None:
        super().handle_message(message)
