"""`oi-lsp chat`: a terminal client of the same server an editor starts.

It runs `oi-lsp` as a child over stdio (the real LSP protocol, no in-process shortcut), opens the
folder as the workspace and so continues that folder's saved conversation. Each line typed is an
`oi/chat` turn (`%` commands included: the server answers them); proposals are asked in the
terminal; Ctrl-C during a turn sends `oi/stop`, at the idle prompt it exits. With no terminal on
stdin it runs one turn and never waits for an answer nobody can give.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .. import protocol
from . import attach
from .approval import Approval
from .questions import ask
from .state import ChatState
from .terminal import quiet_control_keys, restore_mode, save_mode

HISTORY_PAGE = 40  # the last messages a continued conversation opens with, not all of them

OPENAI_DEFAULT_MODEL = "gpt-4o-mini"  # when only OPENAI_API_KEY is set

NO_MODEL_HELP = f"""\
No model is configured. Set one of these, then run `oi-lsp chat` again:
  OpenAI:       export OPENAI_API_KEY=sk-...
                (uses {OPENAI_DEFAULT_MODEL}; pick another with OI_MODEL=gpt-4o or --model)
  Local Ollama: ollama serve & ollama pull llama3.1
                export OI_MODEL=ollama_chat/llama3.1 OI_API_BASE=http://localhost:11434
  Any OpenAI-compatible server (LM Studio, llamafile, vLLM, ...):
                export OI_MODEL=openai/<model name> OI_API_BASE=http://localhost:1234/v1
Or pass them once: oi-lsp chat --model ollama_chat/llama3.1 --api-base http://localhost:11434"""

# Exit statuses
OK, FAILED, USAGE, NOT_RUN, INTERRUPTED = 0, 1, 2, 3, 130


def main(args: argparse.Namespace) -> int:
    folder = Path(args.workspace).expanduser().resolve()
    if not folder.is_dir():
        print(f"oi-lsp chat: {folder} is not a folder", file=sys.stderr)
        return USAGE
    try:
        return asyncio.run(Chat(args, folder).run())
    except KeyboardInterrupt:  # before the Ctrl-C handler is installed
        return INTERRUPTED


