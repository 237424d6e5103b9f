"""Bad input: arbitrary params for every oi/* request, over one real stdio connection.

Everything goes byte by byte (tests/hardening.RawServer): a
request must get a response (a result, or -32602 naming what is wrong), the server must neither
crash nor hang, and a valid oi/execute must still work afterwards.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hardening import RawServer, record
from tests.modelserver import ModelServer

METHODS = ["oi/chat", "oi/approve", "oi/execute", "oi/stop", "oi/reset", "oi/history",
           "oi/configure", "oi/languages"]
FIELDS = {  # the fields each request knows, to build near-valid params
    "oi/chat": ["message", "workspace", "context"],
    "oi/approve": ["proposalId", "decision", "code", "workspace"],
    "oi/execute": ["language", "code", "workspace", "timeout"],
    "oi/stop": ["workspace"], "oi/reset": ["workspace"], "oi/history": ["workspace"],
    "oi/configure": ["workspace", "autoRun", "maxSteps", "temperature", "maxOutput",
                     "systemMessage", "toolCalls", "maxTokens", "trusted", "keepKernel",
                     "executionTimeout"],
    "oi/languages": ["workspace"],
}
# Settings that would point the server at another model, API or kernel gateway: the fuzzer
# must not send traffic anywhere but this machine, so they are never sent.
UNSAFE_SETTINGS = {"model", "apiBase", "api_base", "kernelGateway", "kernel_gateway",
                   "kernelName", "kernel_name", "apiKey", "api_key"}
# Languages whose random code could do harm (random text as shell commands) or run long.
UNSAFE_LANGUAGES = {"shell", "bash", "sh", "console", "terminal", "zsh", "fish", "powershell",
                    "pwsh", "ps1", "r", "rscript", "ruby", "rb", "javascript", "js", "node",
                    "nodejs", "java", "applescript", "osascript"}
FUZZ_EXAMPLES = 250

text = st.text(max_size=40) | st.sampled_from(
    ["", "python", "file:///", "file:///nonexistent", "\x00", "\ud800", "é" * 3, "🐍",
     "run", "skip", "edit", "null", "{}", '{"jsonrpc": "2.0"}'])
huge = st.integers(min_value=100_000, max_value=1_000_000).map(lambda n: "x" * n)
scalar = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
          | st.floats(allow_nan=False) | text)
json_value = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(text, inner, max_size=4), max_leaves=12)
# pygls structures every JSON object that has a "jsonrpc" key as a message of its own.
rpc_junk = st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0", 2])},
                                 optional={"id": st.integers(0, 5), "method": text,
                                           "params": json_value, "result": json_value})


def _safe(method: str, params: Any) -> Any:
    if not isinstance(params, dict):
        return params
    params = {k: v for k, v in params.items() if k not in UNSAFE_SETTINGS}
    if method == "oi/execute" and isinstance(params.get("language"), str) and \
            params["language"].strip().lower() in UNSAFE_LANGUAGES:
        params["language"] = "python"
    if method == "oi/chat" and isinstance(params.get("message"), str) and \
            params["message"].lstrip().startswith("%%"):
        params["message"] = "%help"  # `%% cmd` runs cmd in the shell: no random shell commands
    return params


@st.composite
def near_valid(draw: st.DrawFn, method: str) -> dict[str, Any]:
    """Some of the request's own fields (any value), maybe extra ones, maybe nested junk."""
    fields = FIELDS[method]
    chosen = draw(st.lists(st.sampled_from(fields), unique=True, max_size=len(fields)))
    params: dict[str, Any] = {}
    for name in chosen:
        params[name] = draw(json_value | huge | rpc_junk | valid_value(name))
    extra = draw(st.dictionaries(text, json_value | rpc_junk, max_size=2))
    return {**extra, **params}


