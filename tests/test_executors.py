"""Every executor kind with real processes: the Python kernel, subprocess REPLs (bash, node, ruby,
R), one-shot Java, HTML; and the registry."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from oi_lsp.client import OIClient
from oi_lsp.executors import registry
from oi_lsp.executors.base import Chunk, Executor
from oi_lsp.executors.process import group_members


@dataclass(frozen=True)
class Lang:
    """The code each test runs, in one language."""

    name: str
    program: str
    set_x: str  # x = 41
    print_x: str  # prints x+1 on stdout and "err" on stderr
    fail: str  # fails
    read_stdin: str  # reads a line of input
    sleep: str  # sleeps 100 s
    tree: str  # starts `sleep 100` as a child and as a grandchild, then waits
    big: str  # prints 1,000,000 characters: 20,000 lines of 49 digits and a newline


LANGS = [
    Lang("python", "python3", "x = 41", "import sys\nprint(x + 1)\nprint('err', file=sys.stderr)",
         "raise ValueError('bad')", "input()", "import time\ntime.sleep(100)",
         "import subprocess\nsubprocess.Popen(['sleep', '100'])\n"
         "subprocess.run(['bash', '-c', 'sleep 100; echo no'])",
         "for i in range(20000):\n    print(str(i).zfill(49))"),
    Lang("shell", "bash", "x=41", "echo $((x+1)); echo err >&2", "false", "read line",
         "sleep 100", "sleep 100 & bash -c 'sleep 100; echo no'",
         "for i in $(seq 0 19999); do printf '%049d\\n' $i; done"),
    Lang("javascript", "node", "globalThis.x = 41", "console.log(x+1); console.error('err')",
         "throw new Error('bad')", "require('fs').readFileSync(0, 'utf8')",
         "require('child_process').execSync('sleep 100')",
         "const cp = require('child_process'); cp.spawn('sleep', ['100']);\n"
         "cp.execSync(\"bash -c 'sleep 100; echo no'\")",
         "for (let i = 0; i < 20000; i++) console.log(String(i).padStart(49, '0'))"),
    Lang("ruby", "ruby", "x = 41", "puts x+1; $stderr.puts 'err'", "raise 'bad'", "$stdin.gets",
         "sleep 100", "spawn('sleep 100')\nsystem(\"bash -c 'sleep 100; echo no'\")",
         "20000.times { |i| puts i.to_s.rjust(49, '0') }"),
    Lang("r", "R", "x <- 41", "cat(x+1, '\\n'); message('err')", "stop('bad')",
         "readLines(file('stdin'), n = 1)", "Sys.sleep(100)",
         "system('sleep 100', wait = FALSE)\nsystem(\"bash -c 'sleep 100; echo no'\")",
         "for (i in 0:19999) cat(formatC(i, width = 49, flag = '0'), '\\n', sep = '')"),
]
PARAMS = [pytest.param(lang, id=lang.name, marks=pytest.mark.skipif(
    not shutil.which(lang.program), reason=f"{lang.program} not installed")) for lang in LANGS]

Make = Callable[[str], Executor]


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    made: list[Executor] = []

    def create(language: str) -> Executor:
        ex = registry.create(registry.canonical(language), tmp_path, registry.ReplOptions())
        made.append(ex)
        return ex

    yield create
    for ex in made:
        await ex.shutdown()


async def run(ex: Executor, code: str, timeout: float | None = 60) -> tuple[str, str]:
    out: list[Chunk] = []
    result = await ex.execute(code, out.append, timeout)
    return result.status, "".join(c.content for c in out)


@pytest.mark.parametrize("lang", PARAMS)
async def test_state_output_status_stdin(make: Make, lang: Lang) -> None:
    ex = make(lang.name)
    assert (await run(ex, lang.set_x))[0] == "ok"
    status, text = await run(ex, lang.print_x)
    assert status == "ok" and "42" in text and "err" in text
    assert (await run(ex, lang.fail))[0] == "error"
    # Input cannot be given: a read fails at once (well within the time limit) as an error.
    status, _ = await run(ex, lang.read_stdin, timeout=30)
    assert status == "error"
    status, text = await run(ex, lang.print_x)  # usable after errors, state kept
    assert status == "ok" and "42" in text


def _sleeps(pgid: int) -> list[psutil.Process]:
    """`sleep`s in the REPL's process group (a child may be orphaned, as R's system() does)."""
    return [p for p in group_members(pgid) if p.name() == "sleep"]


@pytest.mark.parametrize("lang", PARAMS)
async def test_stop_kills_child_and_grandchild(make: Make, lang: Lang) -> None:
    ex = make(lang.name)
    await run(ex, lang.set_x)
    assert ex.pid is not None
    task = asyncio.create_task(run(ex, lang.tree, None))
    sleeps: list[psutil.Process] = []
    async with asyncio.timeout(60):
        while len(sleeps) < 2:  # the child sleep and the grandchild sleep
            await asyncio.sleep(0.1)
            sleeps = _sleeps(os.getpgid(ex.pid))  # the launcher's group
    assert any(p.ppid() != ex.pid for p in sleeps)  # one of them is a grandchild
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _, alive = psutil.wait_procs(sleeps, timeout=5)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    status, text = await run(ex, lang.print_x)  # the REPL and its state survived the stop
    assert status == "ok" and "42" in text


@pytest.mark.parametrize("lang", PARAMS)
async def test_timeout_then_usable(make: Make, lang: Lang) -> None:
    ex = make(lang.name)
    await run(ex, lang.set_x)
    status, text = await run(ex, lang.sleep, timeout=2)
    assert status == "timeout" and "timed out after 2 s" in text
    status, text = await run(ex, lang.print_x)
    assert status == "ok" and "42" in text


@pytest.mark.parametrize("lang", PARAMS)
async def test_killed_repl_is_reported_and_replaced(make: Make, lang: Lang) -> None:
    ex = make(lang.name)
    await run(ex, lang.set_x)
    pid = ex.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    status, text = await run(ex, lang.print_x)  # at once: the death may not be reaped yet
    assert ex.pid != pid
    assert "restarted" in text or "started a new one" in text
    assert status == "error" or "42" not in text  # x is gone with the old REPL, as it says
    assert (await run(ex, lang.set_x))[0] == "ok"
    status, text = await run(ex, lang.print_x)
    assert status == "ok" and "42" in text


async def test_killed_kernel_runs_the_next_cell_once(make: Make, tmp_path: Path) -> None:
    ex = make("python")
    await run(ex, "1")
    assert ex.pid is not None
    os.kill(ex.pid, signal.SIGKILL)
    status, text = await run(ex, "open('ran.txt', 'a').write('x')")
    assert status == "ok" and "restarted" in text
    await run(ex, "1")  # a copy of the cell sent to the dead kernel would have run by now
    assert (tmp_path / "ran.txt").read_text() == "x"


@pytest.mark.parametrize("lang", PARAMS)
async def test_megabyte_of_output_arrives_whole(make: Make, lang: Lang) -> None:
    status, text = await run(make(lang.name), lang.big, timeout=120)
    lines = text.splitlines()
    assert status == "ok" and len(lines) == 20000
    assert lines[0] == "0" * 49 and lines[-1] == "19999".zfill(49)
    assert len(text) == 1_000_000


async def test_python_writes_keep_their_meaning_through_the_output_pacing(make: Make) -> None:
    """drivers/ipython_output.py wraps every write of the kernel's streams: what a write
    returns, refuses and lets IPython capture is the stream's own, and a write longer than a
    piece still arrives whole and in order."""
    ex = make("python")
    status, text = await run(ex, "import sys\nn = sys.stdout.write('abc')\nprint(n)")
    assert (status, text) == ("ok", "abc3\n")
    status, text = await run(ex, "sys.stdout.write(5)")
    assert status == "error" and "write() argument must be str" in text
    assert "During handling" not in text and "_splitting" not in text  # the pacing stays out
    status, text = await run(ex, "%%capture kept\nprint('inside')")
    assert (status, text) == ("ok", "")
    status, text = await run(ex, "print(kept.stdout == 'inside\\n')\n"
                                 "sys.stdout.write('a' * 3_000_000 + 'b')\nprint()")
    assert status == "ok" and text == "True\n" + "a" * 3_000_000 + "b\n"


async def test_exit_during_run_is_reported(make: Make) -> None:
    ex = make("shell")
    status, text = await run(ex, "exit 3")
    assert status == "error" and "exit status 3" in text
    assert (await run(ex, "echo ok"))[0] == "ok"


async def test_bash_active_line(make: Make) -> None:
    ex = make("shell")
    ex.active_line = True
    out: list[Chunk] = []
    code = "x=$(echo captured)\necho \"$x\"\nfor i in 1 2; do\n  echo $i\ndone\nfalse\n"
    result = await ex.execute(code, out.append, 30)
    lines = [c.content for c in out if c.format == "active_line"]
    text = "".join(c.content for c in out if c.format == "output")
    assert result.status == "error" and result.exit_code == 1  # the code's status, kept
    assert text == "captured\n1\n2\n"  # no marker in the output nor in $(...)
    assert lines[:2] == ["1", "2"] and lines[-1] == "6" and "4" in lines


async def test_python_png_display(make: Make) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
    ex = make("python")
    out: list[Chunk] = []
    result = await ex.execute(
        f"from IPython.display import Image, HTML, SVG, display\ndisplay(Image(data={png!r}))\n"
        "display(HTML('<b>bold</b>'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\"/>'))",
        out.append, 60)
    assert result.status == "ok"
    assert [(c.type, c.format) for c in out] == [
        ("image", "base64.png"), ("code", "html"), ("image", "svg")]
    assert base64.b64decode(out[0].content) == png
    assert out[1].content == "<b>bold</b>" and out[2].content.startswith("<svg")


async def test_java_html_and_one_shot_timeout(make: Make) -> None:
    out: list[Chunk] = []
    await make("html").execute("<b>x</b>", out.append)
    assert out == [Chunk("code", "html", "<b>x</b>")]
    if not shutil.which("javac"):
        with pytest.raises(registry.UnknownLanguage, match="JDK"):
            make("java")
        return
    java = make("java")
    status, text = await run(java, 'System.out.println("hi " + (40 + 2));', 120)
    assert (status, text) == ("ok", "hi 42\n")
    status, text = await run(java, "int[] a = new int[1];\na[2] = 1;", 120)
    assert status == "error" and "ArrayIndexOutOfBoundsException" in text
    status, text = await run(java, "Thread.sleep(100000);", 10)
    assert status == "timeout" and "timed out" in text


def test_unknown_and_missing_languages() -> None:
    with pytest.raises(registry.UnknownLanguage, match="available"):
        registry.canonical("klingon")
    if not shutil.which("osascript"):
        with pytest.raises(registry.UnknownLanguage, match="macOS"):
            registry.create("applescript", Path("."), registry.ReplOptions())
    if not shutil.which("pwsh"):
        with pytest.raises(registry.UnknownLanguage, match="install PowerShell"):
            registry.create("powershell", Path("."), registry.ReplOptions())
    names = {info.name: info for info in registry.describe(registry.ReplOptions())}
    assert names["shell"].available and names["python"].kind == "kernel"
    for info in names.values():
        assert info.available or info.install_hint


async def test_languages_and_errors_through_server(client: OIClient) -> None:
    result = await client.execute("shell", "echo hi")
    assert result["status"] == "ok" and result["outputs"][0]["content"] == "hi\n"
    result = await client.execute("klingon", "x")
    assert result["status"] == "error"
    assert "klingon" in result["outputs"][0]["content"] and "available" in result["error"]
    if not shutil.which("pwsh"):
        result = await client.execute("powershell", "Write-Output 1")
        assert result["status"] == "error"
        assert "install PowerShell" in result["outputs"][0]["content"]
    infos = {i["name"]: i for i in (await client.request("oi/languages", {}))["languages"]}
    assert {"python", "shell", "javascript", "ruby", "r", "powershell", "java",
            "applescript", "html"} <= set(infos)
    assert infos["python"]["kind"] == "kernel" and infos["shell"]["kind"] == "subprocess"
    for info in infos.values():
        assert info["available"] or info["installHint"]
    assert infos["javascript"]["available"] == bool(shutil.which("node"))


async def test_restarted_kernel_starts_anew_each_time(make: Make) -> None:
    # A restart launches a new kernel with a new no-input stdin: the first start's fd is
    # closed by then (restarting with it failed with EBADF, or handed the kernel another fd).
    ex = make("python")
    assert (await run(ex, "x = 1"))[0] == "ok"
    for _ in range(2):
        first = ex.pid
        await ex.restart()
        assert ex.pid is not None and ex.pid != first
        status, text = await run(ex, "print('x' in globals())")
        assert status == "ok" and "False" in text
        status, _ = await run(ex, "import sys; sys.stdin.readline()", timeout=30)
        assert status == "error"
