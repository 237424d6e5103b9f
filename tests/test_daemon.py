"""The shared daemon (issue 25): `oi-lsp` over stdio relays to one per-user daemon, started on
demand; connections on one workspace share it. Real processes: relays, the daemon, kernels."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import next_proposal
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM

ROOT = Path(__file__).resolve().parents[1]
Relay = Callable[..., Awaitable[OIClient]]


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A runtime folder of this test's own (short: a socket path has at most 107 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="oid-", dir="/tmp"))
    yield base / "run"
    for proc in daemons(base / "run"):
        proc.kill()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def daemon_env(runtime: Path, data_dir: Path) -> dict[str, str]:
    return {"OI_LSP_STANDALONE": "0", "OI_LSP_RUNTIME_DIR": str(runtime),
            "OI_LSP_DATA_DIR": str(data_dir), "OI_LSP_DAEMON_IDLE": "120",
            "OI_LSP_KERNEL_GRACE": "120", "PYTHONPATH": str(ROOT)}


@pytest.fixture
async def relay(model: ModelServer, daemon_env: dict[str, str]) -> AsyncIterator[Relay]:
    """Start `oi-lsp` (a relay) and initialize it on the given folders."""
    clients: list[OIClient] = []

    async def start(*workspaces: Path, options: dict[str, Any] | None = None,
                    env: dict[str, str] | None = None, cwd: Path | None = None) -> OIClient:
        client = OIClient()
        await client.start(env={**daemon_env, **(env or {})}, cwd=cwd)
        clients.append(client)
        await client.initialize(workspaces, options=model.settings() if options is None
                                else options)
        return client

    yield start
    for client in clients:
        await client.close()


def daemons(runtime: Path) -> list[psutil.Process]:
    """The daemon processes serving `runtime`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if (proc.info["cmdline"] or [])[-2:] == ["oi_lsp", "daemon"] and \
                    proc.environ().get("OI_LSP_RUNTIME_DIR") == str(runtime):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    # A child the daemon is starting (a kernel) has its cmdline until it execs: not a daemon.
    pids = {proc.pid for proc in found}
    return [proc for proc in found if _parent(proc) not in pids]


def _parent(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.NoSuchProcess:
        return None


def control(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oi_lsp", "daemon", *args], env={
        **os.environ, **env}, capture_output=True, text=True, timeout=60)


def relay_process(client: OIClient) -> psutil.Process:
    proc = client.process
    assert proc is not None
    return psutil.Process(proc.pid)


async def test_two_relays_share_one_workspace(relay: Relay, model: ModelServer,
                                              workspace: Path, runtime: Path) -> None:
    first = await relay(workspace)
    second = await relay(workspace)
    assert len(daemons(runtime)) == 1
    for client in (first, second):  # a relay is the thin one, not a server
        rss = relay_process(client).memory_info().rss
        print(f"relay RSS: {rss / 2**20:.1f} MB")
        assert rss < 30 * 2**20
        assert not relay_process(client).children()

    model.script(ms.tool("python", "print(6 * 7)"), ms.text("done"))
    chat = asyncio.create_task(first.chat("compute"))
    proposal = await next_proposal(first)
    seen = await next_proposal(second)  # the second editor sees the first one's proposal
    assert seen["proposalId"] == proposal["proposalId"]
    await second.approve(proposal["proposalId"], "run")
    with pytest.raises(Exception, match="no open proposal"):  # the loser of a double answer
        await first.approve(proposal["proposalId"], "skip")
    result = await asyncio.wait_for(chat, 60)
    assert result["status"] == "done"
    for client in (first, second):
        await client.wait_for("oi/stream", lambda p: "42" in (p.get("content") or ""))
        answered = await client.wait_for("oi/answered")  # who did not answer withdraws
        assert answered["proposalId"] == proposal["proposalId"]
        assert answered["decision"] == "run"
    history = (await second.request("oi/history", {}))["messages"]
    assert any(m.get("content") == "compute" for m in history)


