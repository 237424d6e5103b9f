"""Reading opens nothing (issue 21, item 12): read-only requests on folders the client never
opened start no kernel; `file:///`, system folders and bad URIs are refused with -32602."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest
from pygls.exceptions import JsonRpcException

from oi_lsp.client import OIClient, to_uri
from tests.conftest import StartServer
from tests.hardening import record
from tests.modelserver import ModelServer

READ_ONLY = ("oi/history", "oi/sessions", "oi/status", "oi/languages", "oi/models",
             "oi/stop", "oi/configure", "oi/session/new")


def server_children(client: OIClient) -> set[int]:
    assert client.process is not None
    return {p.pid for p in psutil.Process(client.process.pid).children(recursive=True)}


async def kernels_started(client: OIClient, folder: Path) -> list[dict[str, object]]:
    status = await client.request("oi/status", {"workspace": to_uri(folder)})
    return [r for r in status["repls"] if r.get("pid")]


async def test_read_only_requests_start_no_kernel(start_server: StartServer, tmp_path: Path,
                                                  workspace: Path) -> None:
    client = await start_server(workspace)
    await client.execute("python", "1")  # the opened folder's kernel is up: the baseline
    before = server_children(client)
    folders = []
    for i in range(8):
        folder = tmp_path / f"unopened-{i}"
        folder.mkdir()
        folders.append(folder)
        for method in READ_ONLY:
            await client.request(method, {"workspace": to_uri(folder)})
    await asyncio.sleep(2)  # a kernel start would have begun by now
    record("trust", unopened_folders_read=len(folders),
           read_only_requests=len(folders) * len(READ_ONLY),
           processes_they_started=len(server_children(client) - before))
    assert server_children(client) == before
    for folder in folders:
        assert await kernels_started(client, folder) == []
    # The control: a run is an explicit use, and starts its folder's kernel.
    result = await client.execute("python", "print(2)", workspace=to_uri(folders[0]))
    assert result["status"] == "ok"
    assert len(await kernels_started(client, folders[0])) == 1
    assert server_children(client) > before


BAD = {
    "too long": "file:///" + "a" * 400_000,
    "not file:": "https://example.com/repo",
    "not a URI": "just some words",
    "NUL byte": "file:///tmp/a%00b",
    "no such folder": "file:///no/such/folder/here",
    "the filesystem root": "file:///",
    "a top-level folder": "file:///tmp",
    "a system folder": "file:///etc",
    "inside a system folder": "file:///usr/share",
    "a file": None,  # filled in below: a file, not a folder
}


async def test_bad_workspace_uris_are_invalid_params(start_server: StartServer, tmp_path: Path,
                                                     workspace: Path) -> None:
    client = await start_server(workspace)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = {**BAD, "a file": to_uri(a_file)}
    codes = []
    for name, uri in cases.items():
        for method, extra in (("oi/history", {}), ("oi/chat", {"message": "hi"}),
                              ("oi/execute", {"language": "python", "code": "1"})):
            with pytest.raises(JsonRpcException) as err:
                await client.request(method, {"workspace": uri, **extra})
            codes.append(err.value.code)
            assert err.value.code == -32602, (name, method, err.value)
            assert "workspace" in str(err.value), (name, method, err.value)
            assert len(str(err.value)) < 600, (name, method)  # never the 400 KB back
    record("trust", bad_uri_shapes=len(cases), bad_uri_requests=len(codes),
           bad_uri_invalid_params=codes.count(-32602))
    sessions = await client.request("oi/status", {"workspace": to_uri(workspace)})
    assert sessions["workspace"] == to_uri(workspace)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write every folder")
async def test_a_folder_the_user_cannot_write_is_refused(start_server: StartServer,
                                                         tmp_path: Path,
                                                         workspace: Path) -> None:
    client = await start_server(workspace)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(JsonRpcException) as err:
            await client.request("oi/history", {"workspace": to_uri(locked)})
        assert err.value.code == -32602 and "not writable" in str(err.value)
    finally:
        locked.chmod(0o755)


async def test_the_root_in_initialize_is_no_workspace(start_server: StartServer,
                                                      model: ModelServer,
                                                      workspace: Path) -> None:
    client = await start_server(Path("/"), workspace)
    await client.execute("python", "1", workspace=to_uri(workspace))
    with pytest.raises(JsonRpcException) as err:
        await client.request("oi/status", {"workspace": "file:///"})
    assert err.value.code == -32602 and "filesystem root" in str(err.value)
