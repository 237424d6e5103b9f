"""Subprocess REPLs and the registry, with real processes (bash, node, ruby, R, java)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from oi_lsp.client import OIClient
from oi_lsp.executors import registry
from oi_lsp.executors.base import Chunk, Executor

LANGS = [pytest.param(lang, code, marks=pytest.mark.skipif(not shutil.which(prog),
                                                           reason=f"{prog} not installed"))
         for lang, prog, code in [
             ("shell", "bash", ("x=41", "echo $((x+1)); echo err >&2", "false")),
             ("javascript", "node", ("globalThis.x = 41", "console.log(x+1); console.error('err')",
                                     "throw new Error('bad')")),
             ("ruby", "ruby", ("x = 41", "puts x+1; $stderr.puts 'err'", "raise 'bad'")),
             ("r", "R", ("x <- 41", "cat(x+1, '\\n'); message('err')", "stop('bad')")),
         ]]


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[object]:
    made: list[Executor] = []

    def create(language: str) -> Executor:
        ex = registry.create(registry.canonical(language), tmp_path, "python3")
        made.append(ex)
        return ex

    yield create
    for ex in made:
        await ex.shutdown()


async def run(ex: Executor, code: str, timeout: float | None = 30) -> tuple[str, str]:
    out: list[Chunk] = []
    result = await ex.execute(code, out.append, timeout)
    return result.status, "".join(c.content for c in out)


@pytest.mark.parametrize(("language", "code"), LANGS)
async def test_state_output_and_status(make, language: str, code: tuple[str, str, str]) -> None:
    ex = make(language)
    assert (await run(ex, code[0]))[0] == "ok"
    status, text = await run(ex, code[1])
    assert status == "ok" and "42" in text and "err" in text
    status, text = await run(ex, code[2])
    assert status == "error"
    assert (await run(ex, code[1]))[0] == "ok"  # still usable after an error


async def test_shell_stdin_fails_fast(make) -> None:
    status, _ = await run(make("bash"), "read line", timeout=20)
    assert status == "error"


async def test_stop_kills_child_and_grandchild(make) -> None:
    ex = make("shell")
    await ex.start()
    task = asyncio.create_task(run(ex, "sleep 100 & bash -c 'sleep 100; echo no'", None))
    procs: list[psutil.Process] = []
    async with asyncio.timeout(20):
        while len(procs) < 3:  # background sleep, bash -c, its sleep
            await asyncio.sleep(0.05)
            procs = psutil.Process(ex.pid).children(recursive=True)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for proc in procs:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    assert await run(ex, "echo back") == ("ok", "back\n")


async def test_timeout_then_usable(make) -> None:
    ex = make("shell")
    status, text = await run(ex, "echo before; sleep 100", timeout=0.5)
    assert status == "timeout" and "before" in text and "timed out" in text
    assert await run(ex, "echo after") == ("ok", "after\n")


async def test_killed_repl_is_reported_and_replaced(make) -> None:
    ex = make("shell")
    await run(ex, "x=1")
    pid = ex.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    status, text = await run(ex, "echo ${x:-unset}")
    assert status == "ok" and "state is lost" in text and "unset" in text
    assert ex.pid != pid


async def test_exit_during_run_is_reported(make) -> None:
    ex = make("shell")
    status, text = await run(ex, "exit 3")
    assert status == "error" and "exit status 3" in text
    assert (await run(ex, "echo ok"))[0] == "ok"


async def test_java_and_html(make) -> None:
    if shutil.which("java"):
        status, text = await run(make("java"), 'System.out.println("hi " + (40 + 2));', 120)
        assert (status, text) == ("ok", "hi 42\n")
    out: list[Chunk] = []
    await make("html").execute("<b>x</b>", out.append)
    assert out == [Chunk("code", "html", "<b>x</b>")]


def test_unknown_and_missing_languages() -> None:
    with pytest.raises(registry.UnknownLanguage, match="available"):
        registry.canonical("klingon")
    if not shutil.which("osascript"):
        with pytest.raises(registry.UnknownLanguage, match="macOS"):
            registry.create("applescript", Path("."), "python3")
    names = {info.name: info for info in registry.describe("python3")}
    assert names["shell"].available and names["python"].kind == "kernel"


async def test_shell_through_server(client: OIClient) -> None:
    result = await client.execute("shell", "echo hi")
    assert result["status"] == "ok" and result["outputs"][0]["content"] == "hi\n"
    result = await client.execute("klingon", "x")
    assert result["status"] == "error" and "klingon" in result["outputs"][0]["content"]
