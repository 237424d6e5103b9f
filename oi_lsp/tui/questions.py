"""The server's questions (window/showMessageRequest: whether to trust a workspace's own
settings, whether to restart a REPL past its memory limit), asked at the prompt of `oi-lsp chat`.
With no terminal nobody can answer: the question is shown and nothing is chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import ChatState


async def ask(state: ChatState, message: str, actions: list[str]) -> str | None:
    """The title of the action the user chose; None when none was (Enter, Ctrl-D, Ctrl-C)."""
    state.ui.note(message, "bold yellow")
    if not actions:
        return None
    if not state.interactive or state.reader is None:
        state.ui.note(f"(no terminal to answer: none of {', '.join(actions)} was chosen)",
                      "yellow")
        return None
    choices = "  ".join(f"[{i}] {title}" for i, title in enumerate(actions, 1))
    state.asking = True
    try:
        while True:
            line = await state.prompt(f"{choices}: ")
            if line is None or not line.strip():
                return None
            picked = choose(line, actions)
            if picked is not None:
                return picked
            state.ui.note(f"Type one of 1-{len(actions)}, or the start of a choice.", "yellow")
    finally:
        state.asking = False
        for text in state.held:
            state.ui.note(text, "yellow")
        state.held.clear()


def choose(answer: str, actions: list[str]) -> str | None:
    """The action an answer names: its number, or the start of exactly one title."""
    answer = answer.strip().lower()
    if answer.isdigit():
        index = int(answer) - 1
        return actions[index] if 0 <= index < len(actions) else None
    found = [title for title in actions if title.lower().startswith(answer)]
    return found[0] if len(found) == 1 else None
