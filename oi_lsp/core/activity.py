"""What a workspace is doing now: idle, the model thinking (streaming), a proposal waiting for
the user, or code running. Kept as it changes, for oi/status, and streamed to the client as a
`status` chunk at each change: a status chunk is only ever one of these four states."""

from __future__ import annotations

from ..protocol import ActivityState, TurnState
from .streamer import Streamer


class Activity:
    def __init__(self, streamer: Streamer) -> None:
        self._streamer = streamer
        self.state = TurnState(state="idle")

    def set(self, turn_id: str, state: ActivityState) -> None:
        """Enter `state` and tell the client."""
        self.state = TurnState(state=state, turn_id=None if state == "idle" else turn_id)
        self._streamer.status(turn_id, state)
