"""--tcp and --ws at login: nobody without the token holds the one client slot (an idle or
wrong-token connection is dropped after the login timeout, a huge message before login is
refused unread), a client that leaves without logging in leaves the server serving, and over
--ws a web page's Origin is refused. Real servers, real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from oi_lsp.client import server_command
from oi_lsp.lsp.network import LOGIN_MAX_BODY, LOGIN_MAX_MESSAGES, LOGIN_TIMEOUT
from tests.hardening import frame, free_port, initialize_request, read_response, record

TOKEN = "net-test-token"


@dataclass
class Server:
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    def rss(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@asynccontextmanager
async def network_server(transport: str, tmp_path: Path, *args: str) -> AsyncIterator[Server]:
    port = free_port()
    log = tmp_path / f"server-{port}.log"
    proc = await asyncio.create_subprocess_exec(
        *server_command(), transport, "--port", str(port), "--log-file", str(log), *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "OI_LSP_DATA_DIR": str(tmp_path / "data"), "OI_LSP_TOKEN": TOKEN})
    try:
        async with asyncio.timeout(60):  # the port opens once the server has imported
            while not listening(proc.pid, port):  # (a probe connection would take the slot)
                if proc.returncode is not None:
                    raise RuntimeError(f"the server exited ({proc.returncode})")
                await asyncio.sleep(0.1)
        yield Server(proc, port, log)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def listening(pid: int, port: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                   for c in psutil.Process(pid).net_connections("tcp"))
    except psutil.Error:
        return False


class Conn:
    """One client connection over either transport: send JSON-RPC, read a response."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.ws: Any = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self, port: int, origin: str | None = None) -> Conn:
        if self.transport == "--ws":
            from websockets.asyncio.client import connect

            self.ws = await connect(f"ws://127.0.0.1:{port}", origin=origin,  # type: ignore
                                    max_size=None, open_timeout=30)
        else:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        return self

    async def send(self, message: dict[str, Any] | bytes) -> None:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        if self.ws is not None:
            await self.ws.send(body)
            return
        assert self.writer is not None
        self.writer.write(frame(body))
        await self.writer.drain()

    async def response(self, msg_id: int, timeout: float = 30) -> dict[str, Any]:
        if self.ws is None:
            assert self.reader is not None
            return await read_response(self.reader, msg_id, timeout)
        async with asyncio.timeout(timeout):
            while True:
                message = json.loads(await self.ws.recv())
                if message.get("id") == msg_id and "method" not in message:
                    return dict(message)

    async def closed_by_server(self, timeout: float) -> float:
        """Wait until the server closes this connection; the seconds it took."""
        started = time.monotonic()
        async with asyncio.timeout(timeout):
            if self.ws is not None:
                from websockets.exceptions import ConnectionClosed

                with pytest.raises(ConnectionClosed):
                    while True:
                        await self.ws.recv()
            else:
                assert self.reader is not None
                await until_eof(self.reader)
        return time.monotonic() - started

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        elif self.writer is not None:
            self.writer.close()


async def until_eof(reader: asyncio.StreamReader) -> None:
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:  # reset: closed too
        pass


def initialize(msg_id: int, token: str) -> dict[str, Any]:
    return initialize_request(msg_id, None, {"token": token})


async def logs_in(server: Server, transport: str) -> Conn:
    conn = await Conn(transport).open(server.port)
    await conn.send(initialize(1, TOKEN))
    assert "capabilities" in (await conn.response(1))["result"]
    return conn


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_wrong_token_client_leaves_then_right_token_client_is_served(
        transport: str, tmp_path: Path) -> None:
    async with network_server(transport, tmp_path) as server:
        for _ in range(2):  # twice: the second wrong one would find the server gone, too
            wrong = await Conn(transport).open(server.port)
            await wrong.send(initialize(1, "not-the-token"))
            assert (await wrong.response(1))["error"]["code"] == -32001
            await wrong.close()
            await asyncio.sleep(0.3)  # the server has seen it leave
        conn = await logs_in(server, transport)
        await conn.send({"jsonrpc": "2.0", "id": 2, "method": "oi/history", "params": {}})
        assert "messages" in (await conn.response(2))["result"]
        await conn.close()
        assert server.proc.returncode is None or server.proc.returncode == 0


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
@pytest.mark.parametrize("first", ["idle", "wrong token"])
async def test_a_connection_without_login_is_dropped_and_the_next_client_gets_in(
        transport: str, first: str, tmp_path: Path) -> None:
    async with network_server(transport, tmp_path) as server:
        squatter = await Conn(transport).open(server.port)
        if first == "wrong token":
            await squatter.send(initialize(1, "not-the-token"))
            assert (await squatter.response(1))["error"]["code"] == -32001
        # Meanwhile the slot is taken: another client is turned away.
        other = await Conn(transport).open(server.port)
        await other.closed_by_server(30)
        dropped_after = await squatter.closed_by_server(LOGIN_TIMEOUT + 30)
        assert dropped_after >= LOGIN_TIMEOUT - 1.5, dropped_after
        conn = await logs_in(server, transport)
        await conn.close()
        assert "did not log in within" in server.log_text()
    record("network", login_timeout_s=LOGIN_TIMEOUT,
           **{f"dropped_after_s_{transport[2:]}_{first.replace(' ', '_')}":
              round(dropped_after + 0.0, 1)})


