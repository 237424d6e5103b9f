"""The oi/* protocol in code: every request, result and notification as a pydantic model.

docs/protocol.md is the same contract in prose; change both together.
Field names are camelCase on the wire and snake_case in Python.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

# Methods ---------------------------------------------------------------------------------------

CHAT = "oi/chat"
APPROVE = "oi/approve"
EXECUTE = "oi/execute"
STOP = "oi/stop"
DEBUG_TASKS = "oi/debug/tasks"  # test-only: served when OI_LSP_DEBUG_TASKS=1
DEBUG_TASKS_ENV = "OI_LSP_DEBUG_TASKS"
RESET = "oi/reset"
HISTORY = "oi/history"
CONFIGURE = "oi/configure"
LANGUAGES = "oi/languages"
MODELS = "oi/models"
SESSIONS = "oi/sessions"
STATUS = "oi/status"
SESSION_OPEN = "oi/session/open"
SESSION_NEW = "oi/session/new"
SESSION_EXPORT = "oi/session/export"

STREAM = "oi/stream"
PROPOSAL = "oi/proposal"
# The shared daemon, to every client attached to the workspace: a proposal was answered (by
# any of them); the others withdraw their question.
ANSWERED = "oi/answered"
TURN = "oi/turn"
RESOURCES = "oi/resources"
# server -> client request: a running program reads input (clients that declare
# experimental.oiInput)
INPUT = "oi/input"
TOOL = "oi/tool"  # server -> client: an MCP tool call of a run (core/mcp_bridge.py)
INPUT_CAPABILITY = "oiInput"

# workspace/executeCommand commands, for clients that only speak plain LSP (docs/protocol.md,
# "Plain LSP clients"): each returns at once.
CHAT_COMMAND = "oi.chat"
STOP_COMMAND = "oi.stop"
RESET_COMMAND = "oi.reset"
EXECUTE_COMMAND = "oi.execute"
NEW_CONVERSATION_COMMAND = "oi.newConversation"
SHOW_TRANSCRIPT_COMMAND = "oi.showTranscript"
COMMANDS = (CHAT_COMMAND, STOP_COMMAND, RESET_COMMAND, EXECUTE_COMMAND,
            NEW_CONVERSATION_COMMAND, SHOW_TRANSCRIPT_COMMAND)

# The error code the server uses beyond those pygls names (InvalidParams, ...).
REQUEST_FAILED = -32803  # LSP's RequestFailed: valid request, but the server cannot do it now.


class Wire(BaseModel):
    """Base of every message: camelCase aliases, unknown fields ignored (newer clients)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict sent to the peer (aliases, no None fields)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# Shared shapes ---------------------------------------------------------------------------------

Role = Literal["user", "assistant", "computer"]
ChunkType = Literal["message", "code", "console", "image", "confirmation", "status", "error",
                    "reasoning"]
TurnStatus = Literal["done", "stopped", "error"]
RunStatus = Literal["ok", "error", "stopped", "timeout"]
Decision = Literal["run", "skip", "edit", "outside"]  # outside: only a blocked run's
# What an "always" answer covers: the command's first word, or the code's exact text.
AlwaysScope = Literal["command", "text"]
RuleAction = Literal["allow", "ask", "deny"]
RiskLevel = Literal["low", "medium", "high"]
# What became of a piece of code the model proposed (or the user ran): on its `code` message.
CodeOutcome = Literal["ran", "edited", "skipped", "stopped", "timedOut", "autoRan", "error",
                      "expired"]
# Why a turn ended in an error, for clients to offer the right action.
ErrorKind = Literal["noModel", "noApiKey", "authFailed", "unreachable", "rateLimited",
                    "overloaded", "contextTooLong", "budget", "maxSteps", "modelError",
                    "notSaved"]
ActivityState = Literal["idle", "thinking", "waiting", "running"]


class Position(Wire):
    line: int = Field(ge=0)
    character: int = Field(ge=0)


class Range(Wire):
    start: Position
    end: Position


class EditorContext(Wire):
    """What the editor adds to a message: the file, its language, the selected text."""

    uri: str | None = None
    language: str | None = None
    selection: str | None = None
    range: Range | None = None


