"""pygls wire plumbing shared by the server and the client."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import cattrs
from pygls.exceptions import JsonRpcException
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
    default_converter,
)

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
    return converter


class WholeMessageProtocol(LanguageServerProtocol):
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
                self._send_response(msg_id, None, exc.to_response_error())
            return
        self.handle_structured(structured)

    def handle_structured(self, message: Any) -> None:
        super().handle_message(message)


# What pygls understands in a header (it reads these two and the blank line ending them).
_HEADER = re.compile(rb"(?:Content-Length: \d+|Content-Type: [^\r\n]*)?\r\n")


class FramingError(ValueError):
    """The client's byte stream cannot be LSP: the server stops reading it."""


class BoundedInput:
    """The LSP input stream with limits, for pygls' reader.

    pygls reads a header line with readline() and a body with read(Content-Length): a line
    that never ends, or a Content-Length of 10**14, would take all memory (BufferedReader
    allocates the whole length up front). Lines are cut at 64 KiB (a cut line is no header
    pygls knows, so it is skipped), bodies are read in pieces as the bytes arrive, and a
    length beyond MAX_BODY, or an input that ends inside a body, ends the connection with a
    FramingError.
    """

    MAX_LINE = 64 * 1024
    MAX_BODY = 1 << 30
    _PIECE = 1 << 20

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.skipped = 0  # header lines pygls will ignore: logged, a few a second at most
        self._budget, self._refilled = 10.0, time.monotonic()

    def readline(self) -> bytes:
        line = bytes(self._raw.readline(self.MAX_LINE))
        if line and not _HEADER.fullmatch(line):
            self.skipped += 1
            now = time.monotonic()
            self._budget = min(10.0, self._budget + (now - self._refilled))
            self._refilled = now
            if self._budget >= 1:
                self._budget -= 1
                log.warning("skipped a malformed LSP header line (%d so far): %.100r",
                            self.skipped, line)
        return line

    def read(self, n: int) -> bytes:
        if n > self.MAX_BODY:
            raise FramingError(f"the client announced a message of {n} bytes "
                               f"(the limit is {self.MAX_BODY})")
        pieces, left = [], n
        while left > 0:
            piece = self._raw.read(min(left, self._PIECE))
            if not piece:
                raise FramingError(f"the input ended inside a message ({n - left} of its "
                                   f"{n} bytes came)")
            pieces.append(piece)
            left -= len(piece)
        return b"".join(pieces)

    def close(self) -> None:
        self._raw.close()
