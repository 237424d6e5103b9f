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
import shlex
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import languages, protocol

if TYPE_CHECKING:
    from ..client import OIClient
    from .line_input import LineReader
    from .render import Renderer

OPENAI_DEFAULT_MODEL = "gpt-4o-mini"  # when only OPENAI_API_KEY is set

NO_MODEL_HELP = f"""\
No model is configured. Set one of these, then run `oi-lsp chat` again:
  OpenAI:       export OPENAI_API_KEY=sk-...
                (uses {OPENAI_DEFAULT_MODEL}; pick another with OI_MODEL=gpt-4o or --model)
  Local Ollama: ollama serve & ollama pull llama3.1
                export OI_MODEL=ollama/llama3.1 OI_API_BASE=http://localhost:11434
  Any OpenAI-compatible server (LM Studio, llamafile, vLLM, ...):
                export OI_MODEL=openai/<model name> OI_API_BASE=http://localhost:1234/v1
Or pass them once: oi-lsp chat --model ollama/llama3.1 --api-base http://localhost:11434"""

ASK = "Run? [y]es / [n]o / [e]dit / [a]lways: "
NEEDS_Y = ("Not run: there is no terminal to ask whether to run this code. Pass -y "
           "(--auto-run) to run the model's code without asking.")
# Exit statuses
OK, FAILED, USAGE, NOT_RUN, INTERRUPTED = 0, 1, 2, 3, 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", nargs="*",
                        help="a first message; with no terminal on stdin, the only one (read "
                             "from stdin when not given)")
    parser.add_argument("-y", "--auto-run", action="store_true",
                        help="run the model's code without asking")
    parser.add_argument("--model", help="litellm model, e.g. gpt-4o-mini or ollama/llama3.1 "
                                        "(default: $OI_MODEL)")
    parser.add_argument("--api-base", help="base URL of the model API (default: $OI_API_BASE)")
    parser.add_argument("--api-key", help="API key of the model API (default: $OI_API_KEY or "
                                          "the provider's variable, e.g. $OPENAI_API_KEY)")
    parser.add_argument("--profile", help="a settings profile of the server, by name")
    parser.add_argument("--workspace", default=".", metavar="DIR",
                        help="the folder whose conversation and REPLs to use (default: here)")
    parser.add_argument("--exec", nargs=2, metavar=("LANG", "CODE"),
                        help="run CODE in the workspace's LANG REPL, print its output, exit")


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
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.folder = folder
        self.message = " ".join(args.message).strip()
        self.interactive = sys.stdin.isatty() and not args.exec
        self.workspace = ""
        self.busy = False  # a turn or an --exec run is going on
        self.stopping = False  # Ctrl-C asked the server to stop it
        self.always = False  # [a]lways was answered: run the rest without asking
        self.not_run = False  # one-shot: a proposal needed an approval nobody could give
        self.last_proposed: str | None = None  # to show the code that runs only if edited
        self.confirm_parts: list[str] = []
        self.deferred: list[str] = []  # server messages that arrive during a turn
        self.asking: set[asyncio.Task[None]] = set()
        self.reader: LineReader | None = None
        self.main_task: asyncio.Task[Any] | None = None
        self.model = ""

    async def run(self) -> int:
        from rich.console import Console

        from ..client import OIClient, to_uri
        from .line_input import LineReader
        from .render import Renderer

        self.ui: Renderer = Renderer(Console(highlight=False),
                                     Console(stderr=True, highlight=False))
        self.client: OIClient = OIClient()
        self.workspace = to_uri(self.folder)
        self.main_task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        saved_tty = _save_tty()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        try:
            # Its own session: the terminal's Ctrl-C reaches only us (we turn it into oi/stop),
            # never the server or its kernels.
            await self.client.start(new_session=True)
            self.client.listeners.append(self._on_notification)
            await self.client.initialize([self.folder])
            if self.args.exec:
                return await self._exec(*self.args.exec)
            if not await self._configure():
                return USAGE
            if self.interactive:
                self.reader = LineReader(loop)
                return await self._interactive()
            message = self.message or (await asyncio.to_thread(sys.stdin.read)).strip()
            if not message:
                self.ui.error('Nothing to send: give a message, e.g. oi-lsp chat "list the '
                              'files here" (or pipe it on stdin).')
                return USAGE
            return await self._one_shot(message)
        except asyncio.CancelledError:  # Ctrl-C with nothing to stop, or a second Ctrl-C
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self.ui.newline()
            return INTERRUPTED
        except (ConnectionError, OSError, RuntimeError) as exc:
            self.ui.error(f"The oi-lsp server failed: {exc}")
            tail = self.client.stderr.decode(errors="replace").strip()[-2000:]
            if tail:
                self.ui.note(tail)
            return FAILED
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            self.ui.finish()
            for task in self.asking:
                task.cancel()
            # Once the server has answered shutdown, everything is saved and its REPLs are
            # stopped: do not wait long for the process itself.
            await self.client.close(exit_timeout=3)
            _restore_tty(saved_tty)

    # Setup -------------------------------------------------------------------------------------

    async def _configure(self) -> bool:
        """Send the command line's settings; say exactly what to set when there is no model."""
        values: dict[str, Any] = {}
        for key, value in (("model", self.args.model), ("apiBase", self.args.api_base),
                           ("apiKey", self.args.api_key), ("profile", self.args.profile)):
            if value:
                values[key] = value
        if self.args.auto_run:
            values["autoRun"] = True
        result = await self._set(values)
        if result is None:
            return False
        warnings = [str(w) for w in result.get("warnings") or ()]
        if self.args.profile and any("'profile'" in w for w in warnings):
            self.ui.error(f"--profile {self.args.profile}: this oi-lsp server does not know "
                          "profiles (it ignored the setting). Update oi-lsp, or leave out "
                          "--profile.")
            return False
        for warning in warnings:
            self.ui.note(f"warning: {warning}", "yellow")
        settings = result.get("settings") or {}
        if not settings.get("model") and os.environ.get("OPENAI_API_KEY"):
            result = await self._set({"model": OPENAI_DEFAULT_MODEL})
            settings = (result or {}).get("settings") or {}
        if not settings.get("model"):
            self.ui.error(NO_MODEL_HELP)
            return False
        self.model = str(settings["model"])
        return True

    async def _set(self, values: dict[str, Any]) -> dict[str, Any] | None:
        from pygls.exceptions import JsonRpcException

        try:
            result: dict[str, Any] = await self.client.request(
                protocol.CONFIGURE, {"workspace": self.workspace, **values})
        except JsonRpcException as exc:  # a value the server refused: the message names it
            self.ui.error(f"Settings refused: {exc.message}")
            return None
        return result

    # Modes -------------------------------------------------------------------------------------

    async def _interactive(self) -> int:
        history = await self.client.request(protocol.HISTORY, {"workspace": self.workspace})
        self.ui.history(history.get("messages") or [])
        self.ui.note(f"oi-lsp chat · {self.model} · {self.folder}\n"
                     "Ctrl-C stops a turn; Ctrl-C or Ctrl-D at the prompt exits.")
        if self.message:
            self.ui.note(f"> {self.message}", "bold green")
            await self._turn(self.message)
        while True:
            line = await self._prompt("> ")
            if line is None:
                return OK
            if line.strip():
                await self._turn(line.strip())

    async def _one_shot(self, message: str) -> int:
        status = await self._turn(message)
        if self.not_run:
            return NOT_RUN
        return {"done": OK, "stopped": INTERRUPTED}.get(status, FAILED)

    async def _prompt(self, text: str) -> str | None:
        """A line typed at the prompt; None when the user leaves (Ctrl-D, or Ctrl-C)."""
        from .line_input import Interrupted

        assert self.reader is not None
        self.ui.newline()
        if text == "> ":
            self.ui.console.print()  # a blank line between exchanges
        self.ui.console.print(text, end="", style="bold green", markup=False)
        self.ui.console.file.flush()
        try:
            line = await self.reader.read()
        except Interrupted:
            line = None
        if line is None:  # the terminal echoed no newline for Ctrl-C or Ctrl-D
            self.ui.raw("\n")
        else:
            self.ui.at_line_start()  # the terminal echoed the Enter
        return line

    async def _turn(self, message: str) -> str:
        from pygls.exceptions import JsonRpcException

        self.busy, self.stopping, self.always = True, False, False
        try:
            result = await self.client.chat(message, workspace=self.workspace)
        except JsonRpcException as exc:  # e.g. a turn of another client of this folder runs
            result = {"status": "error", "error": exc.message}
        finally:
            self.busy = False
            for task in self.asking:  # the turn is over: nothing is asked any more
                task.cancel()
        self.ui.finish()
        status, error = result.get("status"), result.get("error")
        if status == "stopped" and not self.not_run:
            self.ui.note("[stopped]", "yellow")
        elif status == "error":
            self.ui.error(f"Error: {error}")
        for text in self.deferred:
            if not error or error not in text:
                self.ui.note(text, "yellow")
        self.deferred.clear()
        return str(status)

    async def _exec(self, language: str, code: str) -> int:
        self.busy = True
        try:
            result = await self.client.execute(language, code, workspace=self.workspace)
        finally:
            self.busy = False
        self.ui.newline()
        status = result.get("status")
        if status == "ok":
            return OK
        error = result.get("error") or ""
        printed = "".join(o.get("content") or "" for o in result.get("outputs") or ())
        if status == "stopped":
            self.ui.note("[stopped]", "yellow")
            return INTERRUPTED
        if error and error not in printed:
            self.ui.error(f"{status}: {error}")
        return FAILED

    # Notifications -----------------------------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if params.get("workspace") not in (None, self.workspace):
            return
        if method == protocol.STREAM:
            if params.get("type") == "confirmation":
                self._confirmation(params)
            else:
                self.ui.chunk(params)
        elif method == protocol.PROPOSAL:
            self._proposal(params)
        elif method == "window/showMessage":
            text = str(params.get("message") or "")
            if self.busy:
                self.deferred.append(text)  # after the turn, unless it repeats its error
            else:
                self.ui.note(text, "yellow")

    def _confirmation(self, params: dict[str, Any]) -> None:
        """Show the code that runs when it is not what was proposed (the user edited it)."""
        if params.get("content"):
            self.confirm_parts.append(params["content"])
        if params.get("end"):
            ran = "".join(self.confirm_parts)
            self.confirm_parts.clear()
            if ran.strip() != (self.last_proposed or "").strip():
                self.ui.code(params.get("format") or "text", ran, "running (edited)", "green")

    def _proposal(self, p: dict[str, Any]) -> None:
        """Show the code at once, in stream order; ask in a task (the loop must keep going)."""
        language, code = str(p.get("language")), str(p.get("code"))
        self.last_proposed = code
        risk = _risk_text(p.get("risk"))
        auto = bool(p.get("autoRun"))
        title = f"{language} · " + ("running (auto-run)" if auto else "proposed")
        self.ui.code(language, code, title, "cyan" if auto else "yellow")
        if risk:
            self.ui.note(risk, "bold red" if risk.startswith("high") else "bold yellow")
        if auto or self.stopping:
            return
        if self.always:
            self._spawn(self._approve(p, "run"))
        elif not self.interactive:
            # Never wait for an answer nobody can give: say why, and end the turn.
            self.not_run = True
            self.ui.error(NEEDS_Y if not self.args.auto_run else
                          f"Not run: the server asks for approval of this code even with -y"
                          f"{f' ({risk})' if risk else ''}, and there is no terminal to ask.")
            self._spawn(self._stop())
        else:
            self._spawn(self._ask(p))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.asking.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.asking.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.ui.error(f"oi-lsp chat: {task.exception()}")

    async def _ask(self, p: dict[str, Any]) -> None:
        while True:
            answer = await self._prompt(ASK)
            if answer is None:  # Ctrl-C (the turn is being stopped) or Ctrl-D
                if not self.stopping:
                    await self._stop()
                return
            choice = answer.strip().lower()[:1]
            if choice == "y":
                await self._approve(p, "run")
            elif choice == "n":
                await self._approve(p, "skip")
                self.ui.note("skipped")
            elif choice == "a":
                await self._set({"autoRun": True})
                self.always = True
                self.ui.note("Auto-run is on for this folder until oi-lsp chat exits.")
                await self._approve(p, "run")
            elif choice == "e":
                edited = await self._edit(str(p.get("language")), str(p.get("code")))
                if edited is None or not edited.strip():
                    self.ui.note("nothing to run: skipped")
                    await self._approve(p, "skip")
                else:
                    await self._approve(p, "edit", code=edited)
            else:
                self.ui.note("Answer y, n, e or a.")
                continue
            return

    async def _approve(self, p: dict[str, Any], decision: str, **extra: Any) -> None:
        from pygls.exceptions import JsonRpcException

        try:
            await self.client.approve(p["proposalId"], decision, workspace=self.workspace,
                                      **extra)
        except JsonRpcException as exc:  # the turn was stopped meanwhile: the id is gone
            self.ui.note(f"(not sent: {exc.message})")

    async def _edit(self, language: str, code: str) -> str | None:
        """The code as the user rewrote it: in $VISUAL/$EDITOR, else typed at a prompt."""
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            self.ui.note("No $EDITOR is set: type the code to run instead, then a line with "
                         "only a '.' to finish (an empty one skips it).")
            lines: list[str] = []
            while (line := await self._prompt("... ")) is not None and line != ".":
                lines.append(line)
            if line is None:
                return None
            return "\n".join(lines) + "\n" if lines else None
        fd, name = tempfile.mkstemp(prefix="oi-edit-", suffix=languages.suffix(language))
        path = Path(name)
        saved = _save_tty()
        try:
            with os.fdopen(fd, "w") as f:
                f.write(code)
            proc = await asyncio.create_subprocess_exec(*shlex.split(editor), str(path))
            if await proc.wait() != 0:
                self.ui.note(f"{editor} exited with status {proc.returncode}: skipped")
                return None
            return await asyncio.to_thread(path.read_text)
        except OSError as exc:
            self.ui.error(f"could not run {editor}: {exc}")
            return None
        finally:
            _restore_tty(saved)  # whatever mode the editor left the terminal in
            await asyncio.to_thread(path.unlink, missing_ok=True)

    async def _stop(self) -> None:
        self.stopping = True
        await self.client.request(protocol.STOP, {"workspace": self.workspace})

    # Ctrl-C ------------------------------------------------------------------------------------

    def _on_sigint(self) -> None:
        if self.busy and not self.stopping:
            self.ui.finish()
            self.ui.note("stopping… (Ctrl-C again quits)", "yellow")
            self._spawn(self._stop())
            if self.reader is not None:
                self.reader.interrupt()  # an approval question is moot now
        elif self.reader is not None and self.reader.waiting and not self.busy:
            self.reader.interrupt()  # at the idle prompt: leave
        elif self.main_task is not None:
            self.main_task.cancel()  # nothing to stop, or a second Ctrl-C: quit


def _risk_text(risk: Any) -> str:
    """A proposal's risk as one line ("high risk: deletes ..."); empty when nothing was found."""
    if not isinstance(risk, dict):
        return ""
    try:
        return protocol.Risk.model_validate(risk).summary()
    except ValueError:  # a server newer than this client: show nothing rather than fail
        return ""


def _save_tty() -> list[Any] | None:
    """The terminal's mode, to restore it whatever an editor or an interrupted read left."""
    if not os.isatty(0):
        return None
    import termios

    try:
        return termios.tcgetattr(0)
    except termios.error:
        return None


def _restore_tty(mode: list[Any] | None) -> None:
    if mode is None:
        return
    import termios

    try:
        termios.tcsetattr(0, termios.TCSADRAIN, mode)
    except termios.error:
        pass
