"""`oi-lsp daemon`: the per-user server. It listens on a Unix socket in a private folder;
each connection says hello (handshake.py) and is then an LSP session of its own (its own
initialize, capabilities and settings) over one shared registry of workspaces. It exits after
`idle` seconds without connections, and on `oi-lsp daemon --stop`."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from pygls.io_ import run_async

from .. import __version__
from ..core.fanout import origin
from ..core.settings import env_layer
from ..lsp.language_server import OIServer
from ..lsp.pygls_compat import copy_features, new_stop_event
from ..lsp.stdio import READ_LIMIT, BatchingWriter, FramedReader
from . import handshake, paths
from .shared import ConnectionWorkspaces, SharedWorkspaces

log = logging.getLogger(__name__)

IDLE = 30 * 60.0  # seconds without a connection before the daemon exits
GRACE = 10 * 60.0  # seconds a workspace nobody uses keeps its REPLs
LOCK_WAIT = 30.0  # seconds a new daemon waits for an exiting one to end


class ConnectionServer(OIServer):
    """One connection's LSP session; its workspaces are the daemon's."""

    def __init__(self, shared: SharedWorkspaces, env: dict[str, str],
                 cwd: str | None = None) -> None:
        super().__init__()
        self.env = env_layer(env, provider_keys=True)  # this client's environment, not the daemon's
        self.approvals = shared.approvals
        self.store = shared.store
        self.workspaces = ConnectionWorkspaces(shared, self, lambda: self.plain is not None,
                                               cwd)

    def settings_layers(self) -> list[dict[str, Any]]:
        return [self.env, self.client_settings]


class ConnectionWriter(BatchingWriter):
    """stdio's writer, but pygls closing it at `exit` only flushes: the connection's end
    closes it, after the end line that gives the relay its exit status."""

    def close(self) -> None:
        self.flush()

    def end(self, trailer: bytes = b"") -> None:
        super().flush()
        if trailer:
            self._transport.write(trailer)
        super().close()


class Daemon:
    def __init__(self, folder: Path, idle: float, grace: float) -> None:
        from ..lsp.server import SERVER  # the handlers every connection's server copies

        self.template = SERVER
        self.folder = folder
        self.idle = idle
        self.shared = SharedWorkspaces(grace)
        self.connections: set[ConnectionServer] = set()
        self.stopping = asyncio.Event()
        self._idle_timer: asyncio.TimerHandle | None = None

    def _arm_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = None
        if not self.connections:
            self._idle_timer = asyncio.get_running_loop().call_later(
                self.idle, self._idle_out)

    def _idle_out(self) -> None:
        log.info("no connection for %g s: exiting", self.idle)
        self.stopping.set()

    def status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "socket": str(paths.socket_path(self.folder)),
                "connections": len(self.connections),
                "workspaces": sorted(self.shared.fanouts)}

    async def connection(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        try:
            hello = handshake.decode(await reader.readline())
        except (ValueError, asyncio.LimitOverrunError) as exc:
            log.warning("refused a connection: %s", exc)
            writer.close()
            return
        answer: dict[str, Any] = {"pid": os.getpid()}
        control = hello.get("control")
        if control == "status":
            answer.update(self.status())
        if hello["oi-lsp"] != __version__ or control:
            writer.write(handshake.hello(**answer))
            await writer.drain()
            writer.close()
            if control == "stop":
                self.stopping.set()
            return
        writer.write(handshake.hello(**answer))
        env, cwd = hello.get("env"), hello.get("cwd")
        env = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
        server = ConnectionServer(self.shared, env, cwd if isinstance(cwd, str) else None)
        await self.serve(server, reader, writer)

    async def serve(self, server: ConnectionServer, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        copy_features(self.template, server)
        self.connections.add(server)
        self._arm_idle()
        origin.set(server)  # every task this connection's requests start knows its client
        out = ConnectionWriter(asyncio.get_running_loop(), writer.transport)
        server.protocol.set_writer(out)
        stop = new_stop_event(server)
        exited = False
        try:
            await run_async(stop_event=stop, reader=FramedReader(reader),
                            protocol=server.protocol, logger=log,
                            error_handler=server.report_server_error)
        except SystemExit:  # the client's `exit`: its session ends, not the daemon
            exited = True
        finally:
            await server.workspaces.close_all()  # detaches: the workspaces stay
            self.connections.discard(server)
            # After `exit` the relay exits as a standalone server would.
            out.end(handshake.END + b"%d\n" % (0 if server.shut_down else 1) if exited else b"")
            self._arm_idle()

    async def run(self) -> None:
        path = paths.socket_path(self.folder)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead daemon's: we hold the pid lock, so none listens on it
        old = os.umask(0o177)  # the socket is made 0600
        try:
            listener = await asyncio.start_unix_server(self.connection, str(path),
                                                       limit=READ_LIMIT)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        log.info("oi-lsp %s daemon listening on %s", __version__, path)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP):  # `kill`, a logout: stop as --stop does
            loop.add_signal_handler(signum, self.stopping.set)
        self._arm_idle()
        async with listener:
            await self.stopping.wait()
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            for server in list(self.connections):
                server.shutdown()  # each connection's read loop ends
            await self.shared.close_all()


def serve(idle: float = IDLE, grace: float = GRACE) -> int:
    """Run the daemon; 0 at its end, 1 when another daemon holds this folder already."""
    folder = paths.private_dir()
    lock = open(folder / paths.PID_LOCK, "a+")  # held until this process ends
    if not _take(lock):
        log.warning("another daemon (pid %s) serves %s", _pid_of(lock), folder)
        return 1
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    os.chdir(Path.home())  # not the folder of the relay that started it: it may go away
    daemon: Daemon | None = None

    async def main() -> None:
        nonlocal daemon
        daemon = Daemon(folder, idle, grace)
        await daemon.run()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        if daemon is not None:
            daemon.shared.kill_all()  # whatever close_all did not stop
    return 0


def _pid_of(lock: Any) -> str:
    lock.seek(0)
    return str(lock.read().strip() or "?")


def _take(lock: Any, wait: float = LOCK_WAIT) -> bool:
    """The pid lock. A relay starts a daemon only when none listens: one holding the lock then
    is one that is exiting (stopped, idle), still closing its REPLs; wait for it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
