"""The oi.* commands (workspace/executeCommand) and the code actions that carry them: Open
Interpreter for clients that only speak plain LSP. Every command answers at once; a turn or
run it starts goes on in the background, seen through progress, the transcript and messages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.workspace import TextDocument

from .. import protocol
from ..common import languages
from ..common.uris import to_fs_path
from ..core.aio import in_thread
from ..core.attachments import AttachmentError
from ..core.settings import SettingsError
from ..core.store import ConversationInUse, DamagedConversation, UnknownConversation
from ..core.workspace import Busy, Workspace
from ..core.workspaces import NotAWorkspace
from ..protocol import (
    ChatCommandArgs,
    ChatParams,
    CommandTarget,
    EditorContext,
    ExecuteCommandArgs,
    ExecuteParams,
    InvalidParams,
    Position,
    Range,
)

if TYPE_CHECKING:
    from .language_server import OIServer

EXPLAIN = "Explain this code: what it does and anything surprising in it."
DO_IT = "Do what the selected text says."


@contextmanager
def refusals(command: str | None = None) -> Iterator[None]:
    """A workspace's refusals as JSON-RPC errors: busy (naming the command that stops the
    turn, for a command), a profile that cannot be read, or no such conversation."""
    try:
        yield
    except Busy as exc:
        hint = f" To stop it: the command {protocol.STOP_COMMAND}." if command else ""
        raise JsonRpcException(f"{exc}{hint}", code=protocol.REQUEST_FAILED) from None
    except (DamagedConversation, ConversationInUse, SettingsError) as exc:
        raise JsonRpcException(str(exc), code=protocol.REQUEST_FAILED) from None
    except UnknownConversation as exc:
        raise JsonRpcInvalidParams(f"id: {exc}") from None
    except AttachmentError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


def arguments(model: type[protocol.M], args: tuple[Any, ...], text_field: str = "") -> protocol.M:
    """A command's arguments: one object, or (for oi.chat) just the message as a string."""
    arg = args[0] if args else {}
    if isinstance(arg, str) and text_field:
        arg = {text_field: arg}
    try:
        return protocol.parse(model, arg)
    except InvalidParams as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


def target(ls: OIServer, args: CommandTarget, *, start: bool = False) -> Workspace:
    """The workspace a command means: its `workspace`, else the folder holding `uri`. Only a
    chat or a run `start`s it (see server._workspace)."""
    try:
        return ls.workspaces.resolve(args.workspace, args.uri, start=start)
    except NotAWorkspace as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


async def chat(ls: OIServer, args: tuple[Any, ...]) -> dict[str, Any]:
    a = arguments(ChatCommandArgs, args, "message")
    workspace = target(ls, a, start=True)
    context = None
    if a.uri:
        text, language = await selection(ls, a.uri, a.range)
        context = EditorContext(uri=a.uri, language=language, selection=text,
                                range=_whole_lines(a.range, text))
    with refusals(protocol.CHAT_COMMAND):
        turn_id, ending = await workspace.start_chat(ChatParams(message=a.message,
                                                                context=context))
    ls.keep(ending)
    return protocol.StartedResult(turn_id=turn_id).wire()


async def execute(ls: OIServer, args: tuple[Any, ...]) -> dict[str, Any]:
    a = arguments(ExecuteCommandArgs, args)
    workspace = target(ls, a, start=True)
    code, language = a.code, a.language
    if code is None:
        if not a.uri:
            raise JsonRpcInvalidParams("give `code` and `language`, or the `uri` (and `range`) "
                                       "of the code to run")
        code, found = await selection(ls, a.uri, a.range)
        language = language or found
    if not language:
        raise JsonRpcInvalidParams("language: cannot tell the language of the code; give it")
    turn_id, ending = workspace.start_execute(ExecuteParams(language=language, code=code))
    ls.keep(ending)
    return protocol.StartedResult(turn_id=turn_id).wire()


