"""A running program asks for input (oi/input), answered at the terminal (for `oi-lsp chat`):
the prompt is in the program's output already; the line is typed in the terminal's line mode,
without echo for a password."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .line_input import Interrupted
from .state import ChatState


@contextlib.contextmanager
def _no_echo(fd: int = 0) -> Iterator[None]:
    import termios

    try:
        mode = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    quiet = list(mode)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSADRAIN, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, mode)


async def answer(state: ChatState, params: dict[str, Any]) -> str | None:
    """The line the user typed; None (the read fails) without a terminal, or on Ctrl-D/C."""
    ui, reader = state.ui, state.reader
    if reader is None:
        ui.note("The program asks for input, and there is no terminal to ask: the read fails.")
        return None
    ui.finish()
    if not str(params.get("prompt") or "").strip():
        ui.raw("input: " if ui.at_start else " input: ")
    password = bool(params.get("password"))
    try:
        with _no_echo() if password else contextlib.nullcontext():
            line = await reader.read()
    except Interrupted:
        line = None
    if line is None or password:
        ui.raw("\n")  # the terminal echoed no newline
    else:
        ui.at_line_start()  # it echoed the Enter
    # What the program's output echoes next, the terminal showed already.
    ui.echoed = "\n" if line is None or password else line + "\n"
    return line
