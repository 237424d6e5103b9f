"""Code that closes the shell's standard output or error: the run ends, says so, and the shell
(with its variables) goes on; nothing hangs until a timeout."""

from __future__ import annotations

import pytest

from oi_lsp.client import OIClient
from tests.hardening import record

REOPENED_OUT = "[the code closed the shell's standard output; it is open again]"
REOPENED_ERR = "[the code closed the shell's standard error; it is open again]"


def text(result: dict[str, object]) -> str:
    return "".join(o["content"] for o in result["outputs"])  # type: ignore[index, union-attr]


@pytest.mark.parametrize(("closing", "notes"), [
    ("exec >&-", [REOPENED_OUT]),
    ("exec 2>&-", [REOPENED_ERR]),
    ("exec 2>&- 1>&-", [REOPENED_OUT, REOPENED_ERR]),
])
async def test_closed_output_is_reopened_and_said(client: OIClient, closing: str,
                                                  notes: list[str]) -> None:
    assert (await client.execute("shell", "kept=41"))["status"] == "ok"
    closed = await client.execute("shell", closing, timeout=30)
    assert closed["status"] == "ok"  # ended by its marker, not by the timeout
    assert all(note in text(closed) for note in notes)
    after = await client.execute("shell", "echo out $((kept + 1)); echo err >&2", timeout=30)
    assert after["status"] == "ok" and text(after) == "out 42\nerr\n"
    record("closed_output", **{f"hung_{closing.replace(' ', '_')}": 0})
