# Run in an IPython kernel, in a namespace of its own. A write longer than a megabyte goes out
# as several iopub messages, not one, so whoever reads the kernel (the oi-lsp server) never
# holds a whole 100 MB line at once (nor the many megabytes a fast loop writes between two of
# ipykernel's timed flushes). And the kernel waits while the server is more than WINDOW
# characters behind: the server counts what it has read in the shared file ACK (8 bytes,
# mapped into both processes), so output cannot pile up in the server's memory however fast
# the code prints. The text and its order are unchanged.
#
# IPython puts its own `write` on the stream around every cell and afterwards puts back the one
# it found, so patching the stream in this file's own cell does not last. For that cell the
# stream becomes an instance of a subclass whose `write` is a property, which turns IPython's
# putting back into the split write in the stream's own attribute (and the stream's class back
# to its own); every later cell finds the split write there and puts it back itself.
#
# Every print passes through here twice (the text, then the newline), so the common path is
# kept short: a short write is one call and one addition.
import mmap
import operator
import struct
import sys
import time

_SIZE = 1 << 20
_WINDOW = 4 << 20
_PATIENCE = 2.0  # seconds without progress of the reader before writing on regardless


def _state():
    state = getattr(sys, "_oi_output", None)
    if state is None:
        state = {"sent": 0, "ack": None}
        setattr(sys, "_oi_output", state)  # noqa: B010 (kept across runs of this file)
    return state


def _wait_for_reader(state):
    ack = state["ack"]
    if ack is None:
        return
    last, since = -1, time.monotonic()
    while True:
        read = struct.unpack_from("Q", ack)[0]
        if state["sent"] - read <= _WINDOW:
            return
        if read != last:
            last, since = read, time.monotonic()
        elif time.monotonic() - since > _PATIENCE:
            return
        time.sleep(0.001)


def _splitting(write, stream):
    state = _state()  # one dict for the kernel's life: _follow changes it in place
    unflushed = 0  # characters written since the last wait for the reader

    def caught_up():
        nonlocal unflushed
        state["sent"] += unflushed
        unflushed = 0
        stream.flush()  # waits until the piece is sent
        _wait_for_reader(state)

    def split(text):  # as ipykernel's own write: one argument
        nonlocal unflushed
        try:
            size = len(text)
        except TypeError:
            size = -1
        if size < 0:  # not text: the stream's own write says so, and IPython hides this frame
            __tracebackhide__ = True
            return write(text)
        if size <= _SIZE:
            written = write(text)
            unflushed += size
            if unflushed >= _SIZE:
                caught_up()
            return written
        for at in range(0, size, _SIZE):
            piece = text[at:at + _SIZE]
            write(piece)
            unflushed += len(piece)
            if unflushed >= _SIZE:
                caught_up()
        return size

    return split


def _install(stream):
    base = type(stream)
    if stream.__dict__.get("_oi_split") or not base.__module__.startswith("ipykernel"):
        return  # split already (this file run again for a new server), or not a kernel's
    split = _splitting(base.write.__get__(stream), stream)
    stream.__dict__["_oi_split"] = True

    def chose(self, value):
        if getattr(value, "__func__", None) is base.write:
            # IPython putting back, as this file's cell ends, the unsplit write it found when
            # the cell began. From now on it finds the split one in the stream's own
            # attribute and puts that back: the stream's class can be its own again, and a
            # write costs no property call.
            self.__class__ = base
            self.__dict__.pop("_oi_current", None)
            self.__dict__["write"] = split
        else:  # IPython's capture for this cell, which calls the split write it found
            self.__dict__["_oi_current"] = value

    def forget(self):
        self.__dict__["_oi_current"] = split

    class Splitting(base):  # type: ignore[valid-type, misc]
        write = property(operator.attrgetter("_oi_current"), chose, forget)

    stream.__dict__.pop("write", None)
    stream.__dict__["_oi_current"] = split
    stream.__class__ = Splitting


def _follow(path):
    """Count against the reader whose counter is in `path` (a new server after a reattach)."""
    state = _state()
    with open(path, "rb") as f:  # read only: allowed inside the sandbox too
        state["ack"] = mmap.mmap(f.fileno(), 8, access=mmap.ACCESS_READ)
    state["sent"] = struct.unpack_from("Q", state["ack"])[0]


for _stream in (sys.stdout, sys.stderr):
    _install(_stream)
_ack = globals().get("ACK")  # the counter's path, given by the server
if _ack:
    _follow(_ack)