async def _send_until_closed(send: Callable[[bytes], Any], total: int) -> int:
    """Send up to `total` bytes in 1 MB pieces; how many went before the server closed."""
    piece = b"x" * (1 << 20)
    sent = 0
    try:
        while sent < total:
            await send(piece)
            sent += len(piece)
    except (ConnectionError, OSError):
        pass
    return sent


async def test_huge_content_length_before_login_is_refused_unread(tmp_path: Path) -> None:
    async with network_server("--tcp", tmp_path) as server:
        before = server.rss()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)

        async def send(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

        await send(b"Content-Length: 5000000000\r\n\r\n")
        sent = await _send_until_closed(send, 100 << 20)
        await asyncio.wait_for(until_eof(reader), 30)
        growth_mb = (server.rss() - before) / (1 << 20)
        assert sent < 100 << 20, "the server read 100 MB of a message before login"
        assert growth_mb < 20, growth_mb
        assert "5000000000 bytes" in server.log_text()
        conn = await logs_in(server, "--tcp")  # and the slot is free again
        await conn.close()
    record("network", huge_before_login_sent_mb=round(sent / (1 << 20)),
           huge_before_login_rss_growth_mb=round(growth_mb, 1))


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_a_flood_before_login_is_cut_off(transport: str, tmp_path: Path) -> None:
    """A client that sends without reading: the refusals must not pile up in the server."""
    async with network_server(transport, tmp_path) as server:
        flood = await Conn(transport).open(server.port)
        sent = 0
        with contextlib.suppress(ConnectionError, OSError, Exception):
            for i in range(1000):
                await flood.send({"jsonrpc": "2.0", "id": i, "method": "oi/history",
                                  "params": {}})
                sent += 1
        answered, ended_by = 0, None
        try:
            async with asyncio.timeout(LOGIN_TIMEOUT - 1):  # closed before the login timeout
                while True:
                    await flood.response(answered)
                    answered += 1
        except Exception as exc:  # the end of the stream, a reset, or the timeout
            ended_by = exc
        assert not isinstance(ended_by, TimeoutError), (answered, sent)
        # Over TCP the client may see none of the answers: the server closed with the rest of
        # the flood unread, so the kernel resets the connection (and drops what it held).
        assert answered <= LOGIN_MAX_MESSAGES, (answered, sent)
        assert "messages without the token" in server.log_text()
        await asyncio.sleep(0.3)  # the server has seen it leave
        conn = await logs_in(server, transport)
        await conn.close()


@pytest.mark.parametrize("transport", ["--tcp", "--ws"])
async def test_message_limits_before_and_after_login(transport: str, tmp_path: Path) -> None:
    padding = "a" * (LOGIN_MAX_BODY * 8)  # 512 KB: over the login limit, under stdio's
    big = {"jsonrpc": "2.0", "id": 7, "method": "oi/nosuchmethod", "params": {"pad": padding}}
    async with network_server(transport, tmp_path) as server:
        # Before login: the connection is closed, not answered.
        conn = await Conn(transport).open(server.port)
        try:
            await conn.send(big)
        except (ConnectionError, OSError):
            pass
        await conn.closed_by_server(30)
        # An editor's initialize of a few KB is not refused.
        conn = await Conn(transport).open(server.port)
        init = initialize(1, TOKEN)
        init["params"]["capabilities"]["experimental"]["padding"] = "b" * 20_000
        await conn.send(init)
        assert "capabilities" in (await conn.response(1))["result"]
        # After login the limit is stdio's: 2 MB goes through and is answered.
        big["params"]["pad"] = "a" * (2 << 20)
        await conn.send(big)
        assert (await conn.response(7))["error"]["code"] == -32601
        await conn.close()


@pytest.mark.parametrize("origin, allowed", [
    (None, True),  # a program, not a browser: no Origin header
    ("https://evil.example", False),
    ("http://localhost:8888", False),  # any local page (a notebook, a dev server) too
    ("http://localhost:3000", True),  # allowed by --allow-origin
])
async def test_ws_refuses_foreign_origins(origin: str | None, allowed: bool,
                                          tmp_path: Path) -> None:
    from websockets.exceptions import InvalidStatus

    async with network_server("--ws", tmp_path, "--allow-origin",
                              "http://localhost:3000") as server:
        if not allowed:
            with pytest.raises(InvalidStatus) as info:
                await Conn("--ws").open(server.port, origin)
            assert info.value.response.status_code == 403
        conn = await Conn("--ws").open(server.port, None if not allowed else origin)
        await conn.send(initialize(1, TOKEN))
        assert "capabilities" in (await conn.response(1))["result"]
        await conn.close()
