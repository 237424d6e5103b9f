"""The `mcpServers` setting: the user's MCP servers, in the shape Claude Desktop's and VS Code's
`mcp.json` give them (a name, then `command`/`args`/`env` for a local server, or `url`/`headers`
for one over streamable HTTP), plus when to ask before a tool runs. Also the same servers as an
ACP client sends them (`session/new`'s `mcpServers`)."""

from __future__ import annotations

import keyword
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class McpServer(BaseModel):
    """One server. Exactly one of `command` (started as a process of the user's, outside the
    REPLs' sandbox) and `url` (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, repr=False)  # may carry credentials
    cwd: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    # When a call asks the user first: tools the server marks destructive, every tool, none.
    confirm: Literal["destructive", "always", "never"] = "destructive"
    timeout: float = Field(default=60.0, gt=0)  # seconds a start or a call may take
    disabled: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_sse(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") == "sse":
            raise ValueError("the SSE transport is not supported: use the server's "
                             "streamable HTTP endpoint (type 'http')")
        return data

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (a local server) or 'url' (streamable "
                             "HTTP), not both or neither")
        if self.url is None and self.type not in (None, "stdio"):
            raise ValueError(f"type {self.type!r} needs a 'url'")
        if self.command is None and self.type == "stdio":
            raise ValueError("type 'stdio' needs a 'command'")
        return self

    @property
    def where(self) -> str:
        """What the user configured, for messages (never env or headers)."""
        return self.url if self.url is not None else " ".join([self.command or "", *self.args])


_NAME = re.compile(r"[A-Za-z_][\w-]*")


def module_name(server: str) -> str:
    """The Python module a server is in the kernel (`oi_mcp.<name>`): '-' and '.' become '_',
    a keyword gets a trailing '_'."""
    name = re.sub(r"[-.]", "_", server)
    return f"{name}_" if keyword.iskeyword(name) else name


def check_names(servers: dict[str, McpServer]) -> None:
    """Each name must make a module name, and no two the same one."""
    seen: dict[str, str] = {}
    for name in servers:
        if not _NAME.fullmatch(name.replace(".", "-")):
            raise ValueError(f"{name!r} is not a server name (letters, digits, '_', '-')")
        module = module_name(name)
        if module in seen:
            raise ValueError(f"{seen[module]!r} and {name!r} are both oi_mcp.{module}")
        seen[module] = name


def from_acp(servers: list[Any]) -> tuple[dict[str, McpServer], list[str]]:
    """An ACP client's mcpServers (the SDK's McpServerStdio / HttpMcpServer, or their JSON)
    as settings, and why each one that cannot be used is left out (SSE, no name, ...)."""
    out: dict[str, McpServer] = {}
    problems = []
    for server in servers:
        data = server.model_dump(by_alias=True) if hasattr(server, "model_dump") else server
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str):
            problems.append("an MCP server without a name")
            continue
        pairs = {p["name"]: p["value"] for p in data.get("env") or data.get("headers") or []
                 if isinstance(p, dict)}
        if data.get("type") in ("http", "sse"):
            config: dict[str, Any] = {"type": data["type"], "url": data.get("url"),
                                      "headers": pairs}
        else:
            config = {"command": data.get("command"), "args": list(data.get("args") or []),
                      "env": pairs}
        try:
            candidate = {**out, name: McpServer.model_validate(config)}
            check_names(candidate)
        except ValueError as exc:
            problems.append(f"MCP server {name!r}: {_first_error(exc)}")
            continue
        out = candidate
    return out, problems


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where + ': ' if where else ''}{first.get('msg', exc)}"
    return str(exc)
