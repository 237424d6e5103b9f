# Which line of a cell runs, sampled in the kernel (see active_line.py); run by python_setup
# with `get_ipython` and CELL_FILENAMES given. Installs, once per kernel, pre/post_run_cell hooks
# that wake and park the sampling thread; python_setup's last line sets whether they report.
# The stream is the kernel's own stdout, taken at install time, so a cell that redirects
# sys.stdout does not get markers in its buffer.
# It runs on the kernel's Python, which may be another version than oi-lsp's: not type-checked.
# mypy: ignore-errors
import sys
import threading
import time

ip = get_ipython()  # noqa: F821 (given by python_setup)
state = getattr(ip, "_oi_active_line", None)
if state is None:
    state = ip._oi_active_line = {"on": False, "ident": None, "last": None}
    lock, running = threading.Lock(), threading.Event()
    out = sys.stdout
    cells = getattr(ip.compile, CELL_FILENAMES, {})  # noqa: F821

    def sample() -> None:
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
                    out.write(f"\x02{state['token']}:{line}\x03")
                    out.flush()

    def pre_run_cell(info: object) -> None:
        if state["on"]:
            with lock:
                state["ident"], state["last"] = threading.get_ident(), None
            running.set()
            if "thread" not in state:
                state["thread"] = threading.Thread(target=sample, name="oi-active-line",
                                                   daemon=True)
                state["thread"].start()

    def post_run_cell(result: object) -> None:
        running.clear()
        with lock:
            state["ident"] = None

    ip.events.register("pre_run_cell", pre_run_cell)
    ip.events.register("post_run_cell", post_run_cell)
