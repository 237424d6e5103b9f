"""The pygls server: one small handler per method. Each validates its params, finds the
workspace, calls it and returns; the work is done in core/ and below."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from .. import protocol
from ..common import files
from ..common.uris import from_fs_path
from ..core import llm, model_presets, profiles
from ..core.aio import in_thread, live_tasks
from ..core.approval import UnknownProposal, WrongDecision
from ..core.link import Answer
from ..core.settings import SettingsError
from ..core.workspace import Workspace
from ..core.workspaces import NotAWorkspace
from ..protocol import (
    ApproveParams,
    ApproveResult,
    ChatParams,
    CommandTarget,
    ConfigureParams,
    ConfigureResult,
    ExecuteParams,
    HistoryParams,
    HistoryResult,
    InvalidParams,
    LanguagesResult,
    LocalServer,
    ModelsResult,
    OkResult,
    SessionExportParams,
    SessionOpenParams,
    SessionResult,
    SessionsParams,
    SessionsResult,
    StopResult,
    TranscriptResult,
    WorkspaceParams,
)
from . import commands
from .commands import refusals
from .language_server import OIServer

log = logging.getLogger(__name__)

# Longest wait for the opened workspaces' kernels before litellm starts loading (seconds).
WARM_UP_WAIT = 5.0


SERVER = OIServer()


def _workspace(ls: OIServer, params: WorkspaceParams | ApproveParams,
               hint: str | None = None, *, start: bool = False) -> Workspace:
    """The workspace a request names. Only a chat or a run `start`s it (its kernel, the
    question about its settings): reading and changing records open nothing."""
    try:
        return ls.workspaces.resolve(params.workspace, hint, start=start)
    except NotAWorkspace as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


def _parse(model_cls: type[protocol.M], params: Any) -> protocol.M:
    try:
        return protocol.parse(model_cls, params)
    except InvalidParams as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


# LSP lifecycle ------------------------------------------------------------------------------

@SERVER.feature(types.INITIALIZE)
def initialize(ls: OIServer, params: types.InitializeParams) -> None:
    ls.client_known(params.capabilities)
    ls.apply_client_settings(params.initialization_options)
    folders = [f.uri for f in params.workspace_folders or ()]
    if not folders and params.root_uri:
        folders = [params.root_uri]
    for uri in folders:
        try:
            ls.workspaces.add_folder(uri)
        except NotAWorkspace as exc:
            log.warning("%s", exc)


@SERVER.feature(types.INITIALIZED)
def initialized(ls: OIServer, params: types.InitializedParams) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # once: initialized comes once
        ls.keep(_warn_root(ls))
    # Load litellm in the background so the first turn does not wait; but once the kernels
    # of the opened workspaces are up: its import holds the GIL for seconds, and a first run
    # right after opening came 0.27 s later (1.86 s from initialize, not 1.58). A chat that
    # comes first starts the load itself.
    if os.environ.get("OI_LSP_WARM_UP", "1") != "0":
        ls.warming = asyncio.ensure_future(_warm_up_after(ls.workspaces.opening()))


ROOT_WARNING = ("oi-lsp runs as root: code the model proposes runs with full control of this "
                "machine. Run the editor as a normal user if you can.")


async def _warn_root(ls: OIServer) -> None:
    """A message box the first time for this data folder; then the log only, so a root-run
    container does not say it in every chat of every start."""
    if await in_thread(files.first_time, "root-warned"):
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                       message=ROOT_WARNING))
    else:
        ls.window_log_message(types.LogMessageParams(type=types.MessageType.Warning,
                                                     message=ROOT_WARNING))


async def _warm_up_after(opening: list[asyncio.Task[None]]) -> None:
    if opening:
        await asyncio.wait(opening, timeout=WARM_UP_WAIT)
    llm.warm_up()


@SERVER.feature(types.SHUTDOWN)
async def shutdown(ls: OIServer, params: None) -> None:
    ls.shut_down = True
    await ls.workspaces.close_all()


@SERVER.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
async def did_change_folders(ls: OIServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    for folder in params.event.removed:
        await ls.workspaces.remove_folder(folder.uri)
    for folder in params.event.added:
        try:
            ls.workspaces.add_folder(folder.uri)
        except NotAWorkspace as exc:
            log.warning("%s", exc)


@SERVER.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(ls: OIServer,
                                   params: types.DidChangeConfigurationParams) -> None:
    if isinstance(params.settings, dict) and params.settings:
        ls.apply_client_settings(params.settings)
        await ls.workspaces.settings_changed()
        return
    # Pull model: the notification carries nothing; ask for the section.
    try:
        values = await ls.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(section="oi")]))
    except JsonRpcException as exc:
        log.warning("could not read the oi configuration: %s", exc)
        return
    if values:
        ls.apply_client_settings(values[0])
        await ls.workspaces.settings_changed()


# oi/* requests -----------------------------------------------------------------------------

@SERVER.feature(protocol.CHAT)
async def chat(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(ChatParams, params)
    workspace = _workspace(ls, p, p.context.uri if p.context else None, start=True)
    with refusals():
        return (await workspace.chat(p)).wire()


if os.environ.get(protocol.DEBUG_TASKS_ENV) == "1":
    @SERVER.feature(protocol.DEBUG_TASKS)
    def debug_tasks(ls: OIServer, params: Any) -> dict[str, Any]:
        """Test-only: the tasks alive on the server's loop, and its child processes."""
        import psutil

        children = psutil.Process().children(recursive=True)
        return {"tasks": live_tasks(asyncio.current_task()),
                "children": sorted(child.pid for child in children)}


