"""A turn as an LSP work-done progress, for clients that render no oi/* notifications.

The core already says what a turn does (oi/turn, status chunks, oi/resources); this reads those
as they go out and mirrors them as `window/workDoneProgress/create` + `$/progress`
begin / report / end, which stock clients show (Neovim's `vim.lsp.status()` and LspProgress,
fidget, Emacs mode lines). Cancelling the progress stops the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.progress import Progress

from .. import protocol

log = logging.getLogger(__name__)

_STATES = {"thinking": "thinking", "waiting": "waiting for your approval",
           "running": "running code"}
MB = 1024 * 1024


@dataclass
class _Bar:
    token: str
    workspace: str
    message: str
    created: asyncio.Task[bool] | None = None
    language: str = ""  # of the code about to run (its confirmation chunk says)
    ended: bool = False


class TurnProgress:
    """One work-done progress per turn or direct run, from its oi/turn `running` to its end."""

    def __init__(self, progress: Callable[[], Progress], stop: Callable[[str], None]) -> None:
        self._progress = progress  # pygls' work-done progress of the connection
        self._stop = stop  # stop the turns of a workspace (the user cancelled the progress)
        self._bars: dict[str, _Bar] = {}  # turn id -> its progress

    def observe(self, method: str, params: dict[str, Any]) -> None:
        """A notification the server sends: begin, report or end the turn's progress."""
        bar = self._bars.get(params.get("turnId") or "")
        if method == protocol.TURN:
            if params.get("status") == "running" and bar is None:
                self._begin(params)
            elif bar is not None and params.get("status") != "running":
                self._end(bar, params.get("status") or "done")
        elif bar is None:
            return
        elif method == protocol.STREAM:
            if params.get("type") == "confirmation" and params.get("start"):
                bar.language = params.get("format") or ""
            elif params.get("type") == "status" and params.get("format") != "idle":
                # idle within a turn is the moment between a run and the next model call
                state = params.get("format") or ""
                text = _STATES.get(state, state)
                if state == "running" and bar.language:
                    text = f"running {bar.language}"
                self._report(bar, text)
        elif method == protocol.RESOURCES:
            self._report(bar, _figures(params))

    def cancelled(self, token: str) -> None:
        """The client cancelled a progress: stop its turn."""
        for bar in self._bars.values():
            if bar.token == token and not bar.ended:
                self._stop(bar.workspace)

    def _begin(self, params: dict[str, Any]) -> None:
        turn_id = params["turnId"]
        what = "a run" if params.get("kind") == "execute" else "thinking"
        bar = self._bars[turn_id] = _Bar(f"oi-{turn_id}", params["workspace"], what)
        bar.created = asyncio.ensure_future(self._create(bar))

    async def _create(self, bar: _Bar) -> bool:
        """Ask the client for the token, then begin with what the turn does by now."""
        try:
            await self._progress().create_async(bar.token)
        except (JsonRpcException, asyncio.CancelledError, RuntimeError) as exc:
            log.info("the client refused a progress: %s", exc)
            return False
        # Begun even when the turn ended meanwhile: an end must follow a begin.
        self._progress().begin(bar.token, types.WorkDoneProgressBegin(
            title="Open Interpreter", message=bar.message, cancellable=True))
        return True

    def _report(self, bar: _Bar, message: str) -> None:
        if message == bar.message:
            return
        bar.message = message
        if bar.created is not None and bar.created.done() and bar.created.result():
            self._progress().report(bar.token, types.WorkDoneProgressReport(message=message))
        # Not created yet: _create begins with the latest message.

    def _end(self, bar: _Bar, status: str) -> None:
        bar.ended = True
        self._bars.pop(bar.token.removeprefix("oi-"), None)

        def finish(created: asyncio.Future[bool]) -> None:
            if not created.cancelled() and created.result():
                self._progress().end(bar.token, types.WorkDoneProgressEnd(message=status))
            self._progress().tokens.pop(bar.token, None)

        if bar.created is not None:
            bar.created.add_done_callback(finish)


def _figures(params: dict[str, Any]) -> str:
    """"running python 12 s · 98% CPU · 512 MB" from an oi/resources notification."""
    repl = params.get("repl") or {}
    parts = [f"running {repl.get('language') or 'code'} {params.get('elapsed', 0):.0f} s"]
    if repl.get("cpuPercent") is not None:
        parts.append(f"{repl['cpuPercent']:.0f}% CPU")
    if repl.get("rss") is not None:
        parts.append(f"{repl['rss'] / MB:.0f} MB")
    return " · ".join(parts)
