"""Programs that read input: oi/input asks the client, the program gets the answer (Python
kernels through the Jupyter stdin channel, shells through a terminal of their own)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oi_lsp.client import OIClient
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, tool_results
from tests.gateway_process import Gateway
from tests.modelserver import ModelServer


async def answering(start_server: StartServer, workspace: Path, model: ModelServer,
                    box: Any, **options: Any) -> OIClient:
    """A client that declares experimental.oiInput and answers with `box`."""
    client = await start_server(workspace, initialize=False)
    client.input_box = box
    await client.initialize([workspace], options=model.settings(**options), answers_input=True)
    return client


def asked(client: OIClient) -> list[dict[str, Any]]:
    return [p for m, p in client.notifications if m == "oi/input"]


async def test_python_input_answered(start_server: StartServer, workspace: Path,
                                     model: ModelServer) -> None:
    client = await answering(start_server, workspace, model, lambda params: "Ada")
    result = await client.execute("python", "name = input('name? ')\nprint('hello', name)")
    assert result["status"] == "ok", result
    text = "".join(o["content"] for o in result["outputs"])
    assert "name? Ada" in text and "hello Ada" in text
    [request] = asked(client)
    assert request["prompt"] == "name? " and request["password"] is False
    assert request["turnId"] == result["turnId"] and request["workspace"].startswith("file:")


async def test_python_input_cancelled(start_server: StartServer, workspace: Path,
                                      model: ModelServer) -> None:
    client = await answering(start_server, workspace, model, lambda params: None)
    result = await client.execute("python", "try:\n    input('name? ')\n"
                                            "except EOFError:\n    print('no name')")
    assert result["status"] == "ok", result
    text = "".join(o["content"] for o in result["outputs"])
    assert "input cancelled" in text and "no name" in text
    # The REPL is ready for the next run.
    again = await client.execute("python", "print(1 + 1)")
    assert "2" in again["outputs"][0]["content"]


async def test_a_stop_withdraws_the_question(start_server: StartServer, workspace: Path,
                                            model: ModelServer) -> None:
    """The run ends while the box waits for the user: the server cancels its oi/input
    ($/cancelRequest), so an editor closes the box instead of leaving it open."""
    cancelled = asyncio.Event()

    async def box(params: dict[str, Any]) -> str | None:
        try:
            await asyncio.sleep(300)  # the user does not answer
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None

    client = await answering(start_server, workspace, model, box)
    run = asyncio.create_task(client.execute("python", "input('name? ')"))
    await client.wait_for("oi/input", lambda p: True, timeout=60)
    assert (await client.request("oi/stop", {}))["stopped"] is True
    assert (await run)["status"] == "stopped"
    await asyncio.wait_for(cancelled.wait(), 10)
    again = await client.execute("python", "print(1 + 1)")  # and the kernel goes on
    assert "2" in again["outputs"][0]["content"]


async def test_client_without_support_is_told_why(client: OIClient) -> None:
    result = await client.execute("python", "input('name? ')")
    assert result["status"] == "error"
    text = "".join(o["content"] for o in result["outputs"])
    assert "oiInput" in text and "EOFError" in text
    assert "ipykernel" not in text  # its own frames are left out of the traceback
    assert not asked(client)


async def test_unanswered_input_times_out(start_server: StartServer, workspace: Path,
                                          model: ModelServer) -> None:
    never: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    client = await answering(start_server, workspace, model, lambda params: never,
                             inputTimeout=1)
    result = await client.execute("python", "def ask():\n    return input('name? ')\nask()")
    assert result["status"] == "error"
    text = "".join(o["content"] for o in result["outputs"])
    assert "inputTimeout" in text
    # The user's frames, then the error: none of ipykernel's own (kernelbase.py's input).
    assert "----> 3 ask()" in text and "----> 2     return input('name? ')" in text
    assert "ipykernel" not in text and text.rstrip().endswith("EOFError:")


async def test_password_kept_from_history_and_model(start_server: StartServer,
                                                    workspace: Path, model: ModelServer,
                                                    data_dir: Path) -> None:
    secret = "hunter2-s3cret"
    # verbose: every model request is logged too
    client = await answering(start_server, workspace, model, lambda params: secret,
                             verbose=True)
    model.script(ms.tool("python", "import getpass\npw = getpass.getpass('Password: ')\n"
                                   "print('length', len(pw))"),
                 ms.text("Done."))
    chat = asyncio.create_task(client.chat("log in"))
    proposal = await next_proposal(client)
    await client.approve(proposal["proposalId"], "run")
    assert (await chat)["status"] == "done"
    [request] = asked(client)
    assert request["password"] is True
    assert tool_results(model.requests[1]) == ["Password: \nlength 14"]
    assert secret not in json.dumps(model.requests)
    saved = await asyncio.to_thread(
        lambda: [p.read_text() for p in data_dir.rglob("*") if p.is_file()])
    assert saved and not any(secret in text for text in saved)
    assert secret not in client.stderr.decode(errors="replace")
    assert secret not in json.dumps([p for m, p in client.notifications if m != "oi/input"])


@pytest.mark.parametrize("approved", [False, True])
async def test_shell_read_answered(start_server: StartServer, workspace: Path,
                                   model: ModelServer, approved: bool) -> None:
    client = await answering(start_server, workspace, model, lambda params: "Grace")
    code = 'read -p "name? " name\necho "hello $name"'
    if not approved:
        result = await client.execute("shell", code)
        assert result["status"] == "ok", result
        text = "".join(o["content"] for o in result["outputs"])
    else:
        model.script(ms.tool("shell", code), ms.text("Greeted."))
        chat = asyncio.create_task(client.chat("greet"))
        await client.approve((await next_proposal(client))["proposalId"], "run")
        assert (await chat)["status"] == "done"
        text = tool_results(model.requests[1])[0]
    assert "hello Grace" in text
    [request] = asked(client)
    assert request["prompt"] == "name?" and request["password"] is False


async def test_shell_read_cancelled_and_password(start_server: StartServer, workspace: Path,
                                                 model: ModelServer) -> None:
    answers = iter([None, "s3cret-pw"])
    client = await answering(start_server, workspace, model, lambda params: next(answers))
    result = await client.execute("shell", 'read -p "name? " name || echo "read failed"')
    text = "".join(o["content"] for o in result["outputs"])
    assert "read failed" in text and "input cancelled" in text
    result = await client.execute("shell", 'read -s -p "Password: " pw\necho "got ${#pw}"')
    text = "".join(o["content"] for o in result["outputs"])
    assert "got 9" in text and "s3cret-pw" not in text
    assert asked(client)[-1]["password"] is True


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("gateway")).start()
    yield gw
    gw.kill()


async def test_input_on_a_kernel_gateway(start_server: StartServer, workspace: Path,
                                         model: ModelServer, gateway: Gateway) -> None:
    client = await start_server(workspace, initialize=False)
    client.input_box = lambda params: "Lin"
    await client.initialize([workspace], options=model.settings(**gateway.settings()),
                            answers_input=True)
    result = await client.execute("python", "print('hi', input('who? '))")
    assert result["status"] == "ok", result
    assert "hi Lin" in "".join(o["content"] for o in result["outputs"])
    assert asked(client)[0]["prompt"] == "who? "
