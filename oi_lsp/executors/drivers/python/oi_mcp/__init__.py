"""The user's MCP servers as Python modules, in the workspace's kernel (oi-lsp).

    from oi_mcp import filesystem
    help(filesystem.list_directory)
    for name in filesystem.list_directory(path=".")["content"].splitlines(): ...

Each server of the `mcpServers` setting is a module `oi_mcp.<name>` ('-' becomes '_'), with a
function per tool: the tool's parameters are its signature, its description the docstring.
A call returns the tool's structured content (a dict) when it has one, else its text (text that
is JSON comes back parsed; several pieces, a list); images it returns are displayed. A call
that cannot be made raises: ServerUnavailable (the server could not start, exited or did not
answer in time), ToolError (the tool reported an error, or the server refused the call) or
CallDenied (the user said no to a tool that asks first). Each call prints a line (the tool,
its arguments, how long it took) unless `oi_mcp.verbose = False`.

Resources and prompts: `resources(server)`, `read_resource(server, uri)`, `prompts(server)`,
`get_prompt(server, name, **arguments)`; `servers()` lists them all.

The calls go to oi-lsp through a socket (OI_MCP_SOCKET): the servers run there, with the
user's rights and credentials, never in this kernel. Standard library only.
"""

from __future__ import annotations

import base64
import importlib.abc
import importlib.machinery
import inspect
import itertools
import json
import keyword
import os
import re
import socket
import sys
import threading
import time
import types
from typing import Any

__all__ = ["CallDenied", "McpError", "ServerUnavailable", "ToolError", "get_prompt",
           "prompts", "read_resource", "resources", "servers"]

verbose = True  # a line per tool call in the run's output
MAX_SHOWN = 20  # lines a cell shows; later calls of the cell are not shown


class McpError(Exception):
    """A call to an MCP server returned no result."""


class ServerUnavailable(McpError):
    """The server could not start, exited, or did not answer in time."""


class ToolError(McpError):
    """The tool reported an error, or the server refused the call."""


class CallDenied(McpError, PermissionError):
    """The user did not allow the call."""


_ERRORS = {"unavailable": ServerUnavailable, "refused": ToolError, "denied": CallDenied}
_TYPES = {"string": "str", "number": "float", "integer": "int", "boolean": "bool",
          "array": "list", "object": "dict", "null": "None"}
_local = threading.local()  # a connection per thread: a request and its answer at a time
_ids = itertools.count(1)
_shown: dict[str, Any] = {"cell": None, "count": 0}  # the lines the current cell showed


# The link to oi-lsp -----------------------------------------------------------------------

def _connect() -> tuple[socket.socket, Any]:
    path, token = os.environ.get("OI_MCP_SOCKET"), os.environ.get("OI_MCP_TOKEN", "")
    if not path:
        raise ServerUnavailable("this Python was not started by oi-lsp (no OI_MCP_SOCKET): "
                                "MCP servers are reached from the workspace's own kernel")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise ServerUnavailable(f"oi-lsp's MCP link ({path}) is gone ({exc.strerror}): this "
                                "kernel outlived the oi-lsp that started it; restart the "
                                "kernel") from None
    sock.sendall(json.dumps({"token": token}).encode() + b"\n")
    return sock, sock.makefile("rb")


def _drop() -> None:
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        conn[1].close()
        conn[0].close()


def _request(op: str, **fields: Any) -> Any:
    __tracebackhide__ = True  # IPython shows the user's line, not the shim's frames
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = _connect()
    sock, reader = conn
    try:
        sock.sendall(json.dumps({"id": next(_ids), "op": op, **fields}).encode() + b"\n")
        line = reader.readline()
    except OSError as exc:
        _drop()
        raise ServerUnavailable(f"oi-lsp's MCP link broke ({exc})") from None
    except BaseException:  # an interrupt too: hanging up makes oi-lsp cancel the call
        _drop()
        raise
    if not line:
        _drop()
        raise ServerUnavailable("oi-lsp closed the MCP link (it stopped or restarted)")
    reply = json.loads(line)
    error = reply.get("error")
    if error is not None:
        raise _ERRORS.get(error.get("kind"), McpError)(error.get("message", "failed"))
    return reply.get("ok")


