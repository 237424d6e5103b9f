"""The terminal's mode, saved and restored around what may change it (for `oi-lsp chat`).

An editor started for `[e]dit`, or a read interrupted by Ctrl-C, can leave the terminal in
another mode; the chat puts back the one it found.
"""

from __future__ import annotations

import os
from typing import Any


def save_mode() -> list[Any] | None:
    """The terminal's mode, to restore it whatever an editor or an interrupted read left."""
    if not os.isatty(0):
        return None
    import termios

    try:
        return termios.tcgetattr(0)
    except termios.error:
        return None


def restore_mode(mode: list[Any] | None) -> None:
    if mode is None:
        return
    import termios

    try:
        termios.tcsetattr(0, termios.TCSADRAIN, mode)
    except termios.error:
        pass


def quiet_control_keys(mode: list[Any] | None) -> None:
    """Stop the terminal echoing Ctrl-C as `^C` where the cursor is: in the middle of an
    answer being redrawn in place, those two characters push the redraw a line down and the
    streamed line shows twice. The chat says itself what a Ctrl-C did."""
    if mode is None:
        return
    import termios

    quiet = list(mode)
    quiet[3] &= ~termios.ECHOCTL
    try:
        termios.tcsetattr(0, termios.TCSADRAIN, quiet)
    except termios.error:
        pass
