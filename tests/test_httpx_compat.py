"""What oi_lsp/common/httpx_compat.py changes in httpx, checked against the installed release: when
one moves what it relies on, these fail loudly."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
if sys.argv[1] == "skip":
    from oi_lsp.common import httpx_compat
    httpx_compat.skip_cli()
import httpx
answer = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text="hi")))
print(json.dumps({"cli": sorted(m for m in ("rich", "click", "pygments") if m in sys.modules),
                  "main": callable(httpx.main),
                  "text": answer.get("http://127.0.0.1/").text}))
"""


def imported(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_httpx_imports_without_its_command_line_tool() -> None:
    # What it saves: httpx's import loads its CLI's libraries (else the skip is pointless).
    assert imported("plain")["cli"] == ["click", "pygments", "rich"]
    skipped = imported("skip")
    assert skipped == {"cli": [], "main": True, "text": "hi"}
