"""Which line of a run is executing now, as Open Interpreter's `active_line` chunks.

The REPL writes a marker `\\x02<token>:<line>\\x03` into its own output; `LineFilter` takes the
markers out of the console text and emits each as a `console`/`active_line` chunk. The token is
random per executor, so program output never looks like a marker by accident.

Python is sampled, not instrumented: while a cell runs, a thread in the kernel looks every
SAMPLE_INTERVAL at the running thread's stack and writes the line of the cell that is executing
when it changed. The code runs unchanged (tracebacks keep their line numbers) and costs a
wake-up per interval instead of a write per statement (the thread sleeps between cells); a
line faster than the interval may not be reported, which a highlight would not show anyway.
bash uses a DEBUG trap (see repl.py), one marker per simple command.
"""

from __future__ import annotations

import secrets

from .base import Chunk, Emit, driver, prefix_overlap

SAMPLE_INTERVAL = 0.05
_MAX_MARKER = 64  # an opened marker longer than this is program output after all


def new_token() -> str:
    return secrets.token_hex(4)


def marker(token: str) -> str:
    """The start of a marker; the line number and \\x03 follow."""
    return f"\x02{token}:"


# The attribute of IPython's compiler (ip.compile, a CachingCompiler) that maps the file name
# of every cell it compiled to the cell's number. Private to IPython: tests/test_ipython_compat.py
# fails when an IPython release renames it (the sampler would then report no line at all).
CELL_FILENAMES = "_filename_map"


def python_setup(on: bool, token: str) -> str:
    """Kernel code that turns active-line reports on or off for the next cells: the sampler
    (drivers/ipython_active_line.py), run in a namespace of its own, none of it in the user's."""
    body = (driver("ipython_active_line.py") + f'state["on"], state["token"], state["interval"] = '
            f"{on!r}, {token!r}, {SAMPLE_INTERVAL!r}\n")
    return (f"exec({body!r}, {{'get_ipython': get_ipython, "
            f"'CELL_FILENAMES': {CELL_FILENAMES!r}}})")


class LineFilter:
    """Wraps an Emit: markers in console text become `active_line` chunks, the rest passes.

    Text that may be the start of a marker is held until the next chunk tells (a marker can
    be split between two reads); `flush` lets it go at the end of a run.
    """

    def __init__(self, emit: Emit, token: str) -> None:
        self.emit = emit
        self.start = marker(token)
        self.held = ""
        self.last = ""  # a line is reported once, until another one runs

    def __call__(self, chunk: Chunk) -> None:
        if chunk.type != "console" or chunk.format != "output":
            self.flush()
            self.emit(chunk)
            return
        text, self.held = self.held + chunk.content, ""
        while (at := text.find(self.start)) >= 0:
            end = text.find("\x03", at)
            if end < 0:
                if len(text) - at <= _MAX_MARKER:
                    self._text(text[:at])
                    self.held = text[at:]
                    return
                break
            number = text[at + len(self.start):end]
            self._text(text[:at])
            if number.isdigit() and number != self.last:
                self.last = number
                self.emit(Chunk("console", "active_line", number))
            text = text[end + 1:]
        keep = prefix_overlap(text, self.start)
        self._text(text[:len(text) - keep])
        self.held = text[len(text) - keep:]

    def flush(self) -> None:
        held, self.held = self.held, ""
        self._text(held)

    def _text(self, text: str) -> None:
        if text:
            self.emit(Chunk("console", "output", text))

