"""Remote kernels on a real Jupyter Kernel Gateway (127.0.0.1, with a token), end to end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.client import OIClient, server_command
from tests import modelserver as ms
from tests.conftest import next_proposal, start_sleeping_run, tool_results
from tests.gateway_process import TOKEN, Gateway, free_port
from tests.modelserver import ModelServer


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("gateway")).start()
    yield gw
    gw.kill()


@pytest.fixture
async def servers(data_dir: Path) -> AsyncIterator[list[OIClient]]:
    clients: list[OIClient] = []
    yield clients
    for client in clients:
        await client.close()


async def start(servers: list[OIClient], workspace: Path, model: ModelServer,
                data_dir: Path, **settings: Any) -> OIClient:
    """oi-lsp logging at DEBUG (so the token check covers every log line)."""
    client = OIClient()
    await client.start([*server_command(), "--log-level", "debug"],
                       env={"OI_LSP_DATA_DIR": str(data_dir)})
    servers.append(client)
    await client.initialize([workspace], options=model.settings(**settings))
    return client


def assert_no_token(client: OIClient, data_dir: Path, token: str = TOKEN) -> None:
    assert token not in json.dumps(client.notifications)
    assert token.encode() not in client.stderr
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


async def test_chat_runs_on_the_gateway(servers: list[OIClient], gateway: Gateway,
                                        model: ModelServer, workspace: Path,
                                        data_dir: Path) -> None:
    client = await start(servers, workspace, model, data_dir, **gateway.settings())
    langs = (await client.request("oi/languages", {}))["languages"]
    python = next(lang for lang in langs if lang["name"] == "python")
    assert python["location"] == "remote" and python["host"] == f"127.0.0.1:{gateway.port}"
    assert python["sandbox"] == "gateway"  # its side decides what its kernels may do

    # The cwd tells where it ran: a local kernel starts in the workspace.
    model.script(ms.tool("python", "import os\nx = 41\nprint('cwd', os.getcwd())"),
                 ms.text("x is set."))
    chat = asyncio.create_task(client.chat("set x"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    assert f"cwd {gateway.root}" in client.stream(result["turnId"], "console")

    since = len(client.notifications)
    model.script(ms.tool("python", "print(x + 1)"), ms.text("42."))
    chat = asyncio.create_task(client.chat("add one"))
    proposal = await next_proposal(client, since)
    await client.approve(proposal["proposalId"], "run")
    result = await chat
    assert tool_results(model.requests[3])[-1] == "42"
    assert len(gateway.kernels()) == 1

    await client.close()
    assert gateway.kernels() == []  # deleted on close (keepKernel is off)
    assert_no_token(client, data_dir)


async def test_stop_during_sleep_keeps_state(servers: list[OIClient], gateway: Gateway,
                                             model: ModelServer, workspace: Path,
                                             data_dir: Path) -> None:
    client = await start(servers, workspace, model, data_dir, **gateway.settings())
    chat = await start_sleeping_run(client, model, "survives a stop")
    assert (await client.request("oi/stop", {}))["stopped"] is True
    assert (await asyncio.wait_for(chat, 20))["status"] == "stopped"
    after = await client.execute("python", "print(kept)")
    assert after["status"] == "ok"
    assert after["outputs"][0]["content"] == "survives a stop\n"


async def test_restarted_server_reattaches(servers: list[OIClient], gateway: Gateway,
                                           model: ModelServer, workspace: Path,
                                           data_dir: Path) -> None:
    first = await start(servers, workspace, model, data_dir, keepKernel=True,
                        **gateway.settings())
    assert (await first.execute("python", "x = 41"))["status"] == "ok"
    await first.close()
    [kernel] = gateway.kernels()  # kept on the gateway

    # Same workspace, a new server (without keepKernel: this one deletes it on close).
    second = await start(servers, workspace, model, data_dir, **gateway.settings())
    result = await second.execute("python", "print(x + 1)")
    assert result["status"] == "ok", result
    assert result["outputs"][0]["content"] == "42\n"
    assert [k["id"] for k in gateway.kernels()] == [kernel["id"]]
    await second.close()
    assert gateway.kernels() == []
    assert_no_token(second, data_dir)


async def test_gateway_killed_mid_run(servers: list[OIClient], model: ModelServer,
                                      workspace: Path, data_dir: Path,
                                      tmp_path: Path) -> None:
    gw = Gateway(tmp_path / "gw").start()
    try:
        client = await start(servers, workspace, model, data_dir, **gw.settings())
        run = asyncio.create_task(client.execute(
            "python", "import time\nprint('started', flush=True)\ntime.sleep(30)"))
        await client.wait_for("oi/stream", lambda p: "started" in (p.get("content") or ""))
        gw.kill()
        result = await asyncio.wait_for(run, 60)
        assert result["status"] == "error"
        assert gw.url in result["error"]

        # Still down: a clear error naming it, and nothing ran here instead.
        marker = workspace / "ran-locally.txt"
        down = await client.execute("python", f"open({str(marker)!r}, 'w').write('x')")
        assert down["status"] == "error" and gw.url in down["error"]
        assert not marker.exists()

        gw.start()  # back (same URL): the session works again, on a new kernel
        back = await client.execute("python", "print('back')")
        assert back["status"] == "ok", back
        text = "".join(o["content"] for o in back["outputs"])
        assert "earlier variables are gone" in text and text.endswith("back\n")
        assert len(gw.kernels()) == 1
        await client.close()
        assert_no_token(client, data_dir)
    finally:
        gw.kill()


async def test_wrong_token_runs_nothing(servers: list[OIClient], gateway: Gateway,
                                        model: ModelServer, workspace: Path,
                                        data_dir: Path) -> None:
    bad = "not-the-token-77"
    client = await start(servers, workspace, model, data_dir,
                         kernelGateway={"url": gateway.url, "token": bad})
    marker = workspace / "ran.txt"
    model.script(ms.tool("python", f"open({str(marker)!r}, 'w').write('x')"),
                 ms.text("It failed."))
    chat = asyncio.create_task(client.chat("write a file"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "run")
    result = await chat
    console = client.stream(result["turnId"], "console")
    assert gateway.url in console and "refused the token" in console
    assert "refused the token" in tool_results(model.requests[1])[0]
    assert not marker.exists()
    # Shell code too: whether the gateway has a kernel for it cannot be asked, so it fails
    # naming the gateway instead of running here.
    touched = workspace / "shell-ran.txt"
    shell = await client.execute("shell", f"touch {touched}")
    assert shell["status"] == "error" and gateway.url in shell["error"]
    assert "refused the token" in shell["error"] and not touched.exists()
    assert gateway.kernels() == []
    assert_no_token(client, data_dir, bad)


async def test_unreachable_gateway_is_named(servers: list[OIClient], model: ModelServer,
                                            workspace: Path, data_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = await start(servers, workspace, model, data_dir, kernelGateway={"url": url})
    result = await client.execute("python", "print('here')")
    assert result["status"] == "error"
    assert f"cannot reach the kernel gateway at {url}" in result["error"]
    settings = (await client.request("oi/configure", {}))["settings"]
    assert settings["kernelGateway"]["url"] == url and "token" not in settings["kernelGateway"]


async def test_shell_runs_on_the_gateways_bash_kernel(servers: list[OIClient],
                                                     model: ModelServer, workspace: Path,
                                                     data_dir: Path, tmp_path: Path) -> None:
    gw = Gateway(tmp_path / "gw-bash", bash=True).start()
    try:
        client = await start(servers, workspace, model, data_dir, **gw.settings())
        langs = {lang["name"]: lang
                 for lang in (await client.request("oi/languages", {}))["languages"]}
        host = f"127.0.0.1:{gw.port}"
        assert langs["shell"]["location"] == "remote" and langs["shell"]["host"] == host
        assert langs["shell"]["kind"] == "kernel" and langs["shell"]["runner"] == "bash"
        assert langs["python"]["location"] == "remote"
        # No kernel for these on the gateway: they stay local.
        assert langs["javascript"]["location"] == "local" and "host" not in langs["javascript"]
        assert langs["html"]["location"] == "local"

        first = await client.execute("shell", "X=7; echo cwd $PWD")
        assert first["status"] == "ok", first
        # A gateway's kernels start in its folder; a local REPL would be in the workspace.
        assert first["outputs"][0]["content"].strip() == f"cwd {gw.root}"
        again = await client.execute("bash", "echo x is $X")
        assert again["outputs"][0]["content"].strip() == "x is 7"  # the same remote shell
        # Python (started when the workspace opened) and bash, both on the gateway.
        assert sorted(k["name"] for k in gw.kernels()) == ["bash", "python3"]
        local = await client.execute("javascript", "console.log(process.cwd())")
        assert local["outputs"][0]["content"].strip() == str(workspace)

        await client.close()
        servers.remove(client)
        assert gw.kernels() == []  # shut down with the workspace (keepKernel is off)
        assert_no_token(client, data_dir)
    finally:
        gw.kill()


class Proxy:
    """A TCP relay in front of the gateway that can cut every connection through it, as a
    network blip would, or refuse new ones for a while; while a direction ("up" to the
    gateway, "down" from it) is in `swallow`, what goes that way is dropped, as a connection
    dying silently would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.swallow: set[str] = set()
        self.swallowed = asyncio.Event()  # something was

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       direction: str) -> None:
            try:
                while data := await src.read(65536):
                    if direction in self.swallow:
                        self.swallowed.set()
                        continue
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, "up"), pipe(up_reader, writer, "down"))
        self.writers -= {writer, up_writer}

    def drop(self) -> None:
        for writer in list(self.writers):
            writer.transport.abort()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        self.drop()