@SERVER.feature(protocol.APPROVE)
async def approve(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(ApproveParams, params)
    workspace = None
    if p.workspace:
        workspace = _workspace(ls, p).uri
    result = ApproveResult()
    try:
        if p.always is not None:  # the rule first: when it cannot be saved, nothing runs
            owner, language, code = ls.approvals.proposal(p.proposal_id, workspace)
            with refusals():
                rule, path = await ls.workspaces.get(owner).layers.always(language, code,
                                                                          p.always)
            result = ApproveResult(rule=rule, file=str(path))
        ls.approvals.answer(p.proposal_id, Answer(p.decision, p.code), workspace)
    except (UnknownProposal, WrongDecision) as exc:
        raise JsonRpcInvalidParams(str(exc)) from None
    return result.wire()


@SERVER.feature(protocol.EXECUTE)
async def execute(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(ExecuteParams, params)
    return (await _workspace(ls, p, start=True).execute(p)).wire()


@SERVER.feature(protocol.STOP)
async def stop(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(WorkspaceParams, params)
    return StopResult(stopped=await _workspace(ls, p).stop()).wire()


@SERVER.feature(protocol.RESET)
async def reset(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(WorkspaceParams, params)
    await _workspace(ls, p).reset()
    return OkResult().wire()


@SERVER.feature(protocol.HISTORY)
async def history(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(HistoryParams, params)
    workspace = _workspace(ls, p)
    with refusals():  # an older page's line that cannot be read
        start, messages, total = await workspace.conversation.page(p.before, p.limit)
    return HistoryResult(workspace=workspace.uri, messages=messages, start=start,
                         total=total).wire()


@SERVER.feature(protocol.CONFIGURE)
async def configure(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(ConfigureParams, params)
    workspace = _workspace(ls, p)
    try:
        settings, unknown = await workspace.configure(dict(p.model_extra or {}))
    except SettingsError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None
    return ConfigureResult(settings=settings.public(),
                           warnings=[f"unknown setting {k!r} ignored" for k in unknown]).wire()


@SERVER.feature(protocol.LANGUAGES)
async def languages(ls: OIServer, params: Any) -> dict[str, Any]:
    workspace = _workspace(ls, _parse(WorkspaceParams, params))
    return LanguagesResult(languages=await workspace.repls.languages()).wire()


@SERVER.feature(protocol.STATUS)
async def status(ls: OIServer, params: Any) -> dict[str, Any]:
    return (await _workspace(ls, _parse(WorkspaceParams, params)).status()).wire()


@SERVER.feature(protocol.SESSIONS)
async def sessions(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(SessionsParams, params)
    workspace = _workspace(ls, p)
    return SessionsResult(workspace=workspace.uri, current=workspace.conversation.id,
                          sessions=await workspace.conversation.summaries(p.query)).wire()


@SERVER.feature(protocol.SESSION_OPEN)
async def session_open(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(SessionOpenParams, params)
    workspace = _workspace(ls, p)
    with refusals():
        await workspace.open_conversation(p.id)
    return await _session_result(workspace, p.limit)


@SERVER.feature(protocol.SESSION_NEW)
async def session_new(ls: OIServer, params: Any) -> dict[str, Any]:
    workspace = _workspace(ls, _parse(WorkspaceParams, params))
    with refusals():
        await workspace.new_conversation()
    return await _session_result(workspace)


async def _session_result(workspace: Workspace, limit: int | None = None) -> dict[str, Any]:
    conversation = workspace.conversation
    start, messages, total = await conversation.page(None, limit)
    return SessionResult(workspace=workspace.uri, id=conversation.id, messages=messages,
                         start=start, total=total).wire()


@SERVER.feature(protocol.SESSION_EXPORT)
async def session_export(ls: OIServer, params: Any) -> dict[str, Any]:
    p = _parse(SessionExportParams, params)
    workspace = _workspace(ls, p)
    with refusals():
        return (await workspace.conversation.export(p.id, p.format)).wire()


@SERVER.feature(protocol.MODELS)
async def models(ls: OIServer, params: Any) -> dict[str, Any]:
    workspace = _workspace(ls, _parse(WorkspaceParams, params))
    servers, names = await asyncio.gather(model_presets.probe(),
                                          in_thread(profiles.available))
    return ModelsResult(local=[LocalServer.model_validate(s) for s in servers],
                        model=workspace.settings().model, profiles=names).wire()


# Plain LSP: commands, code actions, progress (commands.py) ---------------------------------

@SERVER.command(protocol.CHAT_COMMAND)
async def chat_command(ls: OIServer, *args: Any) -> dict[str, Any]:
    return await commands.chat(ls, args)


@SERVER.command(protocol.EXECUTE_COMMAND)
async def execute_command(ls: OIServer, *args: Any) -> dict[str, Any]:
    return await commands.execute(ls, args)


@SERVER.command(protocol.STOP_COMMAND)
async def stop_command(ls: OIServer, *args: Any) -> dict[str, Any]:
    workspace = commands.target(ls, commands.arguments(CommandTarget, args))
    return StopResult(stopped=await workspace.stop()).wire()


@SERVER.command(protocol.RESET_COMMAND)
async def reset_command(ls: OIServer, *args: Any) -> dict[str, Any]:
    await commands.target(ls, commands.arguments(CommandTarget, args)).reset()
    return OkResult().wire()


@SERVER.command(protocol.NEW_CONVERSATION_COMMAND)
async def new_conversation_command(ls: OIServer, *args: Any) -> dict[str, Any]:
    workspace = commands.target(ls, commands.arguments(CommandTarget, args))
    with refusals(protocol.NEW_CONVERSATION_COMMAND):
        await workspace.new_conversation()
    return {"workspace": workspace.uri, "id": workspace.conversation.id}


@SERVER.command(protocol.SHOW_TRANSCRIPT_COMMAND)
async def show_transcript_command(ls: OIServer, *args: Any) -> dict[str, Any]:
    workspace = commands.target(ls, commands.arguments(CommandTarget, args))
    if ls.plain is not None:
        path = await ls.plain.show_transcript(workspace, focus=True)
    else:
        path = await workspace.transcript.flush()
    return TranscriptResult(uri=from_fs_path(str(path))).wire()


@SERVER.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.Refactor,
                       types.CodeActionKind.Source]))
def code_action(ls: OIServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    return commands.code_actions(params)


@SERVER.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)
def progress_cancelled(ls: OIServer, params: types.WorkDoneProgressCancelParams) -> None:
    ls.turn_progress.cancelled(str(params.token))
