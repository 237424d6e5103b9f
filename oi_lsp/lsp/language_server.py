"""OIServer: the pygls LanguageServer that is the core's Link to the editor. It sends the
oi/* notifications, asks plain LSP clients about proposals with a message box, tells the user
through window/showMessage, and keeps the settings the editor sent."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer

from .. import __version__, protocol
from ..core.approval import Answer, Approvals
from ..core.settings import SettingsError, check, client_section, env_layer, split_known
from ..core.store import Store
from ..core.workspace import Workspace
from ..core.workspaces import Workspaces
from ..protocol import Proposal
from .jsonrpc import raw_params_converter
from .network import GatedProtocol
from .pygls_compat import quiet_refusals

log = logging.getLogger(__name__)


class OIServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("oi-lsp", __version__, converter_factory=raw_params_converter,
                         protocol_cls=GatedProtocol)  # --tcp/--ws admit by token
        quiet_refusals()
        self.approvals = Approvals()
        self.store = Store()
        self.env = env_layer()
        self.client_settings: dict[str, Any] = {}
        self.oi_client = False  # the client renders oi/stream and oi/proposal itself
        self.workspaces = Workspaces(self._new_workspace)
        self.warming: asyncio.Future[None] | None = None  # litellm's load, once it may start
        self.shut_down = False  # the client asked for `shutdown` (the exit status says so)

    def _new_workspace(self, uri: str, folder: Path) -> Workspace:
        return Workspace(uri, folder, self, self.approvals, self.store,
                         lambda: [self.env, self.client_settings])

    # Link: what workspaces need from the client ---------------------------------------------

    def send(self, method: str, params: dict[str, Any]) -> None:
        self.protocol.notify(method, params)

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        self.send(protocol.PROPOSAL, proposal.wire())
        if self.oi_client:
            return await answer
        # A plain LSP client: ask with a message box; an oi/approve still counts if it comes.
        box: asyncio.Future[Any] = asyncio.ensure_future(self.window_show_message_request_async(
            types.ShowMessageRequestParams(
                type=types.MessageType.Info,
                message=f"Run this {proposal.language} code?{_risk_note(proposal)}\n\n"
                        f"{proposal.code}",
                actions=[types.MessageActionItem("Run"), types.MessageActionItem("Skip")])))
        try:
            await asyncio.wait([box, answer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            box.cancel()
        if answer.done():
            return answer.result()
        action = box.result()
        return Answer("run" if getattr(action, "title", None) == "Run" else "skip")

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

    def show_text(self, text: str, error: bool = False) -> None:
        if error:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error, message=f"oi-lsp: {text}"))
        elif not self.oi_client:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Info,
                                                           message=text))

    # Settings ---------------------------------------------------------------------------

    def apply_client_settings(self, raw: Any) -> None:
        """New values from the client; a wrong value is reported and the old one kept."""
        values, _ = split_known(client_section(raw))
        good: dict[str, Any] = {}
        for key, value in values.items():
            try:
                check({key: value})
                good[key] = value
            except SettingsError as exc:
                self.show_text(str(exc), error=True)
        self.client_settings = {**self.client_settings, **good}


def _risk_note(proposal: Proposal) -> str:
    """The risk check's verdict, for clients that show the proposal as a message box."""
    summary = proposal.risk.summary()
    return f" ({summary})" if summary else ""