async def test_racing_relays_start_one_daemon(relay: Relay, workspace: Path,
                                              runtime: Path) -> None:
    clients = await asyncio.gather(*(relay(workspace) for _ in range(3)))
    log = (runtime / "daemon.log").read_text()
    assert len(daemons(runtime)) == 1, log
    assert "another daemon" not in log
    for client in clients:
        assert (await client.execute("python", "1 + 1"))["status"] == "ok"


async def test_socket_and_folder_are_private(relay: Relay, workspace: Path,
                                             runtime: Path) -> None:
    await relay(workspace)
    folder, sock = os.stat(runtime), os.stat(runtime / "oi-lsp.sock")
    assert stat.S_IMODE(folder.st_mode) == 0o700
    assert stat.S_ISSOCK(sock.st_mode)
    assert stat.S_IMODE(sock.st_mode) == 0o600


async def test_status_and_stop(relay: Relay, workspace: Path, runtime: Path,
                               daemon_env: dict[str, str]) -> None:
    assert control(daemon_env, "--status").returncode == 3  # none yet
    client = await relay(workspace)
    status = control(daemon_env, "--status")
    assert status.returncode == 0, status.stderr
    assert "connections: 1" in status.stdout
    assert workspace.as_uri() in status.stdout
    [daemon] = daemons(runtime)
    assert str(daemon.pid) in status.stdout
    assert control(daemon_env, "--stop").returncode == 0
    daemon.wait(30)
    assert not (runtime / "oi-lsp.sock").exists()
    proc = client.process
    assert proc is not None
    assert await asyncio.wait_for(proc.wait(), 30) == 1  # the editor sees its server exit


async def test_daemon_exits_when_idle(relay: Relay, workspace: Path, runtime: Path,
                                      daemon_env: dict[str, str]) -> None:
    client = await relay(workspace, env={"OI_LSP_DAEMON_IDLE": "1"})
    [daemon] = daemons(runtime)
    await client.close()
    daemon.wait(30)  # psutil.TimeoutExpired if it stays


async def test_daemon_killed_mid_turn(relay: Relay, model: ModelServer, workspace: Path,
                                      runtime: Path) -> None:
    client = await relay(workspace)
    [daemon] = daemons(runtime)
    model.script(ms.tool("python", "import time\nprint('sleeping', flush=True)\n"
                                   "time.sleep(60)"))
    chat = asyncio.create_task(client.chat("sleep a minute"))
    await client.approve((await next_proposal(client))["proposalId"], "run")
    await client.wait_for("oi/stream", lambda p: "sleeping" in (p.get("content") or ""))
    daemon.send_signal(signal.SIGKILL)
    proc = client.process
    assert proc is not None
    assert await asyncio.wait_for(proc.wait(), 30) == 1  # the relay reports it: it exits
    assert b"the daemon closed the connection" in client.stderr
    chat.cancel()
    again = await relay(workspace)
    [new] = daemons(runtime)
    assert new.pid != daemon.pid
    history = (await again.request("oi/history", {}))["messages"]
    assert any(m.get("content") == "sleep a minute" for m in history)


async def test_each_relay_uses_its_own_key(relay: Relay, model: ModelServer,
                                           workspace: Path) -> None:
    """Two editors on one folder, each with its own OI_API_KEY: each turn uses its starter's."""
    settings = {"model": "openai/scripted", "apiBase": model.url}  # no key: the environment's
    first = await relay(workspace, options=settings, env={"OI_API_KEY": "sk-first-editor"})
    second = await relay(workspace, options=settings, env={"OI_API_KEY": "sk-second-editor"})
    model.script(ms.text("one"), ms.text("two"), ms.text("three"))
    await first.chat("hello")
    await second.chat("hello again")
    await first.chat("and again")
    keys = [h.get("Authorization") or h.get("authorization") for h in model.headers]
    assert keys == ["Bearer sk-first-editor", "Bearer sk-second-editor",
                    "Bearer sk-first-editor"]


