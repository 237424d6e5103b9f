"""OIAgent: the ACP handlers, thin. A session is a workspace (its `cwd`) and one of its
conversations; a prompt is an oi/chat turn; the core does the rest through AcpLink."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, RequestError, run_agent
from acp.helpers import (
    update_agent_message_text,
    update_available_commands,
    update_current_mode,
)
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    UnstructuredCommandInput,
)
from pydantic import ValidationError

from .. import __version__
from ..common.pipes import private_stdio, streams
from ..common.uris import from_fs_path
from ..core.approval import Approvals
from ..core.attachments import AttachmentError
from ..core.mcp_config import from_acp
from ..core.settings import SettingsError, env_layer
from ..core.store import ConversationInUse, Store, UnknownConversation, valid_id
from ..core.workspace import Busy, Workspace
from ..core.workspaces import NotAWorkspace, Workspaces
from ..protocol import Attachment, ChatParams, Message
from . import replay
from .link import AcpLink

log = logging.getLogger(__name__)

STDIO_LIMIT = 50 * 1024 * 1024  # longest message line (the SDK's own default)
MODES = [SessionMode(id="ask", name="Ask", description="Ask before running each piece of code"),
         SessionMode(id="auto", name="Auto", description="Run code without asking (high-risk "
                                                           "code still asks)")]
COMMANDS = {"reset": "New conversation and restarted REPLs", "undo": "Forget the last exchange",
            "tokens": "Tokens and cost of the conversation", "info": "Settings and state",
            "verbose": "Verbose on/off", "markdown": "Export the conversation as Markdown",
            "jupyter": "Export the conversation as a notebook", "help": "The commands",
            "earlier": "Show the messages before those shown of a loaded conversation"}
REPLAY_PAGE = 100  # messages session/load replays (and /earlier adds), from a turn's start
_HINTED = {"verbose": "true | false", "markdown": "path (optional)",
           "jupyter": "path (optional)"}


@dataclass
class Session:
    id: str
    workspace: str  # its URI
    cwd: str
    conversation: str  # the conversation it shows (the workspace may have opened another)
    mode: str = "ask"
    shown_from: int = 0  # the index of the first message session/load or /earlier replayed


class OIAgent:
    def __init__(self) -> None:
        self.env = env_layer()  # settings come from the environment (OI_MODEL, ...)
        self.link = AcpLink(self._max_output, self._proposed, self._always, self._remember)
        self.workspaces = Workspaces(self._new_workspace)
        self.approvals = Approvals()
        self.store = Store()
        self.sessions: dict[str, Session] = {}
        self.conn: Client | None = None

    def _new_workspace(self, uri: str, folder: Path) -> Workspace:
        return Workspace(uri, folder, self.link, self.approvals, self.store,
                         lambda: [self.env])

    def _max_output(self, uri: str) -> int:
        return self.workspaces.get(uri).settings().max_output

    def _proposed(self, uri: str) -> Message | None:
        """The workspace's latest proposal as the conversation keeps it: when a tool call
        opens, that of its code (recorded before it is asked or run), whose outcome the core
        sets when the run ends."""
        for message in reversed(self.workspaces.get(uri).conversation.messages):
            if message.role == "assistant" and message.type == "code":
                return message
        return None

    def on_connect(self, conn: Client) -> None:
        self.conn = self.link.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **kwargs: Any) -> InitializeResponse:
        elicitation = getattr(client_capabilities, "elicitation", None)
        self.link.can_edit = getattr(elicitation, "form", None) is not None
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities())),
            agent_info=Implementation(name="oi-lsp", title="Open Interpreter (oi-lsp)",
                                      version=__version__))

    # Sessions ----------------------------------------------------------------------------

    def _workspace(self, cwd: str) -> Workspace:
        try:
            return self.workspaces.get(from_fs_path(cwd), start=True)  # a session uses it
        except NotAWorkspace as exc:
            raise RequestError.invalid_params({"cwd": str(exc)}) from exc

    async def new_session(self, cwd: str, additional_directories: Any = None,
                          mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        workspace = self._workspace(cwd)
        try:
            await workspace.new_conversation()
        except Busy as exc:
            raise RequestError(-32803, str(exc)) from exc
        session = self._open(workspace, cwd, workspace.conversation.id)
        self._use_servers(workspace, session.id, mcp_servers)
        return NewSessionResponse(session_id=session.id, modes=self._modes(session))

    def _open(self, workspace: Workspace, cwd: str, conversation: str) -> Session:
        session = self.sessions[conversation] = Session(conversation, workspace.uri, cwd,
                                                        conversation)
        session.mode = "auto" if workspace.settings().auto_run else "ask"
        self.link.sessions[workspace.uri] = session.id
        self._later(session.id, update_available_commands(_commands()))
        return session

    def _use_servers(self, workspace: Workspace, session_id: str, servers: Any) -> None:
        """The client's MCP servers become modules of the kernel (oi_mcp), beside the
        settings' own; one that cannot be used is said, once the client knows the session."""
        usable, problems = from_acp(list(servers or []))
        workspace.mcp.servers.extra = usable
        if problems:
            self._later(session_id, update_agent_message_text(
                "**oi-lsp:** not used: " + "; ".join(problems) + ".\n\n"))

    def _later(self, session_id: str, update: Any) -> None:
        """An update sent after the response that names the session (a client may not know
        the session before)."""
        asyncio.get_running_loop().call_soon(self.link.update, session_id, update)

    def _modes(self, session: Session) -> SessionModeState:
        return SessionModeState(current_mode_id=session.mode, available_modes=MODES)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           additional_directories: Any = None,
                           **kwargs: Any) -> LoadSessionResponse:
        if not valid_id(session_id):
            raise RequestError.invalid_params({"sessionId": "not a session id"})
        workspace = self._workspace(cwd)
        try:
            await workspace.open_conversation(session_id)
        except (UnknownConversation, ConversationInUse, Busy) as exc:
            raise RequestError.invalid_params({"sessionId": str(exc)}) from exc
        session = self._open(workspace, cwd, session_id)
        self._use_servers(workspace, session_id, mcp_servers)
        start, messages, _ = await workspace.conversation.page(None, REPLAY_PAGE)
        session.shown_from = start
        if start:
            self.link.update(session_id, update_agent_message_text(
                f"**oi-lsp:** {_count(start)} of this conversation are kept and not shown "
                "here: /earlier shows the ones before these.\n\n"))
        for update in replay.updates(messages, workspace.folder):
            self.link.update(session_id, update)
        await self.link.drain(workspace.uri)  # the history arrives before the response
        return LoadSessionResponse(modes=self._modes(session))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **kwargs: Any) -> ListSessionsResponse:
        if cwd is None:
            return ListSessionsResponse(sessions=[])
        workspace = self._workspace(cwd)
        return ListSessionsResponse(sessions=[
            SessionInfo(session_id=s.id, cwd=cwd, title=s.title or None, updated_at=s.updated)
            for s in await workspace.conversation.summaries() if s.message_count])

    async def set_session_mode(self, session_id: str, mode_id: str,
                               **kwargs: Any) -> SetSessionModeResponse:
        if mode_id not in ("ask", "auto"):
            raise RequestError.invalid_params({"modeId": "ask or auto"})
        session = self._session(session_id)
        await self._set_mode(session, mode_id)
        return SetSessionModeResponse()

    async def _set_mode(self, session: Session, mode_id: str) -> None:
        session.mode = mode_id
        await self.workspaces.get(session.workspace).configure({"autoRun": mode_id == "auto"})

    async def _always(self, session_id: str) -> None:
        """"Always run" chosen in a permission request: the session goes to auto mode."""
        session = self.sessions.get(session_id)
        if session is not None:
            await self._set_mode(session, "auto")
            self.link.update(session_id, update_current_mode("auto"))

    async def _remember(self, uri: str, language: str, code: str) -> str | None:
        """"Always run this command here": the workspace saves the allow rule; why it could
        not (an untrusted workspace, a broken .oi/profile.yaml), or None."""
        try:
            await self.workspaces.get(uri).layers.always(language, code, "command")
        except SettingsError as exc:
            return str(exc)
        return None

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": f"no session {session_id!r}"})
        return session

    # Turns -------------------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        workspace = self.workspaces.get(session.workspace, start=True)
        text = _message(prompt)
        if text.strip() == "%earlier":
            return await self._earlier(session, workspace)
        try:  # image blocks: attachments, as oi/chat takes them (an image alone will do)
            params = ChatParams(message=text if text.strip() else "", workspace=workspace.uri,
                                attachments=[Attachment(data=b.data, mime_type=b.mime_type)
                                             for b in prompt
                                             if getattr(b, "type", None) == "image"])
        except ValidationError as exc:
            raise RequestError.invalid_params({"prompt": str(exc.errors()[0]["msg"])}) from exc
        try:
            workspace.check_idle()  # another session's turn here: its updates stay its own
            if workspace.conversation.id != session.conversation:
                await workspace.open_conversation(session.conversation)
        except Busy as exc:
            raise RequestError(-32803, str(exc)) from exc
        self.link.sessions[workspace.uri] = self.link.active = session_id
        try:
            result = await workspace.chat(params)
        except Busy as exc:  # one began meanwhile
            raise RequestError(-32803, str(exc)) from exc
        except AttachmentError as exc:
            raise RequestError.invalid_params({"prompt": str(exc)}) from exc
        finally:
            await self.link.drain(workspace.uri)  # every update before the answer
        session.conversation = workspace.conversation.id  # /reset starts a new one
        if result.status == "stopped":
            return PromptResponse(stop_reason="cancelled")
        if result.error_kind == "maxSteps":
            return PromptResponse(stop_reason="max_turn_requests")
        if result.error_kind == "budget":
            return PromptResponse(stop_reason="refusal")
        if result.error:
            raise RequestError.internal_error({"error": result.error,
                                               "errorKind": result.error_kind})
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        # Only the session whose turn runs there stops it (stopping drops the open proposal).
        if session is not None and self.link.sessions.get(session.workspace) == session_id:
            await self.workspaces.get(session.workspace).stop()

    async def _earlier(self, session: Session, workspace: Workspace) -> PromptResponse:
        """/earlier: the page before those replayed, as session/load replayed them (an ACP
        client's transcript only grows: they come after the prompt that asked)."""
        conversation = workspace.conversation
        if conversation.id != session.conversation or not session.shown_from:
            self.link.update(session.id, update_agent_message_text(
                "**oi-lsp:** nothing earlier: the whole conversation is shown.\n"))
        else:
            start, messages, _ = await conversation.page(session.shown_from, REPLAY_PAGE)
            self.link.update(session.id, update_agent_message_text(
                f"**oi-lsp:** messages {start + 1} to {session.shown_from} of "
                f"{conversation.count}"
                + (f" ({_count(start)} before them: /earlier again)" if start else "")
                + ":\n\n"))
            for update in replay.updates(messages, workspace.folder):
                self.link.update(session.id, update)
            session.shown_from = start
        await self.link.drain(workspace.uri)
        return PromptResponse(stop_reason="end_turn")

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def _commands() -> list[AvailableCommand]:
    return [AvailableCommand(name=name, description=description, input=AvailableCommandInput(
        root=UnstructuredCommandInput(hint=_HINTED[name])) if name in _HINTED else None)
        for name, description in COMMANDS.items()]


