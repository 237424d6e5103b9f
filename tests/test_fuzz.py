"""Bad input: arbitrary params for every oi/* request, and malformed LSP framing.

Everything goes over one real stdio connection, byte by byte (tests/hardening.RawServer): a
request must get a response (a result, or -32602 naming what is wrong), the server must neither
crash nor hang, and a valid oi/execute must still work afterwards.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hardening import RawServer, record
from tests.modelserver import ModelServer

FIELDS = {  # every oi/* request and the fields it knows, to build near-valid params
    "oi/chat": ["message", "workspace", "context"],
    "oi/approve": ["proposalId", "decision", "code", "workspace"],
    "oi/execute": ["language", "code", "workspace", "timeout"],
    "oi/stop": ["workspace"], "oi/reset": ["workspace"], "oi/history": ["workspace"],
    "oi/configure": ["workspace", "autoRun", "maxSteps", "temperature", "maxOutput",
                     "systemMessage", "toolCalls", "maxTokens", "trusted", "keepKernel",
                     "executionTimeout"],
    "oi/languages": ["workspace"], "oi/status": ["workspace"], "oi/models": ["workspace"],
    "oi/sessions": ["workspace"], "oi/session/new": ["workspace"],
    "oi/session/open": ["workspace", "id"],
    "oi/session/export": ["workspace", "id", "format"],
}
METHODS = list(FIELDS)
# Settings that would point the server at another model, API or kernel gateway: the fuzzer
# must not send traffic anywhere but this machine, so they are never sent.
UNSAFE_SETTINGS = {"model", "apiBase", "api_base", "kernelGateway", "kernel_gateway",
                   "kernelName", "kernel_name", "apiKey", "api_key"}
# Languages whose random code could do harm (random text as shell commands) or run long.
UNSAFE_LANGUAGES = {"shell", "bash", "sh", "console", "terminal", "zsh", "fish", "powershell",
                    "pwsh", "ps1", "r", "rscript", "ruby", "rb", "javascript", "js", "node",
                    "nodejs", "java", "applescript", "osascript"}
FUZZ_EXAMPLES = 400

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
        "id": st.sampled_from(["20261203-091000-abcdef", "../../etc/passwd", "current", ".",
                               "a" * 300]),
        "format": st.sampled_from(["json", "markdown", "ipynb", "html", "JSON"]),
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


def test_every_request_is_fuzzed() -> None:
    """A request added to the server is fuzzed too (or this fails until FIELDS names it)."""
    from oi_lsp.lsp.server import SERVER

    served = {name for name in SERVER.protocol.fm.features if name.startswith("oi/")}
    assert served == set(FIELDS)


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


# Malformed framing ---------------------------------------------------------------------------

def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


FRAMING_CASES: dict[str, bytes] = {
    "non-JSON body": b"Content-Length: 9\r\n\r\nnot json!",
    "JSON that is not an object": b"Content-Length: 7\r\n\r\n[1,2,3]",
    "non-numeric Content-Length": b"Content-Length: lots\r\n\r\n{}",
    "no Content-Length": b"Content-Type: application/json\r\n\r\n{}\r\n",
    "negative Content-Length": b"Content-Length: -5\r\n\r\n{}",
    "binary garbage": bytes(range(256)) * 4 + b"\r\n\r\n",
    "a header line of 8 MB without an end": b"X" * (8 << 20) + b"\r\n\r\n",
    "a body cut short, then the stream ends": b"Content-Length: 50\r\n\r\n{\"jsonrpc\"",
    "a huge Content-Length": b"Content-Length: 99999999999999\r\n\r\n{}",
}
ENDS_STREAM = {"a body cut short, then the stream ends"}


def test_malformed_framing(model_server: ModelServer, tmp_path: Path) -> None:
    """Each bad frame is logged and the server keeps serving, or exits cleanly (a message,
    no traceback, its kernel gone); it never spins: its CPU time over the 2 s after the frame
    is measured. One server serves case after case until one ends it."""
    (tmp_path / "ws").mkdir()
    figures: dict[str, dict[str, Any]] = {}
    server: RawServer | None = None
    logs = 0
    try:
        for name, data in FRAMING_CASES.items():
            if server is None or server.proc.poll() is not None:
                logs += 1
                log_path = tmp_path / f"server{logs}.log"
                server = RawServer({"OI_LSP_DATA_DIR": str(tmp_path / "data")}, log_path)
                server.initialize(tmp_path / "ws", model_server.settings())
                if logs == 1:  # a chat loads litellm and the kernel: then the server idles
                    assert "result" in server.request("oi/chat", {"message": "warm up"},
                                                      timeout=300)
            proc = psutil.Process(server.proc.pid)
            kernels = proc.children(recursive=True)
            logged_before = log_path.stat().st_size
            server.send(data, raw=True)
            if name in ENDS_STREAM:
                server.proc.stdin.close()  # type: ignore[union-attr]
            before, started = _cpu_seconds(proc), time.monotonic()
            time.sleep(2)
            try:
                cpu = _cpu_seconds(proc) - before
            except psutil.NoSuchProcess:
                cpu = 0.0  # it exited: no longer spending anything
            cpu_share = cpu / (time.monotonic() - started)
            served = False
            if server.proc.poll() is None and name not in ENDS_STREAM:
                # The garbage may swallow what follows it up to a line end: a client that
                # resynchronises sends a blank line first; give it a few tries.
                for _ in range(3):
                    server.send(b"\r\n", raw=True)
                    try:
                        served = "result" in server.request("oi/history", {}, timeout=10)
                        break
                    except TimeoutError:
                        continue
                    except (EOFError, BrokenPipeError):  # it is leaving: checked below
                        break
            code = None if served else server.proc.wait(30)
            log = log_path.read_text(errors="replace")[logged_before:]
            assert cpu_share < 0.5, f"the server used {cpu_share:.0%} of a core after {name}"
            assert served or code == 1, f"{name}: exit code {code}\n{log[-3000:]}"
            if not served:
                assert "Traceback" not in log, f"{name}: not a clean exit:\n{log[-3000:]}"
                assert [k for k in kernels if k.is_running()
                        and k.status() != psutil.STATUS_ZOMBIE] == [], name
            assert len(log.strip()) > 0, f"{name}: nothing was logged"
            figures[name] = {"outcome": "served the next request" if served
                             else f"exited ({code})", "cpu_share": round(cpu_share, 3)}
    finally:
        if server is not None:
            server.close()
    record("bad_input", framing=figures)