def own_address() -> str | None:
    """This machine's address on its network (not loopback), or None without one: the route
    the kernel would take to a documentation address, so no packet leaves."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


@pytest.fixture
def remote_model() -> Iterator[ModelServer]:
    """The scripted model at an address that is not loopback: the environment's provider keys
    are sent only to such a server (a server on 127.0.0.1 gets one only from apiKey)."""
    address = own_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    server = ModelServer(host=address).start()
    yield server
    server.stop()


async def test_each_relay_uses_its_own_provider_key(relay: Relay, remote_model: ModelServer,
                                                    workspace: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider's own variable (OPENAI_API_KEY), which litellm would read from the daemon's
    environment (the first editor's): each editor's own is used, and an editor without one
    never borrows another's."""
    model = remote_model
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = {"model": "openai/scripted", "apiBase": model.url}
    first = await relay(workspace, options=settings, env={"OPENAI_API_KEY": "sk-first-openai"})
    second = await relay(workspace, options=settings, env={"OPENAI_API_KEY": "sk-second-openai"})
    third = await relay(workspace, options=settings)
    model.script(ms.text("one"), ms.text("two"), ms.text("three"))
    await first.chat("hello")
    await second.chat("hello again")
    await third.chat("and me")
    keys = [h.get("Authorization") or h.get("authorization") for h in model.headers]
    assert keys[:2] == ["Bearer sk-first-openai", "Bearer sk-second-openai"]
    assert keys[2] == "Bearer no-key-set"  # and a 401 then reads as noApiKey (test_llm)


async def test_kernel_survives_a_reconnect(relay: Relay, workspace: Path) -> None:
    first = await relay(workspace)
    await first.execute("python", "kept = 41")
    assert await first.close() == 0  # shutdown, exit: the relay exits as a server would
    second = await relay(workspace)
    result = await second.execute("python", "print(kept + 1)")
    assert "42" in str(result)


async def test_standalone_serves_in_its_own_process(model: ModelServer, workspace: Path,
                                                    runtime: Path,
                                                    daemon_env: dict[str, str]) -> None:
    client = OIClient()
    await client.start([sys.executable, "-m", "oi_lsp", "--standalone"], env=daemon_env)
    try:
        await client.initialize([workspace], options=model.settings())
        result = await client.execute("python", "print(6 * 7)")
        assert "42" in str(result)
        assert not await asyncio.to_thread(os.path.exists, runtime)
        assert not daemons(runtime)
    finally:
        await client.close()


