"""The pipes a front end (LSP, ACP) talks to its client over, kept private: kernels, REPLs and
C libraries that print must never reach them. Imports nothing of oi-lsp."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import BinaryIO


def private_stdio() -> tuple[BinaryIO, BinaryIO]:
    """Move the client's pipes to private descriptors; point fd 0 at /dev/null and fd 1 at stderr.

    Kernels and REPLs are our children and inherit fds 0 and 1; so do C libraries that print.
    One byte of theirs on the protocol stream corrupts it, and a child reading fd 0 would steal
    requests. After this, nothing but the server's writer can reach the client.
    """
    sys.stdout.flush()
    # Buffered: pygls reads a message body with one read(n), which a raw pipe may answer with
    # fewer bytes. os.dup: the descriptors are not inherited by children.
    lsp_in = os.fdopen(os.dup(0), "rb")
    lsp_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)  # lives as long as the process
    sys.stdout = sys.stderr
    return lsp_in, lsp_out


async def streams(pipe_in: BinaryIO, pipe_out: BinaryIO,
                  limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio streams over the private pipes (what an SDK's stdio helper would give)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe_in)
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), pipe_out)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)
