"""Baseline B's worker: runs inside Open Interpreter's own venv (never imports oi_lsp).

Reads one JSON request per line on stdin, `{"language": ..., "code": ...}`, runs it with
`interpreter.computer.run(language, code)` (Open Interpreter's execution path, no model) and
answers one JSON line `{"seconds", "ok", "chars", "error"?}`. The first line it writes is
`{"ready": true, "version": ...}` once the package is imported.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def private_stdout() -> Any:
    """Open Interpreter prints (banners, warnings): keep our JSON lines on a private fd."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main() -> None:
    out = private_stdout()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    started = time.perf_counter()
    from importlib.metadata import version

    from interpreter import interpreter

    interpreter.offline = True
    out.write(json.dumps({"ready": True, "version": version("open-interpreter"),
                          "import_seconds": time.perf_counter() - started}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        try:
            result = interpreter.computer.run(request["language"], request["code"])
            elapsed = time.perf_counter() - started
            chars = sum(len(str(r.get("content", ""))) for r in result or ()
                        if isinstance(r, dict))
            out.write(json.dumps({"seconds": elapsed, "ok": True, "chars": chars}) + "\n")
        except Exception as exc:
            out.write(json.dumps({"seconds": time.perf_counter() - started, "ok": False,
                                  "chars": 0, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
    interpreter.computer.terminate()


if __name__ == "__main__":
    main()
