"""activeLine: which line runs, as `console`/`active_line` chunks, through the real server."""

from __future__ import annotations

from oi_lsp.client import OIClient
from oi_lsp.executors.active_line import LineFilter, marker
from oi_lsp.executors.base import Chunk

CODE = "import time\nprint('start', flush=True)\ntime.sleep(0.6)\nx = 1\ntime.sleep(0.6)\nx\n"


def _lines(client: OIClient, turn_id: str) -> list[str]:
    return [p["content"] for m, p in client.notifications
            if m == "oi/stream" and p["turnId"] == turn_id and p.get("format") == "active_line"]


async def test_python_active_line(client: OIClient) -> None:
    off = await client.execute("python", CODE)
    assert off["status"] == "ok" and _lines(client, off["turnId"]) == []
    await client.request("oi/configure", {"activeLine": True})
    on = await client.execute("python", CODE)
    assert on["status"] == "ok"
    # Sleeping lines 3 and 5 are reported, in order; the output carries no marker.
    lines = _lines(client, on["turnId"])
    assert lines[:1] == ["3"] and "5" in lines and lines.index("5") > lines.index("3")
    assert [o["content"] for o in on["outputs"]] == ["start\n1\n"]
    # Not a block: no start/end, and the output block around it stays one block.
    chunks = [p for m, p in client.notifications
              if m == "oi/stream" and p["turnId"] == on["turnId"] and p["type"] == "console"]
    assert all(not (p.get("start") or p.get("end")) for p in chunks
               if p.get("format") == "active_line")
    assert sum(1 for p in chunks if p.get("start")) == 1
    # Tracebacks keep the lines of the code as written.
    failed = await client.execute("python", "a = 1\n\nb = 2\n1/0\n")
    assert "line 4" in failed["outputs"][0]["content"]
    await client.request("oi/configure", {"activeLine": False})
    again = await client.execute("python", CODE)
    assert _lines(client, again["turnId"]) == []


def test_line_filter_split_markers() -> None:
    out: list[Chunk] = []
    line = LineFilter(out.append, "ab12")
    start = marker("ab12")
    text = f"one{start}3\x03two\n{start}14\x03x\x02 not a marker\n"
    for i in range(0, len(text), 3):  # markers cut at every place
        line(Chunk("console", "output", text[i:i + 3]))
    line.flush()
    lines = [c.content for c in out if c.format == "active_line"]
    printed = "".join(c.content for c in out if c.format == "output")
    assert lines == ["3", "14"] and printed == "onetwo\nx\x02 not a marker\n"
