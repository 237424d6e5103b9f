"""The server's questions (window/showMessageRequest: whether to trust a workspace's own
settings, whether to restart a REPL past its memory limit, whether to allow a call of an MCP
tool its server marks destructive), asked at the prompt of `oi-lsp chat`. With no terminal
nobody can answer: the question is shown and nothing is chosen.

A question during a run (the server asks once the run's output settled) holds the output that
comes while it waits until the answer, so none prints into the line being typed.
The output line the question cut (the call's "⚙ server.tool(...)") is written again after it,
so its end (" · 0.12 s", " · CallDenied after ...") completes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import ChatState


async def ask(state: ChatState, message: str, actions: list[str]) -> str | None:
    """The title of the action the user chose; None when none was (Enter, Ctrl-D, Ctrl-C)."""
    partial = state.ui.partial_line()
    try:
        return await _ask(state, message, actions)
    finally:
        if partial:
            state.ui.newline()
            state.ui.raw(partial)
        held = state.held_output[:]
        state.held_output.clear()
        for params in held:
            state.ui.chunk(params)


async def _ask(state: ChatState, message: str, actions: list[str]) -> str | None:
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
