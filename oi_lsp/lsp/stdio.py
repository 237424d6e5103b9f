"""Serving LSP over stdio on the event loop itself: no reader threads, one write per burst.

pygls' stdio transport reads every header line and body in a worker thread (four thread hops
per request) and writes and flushes every message on its own. On a busy machine each flush
wakes the editor, which may take the CPU from us before the next message is written: a run
that sends its start, its output, its end and the response paid that four or five times
(profiled: most of the server's own share of an `oi/execute` round trip). Here the pipes are
asyncio pipe transports: reads are plain `await`s, and what the server sends while handling
one burst of events goes out in a single non-blocking write, in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from pygls.io_ import run_async

from .pygls_compat import new_stop_event

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

# A write goes out once the loop has run _QUIET iterations without another write (a request's
# handler, the task it starts and the done callback that answers run an iteration or two
# apart: all they send leaves together), and after _MAX_WAIT iterations or _MAX_BYTES at most.
_QUIET = 2
_MAX_WAIT = 8
_MAX_BYTES = 256 * 1024
READ_LIMIT = 1 << 20  # longest header line; bodies are read by length
MAX_BODY = 1 << 30  # the longest message a client may send (--tcp and --ws too, once logged in)
# What pygls understands in a header (it reads these two and the blank line ending them).
_HEADER = re.compile(rb"(?:Content-Length: \d+|Content-Type: [^\r\n]*)?\r\n")


class BatchingWriter:
    """pygls' writer interface over a pipe transport, flushing once the loop has moved on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport) -> None:
        self._loop = loop
        self._transport = transport
        self._loop_thread = threading.get_ident()
        self._parts: list[bytes] = []
        self._size = 0
        self._quiet = 0
        self._waited = 0
        self._scheduled = False

    def write(self, data: bytes) -> None:
        if threading.get_ident() != self._loop_thread:  # pygls' threaded handlers
            self._loop.call_soon_threadsafe(self.write, data)
            return
        self._parts.append(data)
        self._size += len(data)
        self._quiet = 0
        if self._size >= _MAX_BYTES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._waited = 0
            self._loop.call_soon(self._tick)

    def answered(self) -> None:
        """A response was written: it ends its request's burst, so what is pending leaves at
        once rather than after the quiet iterations (each a few dozen µs of a round trip)."""
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.answered)
            return
        self.flush()

    def _tick(self) -> None:
        if not self._scheduled:  # flushed meanwhile
            return
        self._quiet += 1
        self._waited += 1
        if self._quiet > _QUIET or self._waited >= _MAX_WAIT:
            self.flush()
        else:
            self._loop.call_soon(self._tick)

    def flush(self) -> None:
        self._scheduled = False
        if not self._parts:
            return
        data = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        if self._transport.is_closing():
            log.warning("dropped %d bytes for a client that has gone", len(data))
            return
        self._transport.write(data)  # what the pipe cannot take now, the transport keeps

    def backlog(self) -> int:
        """Bytes written that the client has not read yet."""
        return self._size + self._transport.get_write_buffer_size()

    def close(self) -> None:
        self.flush()
        self._transport.close()  # sends what it still holds, then closes


class FramedReader:
    """The reader run_async expects (readline, readexactly) over an asyncio StreamReader;
    a stream cut mid-body ends the loop like end of file instead of raising. Malformed
    framing is logged: a header line pygls does not know is skipped (one over the read limit
    too), a Content-Length over `max_body()` ends the loop (the stream cannot be LSP, or, over
    --tcp before the token, is not a client we let in), before a byte of the body is read."""

    def __init__(self, stream: asyncio.StreamReader,
                 max_body: Callable[[], int] = lambda: MAX_BODY) -> None:
        self._stream = stream
        self._max_body = max_body
        self._budget, self._refilled = 10.0, time.monotonic()  # log lines, a few a second
        self._between = True  # the next line read is a message's first

    async def readline(self) -> bytes:
        if self._between:
            # Let the handler of the message just read take its first step before the next
            # message is handled, as with pygls' threaded reader: a notification's async
            # handler (didChangeConfiguration, ...) starts before a request that follows it
            # at once. Once per message: each loop iteration is a few dozen µs of a request.
            self._between = False
            await asyncio.sleep(0)
        try:
            line = await self._stream.readline()
        except ValueError:  # longer than the limit: asyncio dropped it
            self._warn("skipped a header line over %d bytes", READ_LIMIT)
            return b"-\r\n"
        if line and not _HEADER.fullmatch(line):
            self._warn("skipped a malformed LSP header line: %.100r", line)
        return line

    async def readexactly(self, n: int) -> bytes:
        limit = self._max_body()
        if n > limit:
            log.error("the client announced a message of %d bytes (at most %d here); stopping",
                      n, limit)
            return b""
        self._between = True
        try:
            return await self._stream.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            log.error("the input ended inside a message (%d of its %d bytes came)",
                      len(exc.partial), n)
            return b""

    def _warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        self._budget = min(10.0, self._budget + now - self._refilled)
        self._refilled = now
        if self._budget >= 1:
            self._budget -= 1
            log.warning(message, *args)


async def _serve(server: LanguageServer, lsp_in: BinaryIO, lsp_out: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), lsp_in)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, lsp_out)
    writer = BatchingWriter(loop, transport)
    server.protocol.set_writer(writer)
    stop = new_stop_event(server)
    try:
        await run_async(stop_event=stop, reader=FramedReader(stream), protocol=server.protocol,
                        logger=log, error_handler=server.report_server_error)
    finally:
        await connection_over(server)
        writer.close()
        await asyncio.sleep(0)  # let the transport write what close() left it


async def connection_over(server: LanguageServer) -> None:
    """The client's connection is over: what it started ends first (OIServer.connection_ended:
    its turns and runs stopped, saved as they ended)."""
    ended = getattr(server, "connection_ended", None)
    if ended is not None:
        await ended()


def _is_pipe(stream: BinaryIO) -> bool:
    mode = os.fstat(stream.fileno()).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def serve_stdio(server: LanguageServer, lsp_in: BinaryIO, lsp_out: BinaryIO) -> None:
    """Serve until the client closes our input (after `exit`, or when it goes away).

    Pipes and sockets (what editors give) get the transport above; anything else (a terminal,
    a file) is served by pygls' own threaded transport."""
    if sys.platform == "win32" or not (_is_pipe(lsp_in) and _is_pipe(lsp_out)):
        server.start_io(lsp_in, lsp_out)
        return
    try:
        asyncio.run(_serve(server, lsp_in, lsp_out))
    except KeyboardInterrupt:
        pass
    finally:  # SystemExit (the `exit` notification) goes on: its code is the exit status
        server.shutdown()