@pytest.fixture
async def proxy(gateway: Gateway) -> AsyncIterator[Proxy]:
    """A Proxy in front of the module's gateway, stopped after the test."""
    relay = Proxy(gateway.port)
    await relay.start()
    yield relay
    await relay.stop()


async def lose(proxy: Proxy, direction: str, run: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """`run`'s result, while what goes `direction` is swallowed and then the connection is
    cut: the way a connection dying silently ends."""
    proxy.swallow.add(direction)
    task = asyncio.ensure_future(run)
    await asyncio.wait_for(proxy.swallowed.wait(), 30)
    await asyncio.sleep(0.5)  # whatever else goes that way, lost as well
    proxy.swallow.clear()
    proxy.drop()
    return await asyncio.wait_for(task, 60)


async def test_dropped_websocket_reconnects(servers: list[OIClient], gateway: Gateway,
                                            proxy: Proxy, model: ModelServer, workspace: Path,
                                            data_dir: Path) -> None:
    client = await start(servers, workspace, model, data_dir,
                         kernelGateway={"url": proxy.url, "token": gateway.token})
    assert (await client.execute("python", "x = 41"))["status"] == "ok"
    proxy.drop()  # the kernel's WebSocket (and any kept-alive HTTP) cut
    result = await client.execute("python", "print(x + 1)")
    assert result["status"] == "ok", result
    assert result["outputs"][0]["content"] == "42\n"  # reconnected: same kernel, same x

    # Cut and kept away longer than the bounded retries: a clear error, nothing local.
    await proxy.stop()
    marker = workspace / "ran-locally.txt"
    lost = await asyncio.wait_for(client.execute(
        "python", f"open({str(marker)!r}, 'w').write('x')"), 60)
    assert lost["status"] == "error" and proxy.url in lost["error"], lost
    assert not marker.exists()

    await proxy.start()  # back: the same kernel again, its state kept
    back = await client.execute("python", "print(x)")
    assert back["status"] == "ok", back
    assert back["outputs"][-1]["content"].endswith("41\n")
    await client.close()
    servers.remove(client)
    assert_no_token(client, data_dir)


async def test_a_request_lost_with_its_connection_is_sent_again(
        servers: list[OIClient], gateway: Gateway, proxy: Proxy, model: ModelServer,
        workspace: Path, data_dir: Path) -> None:
    """The connection dies silently just as a run is sent: the request never reaches the
    kernel. After the reconnect the run is sent again, and runs once."""
    client = await start(servers, workspace, model, data_dir,
                         kernelGateway={"url": proxy.url, "token": gateway.token})
    assert (await client.execute("python", "x, n = 41, 0"))["status"] == "ok"
    result = await lose(proxy, "up", client.execute("python", "n += 1; print(x + n)"))
    assert result["status"] == "ok", result
    assert [o["content"] for o in result["outputs"]] == ["42\n"]
    assert (await client.execute("python", "print(n)"))["outputs"][0]["content"] == "1\n"


async def test_a_run_whose_answers_were_lost_says_so_and_is_not_sent_again(
        servers: list[OIClient], gateway: Gateway, proxy: Proxy, model: ModelServer,
        workspace: Path, data_dir: Path) -> None:
    """The request arrives and runs, but every answer is lost with the connection: the run
    ends with an error that says so, and is not run a second time."""
    client = await start(servers, workspace, model, data_dir,
                         kernelGateway={"url": proxy.url, "token": gateway.token})
    assert (await client.execute("python", "n = 0"))["status"] == "ok"
    result = await lose(proxy, "down", client.execute("python", "n += 1; print('ran')"))
    assert result["status"] == "error", result
    assert "dropped during this run" in result["error"], result
    said = "".join(o["content"] for o in result["outputs"])
    assert "what it printed after the drop was lost" in said, said
    back = await client.execute("python", "print(n)")
    assert back["outputs"][0]["content"] == "1\n", back  # ran exactly once
