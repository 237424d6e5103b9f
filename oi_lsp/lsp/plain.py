"""What a client that renders no oi/* notifications gets instead, in standard LSP only: proposals
as short message boxes (Run / Skip / Edit; Edit opens the code as a document), the live
transcript opened beside the code (window/showDocument) or named (window/showMessage), and the
answer of each turn as a short message."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from .. import protocol
from ..common import languages
from ..common.files import atomic_write, data_dir
from ..common.uris import from_fs_path
from ..core.aio import in_thread, to_disk
from ..core.link import Answer
from ..core.settings import SettingsError
from ..core.workspace import Workspace
from ..core.workspaces import Workspaces
from ..protocol import Proposal

log = logging.getLogger(__name__)

CODE_LINES = 3  # lines of a proposal's code shown in its message box
ANSWER_LINES = 4  # lines of the model's answer shown at the end of a turn
LINE_WIDTH = 100


OUTSIDE = "Run outside the sandbox"


class Server(Protocol):
    """What of the language server the plain client uses (a protocol: the server holds the
    plain client, so naming its class here would make an import circle)."""

    workspaces: Workspaces

    def keep(self, work: Coroutine[Any, Any, Any] | asyncio.Task[Any]) -> None: ...
    def show_text(self, text: str, error: bool = False) -> None: ...
    def window_show_message(self, params: types.ShowMessageParams) -> None: ...
    def window_show_message_request_async(
        self, params: types.ShowMessageRequestParams
    ) -> Coroutine[Any, Any, types.MessageActionItem | None]: ...
    def window_show_document_async(self, params: types.ShowDocumentParams
                                   ) -> Coroutine[Any, Any, types.ShowDocumentResult]: ...


class PlainClient:
    def __init__(self, server: Server, capabilities: types.ClientCapabilities) -> None:
        self.server = server
        window = capabilities.window
        self.show_document = bool(window and window.show_document
                                  and window.show_document.support)
        self.progress = bool(window and window.work_done_progress)

    # Approval ----------------------------------------------------------------------------

    async def ask(self, proposal: Proposal, answer: asyncio.Future[Answer]) -> Answer:
        """Run / Skip / Edit / Always in a message box; an oi/approve still counts if it
        comes. Code the sandbox blocked: Run outside the sandbox / Skip."""
        if proposal.sandbox_blocked is not None:
            choice = await self._box(_ask_text(proposal), [OUTSIDE, "Skip"], answer)
            return choice if isinstance(choice, Answer) else Answer(
                "outside" if choice == OUTSIDE else "skip")
        actions = ["Run", "Skip", "Edit"] if self.show_document else ["Run", "Skip"]
        workspace = self.server.workspaces.find(proposal.workspace)
        always = None
        if workspace is not None and workspace.settings().trusted:  # else nothing is saved
            always = f"Always `{proposal.command}`" if proposal.command else "Always this code"
            actions.append(always)
        choice = await self._box(_ask_text(proposal), actions, answer)
        if isinstance(choice, Answer):
            return choice
        if choice is not None and choice == always and workspace is not None:
            return await self._always(workspace, proposal, answer)
        if choice != "Edit":
            return Answer("run" if choice == "Run" else "skip")
        path = data_dir() / "edits" / (f"proposal-{proposal.proposal_id[:10]}"
                                       + languages.suffix(proposal.language))
        await to_disk(atomic_write, path, proposal.code.encode())
        try:
            await self.open(path, focus=True)
            choice = await self._box(f"Edit the code in {path.name}, save it, then choose Run "
                                     "edited.", ["Run edited", "Skip"], answer)
            if isinstance(choice, Answer):
                return choice
            if choice != "Run edited":
                return Answer("skip")
            return Answer("edit", await in_thread(path.read_text, encoding="utf-8"))
        finally:
            await to_disk(path.unlink, missing_ok=True)

    async def _always(self, workspace: Workspace, proposal: Proposal,
                      answer: asyncio.Future[Answer]) -> Answer:
        """Save the allow rule, then run; when it cannot be saved, say why and ask again."""
        try:
            _, path = await workspace.layers.always(proposal.language, proposal.code,
                                                    "command")
        except SettingsError as exc:
            self.server.show_text(str(exc), error=True)
            return await self.ask(proposal, answer)
        what = f"`{proposal.command}` commands" if proposal.command else "this exact code"
        self.server.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Info, message=f"oi-lsp: from now on {what} run without "
            f"asking in this workspace (rule saved in {path})."))
        return Answer("run")

    async def _box(self, text: str, actions: list[str],
                   answer: asyncio.Future[Answer]) -> str | Answer | None:
        """The action chosen, or the oi/approve answer when that came first."""
        box: asyncio.Future[Any] = asyncio.ensure_future(
            self.server.window_show_message_request_async(types.ShowMessageRequestParams(
                type=types.MessageType.Info, message=text,
                actions=[types.MessageActionItem(title) for title in actions])))
        try:
            await asyncio.wait([box, answer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            box.cancel()
        if answer.done():
            return answer.result()
        if box.cancelled() or box.exception() is not None:
            log.warning("could not ask the user: %s", None if box.cancelled()
                        else box.exception())
            return None
        return getattr(box.result(), "title", None)

    # Transcript and answers --------------------------------------------------------------

    async def open(self, path: Path, focus: bool, line: int = 0) -> bool:
        """Show a file in the editor (window/showDocument) at `line`; whether it did."""
        if not self.show_document:
            return False
        at = types.Position(line=max(0, line), character=0)
        try:
            result = await self.server.window_show_document_async(types.ShowDocumentParams(
                uri=from_fs_path(str(path)), take_focus=focus,
                selection=types.Range(start=at, end=at)))
        except JsonRpcException as exc:
            log.warning("the client could not show %s: %s", path, exc)
            return False
        return bool(getattr(result, "success", False))

    async def show_transcript(self, workspace: Workspace, focus: bool) -> Path:
        """Write the transcript now and open it, else say where it is."""
        path = await workspace.transcript.flush()
        # At its end: the newest part is what the user wants to see.
        if not await self.open(path, focus, workspace.transcript.lines - 1):
            self.server.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Info, message=f"oi-lsp: the transcript is {path}"))
        return path

    def observe(self, method: str, params: dict[str, Any]) -> None:
        """Turns of plain clients: open the transcript as one starts, answer as it ends."""
        if method != protocol.TURN:
            return
        workspace = self.server.workspaces.find(params["workspace"])
        if workspace is None:
            return
        if params.get("status") == "running":
            if params.get("kind") == "chat":
                self.server.keep(self.show_transcript(workspace, focus=False))
            return
        text = _answer(workspace, params, workspace.transcript.path())
        if text:
            self.server.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Info, message=text))


def _ask_text(proposal: Proposal) -> str:
    """A short message box: the language, the risk, the first lines of the code."""
    lines = proposal.code.strip("\n").split("\n")
    shown = [line if len(line) <= LINE_WIDTH else line[:LINE_WIDTH] + "…"
             for line in lines[:CODE_LINES]]
    if len(lines) > CODE_LINES:
        shown.append(f"… ({len(lines)} lines)")
    risk = f"{proposal.risk.level} risk" + (f": {'; '.join(proposal.risk.reasons)}"
                                             if proposal.risk.reasons else "")
    return f"Run this {proposal.language} code? ({risk})\n" + "\n".join(shown)


def _answer(workspace: Workspace, params: dict[str, Any], transcript: Path) -> str:
    """The end of a turn in a few lines (errors are told on their own, as errors)."""
    status = params.get("status")
    where = f"see the transcript: {transcript}"
    if params.get("kind") == "execute":
        return f"oi-lsp: the run {'was stopped' if status == 'stopped' else 'ended'}; {where}"
    if status == "stopped":
        return f"oi-lsp: stopped; {where}"
    if status != "done":
        return ""
    said = [m.content for m in workspace.conversation.messages
            if m.turn_id == params.get("turnId") and m.role == "assistant"
            and m.type == "message" and m.content.strip()]
    if not said:
        return f"oi-lsp: done; {where}"
    lines = said[-1].strip().split("\n")
    text = "\n".join(lines[:ANSWER_LINES])
    more = " …" if len(lines) > ANSWER_LINES else ""
    return f"{text}{more}\n({where})"