class Risk(Wire):
    """What the static risk check (and safe mode's semgrep scan) found in proposed code."""

    level: RiskLevel = "low"
    reasons: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        """One line for people ("high risk: deletes files ..."); empty when nothing was found."""
        if self.level == "low" and not self.reasons:
            return ""
        reasons = "; ".join(self.reasons)
        return f"{self.level} risk: {reasons}" if reasons else f"{self.level} risk"


class AutoRunRule(BaseModel):
    """One of `autoRunRules`: code (of `language`, when given) that `pattern` matches is run
    without asking (allow), asked about (ask) or refused (deny). A setting, so unknown keys
    are errors (a typo must not silently make a rule match everything)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              strict=True)

    language: str | None = Field(default=None, min_length=1)
    pattern: str = Field(min_length=1)
    action: RuleAction

    @model_validator(mode="after")
    def _pattern_compiles(self) -> AutoRunRule:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"pattern {self.pattern!r} is not a valid regular expression: "
                             f"{exc}") from None
        return self

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class MessageContext(Wire):
    """The editor's context of a user message, kept beside its text (never folded into it)."""

    uri: str | None = None
    range: Range | None = None
    language: str | None = None
    text: str | None = None  # the selection


class Usage(Wire):
    """Tokens a turn's model calls used (litellm's counter) and their price (its cost map)."""

    prompt_tokens: int
    completion_tokens: int
    calls: int
    cost: float | None = None  # USD for this turn; omitted when litellm knows no price
    session_cost: float | None = None  # USD since the session opened in this server
    # As the provider reports them (absent when it does not): completion tokens spent
    # reasoning, prompt tokens read from its prompt cache and written to it, and what the
    # cache saved against the same tokens at the full price (USD; negative when it wrote more
    # than it read).
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_saved: float | None = None


class Message(Wire):
    """One entry of a conversation, in Open Interpreter's LMC shape."""

    role: Role
    type: ChunkType
    format: str | None = None
    content: str = ""
    turn_id: str | None = None
    # Links a code message to its tool call and to its console output (for the model's view).
    tool_call_id: str | None = None
    context: MessageContext | None = None  # user messages: what the editor added
    outcome: CodeOutcome | None = None  # code messages: what became of the code
    edited_code: str | None = None  # code messages: what ran instead, when the user edited it
    risk: Risk | None = None  # proposed code: what the risk check found
    error_kind: ErrorKind | None = None  # error entries (type `error`): why the turn failed
    # The last entry of a chat turn that called the model: that turn's tokens and cost, so a
    # redrawn conversation shows them as the live one did (session_cost is not kept).
    usage: Usage | None = None
    # The last entry of a chat turn the user stopped: clients say so after it, as they did
    # live (a proposal's own `stopped` outcome already says it there).
    stopped: bool | None = None
    # Reasoning entries: the provider's own thinking blocks (Anthropic's, with their
    # signatures), sent back unchanged with the next request; clients ignore them.
    thinking_blocks: list[dict[str, Any]] | None = None


class Output(Wire):
    """One piece of the result of a run, as returned by oi/execute."""

    type: Literal["console", "image", "code"]
    format: str | None = None
    content: str


# Requests --------------------------------------------------------------------------------------


class WorkspaceParams(Wire):
    workspace: str | None = None


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


class Attachment(Wire):
    """An image sent with a message: a file (`uri`, file://) or its bytes (`data`, base64)."""

    uri: str | None = None
    data: str | None = None
    mime_type: str

    @model_validator(mode="after")
    def _one_source(self) -> Attachment:
        if (self.uri is None) == (self.data is None):
            raise ValueError("an attachment has either `uri` or `data` (base64), not both")
        if self.mime_type not in IMAGE_TYPES:
            raise ValueError(f"mimeType {self.mime_type!r}: only images can be attached "
                             f"({', '.join(IMAGE_TYPES)})")
        return self


class ChatParams(WorkspaceParams):
    message: str = ""  # may be empty when images are attached: they are the message
    context: EditorContext | None = None
    attachments: list[Attachment] = Field(default_factory=list, max_length=10)

    @model_validator(mode="after")
    def _something_said(self) -> ChatParams:
        if not self.message and not self.attachments:
            raise ValueError("message: empty, and no attachments")
        return self


