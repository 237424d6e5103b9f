"""Whether to run what the model proposes, asked in the terminal (for `oi-lsp chat`).

A proposal is shown at once as a panel with its risk; then, unless it runs by itself, the user
answers y/n/e/c/a (or, with no terminal, the turn ends with the reason). [e]dit opens $VISUAL or
$EDITOR, or reads the code inline; [c] runs it and has the server save a rule that runs this
command (its first word, else this exact code) without asking in this folder; [a] auto-runs
everything until oi-lsp chat exits. The answer goes to the server as oi/approve.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import protocol
from ..common import languages
from .terminal import restore_mode, save_mode

if TYPE_CHECKING:
    from .state import ChatState

ASK = "Run? [y]es / [n]o / [e]dit / [c] {always} / [a]lways (everything): "
ASK_OUTSIDE = ("Run it once OUTSIDE the sandbox (a fresh process, without the REPL's "
               "variables)? [o]utside / [n]o: ")
NEEDS_Y = ("Not run: there is no terminal to ask whether to run this code. Pass -y "
           "(--auto-run) to run the model's code without asking.")


class Approval:
    def __init__(self, state: ChatState, auto_run: bool) -> None:
        self.state = state
        self.auto_run = auto_run  # -y: a proposal still asked about is one the server holds back
        self.last_proposed: str | None = None  # to show the code that runs only if edited
        self.confirm_parts: list[str] = []
        self.asking: dict[str, asyncio.Task[None]] = {}  # proposal id -> its question

    def confirmation(self, params: dict[str, Any]) -> None:
        """Show the code that runs when it is not what was proposed (the user edited it)."""
        if params.get("content"):
            self.confirm_parts.append(params["content"])
        if params.get("end"):
            ran = "".join(self.confirm_parts)
            self.confirm_parts.clear()
            if ran.strip() != (self.last_proposed or "").strip():
                self.state.ui.code(params.get("format") or "text", ran, "running (edited)",
                                   "green")

    def proposal(self, p: dict[str, Any]) -> None:
        """Show the code at once, in stream order; ask in a task (the loop must keep going)."""
        state = self.state
        language, code = str(p.get("language")), str(p.get("code"))
        self.last_proposed = code
        risk = _risk_text(p.get("risk"))
        auto = bool(p.get("autoRun"))
        blocked = p.get("sandboxBlocked")
        title = f"{language} · " + ("running (auto-run)" if auto else
                                    "blocked by the sandbox" if blocked else "proposed")
        state.ui.code(language, code, title, "cyan" if auto else "yellow")
        if risk:
            state.ui.note(risk, "bold red" if risk.startswith("high") else "bold yellow")
        if auto or state.stopping:
            return
        if blocked:  # never by itself: neither -y nor [a]lways lets code out of the sandbox
            if state.interactive:
                state.spawn(self._ask_outside(p))
            else:
                state.ui.note("not run outside the sandbox: there is no terminal to ask")
                state.spawn(self._approve(p, "skip"))
        elif state.always:
            state.spawn(self._approve(p, "run"))
        elif not state.interactive:
            # Never wait for an answer nobody can give: say why, and end the turn.
            state.not_run = True
            state.ui.error(NEEDS_Y if not self.auto_run else
                           f"Not run: the server asks for approval of this code even with -y"
                           f"{f' ({risk})' if risk else ''}, and there is no terminal to ask.")
            state.spawn(state.stop())
        else:
            state.spawn(self._ask(p))

    def answered(self, params: dict[str, Any]) -> None:
        """oi/answered (the shared daemon): another client answered first; stop asking."""
        task = self.asking.pop(str(params.get("proposalId")), None)
        if task is not None and not task.done():
            task.cancel()
            self.state.ui.raw("\n")
            self.state.ui.note(f"answered in another client: {params.get('decision')}")

    async def _ask(self, p: dict[str, Any]) -> None:
        state = self.state
        command = p.get("command")
        ask = ASK.format(always=f"always `{command}`" if command else "always this code")
        while True:
            choice = await self._waiting_choice(p, ask)
            if choice is None:
                return
            if choice == "y":
                await self._approve(p, "run")
            elif choice == "n":
                # Said first: once the server has the answer, the model's next words may
                # stream before the answer's response comes back.
                state.ui.note("skipped")
                await self._approve(p, "skip")
            elif choice == "c":
                if not await self._always_command(p, command):
                    continue  # refused (an untrusted folder): the proposal still waits
            elif choice == "a":
                await state.configure({"autoRun": True})
                state.always = True
                state.ui.note("Auto-run is on for this folder until oi-lsp chat exits.")
                await self._approve(p, "run")
            elif choice == "e":
                edited = await self._edit(str(p.get("language")), str(p.get("code")))
                if edited is None or not edited.strip():
                    state.ui.note("nothing to run: skipped")
                    await self._approve(p, "skip")
                else:
                    await self._approve(p, "edit", code=edited)
            else:
                state.ui.note("Answer y, n, e, c or a.")
                continue
            return

    async def _ask_outside(self, p: dict[str, Any]) -> None:
        while True:
            choice = await self._waiting_choice(p, ASK_OUTSIDE)
            if choice is None:
                return
            if choice in ("o", "n"):
                await self._approve(p, "outside" if choice == "o" else "skip")
                return
            self.state.ui.note("Answer o or n.")

    async def _waiting_choice(self, p: dict[str, Any], question: str) -> str | None:
        """_choice, withdrawn (cancelled) if another client answers meanwhile."""
        key = str(p.get("proposalId"))
        task = asyncio.current_task()
        if task is not None:
            self.asking[key] = task
        try:
            return await self._choice(question)
        finally:
            self.asking.pop(key, None)

    async def _choice(self, question: str) -> str | None:
        """The first letter of the user's answer; None after Ctrl-C (the turn is being
        stopped) or Ctrl-D, which stop the turn."""
        state = self.state
        answer = await state.prompt(question)
        if answer is None:
            if not state.stopping:
                await state.stop()
            return None
        return answer.strip().lower()[:1]

    async def _always_command(self, p: dict[str, Any], command: str | None) -> bool:
        """Run it and save the rule; False when the server refused (nothing ran)."""
        from pygls.exceptions import JsonRpcException

        try:
            result = await self.state.client.approve(
                p["proposalId"], "run", workspace=self.state.workspace, always="command")
        except JsonRpcException as exc:
            if exc.code != protocol.REQUEST_FAILED:  # the turn was stopped: the id is gone
                self.state.ui.note(f"(not sent: {exc.message})")
                return True
            self.state.ui.error(f"Not saved: {exc.message}")
            return False
        what = f"`{command}` commands" if command else "this exact code"
        self.state.ui.note(f"From now on {what} run without asking in this folder (rule "
                           f"saved in {result.get('file')}).")
        return True

    async def _approve(self, p: dict[str, Any], decision: str, **extra: Any) -> None:
        from pygls.exceptions import JsonRpcException

        try:
            await self.state.client.approve(p["proposalId"], decision,
                                            workspace=self.state.workspace, **extra)
        except JsonRpcException as exc:  # the turn was stopped meanwhile: the id is gone
            self.state.ui.note(f"(not sent: {exc.message})")

    async def _edit(self, language: str, code: str) -> str | None:
        """The code as the user rewrote it: in $VISUAL/$EDITOR, else typed at a prompt."""
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            return await self._type_code()
        ui = self.state.ui
        fd, name = tempfile.mkstemp(prefix="oi-edit-", suffix=languages.suffix(language))
        path = Path(name)
        saved = save_mode()
        try:
            with os.fdopen(fd, "w") as f:
                f.write(code)
            proc = await asyncio.create_subprocess_exec(*shlex.split(editor), str(path))
            if await proc.wait() != 0:
                ui.note(f"{editor} exited with status {proc.returncode}: skipped")
                return None
            return await asyncio.to_thread(path.read_text)
        except OSError as exc:
            ui.error(f"could not run {editor}: {exc}")
            return None
        finally:
            restore_mode(saved)  # whatever mode the editor left the terminal in
            await asyncio.to_thread(path.unlink, missing_ok=True)

    async def _type_code(self) -> str | None:
        """The code typed line by line, when there is no editor to open."""
        self.state.ui.note("No $EDITOR is set: type the code to run instead, then a line with "
                           "only a '.' to finish (an empty one skips it).")
        lines: list[str] = []
        while (line := await self.state.prompt("... ")) is not None and line != ".":
            lines.append(line)
        if line is None:
            return None
        return "\n".join(lines) + "\n" if lines else None


def _risk_text(risk: Any) -> str:
    """A proposal's risk as one line ("high risk: deletes ..."); empty when nothing was found."""
    if not isinstance(risk, dict):
        return ""
    try:
        return protocol.Risk.model_validate(risk).summary()
    except ValueError:  # a server newer than this client: show nothing rather than fail
        return ""
