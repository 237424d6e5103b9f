"""Issue 38: what a change to a conversation costs at its length, and what opening a long one
costs. Run in a clean process of its own per length (`python -m bench.record_cost N`): it
writes an N-message conversation as a server writes it, opens it as a restarted server does,
then makes changes as a session makes them (a run's code and its output recorded, the
proposal's outcome set, each flushed to disk as a turn's end is), and prints JSON:
bytes written and CPU per change, the open's wall time to the first page (oi/history's 200),
and the RSS the open conversation adds."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import psutil

CHANGES = 300
PAGE = 200
URI = "file:///bench/workspace"
ID = "20261207-000000-abcdef"


def write(count: int, data: Path) -> None:
    """The conversation, written as a server writes it (in a process of its own: the measure
    starts without these messages in its memory)."""
    from oi_lsp.core.store import Batch, Store
    from oi_lsp.protocol import Message

    messages = [Message(role="user" if i % 2 == 0 else "assistant", type="message",
                        turn_id=f"t{i // 2}",
                        content=(f"question {i}: " + "words " * 20) if i % 2 == 0
                        else (f"answer {i}: " + "more words " * 40)) for i in range(count)]
    store = Store(data)
    store.write(URI, ID, Batch(1.0, "question 0", count, whole=messages))
    store.set_current(URI, ID)


async def measure(data: Path) -> dict[str, float]:
    from oi_lsp.core.conversation import Conversation
    from oi_lsp.core.store import Store
    from oi_lsp.protocol import Message

    me = psutil.Process()
    began = time.perf_counter()
    conversation = Conversation(URI, Store(data), lambda _: None)
    await conversation.page(None, PAGE)
    opened = time.perf_counter() - began
    rss = me.memory_info().rss
    record = conversation.file()
    size = record.stat().st_size if record.exists() else 0
    cpu = time.process_time()
    for i in range(CHANGES):
        proposal = Message(role="assistant", type="code", format="python",
                           content=f"print({i})", turn_id=f"run{i}")
        conversation.record(proposal)
        conversation.record(Message(role="computer", type="console", format="output",
                                    content=f"{i}\n", turn_id=f"run{i}"))
        proposal.outcome = "ran"
        conversation.changed(proposal)
        await conversation.flush()
    per_change = (time.process_time() - cpu) / CHANGES
    grown = (record.stat().st_size - size) / CHANGES
    await conversation.close()
    return {"messages": conversation.count - 2 * CHANGES,
            "bytes_per_change": grown, "cpu_ms_per_change": per_change * 1e3,
            "open_ms": opened * 1e3, "rss_mib": rss / 2**20}


def main() -> None:
    """`write N DIR`, then `measure DIR` in a fresh process."""
    if sys.argv[1] == "write":
        write(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        print(json.dumps(asyncio.run(measure(Path(sys.argv[2])))))


if __name__ == "__main__":
    main()
