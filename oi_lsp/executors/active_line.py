"""Which line of a run is executing now, as Open Interpreter's `active_line` chunks.

The REPL writes a marker `\\x02<token>:<line>\\x03` into its own output; `LineFilter` takes the
markers out of the console text and emits each as a `console`/`active_line` chunk. The token is
random per executor, so program output never looks like a marker by accident.

Python is sampled, not instrumented: while a cell runs, a thread in the kernel looks every
SAMPLE_INTERVAL at the running thread's stack and writes the line of the cell that is executing
when it changed. The code runs unchanged (tracebacks keep their line numbers) and costs a
wake-up per interval instead of a write per statement (the thread sleeps between cells); a
line faster than the interval may not be reported, which a highlight would not show anyway.
Shells use a DEBUG trap (see repl.py), one marker per simple command.
"""

from __future__ import annotations

import secrets

from .base import Chunk, Emit, prefix_overlap

SAMPLE_INTERVAL = 0.05
_MAX_MARKER = 64  # an opened marker longer than this is program output after all


def new_token() -> str:
    return secrets.token_hex(4)


def marker(token: str) -> str:
    """The start of a marker; the line number and \\x03 follow."""
    return f"\x02{token}:"


# Run silently in the kernel (its own namespace: nothing lands in the user's). Installs, once
# per kernel, pre/post_run_cell hooks that wake and park the sampling thread, and sets
# whether they do anything. The stream is the kernel's own stdout, taken at install time, so a
# cell that redirects sys.stdout does not get markers in its buffer.
_PYTHON_SETUP = r"""
import sys, threading, time
ip = get_ipython()
state = getattr(ip, "_oi_active_line", None)
if state is None:
    state = ip._oi_active_line = {"on": False, "ident": None, "last": None}
    lock, running = threading.Lock(), threading.Event()
    out = sys.stdout
    cells = getattr(ip.compile, "_filename_map", {})

    def sample():
        while True:
            running.wait()  # nothing to do, and no cost, between cells
            time.sleep(state["interval"])
            with lock:  # post_run_cell waits for a write in progress: none lands after it
                ident = state["ident"]
                frame = sys._current_frames().get(ident) if ident is not None else None
                line = None
                while frame is not None:  # the outermost frame of a cell is the running cell
                    if frame.f_code.co_filename in cells:
                        line = frame.f_lineno
                    frame = frame.f_back
                if line is not None and line != state["last"]:
                    state["last"] = line
                    out.write("\x02%s:%d\x03" % (state["token"], line))
                    out.flush()

    def pre_run_cell(info):
        if state["on"]:
            with lock:
                state["ident"], state["last"] = threading.get_ident(), None
            running.set()
            if "thread" not in state:
                state["thread"] = threading.Thread(target=sample, name="oi-active-line",
                                                   daemon=True)
                state["thread"].start()

    def post_run_cell(result):
        running.clear()
        with lock:
            state["ident"] = None

    ip.events.register("pre_run_cell", pre_run_cell)
    ip.events.register("post_run_cell", post_run_cell)
"""


def python_setup(on: bool, token: str) -> str:
    """Kernel code that turns active-line reports on or off for the next cells."""
    body = (_PYTHON_SETUP + f'state["on"], state["token"], state["interval"] = '
            f"{on!r}, {token!r}, {SAMPLE_INTERVAL!r}\n")
    return f"exec({body!r}, {{'get_ipython': get_ipython}})"


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

