"""`oi-lsp chat`: a terminal client of the same server an editor starts.

It runs `oi-lsp` as a child over stdio (the real LSP protocol, no in-process shortcut), opens the
current folder as the workspace and so continues that folder's saved conversation. Each line
typed is an `oi/chat` turn; proposals are asked in the terminal; Ctrl-C during a turn sends
`oi/stop`, at the idle prompt it exits. With a message and no terminal on stdin it runs one turn.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import protocol

if TYPE_CHECKING:
    from .chat_render import Renderer
    from .client import OIClient

NO_MODEL_HELP = """\
No model is configured. Set one of these, then run `oi-lsp chat` again:
  OpenAI:       export OPENAI_API_KEY=sk-...  OI_MODEL=gpt-4o-mini
                (or: oi-lsp chat --model gpt-4o-mini --api-key sk-...)
  Local Ollama: ollama pull llama3.1   (with `ollama serve` running)
                export OI_MODEL=ollama/llama3.1 OI_API_BASE=http://localhost:11434
  Any OpenAI-compatible server:
                oi-lsp chat --model openai/<name> --api-base http://host:port/v1"""

ASK = "Run? [y]es / [n]o / [e]dit / [a]lways: "
SUFFIXES = {"python": ".py", "shell": ".sh", "bash": ".sh", "javascript": ".js", "r": ".R",
            "ruby": ".rb", "powershell": ".ps1"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", nargs="*",
                        help="a first message; with no terminal on stdin, the only one")
    parser.add_argument("-y", "--auto-run", action="store_true",
                        help="run the model's code without asking")
    parser.add_argument("--model", help="litellm model, e.g. gpt-4o-mini or ollama/llama3.1")
    parser.add_argument("--api-base", help="base URL of the model API")
    parser.add_argument("--api-key", help="API key of the model API")
    parser.add_argument("--profile", help="a settings profile of the server")
    parser.add_argument("--workspace", default=".", metavar="DIR",
                        help="the folder whose conversation and REPL to use (default: here)")
    parser.add_argument("--exec", nargs=2, metavar=("LANG", "CODE"),
                        help="run CODE in the workspace's LANG REPL, print its output, exit")


def main(args: argparse.Namespace) -> int:
    folder = Path(args.workspace).expanduser().resolve()
    if not folder.is_dir():
        print(f"oi-lsp chat: {folder} is not a folder", file=sys.stderr)
        return 2
    try:
        return asyncio.run(Chat(args, folder).run())
    except KeyboardInterrupt:  # before the handlers are installed, or after they are gone
        return 130


class LineReader:
    """Reads terminal lines in a daemon thread, so the event loop keeps serving the server.

    os.read on fd 0 (not sys.stdin) holds no lock, so exiting while a read is pending is safe.
    A line goes to whoever waits when it arrives: after Ctrl-C abandons the approval question,
    the line being typed answers the next prompt instead of being lost.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._wanted = threading.Event()
        self._lines: list[str | None] = []  # None: end of input
        self._waiter: asyncio.Future[str | None] | None = None
        self._buffer = b""
        threading.Thread(target=self._run, daemon=True, name="oi-chat-stdin").start()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            try:
                data = os.read(0, 65536)
            except OSError:
                data = b""
            self.loop.call_soon_threadsafe(self._deliver, data)
            if not data:
                return

    def _deliver(self, data: bytes) -> None:
        if not data:
            if self._buffer:
                self._lines.append(self._buffer.decode(errors="replace"))
                self._buffer = b""
            self._lines.append(None)
        else:
            self._buffer += data
            *lines, self._buffer = self._buffer.split(b"\n")
            self._lines.extend(line.decode(errors="replace") for line in lines)
            if not lines:
                self._wanted.set()
        self._wake()

    def _wake(self) -> None:
        if self._lines and self._waiter is not None and not self._waiter.done():
            line = self._lines[0]
            if line is not None:  # end of input stays, for every later read
                self._lines.pop(0)
            self._waiter.set_result(line)

    async def read(self) -> str | None:
        """The next line (without its newline), or None at end of input."""
        self._waiter = self.loop.create_future()
        if not self._lines:
            self._wanted.set()
        self._wake()
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def interrupt(self) -> None:
        """Abandon the current read (Ctrl-C)."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()


