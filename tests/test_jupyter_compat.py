"""What oi_lsp/executors/jupyter/compat.py changes in jupyter_client, checked against the
installed release: when one moves what it relies on, these fail loudly."""

from __future__ import annotations

from jupyter_client.session import Session

from oi_lsp.executors.jupyter import compat


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