class InputParams(Wire):
    """oi/input: a program of the run `turn_id` reads a line; `password`: show it masked."""

    workspace: str
    turn_id: str
    prompt: str
    password: bool = False


class InputResult(Wire):
    """The answer to oi/input (null instead: cancelled)."""

    value: str


ToolStatus = Literal["running", "done", "error", "denied"]


class ToolCall(Wire):
    """oi/tool: the code of run `turn_id` calls an MCP tool (`running`), and how it ended."""

    workspace: str
    turn_id: str
    call_id: str
    server: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: ToolStatus
    destructive: bool = False
    seconds: float | None = None  # once it ended
    error: str | None = None  # error, denied: why


class ChatResult(Wire):
    turn_id: str
    status: TurnStatus
    error: str | None = None
    error_kind: ErrorKind | None = None


class ApproveParams(Wire):
    proposal_id: str = Field(min_length=1)
    decision: Decision
    code: str | None = None
    workspace: str | None = None
    # Run it, and save an allow rule for code like it in the workspace's .oi/profile.yaml.
    always: AlwaysScope | None = None

    @model_validator(mode="after")
    def _edit_needs_code(self) -> ApproveParams:
        if self.decision == "edit" and self.code is None:
            raise ValueError("decision 'edit' needs the edited code in 'code'")
        if self.always is not None and self.decision != "run":
            raise ValueError("'always' goes with decision 'run' only")
        return self


class ApproveResult(Wire):
    ok: bool = True
    rule: AutoRunRule | None = None  # the rule `always` added
    file: str | None = None  # where it was saved


class ExecuteParams(WorkspaceParams):
    language: str = Field(min_length=1)
    code: str
    timeout: float | None = Field(default=None, gt=0)


class ExecuteResult(Wire):
    turn_id: str
    status: RunStatus
    outputs: list[Output]
    error: str | None = None


class CommandTarget(WorkspaceParams):
    """The argument object of an oi.* command: the workspace, or a document (and a range of
    it) whose folder is the workspace and whose text is the selection."""

    uri: str | None = None
    range: Range | None = None


class ChatCommandArgs(CommandTarget):
    message: str = Field(min_length=1)


class ExecuteCommandArgs(CommandTarget):
    """The code to run, or else the text of `uri` in `range` (language: the document's)."""

    code: str | None = None
    language: str | None = None


class StartedResult(Wire):
    """What a command that starts a turn or run answers at once."""

    turn_id: str
    status: Literal["running"] = "running"


class TranscriptResult(Wire):
    uri: str


class StopResult(Wire):
    stopped: bool


class OkResult(Wire):
    ok: bool = True


class HistoryParams(WorkspaceParams):
    """A page of the conversation: the `limit` messages before index `before` (the newest
    when it is omitted); the whole of it when `limit` is."""

    before: int | None = Field(default=None, ge=0)
    limit: int | None = Field(default=None, ge=1)


class HistoryResult(Wire):
    workspace: str
    messages: list[Message]
    start: int = 0  # the index of the first message sent: older pages end there
    total: int = 0  # the conversation's messages


class ConfigureParams(WorkspaceParams):
    """Same keys as the `oi` settings section; applies to one workspace's session."""

    model_config = ConfigDict(extra="allow")


class ConfigureResult(Wire):
    settings: dict[str, Any]
    warnings: list[str] = []


SandboxState = Literal["off", "workspace-write", "read-only", "gateway"]


class LanguageInfo(Wire):
    name: str
    aliases: list[str]
    kind: Literal["kernel", "subprocess", "compile", "display"]
    runner: str
    available: bool
    install_hint: str | None = None
    location: Literal["local", "remote"] = "local"  # remote: on a kernel gateway
    host: str | None = None  # the gateway's host:port, for remote runners
    # The OS sandbox its REPL starts in: a mode of setting `sandbox`, or "gateway" (the
    # gateway's side decides); None for what the client shows (html).
    sandbox: SandboxState | None = None
    sandbox_network: bool | None = None  # None: not decided here
    # Python's: the interpreter its local kernel runs in and where that choice came from.
    interpreter: str | None = None


class LanguagesResult(Wire):
    languages: list[LanguageInfo]


# Conversations ---------------------------------------------------------------------------------

CONVERSATION_ID = r"^[A-Za-z0-9_-]{1,64}$"
ExportFormat = Literal["json", "markdown", "ipynb"]


