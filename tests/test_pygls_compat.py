"""Every pygls private name oi-lsp relies on (all of them in oi_lsp/lsp/pygls_compat.py) is
still there and still does what we use it for: an upgrade that renames one fails here."""

from __future__ import annotations

import logging
import threading
from typing import Any

from pygls.lsp.client import LanguageClient
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCProtocol, LanguageServerProtocol

from oi_lsp.lsp import pygls_compat
from oi_lsp.lsp.jsonrpc import raw_params_converter


class Probe(pygls_compat.Protocol):
    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.sent: list[Any] = []

    def send_message(self, data: Any) -> None:
        self.sent.append(data)


def test_the_private_names_exist() -> None:
    for name in ("_send_data", "_send_response"):
        assert callable(getattr(JsonRPCProtocol, name, None)), name
    server = LanguageServer("probe", "1")
    assert callable(getattr(server, "_report_server_error", None))
    assert hasattr(server, "_stop_event") and hasattr(server, "_server")
    assert getattr(server.protocol, "_server", None) is server
    assert hasattr(LanguageClient("probe", "1"), "_server")
    assert isinstance(getattr(server.protocol, "_request_futures", None), dict)


def test_every_outgoing_message_passes_send_message() -> None:
    server = LanguageServer("probe", "1", protocol_cls=Probe)
    protocol = server.protocol
    assert isinstance(protocol, Probe) and isinstance(protocol, LanguageServerProtocol)
    protocol.notify("oi/stream", {"a": 1})
    protocol.send_response(7, {"ok": True})
    assert [getattr(m, "method", None) for m in protocol.sent] == ["oi/stream", None]
    assert protocol.sent[1].id == 7 and protocol.sent[1].result == {"ok": True}


def test_report_error_reaches_the_server() -> None:
    server = LanguageServer("probe", "1", protocol_cls=Probe)
    seen: list[Exception] = []
    server.report_server_error = lambda error, source: seen.append(error)  # type: ignore
    error = RuntimeError("boom")
    server.protocol.report_error(error, RuntimeError)  # type: ignore[attr-defined]
    assert seen == [error]


def test_shutdown_sets_our_stop_event_and_closes_our_listener() -> None:
    server = LanguageServer("probe", "1")
    stop = pygls_compat.new_stop_event(server)
    closed = threading.Event()

    class Listener:
        def close(self) -> None:
            closed.set()

    pygls_compat.set_listener(server, Listener())
    server.shutdown()
    assert stop.is_set() and closed.is_set()


def test_client_process_before_start() -> None:
    assert pygls_compat.client_process(LanguageClient("probe", "1")) is None


def test_refusals_are_logged_as_one_line(caplog: Any) -> None:
    from pygls.exceptions import JsonRpcInvalidParams

    pygls_compat.quiet_refusals()
    logger = logging.getLogger("pygls.protocol.json_rpc")
    assert "pygls.protocol.json_rpc" in logging.Logger.manager.loggerDict  # pygls' own name
    with caplog.at_level(logging.INFO, logger="pygls.protocol.json_rpc"):
        try:
            raise JsonRpcInvalidParams("workspace: not a folder")
        except JsonRpcInvalidParams:
            logger.exception('Exception occurred for message "%s"', 3)
        try:
            raise RuntimeError("a real bug")
        except RuntimeError:
            logger.exception('Exception occurred for message "%s"', 4)
    refused, bug = caplog.records[-2:]
    assert refused.getMessage() == "refused a request (-32602): workspace: not a folder"
    assert refused.exc_info is None and refused.levelname == "INFO"
    assert bug.exc_info is not None and bug.levelname == "ERROR"


def test_capabilities_built_sees_the_capabilities_pygls_built() -> None:
    """pygls builds the capabilities in lsp_initialize, after our initialize handler: the
    override hands them to the server's capabilities_built before they are answered."""
    from lsprotocol import types

    server = LanguageServer("probe", "1", protocol_cls=Probe)
    assert getattr(LanguageServerProtocol.lsp_initialize, "method_name", None) == "initialize"
    seen: list[Any] = []
    server.capabilities_built = seen.append  # type: ignore[attr-defined]

    @server.command("probe.one")
    def one(ls: Any, *args: Any) -> None:
        pass

    steps = server.protocol.lsp_initialize(types.InitializeParams(
        capabilities=types.ClientCapabilities()))
    try:
        while True:
            next(steps)  # our initialize handler would run here: none is registered
    except StopIteration as done:
        result = done.value
    assert seen == [result.capabilities]
    assert list(result.capabilities.execute_command_provider.commands) == ["probe.one"]


def test_messages_of_untyped_methods_reach_their_handlers_as_in_pygls() -> None:
    """Dispatch's own path (requests, notifications, responses of methods pygls has no type
    for) calls the handlers pygls would, each in its own context; the rest goes pygls' way."""
    for name in ("_handle_request", "_handle_notification", "_handle_response"):
        assert callable(getattr(JsonRPCProtocol, name, None)), name
    server = LanguageServer("probe", "1", protocol_cls=Probe,
                            converter_factory=raw_params_converter)  # as oi-lsp's
    protocol = server.protocol
    assert isinstance(protocol, Probe) and protocol._shutdown is False
    seen: list[Any] = []

    @server.feature("oi/probe")
    def probe(params: Any) -> dict[str, Any]:
        seen.append(("request", params))
        return {"echo": params}

    @server.feature("oi/told")
    def told(params: Any) -> None:
        seen.append(("notification", params))

    def feed(data: dict[str, Any]) -> None:
        protocol.handle_message(protocol.structure_message(data))

    feed({"jsonrpc": "2.0", "id": 3, "method": "oi/probe", "params": {"x": 1}})
    feed({"jsonrpc": "2.0", "method": "oi/told", "params": {"y": 2}})
    future = protocol.send_request("oi/ask", {})
    asked = protocol.sent[-1].id
    feed({"jsonrpc": "2.0", "id": asked, "result": {"z": 3}})
    assert future.result(timeout=1) == {"z": 3}
    assert seen == [("request", {"x": 1}), ("notification", {"y": 2})]
    answer = protocol.sent[0]
    assert answer.id == 3 and answer.result == {"echo": {"x": 1}}
    # An error and a typed LSP message (pygls' own class for it) go pygls' way.
    failed = protocol.send_request("oi/ask", {})
    feed({"jsonrpc": "2.0", "id": protocol.sent[-1].id,
          "error": {"code": -32603, "message": "no"}})
    assert "no" in str(failed.exception(timeout=1))
    feed({"jsonrpc": "2.0", "id": 4, "method": "shutdown"})
    assert protocol._shutdown is True and protocol.sent[-1].id == 4
    # After shutdown, pygls refuses what is not exit: so does the fast path.
    feed({"jsonrpc": "2.0", "method": "oi/told", "params": {"late": 1}})
    assert len(seen) == 2


def test_the_answer_to_a_given_up_request_is_dropped_without_an_error(
        caplog: Any) -> None:
    """A request whose awaiting task was cancelled (`oi-lsp chat` cancels its pending stop at
    the end of a turn) gets its answer later: pygls alone raised InvalidStateError."""
    protocol = Probe(LanguageServer("probe", "1"), None)
    given_up = protocol.send_request("oi/stop", {})
    kept = protocol.send_request("oi/history", {})
    given_up.cancel()
    ids = [m.id for m in protocol.sent]
    with caplog.at_level(logging.DEBUG):
        protocol._handle_response(ids[0], {"stopped": True})
        protocol._handle_response(ids[1], {"messages": []})
    assert kept.result() == {"messages": []}
    assert not protocol._request_futures
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