# Results ------------------------------------------------------------------------------------

def _parsed(text: str) -> Any:
    if text[:1] in "{[" and text.rstrip()[-1:] in "}]":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _display(block: dict[str, Any]) -> None:
    try:
        from IPython.display import Image, display
    except ImportError:  # a plain Python: nothing can show it
        return
    fmt = str(block.get("mimeType", "image/png")).split("/")[-1]
    display(Image(data=base64.b64decode(block.get("data", "")), format=fmt))


def _result(reply: dict[str, Any], what: str) -> Any:
    __tracebackhide__ = True
    content = reply.get("content") or []
    texts = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "image":
            _display(block)
        elif kind == "resource" and "text" in (block.get("resource") or {}):
            texts.append(block["resource"]["text"])
    if reply.get("isError"):
        raise ToolError(f"{what}: {' '.join(texts) or 'the tool reported an error'}")
    if "structuredContent" in reply:
        return reply["structuredContent"]
    values = [_parsed(t) for t in texts]
    return values[0] if len(values) == 1 else (values or None)


# Calls ---------------------------------------------------------------------------------------

def _line(what: str, arguments: dict[str, Any]) -> str:
    def short(value: Any) -> str:
        text = repr(value)
        if len(text) <= 40:
            return text
        # a string keeps its closing quote: '/home/me/a-long-pa…'
        return f"{text[:38]}…{text[-1]}" if isinstance(value, str) else f"{text[:39]}…"

    return f"⚙ {what}({', '.join(f'{k}={short(v)}' for k, v in arguments.items())})"


def _showing() -> bool:
    """Whether this call gets its line: the first MAX_SHOWN calls of a cell do."""
    if not verbose:
        return False
    ip = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    cell = getattr(ip, "execution_count", None)
    if cell != _shown["cell"]:
        _shown.update(cell=cell, count=0)
    _shown["count"] += 1
    if _shown["count"] == MAX_SHOWN + 1:
        print(f"⚙ (later tool calls of this cell are not shown: more than {MAX_SHOWN})",
              flush=True)
    return _shown["count"] <= MAX_SHOWN