class ConversationInfo(Wire):
    id: str
    title: str  # the first line of the first user message ("" while there is none)
    created: str  # ISO 8601, UTC
    updated: str
    message_count: int
    current: bool
    snippet: str | None = None  # oi/sessions with a query: the words around its first match


class SessionsParams(WorkspaceParams):
    """`query`: only the conversations where every one of its words was said."""

    query: str | None = Field(default=None, max_length=1000)


class SessionsResult(Wire):
    workspace: str
    current: str
    sessions: list[ConversationInfo]


class SessionOpenParams(WorkspaceParams):
    id: str = Field(pattern=CONVERSATION_ID)
    limit: int | None = Field(default=None, ge=1)  # its last page only, as oi/history's


class SessionResult(Wire):
    """The conversation now open (after oi/session/open or oi/session/new)."""

    workspace: str
    id: str
    messages: list[Message]
    start: int = 0  # as oi/history's: the index of the first message sent
    total: int = 0


class SessionExportParams(WorkspaceParams):
    id: str | None = Field(default=None, pattern=CONVERSATION_ID)
    format: ExportFormat


class SessionExportResult(Wire):
    id: str
    format: ExportFormat
    title: str
    content: str


# Resource monitor ----------------------------------------------------------------------------


class ReplStatus(Wire):
    """One REPL of a workspace and what it costs (figures cover its process and children)."""

    language: str
    pid: int | None = None  # None for a REPL that has not started, or runs remotely
    alive: bool
    busy: bool  # running code now
    cpu_percent: float | None = None  # of one core
    rss: int | None = None  # resident memory, bytes
    uptime: float | None = None  # seconds since the process started
    sandbox: SandboxState | None = None  # what the running REPL was started in
    sandbox_network: bool | None = None


class TurnState(Wire):
    state: ActivityState
    turn_id: str | None = None


class StatusResult(Wire):
    workspace: str
    turn: TurnState
    repls: list[ReplStatus]


class LocalServer(Wire):
    """One local model server preset, as oi/models found it."""

    name: str
    url: str
    up: bool
    models: list[str]
    error: str | None = None


class ModelsResult(Wire):
    local: list[LocalServer]
    model: str | None = None  # the workspace's effective model
    profiles: list[str] = []  # the user's profiles, for `profile`


# Notifications ---------------------------------------------------------------------------------


class StreamChunk(Wire):
    turn_id: str
    workspace: str
    role: Role
    type: ChunkType
    format: str | None = None
    content: str | None = None
    start: bool | None = None
    end: bool | None = None


class Resources(Wire):
    """oi/resources: what a REPL costs during a long run (every few seconds)."""

    workspace: str
    turn_id: str | None = None
    repl: ReplStatus
    elapsed: float  # seconds the run has taken so far


class Proposal(Wire):
    turn_id: str
    workspace: str
    proposal_id: str
    language: str
    code: str
    auto_run: bool
    risk: Risk = Field(default_factory=Risk)
    # Set when this asks to run, once and outside the sandbox, code the sandbox just blocked
    # (what it refused): "run" / "outside" run it so, in a fresh process; "skip" does not.
    sandbox_blocked: str | None = None
    # The first word an `always: "command"` answer would allow; absent when the code is not
    # one simple shell command (that answer then allows the exact text).
    command: str | None = None


class Answered(Wire):
    """oi/answered: the first answer to a proposal, which won; later answers are refused."""

    workspace: str
    turn_id: str
    proposal_id: str
    decision: str


class TurnEvent(Wire):
    turn_id: str
    workspace: str
    kind: Literal["chat", "execute"]
    status: Literal["running", "done", "stopped", "error"]
    error: str | None = None
    error_kind: ErrorKind | None = None
    usage: Usage | None = None  # on the end of a chat turn


# Validation ------------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


class InvalidParams(ValueError):
    """Params that do not match a request's model; the message names the fields."""


def parse(model: type[M], params: Any) -> M:
    """Validate raw JSON params into `model`, or raise InvalidParams naming each bad field."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParams(f"params must be an object, got {type(params).__name__}")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "params"
            problems.append(f"{where}: {err['msg']}")
        raise InvalidParams("; ".join(problems)) from None
