"""The wait for a cell's reply that both kernel executors share (jupyter/messages.py)."""

from __future__ import annotations

from typing import Any

import pytest

from oi_lsp.executors.base import Chunk
from oi_lsp.executors.jupyter import messages
from oi_lsp.executors.jupyter.messages import Cell, Gone, Notice, NotTaken, collect


def _msg(msg_type: str, **content: Any) -> dict[str, Any]:
    return {"msg_type": msg_type, "content": content}


@pytest.fixture(autouse=True)
def _short_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(messages, "LIVENESS_INTERVAL", 0.01)


async def _alive() -> Gone | None:
    return None


async def test_output_until_reply_and_idle() -> None:
    cell, out = Cell(), list[Chunk]()
    for item in [("iopub", _msg("status", execution_state="busy")),
                 ("iopub", _msg("stream", text="hi\n")),
                 ("shell", _msg("execute_reply", status="ok")),
                 ("iopub", _msg("status", execution_state="idle"))]:
        cell.queue.put_nowait(item)
    result = await collect(cell, out.append, _alive)
    assert result.status == "ok" and [c.content for c in out] == ["hi\n"]


async def test_quiet_kernel_gone_ends_the_run() -> None:
    cell, out = Cell(), list[Chunk]()

    async def dead() -> Gone | None:
        return Gone("the kernel died", "the kernel died during this run")

    result = await collect(cell, out.append, dead)
    assert (result.status, result.error) == ("error", "the kernel died")
    assert [c.content for c in out] == ["\n[the kernel died during this run]\n"]


async def test_other_channel_and_not_taken() -> None:
    cell, out = Cell(), list[Chunk]()
    cell.queue.put_nowait(("lost", _msg("lost")))
    result = await collect(cell, out.append, _alive,
                           lambda channel, msg: Gone("lost it") if channel == "lost" else None)
    assert result.error == "lost it" and out[-1].content == "\n[lost it]\n"

    async def not_taken() -> Gone | None:
        raise NotTaken

    with pytest.raises(NotTaken):
        await collect(Cell(), out.append, not_taken)


def test_notice_is_told_once() -> None:
    notice, out = Notice(), list[Chunk]()
    notice.tell(out.append)
    notice.replaced("the kernel on h was gone")
    notice.tell(out.append)
    notice.tell(out.append)
    assert [c.content for c in out] == [
        "[the kernel on h was gone; started a new one, earlier variables are gone]\n"]


def test_a_traceback_leaves_out_the_installed_ipykernels_frames() -> None:
    cell, out = Cell(), list[Chunk]()
    cell.output(_msg("error", ename="EOFError", evalue="", traceback=[
        "\x1b[0;31mEOFError\x1b[0m  Traceback (most recent call last)",
        "Cell In[1], line 1\n----> 1 input('name? ')",
        "File /venv/lib/python3.11/site-packages/ipykernel/kernelbase.py:1515, in "
        "Kernel.raw_input(self, prompt)\n-> 1515 return self._input_request(",
        "File /usr/lib/python3/dist-packages/ipykernel/kernelbase.py:1571, in "
        "Kernel._input_request(self)\n-> 1571     raise EOFError",
        "File ~/src/ipykernel/ipykernel/kernelbase.py:9, in mine()\n----> 9 raise EOFError",
        "\x1b[0;31mEOFError\x1b[0m: "]), out.append)
    assert [c.content for c in out] == [
        "EOFError  Traceback (most recent call last)\nCell In[1], line 1\n"
        "----> 1 input('name? ')\nFile ~/src/ipykernel/ipykernel/kernelbase.py:9, in mine()\n"
        "----> 9 raise EOFError\nEOFError: \n"]
    assert cell.error == "EOFError: "