def _call(module: str, tool: str, arguments: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    what = f"{module}.{_identifier(tool)}"
    show = _showing()
    if show:
        print(_line(what, arguments), end="", flush=True)
    started = time.monotonic()
    try:
        reply = _request("call", module=module, tool=tool, arguments=arguments)
        result = _result(reply, what)
    except BaseException as exc:
        if show:
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else type(exc).__name__
            print(f" · {why} after {time.monotonic() - started:.2f} s", flush=True)
        raise
    if show:
        print(f" · {time.monotonic() - started:.2f} s", flush=True)
    return result


def _identifier(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit():
        name = f"_{name}"
    return f"{name}_" if keyword.iskeyword(name) else name


def _doc(tool: dict[str, Any], params: list[tuple[str, dict[str, Any], bool]]) -> str:
    lines = [tool.get("description") or tool["name"], ""]
    if params:
        lines.append("Parameters:")
        for name, spec, required in params:
            kind = spec.get("type", "any")
            kind = "/".join(kind) if isinstance(kind, list) else kind
            note = f" {spec['description']}" if spec.get("description") else ""
            enum = f" One of {spec['enum']}." if spec.get("enum") else ""
            lines.append(f"    {name} ({kind}{', required' if required else ''}):{note}{enum}")
        lines.append("")
    lines.append("Returns the tool's structured content (a dict) when it has one, else its "
                 "text (JSON parsed); images are displayed.")
    if tool.get("destructive"):
        lines.append("The server marks it destructive: the user is asked before it runs.")
    return "\n".join(lines)


def _function(module: str, tool: dict[str, Any]) -> Any:
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names: dict[str, str] = {}  # Python name -> the schema's
    parameters, described = [], []
    for key in sorted(properties, key=lambda k: k not in required):  # required ones first
        spec = properties[key] if isinstance(properties[key], dict) else {}
        name = _identifier(key)
        names[name] = key
        kind = spec.get("type")
        annotation = _TYPES.get(kind, "Any") if isinstance(kind, str) else "Any"
        if key in required:
            parameters.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                annotation=annotation))
        else:
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                default=spec.get("default"),
                                                annotation=annotation))
        described.append((name, spec, key in required))
    signature = inspect.Signature(parameters)

    def call(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        bound = signature.bind(*args, **kwargs)
        arguments = {names[k]: v for k, v in bound.arguments.items()
                     if v is not None or names[k] in required}
        return _call(module, tool["name"], arguments)

    call.__name__ = call.__qualname__ = _identifier(tool["name"])
    call.__module__ = f"oi_mcp.{module}"
    call.__doc__ = _doc(tool, described)
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


# Modules ---------------------------------------------------------------------------------

def servers() -> list[dict[str, str]]:
    """The configured MCP servers: their names and modules (none is started)."""
    return list(_request("servers"))


def _module_of(server: Any) -> str:
    if isinstance(server, types.ModuleType):
        return server.__name__.rsplit(".", 1)[-1]
    return _identifier(str(server).replace("-", "_").replace(".", "_"))


def resources(server: Any) -> list[dict[str, Any]]:
    """The resources a server lists (uri, name, mimeType, ...)."""
    return list(_request("resources", module=_module_of(server)).get("resources", []))


def read_resource(server: Any, uri: str) -> Any:
    """A resource's contents: its text (JSON parsed), or bytes for a binary one."""
    reply = _request("read", module=_module_of(server), uri=uri)
    values = [_parsed(c["text"]) if "text" in c else base64.b64decode(c.get("blob", ""))
              for c in reply.get("contents", [])]
    return values[0] if len(values) == 1 else values


def prompts(server: Any) -> list[dict[str, Any]]:
    """The prompts a server lists (name, description, arguments)."""
    return list(_request("prompts", module=_module_of(server)).get("prompts", []))


def get_prompt(server: Any, name: str, **arguments: str) -> list[dict[str, Any]]:
    """A prompt's messages, its arguments filled in."""
    reply = _request("prompt", module=_module_of(server), name=name, arguments=arguments)
    return list(reply.get("messages", []))


def _load(module: str) -> types.ModuleType:
    tools = _request("tools", module=module)
    mod = types.ModuleType(f"{__name__}.{module}")
    functions = [_function(module, tool) for tool in tools]
    for function in functions:
        setattr(mod, function.__name__, function)
    mod.__all__ = [f.__name__ for f in functions]  # type: ignore[attr-defined]
    listing = "\n".join(f"    {f.__name__}{inspect.signature(f)}" for f in functions)
    mod.__doc__ = f"The tools of the MCP server oi_mcp.{module}:\n\n{listing}\n"
    sys.modules[mod.__name__] = mod
    setattr(sys.modules[__name__], module, mod)
    return mod


def __getattr__(name: str) -> types.ModuleType:
    if name.startswith("_"):
        raise AttributeError(name)
    configured = [s["module"] for s in servers()]
    if name not in configured:
        # Not AttributeError: `from oi_mcp import x` would replace this message with its own.
        raise ModuleNotFoundError(f"no MCP server oi_mcp.{name}: the mcpServers setting "
                                  f"names {', '.join(configured) or 'none'}",
                                  name=f"{__name__}.{name}")
    return _load(name)


def __dir__() -> list[str]:
    try:
        modules = [s["module"] for s in servers()]
    except McpError:  # no link (a completion asks): what is here
        modules = []
    return sorted({*globals(), *modules})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import oi_mcp.<server>` as well as `from oi_mcp import <server>`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.startswith(f"{__name__}.") and fullname.count(".") == 1:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return __getattr__(spec.name.rsplit(".", 1)[-1])

    def exec_module(self, module: types.ModuleType) -> None:
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