async def selection(ls: OIServer, uri: str, rng: Range | None) -> tuple[str, str | None]:
    """The text of a document in a range (all of it without one) and its language: the
    editor's copy when it is open, else the file (read off the event loop)."""
    doc = ls.workspace.text_documents.get(uri)
    if doc is None:
        path = to_fs_path(uri) if uri.startswith("file:") else None
        try:
            source = await in_thread(Path(path or "").read_text, encoding="utf-8",
                                             errors="replace")
        except OSError as exc:
            raise JsonRpcInvalidParams(f"uri: cannot read {uri}: {exc}") from None
        doc = TextDocument(uri, source=source, position_codec=ls.workspace.position_codec)
    text = doc.source if rng is None else doc.text_in_client_range(_lsp_range(rng))
    if rng is not None and rng.end.character == 0 and rng.end.line > rng.start.line:
        text = text.removesuffix("\n")  # whole lines, up to the start of the next one
    return text, language_of(doc.language_id, uri)


def _whole_lines(rng: Range | None, text: str) -> Range | None:
    """A range that ends at the start of a line ends, for people, on the line before."""
    if rng is None or rng.end.character != 0 or rng.end.line <= rng.start.line:
        return rng
    last = Position(line=rng.end.line - 1, character=len(text.rsplit("\n", 1)[-1]))
    return Range(start=rng.start, end=last)


def language_of(language_id: str | None, uri: str) -> str | None:
    """Ours for the editor's language id, else by the file's suffix."""
    found = languages.find(language_id or "")
    if found is None:
        suffix = Path(uri).suffix.lower()
        found = next((lang for lang in languages.LANGUAGES.values()
                      if lang.suffix.lower() == suffix), None)
    return found.name if found is not None else language_id


def _lsp_range(rng: Range) -> types.Range:
    return types.Range(start=types.Position(line=rng.start.line, character=rng.start.character),
                       end=types.Position(line=rng.end.line, character=rng.end.character))


# Code actions -------------------------------------------------------------------------------

def code_actions(params: types.CodeActionParams) -> list[types.CodeAction]:
    """On a selection: explain, run, do what it says; on diagnostics in range: fix this."""
    uri, rng = params.text_document.uri, params.range
    found: list[types.CodeAction] = []
    if rng.start != rng.end:
        where = {"uri": uri, "range": _json_range(rng)}
        found += [
            _action("Open Interpreter: explain this", types.CodeActionKind.Refactor,
                    protocol.CHAT_COMMAND, {"message": EXPLAIN, **where}),
            _action("Open Interpreter: run this in the workspace REPL",
                    types.CodeActionKind.Source, protocol.EXECUTE_COMMAND, where),
            _action("Open Interpreter: do what this selection says",
                    types.CodeActionKind.Refactor, protocol.CHAT_COMMAND,
                    {"message": DO_IT, **where}),
        ]
    for diagnostic in params.context.diagnostics[:3]:
        found.append(_fix(uri, diagnostic))
    only = params.context.only
    if only:
        found = [a for a in found if any(a.kind == k or str(a.kind).startswith(f"{k}.")
                                         for k in only)]
    return found


def _fix(uri: str, diagnostic: types.Diagnostic) -> types.CodeAction:
    """Fix this: the problem, the file and its whole lines go to the model."""
    start, end = diagnostic.range.start.line, diagnostic.range.end.line
    lines = types.Range(start=types.Position(line=start, character=0),
                        end=types.Position(line=end + 1, character=0))
    source = f" ({diagnostic.source})" if diagnostic.source else ""
    code = f" [{diagnostic.code}]" if diagnostic.code is not None else ""
    message = (f"Fix this problem{source}{code} at line {start + 1}: {diagnostic.message}\n"
               "Propose the corrected code.")
    action = _action("Open Interpreter: fix this", types.CodeActionKind.QuickFix,
                     protocol.CHAT_COMMAND, {"message": message, "uri": uri,
                                             "range": _json_range(lines)})
    action.diagnostics = [diagnostic]
    return action


def _action(title: str, kind: str, command: str, args: dict[str, Any]) -> types.CodeAction:
    return types.CodeAction(title=title, kind=kind,
                            command=types.Command(title=title, command=command,
                                                  arguments=[args]))


def _json_range(rng: types.Range) -> dict[str, Any]:
    return {"start": {"line": rng.start.line, "character": rng.start.character},
            "end": {"line": rng.end.line, "character": rng.end.character}}
