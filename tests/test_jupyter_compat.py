"""What oi_lsp/executors/jupyter/compat.py changes in jupyter_client and ipykernel, checked
against the installed releases: when one moves what it relies on, these fail loudly."""

from __future__ import annotations

from pathlib import Path

from jupyter_client.session import Session

from oi_lsp.executors import registry
from oi_lsp.executors.jupyter import compat
from tests.test_executors import run


def test_messages_keep_their_dates_as_sent() -> None:
    session = Session(key=b"secret")
    parent = session.msg("execute_request", {"code": "1"})
    sent = session.msg("stream", {"name": "stdout", "text": "2024-01-02T03:04:05Z"},
                       parent=parent)
    wire = session.serialize(sent)
    compat.keep_dates_as_text()
    message = session.deserialize(wire[wire.index(b"<IDS|MSG>") + 1:])
    assert isinstance(message["header"]["date"], str)
    assert isinstance(message["parent_header"]["date"], str)
    assert message["header"]["date"] == sent["header"]["date"].isoformat().replace(
        "+00:00", "Z")
    # The rest is what jupyter_client makes of it, unchanged.
    assert message["msg_type"] == "stream" and message["content"]["text"] == \
        "2024-01-02T03:04:05Z"
    assert message["parent_header"]["msg_id"] == parent["header"]["msg_id"]


async def test_kernels_skip_the_reply_sleep_and_the_history_database(tmp_path: Path) -> None:
    """compat.IPYKERNEL_OPTIONS reach the kernel and still mean what they say there; a cell's
    output written as it ends is all there before its result, and the session's history stays."""
    ex = registry.create("python", tmp_path, registry.ReplOptions())
    try:
        assert await run(ex, "ip = get_ipython()\n"
                             "print(ip.kernel._execute_sleep, ip.history_manager.enabled)"
                         ) == ("ok", "0.0 False\n")
        for i in range(30):
            assert await run(ex, f"import sys\nsys.stdout.write('a' * 10000 + 'end{i}');"
                             ) == ("ok", "a" * 10000 + f"end{i}")
        status, text = await run(ex, "print(len(In), In[2][:10])\n%history -n 1")
        assert status == "ok"
        assert text.splitlines() == ["33 import sys", "   1:", "ip = get_ipython()",
                                     "print(ip.kernel._execute_sleep, "
                                     "ip.history_manager.enabled)"]
    finally:
        await ex.shutdown()