class Chat:
    """Startup, settings, the turn loop and the exit status; Ctrl-C. Proposals are the
    Approval's; what both change is in the ChatState."""

    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.folder = folder
        self.message = " ".join(args.message).strip()
        self.interactive = sys.stdin.isatty() and not args.exec
        self.deferred: list[str] = []  # server messages that arrive during a turn
        self.main_task: asyncio.Task[Any] | None = None
        self.model = ""
        self.attachments: list[dict[str, Any]] = []  # for the next message
        self.usage: dict[str, Any] | None = None  # the last chat turn's (oi/turn)

    async def run(self) -> int:
        from rich.console import Console

        from ..client import OIClient, server_command, to_uri
        from . import input_box
        from .line_input import LineReader
        from .render import Renderer

        ui = Renderer(Console(highlight=False), Console(stderr=True, highlight=False))
        state = self.state = ChatState(ui, OIClient(), to_uri(self.folder), self.interactive)
        self.approval = Approval(state, self.args.auto_run)
        self.main_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        saved_tty = save_mode()
        quiet_control_keys(saved_tty)
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        try:
            if self.interactive:  # the server may ask (trust the folder's settings?) at once
                state.reader = LineReader(loop)
            state.client.message_box = lambda text, actions: ask(state, text, actions)
            # Its own session: the terminal's Ctrl-C reaches only us (we turn it into oi/stop),
            # never the server or its kernels.
            await state.client.start(
                [*server_command(), "--standalone"] if self.args.standalone else None,
                new_session=True)
            state.client.listeners.append(self._on_notification)
            state.client.input_box = lambda params: input_box.answer(state, params)
            await state.client.initialize([self.folder], answers_input=True)
            if self.args.exec:
                return await self._exec(*self.args.exec)
            if not await self._configure() or not self._attach(*self.args.attach):
                return USAGE
            if self.interactive:
                return await self._interactive()
            message = self.message or (await asyncio.to_thread(sys.stdin.read)).strip()
            if not message:
                ui.error('Nothing to send: give a message, e.g. oi-lsp chat "list the '
                         'files here" (or pipe it on stdin).')
                return USAGE
            return await self._one_shot(message)
        except asyncio.CancelledError:  # Ctrl-C with nothing to stop, or a second Ctrl-C
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            ui.newline()
            return INTERRUPTED
        except (ConnectionError, OSError, RuntimeError) as exc:
            ui.error(f"The oi-lsp server failed: {exc}")
            tail = state.client.stderr.decode(errors="replace").strip()[-2000:]
            if tail:
                ui.note(tail)
            return FAILED
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            ui.finish()
            state.cancel_tasks()
            # Once the server has answered shutdown, everything is saved and its REPLs are
            # stopped: do not wait long for the process itself.
            await state.client.close(exit_timeout=3)
            restore_mode(saved_tty)

    # Setup -------------------------------------------------------------------------------------

    async def _configure(self) -> bool:
        """Send the command line's settings; say exactly what to set when there is no model."""
        state = self.state
        values: dict[str, Any] = {}
        for key, value in (("model", self.args.model), ("apiBase", self.args.api_base),
                           ("apiKey", self.args.api_key), ("profile", self.args.profile)):
            if value:
                values[key] = value
        if self.args.auto_run:
            values["autoRun"] = True
        result = await state.configure(values)
        if result is None:
            return False
        warnings = [str(w) for w in result.get("warnings") or ()]
        if self.args.profile and any("'profile'" in w for w in warnings):
            state.ui.error(f"--profile {self.args.profile}: this oi-lsp server does not know "
                           "profiles (it ignored the setting). Update oi-lsp, or leave out "
                           "--profile.")
            return False
        for warning in warnings:
            state.ui.note(f"warning: {warning}", "yellow")
        settings = result.get("settings") or {}
        if not settings.get("model") and os.environ.get("OPENAI_API_KEY"):
            result = await state.configure({"model": OPENAI_DEFAULT_MODEL})
            settings = (result or {}).get("settings") or {}
        if not settings.get("model"):
            state.ui.error(NO_MODEL_HELP)
            return False
        self.model = str(settings["model"])
        return True

    # Modes -------------------------------------------------------------------------------------

    async def _interactive(self) -> int:
        state = self.state
        history = await state.client.request(protocol.HISTORY, {
            "workspace": state.workspace, "limit": HISTORY_PAGE})
        state.ui.history(history.get("messages") or [], history.get("total"))
        state.ui.note(f"oi-lsp chat · {self.model} · {self.folder}\n"
                      "Ctrl-C stops a turn; Ctrl-C or Ctrl-D at the prompt exits.")
        if self.message:
            state.ui.note(f"> {self.message}", "bold green")
            await self._turn(self.message)
        while True:
            line = await state.prompt("> ")
            if line is None:
                return OK
            if attach.is_command(line.strip()):
                self._attach(line.strip().removeprefix(attach.COMMAND))
            elif line.strip():
                await self._turn(line.strip())

    def _attach(self, *paths: str) -> bool:
        """Attach images to the next message; False (and why shown) for one that cannot be."""
        for path in paths:
            try:
                self.attachments.append(attach.attachment(path))
            except ValueError as exc:
                self.state.ui.error(f"Not attached: {exc}")
                return False
            self.state.ui.note(f"[attached {Path(path.strip()).name}: sent with the next "
                               "message]")
        return True

    async def _one_shot(self, message: str) -> int:
        status = await self._turn(message)
        if self.state.not_run:
            return NOT_RUN
        return {"done": OK, "stopped": INTERRUPTED}.get(status, FAILED)

    async def _turn(self, message: str) -> str:
        from pygls.exceptions import JsonRpcException

        state = self.state
        state.busy, state.stopping, state.always = True, False, False
        self.usage = None
        try:
            sent, self.attachments = self.attachments, []
            result = await state.client.chat(message, workspace=state.workspace,
                                             **({"attachments": sent} if sent else {}))
        except JsonRpcException as exc:  # e.g. a turn of another client of this folder runs
            result = {"status": "error", "error": exc.message}
        finally:
            state.busy = False
            state.cancel_tasks()  # the turn is over: nothing is asked any more
        state.ui.finish()
        if self.usage is not None and state.ui.console.is_terminal:
            from .render import usage_line
            line = usage_line(self.usage)
            if line:
                state.ui.note(line)
        self.usage = None
        status, error = result.get("status"), result.get("error")
        if status == "stopped" and not state.not_run:
            state.ui.note("[stopped]", "yellow")
        elif status == "error":
            state.ui.error(f"Error: {error}")
        for text in self.deferred:
            if not error or error not in text:
                state.ui.note(text, "yellow")
        self.deferred.clear()
        return str(status)

    async def _exec(self, language: str, code: str) -> int:
        state = self.state
        state.busy = True
        try:
            result = await state.client.execute(language, code, workspace=state.workspace)
        finally:
            state.busy = False
        state.ui.newline()
        status = result.get("status")
        if status == "ok":
            return OK
        error = result.get("error") or ""
        printed = "".join(o.get("content") or "" for o in result.get("outputs") or ())
        if status == "stopped":
            state.ui.note("[stopped]", "yellow")
            return INTERRUPTED
        if error and error not in printed:
            state.ui.error(f"{status}: {error}")
        return FAILED

    # Notifications -----------------------------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        state = self.state
        if params.get("workspace") not in (None, state.workspace):
            return
        if method == protocol.STREAM:
            if params.get("type") == "confirmation":
                self.approval.confirmation(params)
            elif state.asking:
                state.held_output.append(params)
            else:
                state.ui.chunk(params)
        elif method == protocol.TURN and params.get("kind") == "chat" \
                and params.get("status") != "running":
            self.usage = params.get("usage")
        elif method == protocol.PROPOSAL:
            self.approval.proposal(params)
        elif method == protocol.ANSWERED:
            self.approval.answered(params)
        elif method == "window/showMessage":
            text = str(params.get("message") or "")
            if state.busy:
                self.deferred.append(text)  # after the turn, unless it repeats its error
            elif state.asking:
                state.held.append(text)
            else:
                state.ui.note(text, "yellow")

    # Ctrl-C ------------------------------------------------------------------------------------

    def _on_sigint(self) -> None:
        state = self.state
        if state.busy and not state.stopping:
            state.ui.finish()
            state.ui.note("stopping… (Ctrl-C again quits)", "yellow")
            state.spawn(state.stop())
            if state.reader is not None:
                state.reader.interrupt()  # an approval question is moot now
        elif state.reader is not None and state.reader.waiting and not state.busy:
            state.reader.interrupt()  # at the idle prompt: leave
        elif self.main_task is not None:
            self.main_task.cancel()  # nothing to stop, or a second Ctrl-C: quit
