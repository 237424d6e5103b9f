"""What a workspace is doing now (idle, the model thinking, a proposal waiting for the user,
code running): kept as it changes, for oi/status; the changes clients draw are also streamed
as `status` chunks."""

from __future__ import annotations

from typing import Literal

from ..protocol import TurnState
from .streamer import Streamer

Streamed = Literal["idle", "thinking", "running"]


class Activity:
    def __init__(self, streamer: Streamer) -> None:
        self._streamer = streamer
        self.state = TurnState(state="idle")

    def set(self, turn_id: str, state: Streamed) -> None:
        """Enter `state` and tell the client (a status chunk)."""
        self.state = TurnState(state=state, turn_id=None if state == "idle" else turn_id)
        self._streamer.status(turn_id, state)

    def waiting(self, turn_id: str) -> None:
        """A proposal waits for the user: the proposal itself tells the client."""
        self.state = TurnState(state="waiting", turn_id=turn_id)
