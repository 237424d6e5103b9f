"""A client of an oi-lsp server over stdio: used by `oi-lsp chat`, the benchmark and the tests.

It starts the real server as a child process and speaks the same LSP protocol an editor does.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from . import __version__, protocol
from .common.uris import from_fs_path
from .lsp.jsonrpc import raw_params_converter
from .lsp.pygls_compat import Dispatch, client_process

Listener = Callable[[str, dict[str, Any]], None]
# (message, actions) -> the title of the chosen action, or None
MessageBox = Callable[[str, list[str]], Any]
# oi/input params -> the line typed, or None (cancelled); may be a coroutine
InputBox = Callable[[dict[str, Any]], Any]


def server_command() -> list[str]:
    """The server of this very installation."""
    return [sys.executable, "-m", "oi_lsp"]


class OIClient:
    def __init__(self) -> None:
        self.lsp = LanguageClient("oi-lsp-client", __version__, protocol_cls=Dispatch,
                                  converter_factory=raw_params_converter)
        self.notifications: list[tuple[str, dict[str, Any]]] = []
        self.listeners: list[Listener] = []
        self.message_box: MessageBox | None = None
        self.input_box: InputBox | None = None  # answers oi/input (declared at initialize)
        self.configuration: dict[str, Any] = {}
        self._changed = asyncio.Event()
        self.stderr = b""
        self._register()

    def _register(self) -> None:
        for method in (protocol.STREAM, protocol.PROPOSAL, protocol.TURN, protocol.RESOURCES,
                       protocol.ANSWERED, protocol.TOOL):
            self.lsp.feature(method)(self._recorder(method))

        @self.lsp.feature(types.WINDOW_SHOW_MESSAGE)
        def show_message(params: types.ShowMessageParams) -> None:
            self._record("window/showMessage", {"type": int(params.type),
                                                "message": params.message})

        @self.lsp.feature(types.WINDOW_LOG_MESSAGE)
        def log_message(params: types.LogMessageParams) -> None:
            self._record("window/logMessage", {"type": int(params.type),
                                               "message": params.message})

        @self.lsp.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        async def message_request(
                params: types.ShowMessageRequestParams) -> types.MessageActionItem | None:
            titles = [a.title for a in params.actions or ()]
            self._record("window/showMessageRequest", {"message": params.message,
                                                       "actions": titles})
            choice = self.message_box(params.message, titles) if self.message_box else None
            if asyncio.iscoroutine(choice):
                choice = await choice
            return types.MessageActionItem(title=choice) if choice else None

        @self.lsp.feature(protocol.INPUT)
        async def read_input(params: dict[str, Any]) -> dict[str, Any] | None:
            self._record(protocol.INPUT, {**params})
            value = self.input_box(params) if self.input_box else None
            if asyncio.iscoroutine(value):
                value = await value
            return None if value is None else {"value": value}

        @self.lsp.feature(types.WINDOW_SHOW_DOCUMENT)
        def show_document(params: types.ShowDocumentParams) -> types.ShowDocumentResult:
            self._record("window/showDocument", {"uri": params.uri,
                                                 "takeFocus": params.take_focus})
            return types.ShowDocumentResult(success=True)

        @self.lsp.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def progress_create(params: types.WorkDoneProgressCreateParams) -> None:
            self._record("window/workDoneProgress/create", {"token": params.token})

        @self.lsp.feature(types.PROGRESS)
        def progress(params: types.ProgressParams) -> None:
            value = params.value if isinstance(params.value, dict) else {}
            self._record("$/progress", {"token": params.token, **value})

        @self.lsp.feature(types.WORKSPACE_CONFIGURATION)
        def configuration(params: types.ConfigurationParams) -> list[Any]:
            return [self.configuration for _ in params.items]

    def _recorder(self, method: str) -> Callable[[Any], None]:
        def record(params: Any) -> None:
            self._record(method, params)
        return record

    def _record(self, method: str, params: dict[str, Any]) -> None:
        self.notifications.append((method, params))
        for listener in list(self.listeners):
            listener(method, params)
        self._changed.set()

    # Process ---------------------------------------------------------------------------------

    async def start(self, command: Sequence[str] | None = None, *,
                    env: dict[str, str] | None = None, cwd: str | Path | None = None,
                    new_session: bool = False) -> None:
        """`new_session`: own process group, so a terminal's Ctrl-C reaches only the client
        (`oi-lsp chat` turns it into oi/stop) and never the server or its kernels."""
        cmd = list(command or server_command())
        await self.lsp.start_io(cmd[0], *cmd[1:], env={**os.environ, **(env or {})},
                                cwd=None if cwd is None else str(cwd),
                                start_new_session=new_session)
        # pygls pipes the server's stderr and never reads it: drain it, or a chatty server
        # blocks on a full pipe. The tail is kept for diagnostics.
        self._drain = asyncio.create_task(self._read_stderr())

    async def _read_stderr(self) -> None:
        proc = self.process
        if proc is None or proc.stderr is None:
            return
        while data := await proc.stderr.read(65536):
            self.stderr = (self.stderr + data)[-1_000_000:]

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        return client_process(self.lsp)

    async def initialize(self, workspaces: Sequence[str | Path] = (), *,
                         options: dict[str, Any] | None = None, oi: bool = True,
                         window: types.WindowClientCapabilities | None = None,
                         answers_input: bool = False) -> types.InitializeResult:
        """`window`: the client's window capabilities (message boxes only, by default);
        `answers_input`: declare that `input_box` answers oi/input."""
        folders = [types.WorkspaceFolder(uri=to_uri(w), name=Path(str(w)).name)
                   for w in workspaces]
        capabilities = types.ClientCapabilities(
            experimental={**({"oi": True} if oi else {}),
                          **({protocol.INPUT_CAPABILITY: True} if answers_input else {})} or None,
            workspace=types.WorkspaceClientCapabilities(workspace_folders=True,
                                                        configuration=True),
            window=window or types.WindowClientCapabilities(
                show_message=types.ShowMessageRequestClientCapabilities()))
        result = await self.lsp.initialize_async(types.InitializeParams(
            capabilities=capabilities, process_id=os.getpid(),
            workspace_folders=folders or None,
            root_uri=folders[0].uri if folders else None,
            initialization_options=options))
        self.lsp.initialized(types.InitializedParams())
        return result

    async def close(self, timeout: float = 30, exit_timeout: float | None = None) -> int | None:
        """Shut the server down politely, then make sure it has exited (killed when it takes
        longer than `exit_timeout` after answering shutdown; default `timeout`)."""
        proc = self.process
        try:
            if proc is not None and proc.returncode is None:
                await asyncio.wait_for(self.lsp.shutdown_async(None), timeout)
                self.lsp.exit(None)
                await asyncio.wait_for(proc.wait(),
                                       timeout if exit_timeout is None else exit_timeout)
        except (TimeoutError, ConnectionError, RuntimeError):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
        await self.lsp.stop()
        return proc.returncode if proc is not None else None

    # Requests ----------------------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.lsp.protocol.send_request_async(method, params or {})

    async def chat(self, message: str, **params: Any) -> dict[str, Any]:
        return await self.request(protocol.CHAT, {"message": message, **params})

    async def approve(self, proposal_id: str, decision: str, **params: Any) -> dict[str, Any]:
        return await self.request(protocol.APPROVE,
                                  {"proposalId": proposal_id, "decision": decision, **params})

    async def execute(self, language: str, code: str, **params: Any) -> dict[str, Any]:
        return await self.request(protocol.EXECUTE,
                                  {"language": language, "code": code, **params})

    # Waiting for notifications -----------------------------------------------------------------

    async def wait_for(self, method: str, predicate: Callable[[dict[str, Any]], bool] | None = None,
                       *, timeout: float = 30, since: int = 0) -> dict[str, Any]:
        """The first notification `method` (from index `since`) that satisfies `predicate`."""
        async with asyncio.timeout(timeout):
            seen = since
            while True:
                for m, params in self.notifications[seen:]:
                    if m == method and (predicate is None or predicate(params)):
                        return params
                seen = len(self.notifications)
                self._changed.clear()
                await self._changed.wait()

    def stream(self, turn_id: str | None = None, type_: str | None = None) -> str:
        """All streamed content so far (of one turn, of one chunk type), joined."""
        return "".join(
            p.get("content") or "" for m, p in self.notifications
            if m == protocol.STREAM and (turn_id is None or p["turnId"] == turn_id)
            and (type_ is None or p["type"] == type_) and p["type"] != "status")


def to_uri(folder: str | Path) -> str:
    text = str(folder)
    return text if text.startswith("file:") else from_fs_path(str(Path(text).resolve()))