def _count(messages: int) -> str:
    return f"{messages:,} earlier message" + ("" if messages == 1 else "s")


def _message(prompt: list[Any]) -> str:
    """The prompt as one message: its text; embedded files as fenced blocks; a slash command
    as the magic command it names (`/tokens` → `%tokens`)."""
    parts: list[str] = []
    for block in prompt:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(f"\n{block.resource.uri}:\n```\n{block.resource.text}\n```")
        elif kind == "resource_link":
            parts.append(f"\n(see {block.uri})")
    text = "".join(parts)
    stripped = text.lstrip()
    if stripped.startswith("/") and stripped[1:].split(" ", 1)[0] in COMMANDS:
        return "%" + stripped[1:]
    return text


async def serve() -> int:
    # The client's pipes, kept from kernels and libraries that print (as the LSP server does).
    pipe_in, pipe_out = private_stdio()
    reader, writer = await streams(pipe_in, pipe_out, STDIO_LIMIT)
    agent = OIAgent()
    try:
        # The SDK's Agent protocol lists unstable methods (fork, resume) this agent lacks.
        # Elicitation (the Edit option) is unstable ACP. Its first stream is the one it writes.
        await run_agent(cast(Any, agent), writer, reader, use_unstable_protocol=True)
    finally:
        await agent.workspaces.close_all()
    return 0
