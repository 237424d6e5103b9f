"""OIServer: the pygls LanguageServer that is the core's Link to the editor. It sends the
oi/* notifications (mirrored for plain LSP clients as progress, a transcript and messages, see
plain.py and progress.py), asks about proposals, tells the user through window/showMessage, and
keeps the settings the editor sent."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import anyio
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer

from .. import __version__, protocol
from ..core.aio import log_failure
from ..core.approval import Approvals
from ..core.link import Answer, NoInput
from ..core.settings import (
    SettingsError,
    check,
    client_section,
    env_layer,
    split_known,
    unknown_key,
)
from ..core.store import Store
from ..core.workspace import Workspace
from ..core.workspaces import Workspaces
from ..protocol import InputParams, InputResult, Proposal, ToolCall
from .jsonrpc import raw_params_converter
from .network import GatedProtocol
from .plain import PlainClient
from .progress import TurnProgress
from .pygls_compat import cancel_request, quiet_refusals

log = logging.getLogger(__name__)

# Seconds a vanished client's turns and runs get to end (a run's stop escalates within it).
ENDING_GRACE = 15.0


class OIServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("oi-lsp", __version__, converter_factory=raw_params_converter,
                         protocol_cls=GatedProtocol)  # --tcp/--ws admit by token
        quiet_refusals()
        self.approvals = Approvals()
        self.store = Store()
        self.env = env_layer()
        self.client_settings: dict[str, Any] = {}
        self._told_unknown: set[str] = set()  # unknown setting names already shown once
        self.oi_client = False  # the client renders oi/stream and oi/proposal itself
        self.input_client = False  # the client answers oi/input (experimental.oiInput)
        self.workspaces = Workspaces(self._new_workspace)
        self.warming: asyncio.Future[None] | None = None  # litellm's load, once it may start
        self.shut_down = False  # the client asked for `shutdown` (the exit status says so)
        self.plain: PlainClient | None = None  # a client that renders no oi/* notifications
        self.turn_progress = TurnProgress(lambda: self.work_done_progress, self._stop_for_progress)
        self._background: set[asyncio.Task[Any]] = set()

    def client_known(self, capabilities: types.ClientCapabilities) -> None:
        """initialize: what the client renders itself, and what it can show."""
        experimental = capabilities.experimental
        self.oi_client = isinstance(experimental, dict) and bool(experimental.get("oi"))
        self.input_client = isinstance(experimental, dict) and bool(
            experimental.get(protocol.INPUT_CAPABILITY))
        self.plain = None if self.oi_client else PlainClient(self, capabilities)

    def capabilities_built(self, capabilities: types.ServerCapabilities) -> None:
        """oi clients have commands of their own, some with these names (VS Code's oi.stop):
        they are told of oi.chat only, though every command still works."""
        if self.oi_client and capabilities.execute_command_provider is not None:
            capabilities.execute_command_provider.commands = [protocol.CHAT_COMMAND]

    def _new_workspace(self, uri: str, folder: Path) -> Workspace:
        workspace = Workspace(uri, folder, self, self.approvals, self.store,
                              lambda: [self.env, self.client_settings])
        workspace.transcript.enabled = self.plain is not None  # where plain clients read
        return workspace

    def keep(self, work: Coroutine[Any, Any, Any] | asyncio.Task[Any]) -> None:
        """Let a turn, a run or a message go on after the request that started it answered."""
        task = work if isinstance(work, asyncio.Task) else asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(log_failure("a background task"))

    async def connection_ended(self) -> None:
        """The client's stream ended without a shutdown (it went away): what it started ends
        now, saved as it ended, within ENDING_GRACE; cli.py kills the REPLs after."""
        if self.shut_down:
            return
        with anyio.move_on_after(ENDING_GRACE):
            await self.workspaces.stop_all()

    def _stop_for_progress(self, workspace: str) -> None:
        found = self.workspaces.find(workspace)
        if found is not None:
            self.keep(found.stop())

    # Link: what workspaces need from the client ---------------------------------------------

    def send(self, method: str, params: dict[str, Any]) -> None:
        self.protocol.notify(method, params)
        if self.plain is not None:
            if self.plain.progress:
                self.turn_progress.observe(method, params)
            self.plain.observe(method, params)

    def backlog(self) -> int:
        writer = getattr(self.protocol, "writer", None)
        if callable(own := getattr(writer, "backlog", None)):  # stdio.BatchingWriter
            return int(own())
        transport = getattr(writer, "transport", None)  # --tcp: an asyncio StreamWriter
        return transport.get_write_buffer_size() if transport is not None else 0

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        self.send(protocol.PROPOSAL, proposal.wire())
        if self.plain is None:
            return await answer
        return await self.plain.ask(proposal, answer)

    async def read_input(self, params: InputParams) -> str | None:
        if not self.input_client:
            raise NoInput("this editor cannot answer it (it does not declare "
                          f"experimental.{protocol.INPUT_CAPABILITY} for oi/input)")
        msg_id = str(uuid.uuid4())
        try:
            answer = await self.protocol.send_request_async(protocol.INPUT, params.wire(),
                                                            msg_id=msg_id)
        except JsonRpcException as exc:
            raise NoInput(f"the editor could not ask ({exc.message})") from None
        except asyncio.CancelledError:  # the run ended (a stop, a timeout): close the box
            cancel_request(self.protocol, msg_id)
            raise
        if answer is None:
            return None
        try:
            return InputResult.model_validate(answer).value
        except ValueError:
            raise NoInput("the editor's answer was not {value: string}") from None

    async def tell(self, text: str, actions: list[str]) -> str | None:
        if not actions:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning, message=f"oi-lsp: {text}"))
            return None
        try:
            choice = await self.window_show_message_request_async(types.ShowMessageRequestParams(
                type=types.MessageType.Warning, message=f"oi-lsp: {text}",
                actions=[types.MessageActionItem(title) for title in actions]))
        except JsonRpcException as exc:  # a client without message boxes: nobody agreed
            log.warning("could not ask the user: %s", exc)
            return None
        return getattr(choice, "title", None)

    async def allow_tool(self, call: ToolCall, question: str) -> bool:
        return await self.tell(question, ["Allow", "Deny"]) == "Allow"

    def show_text(self, text: str, error: bool = False) -> None:
        if error:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error, message=f"oi-lsp: {text}"))
        elif not self.oi_client:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Info,
                                                           message=text))

    # Settings ---------------------------------------------------------------------------

    def apply_client_settings(self, raw: Any) -> None:
        """New values from the client; a wrong value is reported and the old one kept, an
        unknown key (a typo does nothing) is shown once."""
        values, unknown = split_known(client_section(raw))
        if values or (isinstance(raw, dict) and "oi" in raw):  # else another server's section
            for key in unknown:
                if key not in self._told_unknown:
                    self._told_unknown.add(key)
                    self.window_show_message(types.ShowMessageParams(
                        type=types.MessageType.Warning,
                        message=f"oi-lsp: {unknown_key(key)} is ignored"))
        good: dict[str, Any] = {}
        for key, value in values.items():
            try:
                check({key: value})
                good[key] = value
            except SettingsError as exc:
                self.show_text(str(exc), error=True)
        self.client_settings = {**self.client_settings, **good}