def valid_value(name: str) -> st.SearchStrategy[Any]:
    return {
        "message": st.sampled_from(["hi", "é🐍", "x" * 5000]),
        "decision": st.sampled_from(["run", "skip", "edit"]),
        "language": st.sampled_from(["python", "py", "klingon"]),
        "code": st.sampled_from(["1 + 1", "print('fuzz')", "", "def f(:", "\ud800"]),
        "timeout": st.sampled_from([0.5, 5, -1, 0]),
        "context": st.fixed_dictionaries({}, optional={
            "uri": text, "language": text, "selection": text | huge,
            "range": json_value}),
    }.get(name, json_value)


params_strategy = st.sampled_from(METHODS).flatmap(lambda method: st.tuples(
    st.just(method),
    st.one_of(json_value, huge, rpc_junk, near_valid(method),
              st.just(Ellipsis))))  # Ellipsis: no params member at all


@pytest.fixture(scope="module")
def raw_server(model_server: ModelServer, tmp_path_factory: pytest.TempPathFactory,
               ) -> Iterator[tuple[RawServer, Path]]:
    root = tmp_path_factory.mktemp("fuzz")
    workspace = root / "ws"
    workspace.mkdir()
    (root / "data").mkdir()
    server = RawServer({"OI_LSP_DATA_DIR": str(root / "data")}, root / "server.log")
    try:
        # The default scripted reply is plain text: a valid oi/chat is a short turn with no code.
        # Every run is bounded by executionTimeout.
        server.initialize(workspace, model_server.settings(executionTimeout=5))
        yield server, root
    finally:
        server.close()


def test_nested_jsonrpc_key_in_params(raw_server: tuple[RawServer, Path]) -> None:
    """pygls' JSON object hook takes any object with a "jsonrpc" key for a message: inside
    params such an object must stay plain data (and the request still be answered)."""
    server, _ = raw_server
    for junk in ({"jsonrpc": "2.0"}, {"jsonrpc": "2.0", "method": "oi/reset"},
                 {"jsonrpc": "2.0", "id": 1, "result": {"x": 1}},
                 {"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m"}}):
        reply = server.request("oi/execute", {"language": "python",
                                              "code": "print('nested ok')", "junk": junk})
        assert reply["result"]["status"] == "ok", reply
        assert reply["result"]["outputs"][0]["content"] == "nested ok\n"
        reply = server.request("oi/execute", {"language": "python", "code": junk})
        assert reply["error"]["code"] == -32602 and "code" in reply["error"]["message"]


COUNTS: collections.Counter[str] = collections.Counter()


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(case=params_strategy)
def test_arbitrary_params(raw_server: tuple[RawServer, Path], case: tuple[str, Any]) -> None:
    server, _ = raw_server
    method, params = case
    if params is Ellipsis:
        reply = server.request(method, omit_params=True)
    else:
        reply = server.request(method, _safe(method, params))
    COUNTS["cases"] += 1
    COUNTS[method] += 1
    if "result" in reply:
        COUNTS["answered with a result"] += 1
    else:
        error = reply.get("error") or {}
        assert error.get("code") == -32602, reply
        assert error.get("message"), reply
        COUNTS["refused with -32602"] += 1
    assert server.proc.poll() is None, "the server exited"


def test_still_serves_after_fuzzing(raw_server: tuple[RawServer, Path]) -> None:
    server, _ = raw_server
    assert COUNTS["cases"] >= FUZZ_EXAMPLES, "the fuzz test did not run first"
    reply = server.request("oi/execute", {"language": "python", "code": "print(6 * 7)"})
    assert reply["result"]["status"] == "ok", reply
    assert reply["result"]["outputs"][0]["content"] == "42\n"
    record("bad_input", fuzz_cases=COUNTS["cases"],
           fuzz_results=COUNTS["answered with a result"],
           fuzz_invalid_params=COUNTS["refused with -32602"],
           fuzz_per_method={m: COUNTS[m] for m in METHODS},
           fuzz_unanswered=0, fuzz_server_exits=0)
