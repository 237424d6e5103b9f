"""The way from the Python kernel to the workspace's MCP servers: a Unix socket the kernel's
`oi_mcp` package (executors/drivers/python/oi_mcp) connects to, one JSON object a line each way.
The kernel holds no server's credentials, only this socket's path and token; every call is
made here, asked about first when the tool is destructive, and told to the clients (oi/tool)."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from ..protocol import TOOL, ToolCall
from .link import Link
from .mcp_config import module_name
from .mcp_servers import CallRefused, McpServers, ServerUnavailable, Tool
from .settings import Settings

log = logging.getLogger(__name__)

_LINE_LIMIT = 256 * 1024 * 1024  # bytes of one message: a tool may return a large file

# (turn id, call id, tool, arguments) -> whether the user allows the call
Consent = Callable[[str, str, Tool, dict[str, Any]], Awaitable[bool]]
# an oi/tool event: (turn id, call id, tool, arguments, status, seconds, error)
Notify = Callable[[dict[str, Any]], None]


class Denied(Exception):
    """The user did not allow the call."""


def shim_path() -> str:
    """The folder that holds the kernel's `oi_mcp` package (put on its PYTHONPATH)."""
    return str(resources.files("oi_lsp.executors").joinpath("drivers", "python"))


class Bridge:
    @classmethod
    def of_workspace(cls, uri: str, folder: str, link: Link,
                     send: Callable[[str, dict[str, Any]], None],
                     settings: Callable[[], Settings], turn: Callable[[], str],
                     settled: Callable[[], Awaitable[None]]) -> Bridge:
        """A workspace's: its settings' servers; questions to its front end, which has
        `settings().inputTimeout` to answer, asked once the run's output `settled` (so they
        follow what the code printed before the call); oi/tool sent with `send`."""

        async def consent(turn_id: str, call_id: str, tool: Tool,
                          arguments: dict[str, Any]) -> bool:
            call = ToolCall(workspace=uri, turn_id=turn_id, call_id=call_id, server=tool.server,
                            tool=tool.name, arguments=arguments, status="running",
                            destructive=tool.destructive)
            await settled()
            try:
                return await asyncio.wait_for(link.allow_tool(call, question(tool, arguments)),
                                              settings().input_timeout)
            except TimeoutError:
                return False

        def notify(event: dict[str, Any]) -> None:
            send(TOOL, ToolCall.model_validate({"workspace": uri, **event}).wire())

        servers = McpServers(lambda: settings().mcp_servers, folder)
        return cls(servers, consent, notify, turn)

    def __init__(self, servers: McpServers, consent: Consent, notify: Notify,
                 turn: Callable[[], str]) -> None:
        self.servers = servers
        self._consent = consent
        self._notify = notify
        self._turn = turn  # the run its calls belong to ("" when none runs)
        _sweep_once()
        self._folder = tempfile.mkdtemp(prefix="oi-mcp-")  # 0700: only the user reaches it
        self.path = os.path.join(self._folder, "socket")
        self.token = secrets.token_hex(16)
        # Listening from now on: a kernel that connects before serve() starts waits.
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(self.path)
        self._socket.listen(16)
        self._server: asyncio.Server | None = None
        self._serving: asyncio.Task[None] | None = None

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """What a Python kernel needs to import oi_mcp and reach this bridge."""
        path = (base if base is not None else os.environ).get("PYTHONPATH")
        return {"OI_MCP_SOCKET": self.path, "OI_MCP_TOKEN": self.token,
                "PYTHONPATH": os.pathsep.join(p for p in (shim_path(), path) if p)}

    def serve_soon(self) -> None:
        """Serve the kernel's connections from now on (a loop is running)."""
        if self._serving is None:
            self._serving = asyncio.create_task(self.serve())

    async def serve(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_unix_server(self._serve, sock=self._socket,
                                                           limit=_LINE_LIMIT)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        else:
            self._socket.close()
        await self.servers.close()
        await asyncio.to_thread(shutil.rmtree, self._folder, True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One kernel thread's connection: its token, then a request and its answer at a
        time. A kernel that hangs up mid-call (an interrupt closes the socket) cancels it."""
        try:
            hello = json.loads(await reader.readline() or b"null")
            if not isinstance(hello, dict) or not secrets.compare_digest(
                    str(hello.get("token", "")), self.token):
                return
            while line := await reader.readline():
                work = asyncio.create_task(self._answer(json.loads(line)))
                hangup = asyncio.create_task(reader.read(1))  # nothing comes until answered
                await asyncio.wait({work, hangup}, return_when=asyncio.FIRST_COMPLETED)
                hangup.cancel()
                await asyncio.wait({hangup})
                if not work.done():
                    work.cancel()
                    await asyncio.wait({work})
                    return
                writer.write(json.dumps(work.result(), default=str).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, ValueError) as exc:  # JSONDecodeError is a ValueError
            log.info("MCP bridge: a kernel's connection ended: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        rid = request.get("id")
        try:
            return {"id": rid, "ok": await self._do(request)}
        except ServerUnavailable as exc:
            return {"id": rid, "error": {"kind": "unavailable", "message": str(exc)}}
        except CallRefused as exc:
            return {"id": rid, "error": {"kind": "refused", "message": str(exc)}}
        except Denied as exc:
            return {"id": rid, "error": {"kind": "denied", "message": str(exc)}}
        except (KeyError, TypeError, ValueError) as exc:
            return {"id": rid, "error": {"kind": "bad", "message": str(exc)}}

    def _name(self, request: dict[str, Any]) -> str:
        module = str(request.get("module", ""))
        name = self.servers.by_module(module)
        if name is None:
            raise ServerUnavailable(f"no MCP server is oi_mcp.{module} (mcpServers names "
                                    f"{_listed(self.servers)})")
        return name

    async def _do(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "servers":
            return [{"name": n, "module": module_name(n)} for n in self.servers.configured()]
        name = self._name(request)
        server = self.servers.server(name)
        if op == "tools":
            return [t.wire() for t in await server.tools()]
        if op == "call":
            return await self._call(name, str(request["tool"]), request.get("arguments") or {})
        if op == "resources":
            return _dump(await server.resources())
        if op == "read":
            return _dump(await server.read_resource(str(request["uri"])))
        if op == "prompts":
            return _dump(await server.prompts())
        if op == "prompt":
            return _dump(await server.prompt(str(request["name"]),
                                             dict(request.get("arguments") or {})))
        raise ValueError(f"unknown request {op!r}")

    async def _call(self, name: str, tool_name: str, arguments: dict[str, Any]) -> Any:
        if not isinstance(arguments, dict):
            raise TypeError("arguments must be an object")
        tools = {t.name: t for t in await self.servers.tools(name)}
        tool = tools.get(tool_name)
        if tool is None:
            raise CallRefused(f"MCP server {name!r} has no tool {tool_name!r}")
        turn, call_id, started = self._turn(), uuid.uuid4().hex[:12], time.monotonic()

        def event(status: str, error: str | None = None) -> None:
            self._notify({"turnId": turn, "callId": call_id, "server": name, "tool": tool.name,
                          "arguments": arguments, "status": status,
                          "destructive": tool.destructive,
                          **({"seconds": round(time.monotonic() - started, 3)}
                             if status != "running" else {}),
                          **({"error": error} if error else {})})

        event("running")
        try:
            if self.servers.asks(tool) and not await self._consent(turn, call_id, tool,
                                                                   arguments):
                raise Denied(f"the user did not allow {name}.{tool.name}")
            result = await self.servers.server(name).call(tool.name, arguments)
        except Denied as exc:
            event("denied", str(exc))
            raise
        except (ServerUnavailable, CallRefused) as exc:
            event("error", str(exc))
            raise
        except asyncio.CancelledError:
            event("error", "interrupted")
            raise
        dumped = _dump(result)
        event("error" if dumped.get("isError") else "done",
              _text_of(dumped) if dumped.get("isError") else None)
        return dumped


_swept = False
STALE_AFTER = 60.0  # seconds: a folder younger than that may be a starting bridge's


def _sweep_once() -> None:
    """Remove what bridges of killed servers left (a folder and its socket no one listens
    on): close() removes its own, a SIGKILL leaves it. Once a process."""
    global _swept
    if _swept:
        return
    _swept = True
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), "oi-mcp-*")):
        try:
            info = os.stat(folder)
            if info.st_uid != os.getuid() or time.time() - info.st_mtime < STALE_AFTER:
                continue
            path = os.path.join(folder, "socket")
            if os.path.exists(path):
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.setblocking(False)  # a live bridge with a full backlog: kept
                    probe.connect(path)  # listened on: a live bridge's
                continue
        except ConnectionRefusedError:
            pass
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)


def question(tool: Tool, arguments: dict[str, Any]) -> str:
    """What the user is asked before a call of a tool that asks first."""
    why = "which its server marks destructive" if tool.destructive else \
        "whose server asks before every call (confirm: always)"
    shown = json.dumps(arguments, ensure_ascii=False)
    if len(shown) > 600:
        shown = f"{shown[:597]}..."
    return (f"The running code calls the MCP tool {tool.server}.{tool.name}, {why}, with "
            f"{shown}. Allow this call?")


def _dump(result: Any) -> Any:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def _text_of(result: dict[str, Any]) -> str:
    texts = [c.get("text", "") for c in result.get("content", []) if c.get("type") == "text"]
    return " ".join(texts)[:500] or "the tool reported an error"


def _listed(servers: McpServers) -> str:
    names = list(servers.configured())
    return ", ".join(names) if names else "none"