class Chat:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.folder = folder
        self.message = " ".join(args.message).strip()
        self.tty = sys.stdin.isatty()
        self.interactive = self.tty and not args.exec
        self.workspace = ""
        self.turn_running = False
        self.proposals: dict[str, str] = {}  # proposalId -> code shown
        self.last_code: str | None = None
        self.confirm_parts: list[str] = []
        self.deferred: list[str] = []  # server messages that arrive during a turn
        self.skipped_for_y = False
        self.interrupted = False
        self.reader: LineReader | None = None
        self.helped = False  # the no-model help was shown

    async def run(self) -> int:
        from rich.console import Console

        from .chat_render import Renderer
        from .client import OIClient, to_uri

        self.ui: Renderer = Renderer(Console(highlight=False))
        self.client: OIClient = OIClient()
        self.workspace = to_uri(self.folder)
        loop = asyncio.get_running_loop()
        saved_tty = _save_tty()
        try:
            await self.client.start(new_session=True)
            await self.client.initialize([self.folder])
            self.client.listeners.append(self._on_notification)
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
            if self.args.exec:
                return await self._exec(*self.args.exec)
            if not await self._configure():
                return 2
            if self.interactive:
                self.reader = LineReader(loop)
                return await self._interactive()
            message = self.message or (sys.stdin.read().strip() if not self.tty else "")
            if not message:
                self.ui.error("Nothing to send: give a message, e.g. oi-lsp chat \"list the "
                              "files here\".")
                return 2
            return await self._one_shot(message)
        except (ConnectionError, OSError) as exc:
            self.ui.error(f"The oi-lsp server failed: {exc}")
            tail = self.client.stderr.decode(errors="replace").strip()[-2000:]
            if tail:
                self.ui.note(tail)
            return 1
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            self.ui.finish()
            await self.client.close()
            _restore_tty(saved_tty)

    # Setup -------------------------------------------------------------------------------------

    async def _configure(self) -> bool:
        """Send the command line's settings; tell the user what to set when there is no model."""
        values: dict[str, Any] = {}
        for key, value in (("model", self.args.model), ("apiBase", self.args.api_base),
                           ("apiKey", self.args.api_key), ("profile", self.args.profile)):
            if value:
                values[key] = value
        if self.args.auto_run:
            values["autoRun"] = True
        try:
            result = await self.client.request(protocol.CONFIGURE,
                                               {"workspace": self.workspace, **values})
        except Exception as exc:  # a value the server refused: it names the key
            self.ui.error(f"Settings refused: {exc}")
            return False
        for warning in result.get("warnings") or ():
            self.ui.note(f"warning: {warning}", "yellow")
        settings = result.get("settings") or {}
        if not settings.get("model"):
            self.ui.error(NO_MODEL_HELP)
            self.helped = True
        return True

    async def _show_history(self) -> None:
        result = await self.client.request(protocol.HISTORY, {"workspace": self.workspace})
        self.ui.history(result.get("messages") or [])

    # Modes -------------------------------------------------------------------------------------

    async def _interactive(self) -> int:
        await self._show_history()
        self.ui.note(f"oi-lsp chat in {self.folder}. Ctrl-C stops a turn; Ctrl-D or Ctrl-C "
                     "here exits.")
        if self.message:
            await self._turn(self.message)
        while True:
            line = await self._prompt("> ")
            if line is None:
                return 0
            if line.strip():
                await self._turn(line.strip())

    async def _one_shot(self, message: str) -> int:
        status = await self._turn(message)
        if status == "done" and self.skipped_for_y:
            return 3
        return 0 if status == "done" else 1

    async def _prompt(self, text: str) -> str | None:
        """A line typed at the prompt; None when the user leaves (Ctrl-D, or Ctrl-C)."""
        assert self.reader is not None
        self.ui.newline()
        self.ui.console.print(text, end="", style="bold green", markup=False)
        self.ui.console.file.flush()
        self.interrupted = False
        try:
            line = await self.reader.read()
        except asyncio.CancelledError:
            if self.interrupted and not self.turn_running:
                self.ui.raw("\n")
                return None
            raise
        if line is None:
            self.ui.raw("\n")
        return line

    async def _turn(self, message: str) -> str:
        self.turn_running = True
        self.skipped_for_y = False
        try:
            result = await self.client.chat(message, workspace=self.workspace)
        except Exception as exc:  # e.g. a turn of another client of this folder runs
            result = {"status": "error", "error": str(exc)}
        finally:
            self.turn_running = False
        self.ui.finish()
        status, error = result.get("status"), result.get("error")
        if status == "stopped":
            self.ui.note("[stopped]", "yellow")
        elif status == "error":
            self.ui.error(f"Error: {error}")
            if error and "No model is configured" in error and not self.helped:
                self.ui.note(NO_MODEL_HELP)
        for text in self.deferred:
            if error is None or error not in text:
                self.ui.note(text, "yellow")
        self.deferred.clear()
        return str(status)

    async def _exec(self, language: str, code: str) -> int:
        result = await self.client.execute(language, code, workspace=self.workspace)
        self.ui.newline()
        if result.get("status") != "ok":
            self.ui.error(f"{result.get('status')}: {result.get('error') or ''}".rstrip(": "))
            return 1
        return 0

    # Notifications -----------------------------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == protocol.STREAM:
            if params.get("type") == "confirmation":
                self._confirmation(params)
            else:
                self.ui.chunk(params)
        elif method == protocol.PROPOSAL:
            task = asyncio.get_running_loop().create_task(self._proposal(params))
            task.add_done_callback(_report_failure)
        elif method == "window/showMessage":
            text = params["message"]
            if self.turn_running:
                self.deferred.append(text)
            else:
                self.ui.note(text, "yellow")

    def _confirmation(self, params: dict[str, Any]) -> None:
        """Show the code that runs only when it is not what was just shown (an edit)."""
        if params.get("content"):
            self.confirm_parts.append(params["content"])
        if params.get("end"):
            ran = "".join(self.confirm_parts)
            self.confirm_parts.clear()
            if ran.strip() != (self.last_code or "").strip():
                self.ui.code(params.get("format") or "text", ran, "running")
            self.ui.newline()

    async def _proposal(self, p: dict[str, Any]) -> None:
        language, code = p["language"], p["code"]
        self.last_code = code
        auto = p.get("autoRun")
        self.ui.code(language, code, f"{language}{' (auto-run)' if auto else ''}")
        if auto:
            return
        if not self.interactive:
            self.skipped_for_y = True
            self.ui.error("Skipped: there is no terminal to ask whether to run this code. "
                          "Pass -y (--auto-run) to run the model's code without asking.")
            await self._approve(p, "skip")
            return
        while True:
            answer = await self._prompt(ASK)
            choice = (answer or "n").strip().lower()[:1]
            if choice in ("y", ""):
                await self._approve(p, "run")
            elif choice == "n":
                await self._approve(p, "skip")
                self.ui.note("skipped")
            elif choice == "a":
                await self.client.request(protocol.CONFIGURE,
                                          {"workspace": self.workspace, "autoRun": True})
                self.ui.note("Auto-run is on for this folder until oi-lsp chat exits.")
                await self._approve(p, "run")
            elif choice == "e":
                edited = await self._edit(language, code)
                if edited is None or not edited.strip():
                    self.ui.note("empty code: skipped")
                    await self._approve(p, "skip")
                else:
                    self.last_code = None  # show what runs: it was edited
                    await self._approve(p, "edit", code=edited)
            else:
                continue
            return

    async def _approve(self, p: dict[str, Any], decision: str, **extra: Any) -> None:
        try:
            await self.client.approve(p["proposalId"], decision, workspace=self.workspace,
                                      **extra)
        except Exception as exc:  # the turn was stopped meanwhile: the id is gone
            self.ui.note(f"(not sent: {exc})")

    async def _edit(self, language: str, code: str) -> str | None:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            self.ui.note("No $EDITOR set: type the code to run instead, then a line with "
                         "only a '.' to finish.")
            lines: list[str] = []
            while (line := await self._prompt("... ")) is not None and line != ".":
                lines.append(line)
            return "\n".join(lines) + "\n" if lines else None
        fd, name = tempfile.mkstemp(prefix="oi-edit-", suffix=SUFFIXES.get(language, ".txt"))
        path = Path(name)
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
            await asyncio.to_thread(path.unlink, missing_ok=True)

    # Ctrl-C ------------------------------------------------------------------------------------

    def _on_sigint(self) -> None:
        self.interrupted = True
        if self.turn_running or self.args.exec:
            self.ui.finish()
            self.ui.note("stopping…", "yellow")
            task = asyncio.get_running_loop().create_task(
                self.client.request(protocol.STOP, {"workspace": self.workspace}))
            task.add_done_callback(_report_failure)
        if self.reader is not None:
            self.reader.interrupt()
        elif not self.turn_running and not self.args.exec:
            raise KeyboardInterrupt


def _report_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        print(f"oi-lsp chat: {task.exception()}", file=sys.stderr)


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