def test_relay_starts_without_heavy_imports(daemon_env: dict[str, str]) -> None:
    """What the relay imports: none of pygls, pydantic, lsprotocol (measured as modules, not
    time)."""
    code = ("import sys, oi_lsp.cli, oi_lsp.daemon.relay; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pygls', 'pydantic', 'lsprotocol', 'litellm', 'platformdirs')))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **daemon_env},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_copied_handlers_serve_the_server_they_are_copied_to() -> None:
    """Each connection's server answers with its own state, not the template's."""
    from oi_lsp.lsp.language_server import OIServer
    from oi_lsp.lsp.pygls_compat import copy_features

    template, copy = OIServer(), OIServer()

    @template.feature("oi/whoami")
    def whoami(ls: OIServer, params: Any) -> Any:
        return ls

    copy_features(template, copy)
    assert copy.protocol.fm.features["oi/whoami"](None) is copy
    assert template.protocol.fm.features["oi/whoami"](None) is template


async def test_grace_period_ends_an_unused_kernel(relay: Relay, workspace: Path) -> None:
    client = await relay(workspace, env={"OI_LSP_KERNEL_GRACE": "1"})
    await client.execute("python", "import os; open('pid', 'w').write(str(os.getpid()))")
    kernel = psutil.Process(int(await asyncio.to_thread((workspace / "pid").read_text)))
    await client.close()
    await asyncio.to_thread(kernel.wait, 60)  # psutil.TimeoutExpired if it stays


async def test_a_client_without_folders_works_in_the_relays_folder(
        relay: Relay, workspace: Path) -> None:
    client = await relay(cwd=workspace)
    await client.execute("python", "import os; print(os.getcwd())")
    assert str(workspace) in client.stream()


async def test_chat_attaches_to_the_daemon(relay: Relay, workspace: Path, runtime: Path,
                                           daemon_env: dict[str, str]) -> None:
    editor = await relay(workspace)
    await editor.execute("python", "kept = 41")
    chat = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "oi_lsp", "chat", "--workspace", str(workspace), "--exec",
        "python", "print(kept + 1)", env={**os.environ, **daemon_env},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(chat.communicate(), 120)
    assert "42" in out.decode(), err.decode()
    assert len(daemons(runtime)) == 1
    # --standalone: a server of its own, which has no `kept`
    alone = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "oi_lsp", "chat", "--standalone", "--workspace", str(workspace),
        "--exec", "python", "print('kept' in dir())", env={**os.environ, **daemon_env},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(alone.communicate(), 120)
    assert "False" in out.decode(), err.decode()


async def test_a_daemon_of_another_version_means_standalone(
        model: ModelServer, workspace: Path, runtime: Path,
        daemon_env: dict[str, str]) -> None:
    """A relay meeting a daemon of another oi-lsp serves standalone and says why."""
    await asyncio.to_thread(runtime.mkdir, mode=0o700, parents=True)

    async def old_daemon(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b'{"oi-lsp":"0.0.1","pid":1}\n')
        await writer.drain()
        writer.close()

    listener = await asyncio.start_unix_server(old_daemon, str(runtime / "oi-lsp.sock"))
    client = OIClient()
    await client.start(env=daemon_env)
    try:
        await client.initialize([workspace], options=model.settings())
        result = await client.execute("python", "print(6 * 7)")
        assert "42" in str(result) or "42" in client.stream()
        assert b"the daemon runs oi-lsp 0.0.1" in client.stderr
        assert not daemons(runtime)
    finally:
        await client.close()
        listener.close()


async def test_an_editor_restarted_meanwhile_is_shown_the_waiting_proposal(
        relay: Relay, model: ModelServer, workspace: Path) -> None:
    """The terminal's turn waits for approval; the editor restarts and approves it."""
    terminal = await relay(workspace)
    editor = await relay(workspace)
    model.script(ms.tool("python", "print(6 * 7)"), ms.text("done"))
    chat = asyncio.create_task(terminal.chat("compute"))
    proposal = await next_proposal(editor)
    await editor.close()
    editor = await relay(workspace)
    shown = await next_proposal(editor)
    assert shown["proposalId"] == proposal["proposalId"]
    await editor.approve(proposal["proposalId"], "run")
    assert (await asyncio.wait_for(chat, 60))["status"] == "done"
    await editor.wait_for("oi/stream", lambda p: "42" in (p.get("content") or ""))


async def test_a_turn_started_in_the_terminal_is_approved_in_the_editor(
        relay: Relay, model: ModelServer, workspace: Path, data_dir: Path,
        daemon_env: dict[str, str]) -> None:
    """`oi-lsp chat` asks Run?; the editor answers first; the terminal stops asking and shows
    the output."""
    from tests.test_chat import Term, chat_env

    editor = await relay(workspace)
    model.script(ms.tool("python", "print(6 * 7)"), ms.text("all done"))
    env = {**chat_env(data_dir, model), **daemon_env}
    chat = Term(["compute"], workspace, env)
    try:
        await asyncio.to_thread(chat.until, "Run?")
        proposal = await next_proposal(editor)
        await editor.approve(proposal["proposalId"], "run")
        await asyncio.to_thread(chat.until, "answered in another client: run")
        await asyncio.to_thread(chat.until, "42")
        await asyncio.to_thread(chat.until, "all done")
        artifacts = ROOT / "test-artifacts" / "daemon"
        await asyncio.to_thread(artifacts.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread((artifacts / "chat-approved-in-editor.txt").write_text,
                                chat.text)
        assert "Run?" not in chat.text.split("answered in another client")[1]
    finally:
        chat.kill()


def test_the_relay_passes_the_stream_and_keeps_the_end_line() -> None:
    """Messages split anywhere reach the editor whole; the daemon's end line does not."""
    from oi_lsp.daemon.relay import Framing

    body = b'{"jsonrpc":"2.0","method":"oi/stream","params":{"content":"OI-LSP-END 7"}}'
    stream = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    sent = stream * 3 + b"OI-LSP-END 0\n"
    for size in (1, 7, 64, len(sent)):
        framing, out = Framing(), b""
        for i in range(0, len(sent), size):
            out += framing.feed(sent[i:i + size])
        assert out == stream * 3
        assert framing.end == 0


def test_another_data_folder_is_another_daemon(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from oi_lsp.daemon import paths

    monkeypatch.delenv("OI_LSP_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("OI_LSP_DATA_DIR", str(tmp_path / "data"))
    assert paths.runtime_dir() == tmp_path / "data" / "run"
    monkeypatch.delenv("OI_LSP_DATA_DIR")
    assert paths.runtime_dir() == tmp_path / "oi-lsp"


async def test_a_relay_right_after_a_stop_gets_a_new_daemon(
        relay: Relay, workspace: Path, runtime: Path, daemon_env: dict[str, str]) -> None:
    """The stopped daemon may still be closing its kernels when the next relay starts one."""
    first = await relay(workspace)
    await first.execute("python", "x = 1")
    [old] = daemons(runtime)
    stop = await asyncio.to_thread(control, daemon_env, "--stop")
    assert stop.returncode == 0
    second = await relay(workspace)
    assert (await second.execute("python", "print(2)"))["status"] == "ok"
    assert b"standalone" not in second.stderr
    assert [p.pid for p in daemons(runtime)] != [old.pid]
    assert len(daemons(runtime)) == 1


async def test_the_setting_kernel_grace(relay: Relay, model: ModelServer,
                                        workspace: Path) -> None:
    client = await relay(workspace, options=model.settings(kernelGrace=1))
    await client.execute("python", "import os; open('pid', 'w').write(str(os.getpid()))")
    kernel = psutil.Process(int(await asyncio.to_thread((workspace / "pid").read_text)))
    await client.close()
    await asyncio.to_thread(kernel.wait, 60)  # the daemon's grace here is 120 s


@pytest.mark.skipif(not HAVE_NVIM, reason="needs nvim")
async def test_neovim_withdraws_a_proposal_answered_elsewhere(
        relay: Relay, model: ModelServer, workspace: Path, nvim: Any,
        daemon_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Neovim (through a relay to the same daemon) asks; another client answers first."""
    for key in ("OI_LSP_STANDALONE", "OI_LSP_RUNTIME_DIR", "OI_LSP_DAEMON_IDLE",
                "OI_LSP_KERNEL_GRACE"):
        monkeypatch.setenv(key, daemon_env[key])
    other = await relay(workspace)
    model.script(ms.tool("python", "print(6 * 7)"), ms.text("The answer is 42."))
    scenario = asyncio.create_task(asyncio.to_thread(nvim.run, """
        vim.cmd("OIChat what is six times seven")
        T.wait(function() return require("oi.approval").pending(T.root) ~= nil end, "a proposal")
        T.wait_text("answered in another client: run")
        T.wait_text("The answer is 42.")
        T.wait_idle()
    """, workspace))
    proposal = await next_proposal(other, timeout=120)
    await other.approve(proposal["proposalId"], "run")
    run = await scenario
    assert "_→ answered in another client: run_" in run.lines
    assert "[r]un  [s]kip  [e]dit  [c] always this code  [a]lways" not in run.lines
    artifacts = ROOT / "test-artifacts" / "daemon"
    await asyncio.to_thread(artifacts.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread((artifacts / "nvim-answered-elsewhere.txt").write_text,
                            "\n".join(run.lines))


async def test_sigterm_stops_the_daemon_and_its_kernels(relay: Relay, workspace: Path,
                                                        runtime: Path) -> None:
    client = await relay(workspace)
    await client.execute("python", "import os; open('pid', 'w').write(str(os.getpid()))")
    kernel = psutil.Process(int(await asyncio.to_thread((workspace / "pid").read_text)))
    [daemon] = daemons(runtime)
    daemon.send_signal(signal.SIGTERM)
    await asyncio.to_thread(daemon.wait, 60)
    await asyncio.to_thread(kernel.wait, 30)  # closed, not left to the next daemon
    assert not await asyncio.to_thread(os.path.exists, runtime / "oi-lsp.sock")
