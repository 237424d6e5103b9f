"""What the parts of `oi-lsp chat` share while it runs: the screen, the line reader, the link
to the server and the flags of the turn going on.

The app (turn loop, Ctrl-C) and the approval prompt both change these flags, so they live here
rather than in either of them; each part keeps what only it uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import protocol
from .line_input import prompt

if TYPE_CHECKING:
    from ..client import OIClient
    from .line_input import LineReader
    from .render import Renderer


@dataclass(eq=False)
class ChatState:
    ui: Renderer
    client: OIClient
    workspace: str  # the folder's URI, as every request names it
    interactive: bool  # a terminal can answer questions
    reader: LineReader | None = None  # set when the interactive prompt starts
    busy: bool = False  # a turn or an --exec run is going on
    stopping: bool = False  # Ctrl-C asked the server to stop it
    always: bool = False  # [a]lways was answered: run the rest without asking
    not_run: bool = False  # one-shot: a proposal needed an approval nobody could give
    # A question waits at the prompt: the server's messages and the run's output wait for its
    # answer (held, held_output: oi/stream's), so none prints into the line being typed.
    asking: bool = False
    held: list[str] = field(default_factory=list)
    held_output: list[dict[str, Any]] = field(default_factory=list)
    # Started from notification callbacks, which must return at once (the loop must keep going).
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.ui.error(f"oi-lsp chat: {task.exception()}")

    def cancel_tasks(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def prompt(self, text: str) -> str | None:
        """A line typed at the prompt; None when the user leaves (Ctrl-D, or Ctrl-C)."""
        assert self.reader is not None
        return await prompt(self.reader, self.ui, text)

    async def configure(self, values: dict[str, Any]) -> dict[str, Any] | None:
        """oi/configure for this folder; None (and the reason shown) when it was refused."""
        from pygls.exceptions import JsonRpcException

        try:
            result: dict[str, Any] = await self.client.request(
                protocol.CONFIGURE, {"workspace": self.workspace, **values})
        except JsonRpcException as exc:  # a value the server refused: the message names it
            self.ui.error(f"Settings refused: {exc.message}")
            return None
        return result

    async def stop(self) -> None:
        self.stopping = True
        await self.client.request(protocol.STOP, {"workspace": self.workspace})
