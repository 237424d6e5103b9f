"""A workspace's MCP servers (the `mcpServers` setting and an ACP client's): each one started on
first use with the official SDK (`mcp`), kept while the workspace is open, and stopped with it.
A server that exits, cannot start, or does not answer within its `timeout` fails the call with
a sentence saying so (ServerUnavailable); the next use starts it again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .mcp_config import McpServer, module_name

log = logging.getLogger(__name__)

_STOP_WAIT = 5.0  # seconds a server has to end before its process is killed
INDEX_WAIT = 15.0  # seconds a turn's system message waits for the servers to list their tools


class ServerUnavailable(Exception):
    """The server cannot be used now: the message says why, for the code and the model."""


class CallRefused(Exception):
    """The server answered the request with an error (an unknown tool, bad arguments)."""


@dataclass(frozen=True, slots=True)
class Tool:
    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    destructive: bool  # the server says it may destroy (annotations.destructiveHint)
    read_only: bool

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "inputSchema": self.input_schema, "destructive": self.destructive,
                "readOnly": self.read_only}


def _tool(server: str, raw: Any) -> Tool:
    notes = raw.annotations
    read_only = bool(notes is not None and notes.read_only_hint)
    return Tool(server, raw.name, (raw.description or "").strip(), dict(raw.input_schema or {}),
                destructive=bool(notes is not None and notes.destructive_hint and not read_only),
                read_only=read_only)


class _Held:
    """One start of a server: the task that holds the SDK's client (its context is entered
    and left in that task, as anyio wants), and the client once it is ready."""

    def __init__(self) -> None:
        self.client: Any = None
        self.stop = asyncio.Event()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self.stop.is_set()


class _Server:
    """One configured server, started on first use and again after it ended."""

    def __init__(self, name: str, config: McpServer, cwd: str) -> None:
        self.name = name
        self.config = config
        self._cwd = cwd
        self._held: _Held | None = None
        self._tools: list[Tool] | None = None
        self._lock = asyncio.Lock()
        self.failure: str | None = None  # why its last start failed (the index says it)
        self._log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace",
                                           prefix=f"oi-mcp-{name}-")  # its stderr

    @property
    def alive(self) -> bool:
        return self._held is not None and self._held.alive

    async def client(self) -> Any:
        async with self._lock:
            if self._held is None or not self._held.alive:
                self._tools = None
                held = self._held = _Held()
                held.task = asyncio.create_task(self._hold(held), name=f"mcp {self.name}")
            held = self._held
        try:
            await asyncio.wait_for(asyncio.shield(held.ready), self.config.timeout)
        except TimeoutError:
            await self.stop(wait=0.5)  # it never started: nothing to end politely
            self.failure = self._said(f"did not start within {self.config.timeout:g} s", False)
            raise ServerUnavailable(self.failure) from None
        except ServerUnavailable as exc:
            self.failure = str(exc)
            raise
        self.failure = None
        return held.client

    async def _hold(self, held: _Held) -> None:
        from mcp import Client  # lazy: the SDK costs ~0.3 s to import

        try:
            async with Client(self._target(), raise_exceptions=True) as client:
                held.client = client
                held.ready.set_result(None)
                await held.stop.wait()
        except Exception as exc:  # it exited, or never spoke MCP
            log.warning("MCP server %s ended: %s", self.name, _why(exc))
            if not held.ready.done():
                held.ready.set_exception(ServerUnavailable(
                    self._said(f"could not start ({_why(exc)})")))
        finally:
            held.stop.set()
            if not held.ready.done():
                held.ready.set_exception(ServerUnavailable(self._said("stopped")))
            if not held.ready.cancelled():
                held.ready.exception()  # retrieved: never logged as unretrieved

    def _target(self) -> Any:
        config = self.config
        if config.url is not None:
            return _HttpTransport(config.url, config.headers)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert config.command is not None
        params = StdioServerParameters(command=config.command, args=config.args,
                                       env={**os.environ, **config.env} if config.env else None,
                                       cwd=config.cwd or self._cwd)
        return stdio_client(params, errlog=self._log)

    def _said(self, what: str, last_words: bool = True) -> str:
        """'MCP server x (command) <what>', with the last line it wrote to stderr."""
        text = f"MCP server {self.name!r} ({self.config.where}) {what}"
        last = self._last_error_line() if last_words else ""
        return f"{text}; it said: {last}" if last else text

    def _last_error_line(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._log.flush()
            self._log.seek(0)
            lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
            self._log.seek(0, os.SEEK_END)
            return lines[-1][:300] if lines else ""
        return ""

    async def tools(self) -> list[Tool]:
        client = await self.client()
        if self._tools is None:
            listed = await self._guard(client.list_tools(), "listing its tools")
            self._tools = [_tool(self.name, raw) for raw in listed.tools]
        return self._tools

    async def _guard(self, call: Any, doing: str) -> Any:
        """A request to the server, within its timeout; its end or silence said as such."""
        try:
            return await asyncio.wait_for(call, self.config.timeout)
        except TimeoutError:
            raise ServerUnavailable(self._said(
                f"did not answer within {self.config.timeout:g} s ({doing})", False)) from None
        except ServerUnavailable:
            raise
        except Exception as exc:
            from mcp.shared.exceptions import MCPError
            from mcp_types import CONNECTION_CLOSED

            if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
                raise CallRefused(f"MCP server {self.name!r} refused {doing}: "
                                  f"{exc.message}") from None
            if self._held is not None:  # gone or broken: the next use starts it again
                self._held.stop.set()
            gone = isinstance(exc, MCPError)
            raise ServerUnavailable(self._said(
                f"exited while {doing}" if gone else f"failed while {doing}: {_why(exc)}"
            )) from None

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        client = await self.client()
        return await self._guard(client.call_tool(tool, arguments), f"running {tool}")

    async def read_resource(self, uri: str) -> Any:
        client = await self.client()
        return await self._guard(client.read_resource(uri), f"reading {uri}")

    async def resources(self) -> Any:
        client = await self.client()
        return await self._guard(client.list_resources(), "listing its resources")

    async def prompts(self) -> Any:
        client = await self.client()
        return await self._guard(client.list_prompts(), "listing its prompts")

    async def prompt(self, name: str, arguments: dict[str, str]) -> Any:
        client = await self.client()
        return await self._guard(client.get_prompt(name, arguments), f"getting prompt {name}")

    async def stop(self, wait: float = _STOP_WAIT) -> None:
        held = self._held
        if held is None or held.task is None:
            return
        owner = held.task
        held.stop.set()
        await asyncio.wait({owner}, timeout=wait)
        if not owner.done():  # it does not end when asked: its process is killed
            owner.cancel()
            await asyncio.wait({owner})

    def close_log(self) -> None:
        with contextlib.suppress(OSError):
            self._log.close()


def _why(exc: BaseException) -> str:
    """The innermost message of an exception group (anyio's task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


class _HttpTransport:
    """The SDK's streamable HTTP transport with the configured headers (the SDK's own
    timeouts: a server may hold a stream open; each call has its own bound above)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        import httpx2  # the HTTP client the SDK is built on
        from mcp.client.streamable_http import streamable_http_client

        self._client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
        self._context = streamable_http_client(url, http_client=self._client)

    async def __aenter__(self) -> Any:
        await self._client.__aenter__()
        return await self._context.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._context.__aexit__(*exc)
        finally:
            await self._client.__aexit__(None, None, None)


class McpServers:
    """The servers of one workspace: those of its settings and those an ACP client gave."""

    def __init__(self, configs: Callable[[], dict[str, McpServer] | None], cwd: str) -> None:
        self._configs = configs
        self._cwd = cwd
        self.extra: dict[str, McpServer] = {}  # an ACP client's (session/new, session/load)
        self._servers: dict[str, _Server] = {}
        self._retiring: set[asyncio.Task[None]] = set()  # servers whose settings changed

    def configured(self) -> dict[str, McpServer]:
        merged = {**(self._configs() or {}), **self.extra}
        return {name: c for name, c in merged.items() if not c.disabled}

    def by_module(self, module: str) -> str | None:
        """The server whose module is `module` (oi_mcp.<module>)."""
        return next((n for n in self.configured() if module_name(n) == module), None)

    def server(self, name: str) -> _Server:
        config = self.configured().get(name)
        if config is None:
            raise ServerUnavailable(f"no MCP server {name!r} is configured (mcpServers)")
        held = self._servers.get(name)
        if held is not None and held.config != config:  # changed in the settings: anew
            self._servers.pop(name)
            retiring = asyncio.create_task(_retire(held))
            self._retiring.add(retiring)
            retiring.add_done_callback(self._retiring.discard)
            held = None
        if held is None:
            held = self._servers[name] = _Server(name, config, self._cwd)
        return held

    async def tools(self, name: str) -> list[Tool]:
        return await self.server(name).tools()

    async def index(self) -> str:
        """The servers and their tools in a line each, for the system message; a server that
        cannot start is named with why. Starts them all (at once) if they are not yet."""
        names = list(self.configured())
        if not names:
            return ""
        started = time.monotonic()
        # One that failed to start is not tried again for the index (the code's next call
        # does try); one slow to start does not hold the turn past INDEX_WAIT.
        asked = {n: asyncio.ensure_future(self.tools(n)) for n in names
                 if self.server(n).failure is None}
        if asked:
            await asyncio.wait(asked.values(), timeout=INDEX_WAIT)
        lines = []
        for name in names:
            module = module_name(name)
            task = asked.get(name)
            if task is None or (task.done() and task.exception() is not None):
                why = self.server(name).failure if task is None else task.exception()
                lines.append(f"- `oi_mcp.{module}`: unavailable ({why})")
                continue
            if not task.done():
                task.add_done_callback(_retrieved)
                lines.append(f"- `oi_mcp.{module}`: still starting (`help(oi_mcp.{module})` "
                             "lists its tools once it is up)")
                continue
            tools = task.result()
            lines.append(f"- `oi_mcp.{module}` ({len(tools)} tools):")
            lines += [f"  - {module}.{python_name(t.name)}(): {_first_line(t.description)}"
                      + (" [asks the user first]" if self.asks(t) else "") for t in tools]
        log.info("MCP index of %d servers in %.2f s", len(names), time.monotonic() - started)
        return "\n".join(lines)

    def asks(self, tool: Tool) -> bool:
        """Whether a call of `tool` needs the user's yes first (the server's `confirm`)."""
        config = self.configured().get(tool.server)
        confirm = config.confirm if config is not None else "always"
        return confirm == "always" or (confirm == "destructive" and tool.destructive)

    async def close(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        await asyncio.gather(*(_retire(s) for s in servers))


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # said by the code's own call, if it makes one


async def _retire(server: _Server) -> None:
    await server.stop()
    server.close_log()


def python_name(tool: str) -> str:
    """A tool's name as a Python function (the kernel module names it the same way)."""
    import keyword
    import re

    name = re.sub(r"\W", "_", tool)
    if not name or name[0].isdigit():
        name = f"_{name}"
    return f"{name}_" if keyword.iskeyword(name) else name


def _first_line(text: str, limit: int = 90) -> str:
    """A description's first sentence, within `limit` characters."""
    line = text.strip().split("\n", 1)[0].strip()
    line = line.split(". ", 1)[0].rstrip(".")
    return line if len(line) <= limit else f"{line[:limit - 1]}…"
