"""The OS sandbox (executors/sandbox): real REPLs of each language, confined by Landlock, and
what their code, its children and its daemons can and cannot do. One REPL per language and
sandbox, every check run in it in turn."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from oi_lsp.executors import registry
from oi_lsp.executors.base import Chunk, Executor
from oi_lsp.executors.sandbox import landlock
from oi_lsp.executors.sandbox.policy import Sandbox, SandboxUnavailable
from tests.hardening import record

pytestmark = pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 or later")


@dataclass(frozen=True)
class Lang:
    """How each check is written in one language ({p}: a path, {c}: a shell command, ...)."""

    name: str
    program: str
    set_x: str  # x = 41
    print_x: str  # prints x + 1
    write: str  # writes "x" to {p}
    shell: str  # runs the shell command {c}
    # Markers spelled in two pieces: a traceback shows the code, never the joined word.
    connect: str  # connects to 127.0.0.1:{port}, then prints "connected"
    signal: str  # signal 0 to {pid}, then prints "signalled"


LANGS = [
    Lang("python", "python3", "x = 41", "print(x + 1)", "open({p!r}, 'w').write('x')",
         "import subprocess; subprocess.run({c!r}, shell=True)",
         "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
         "print('con' + 'nected')", "import os\nos.kill({pid}, 0)\nprint('sig' + 'nalled')"),
    Lang("shell", "bash", "x=41", "echo $((x+1))", "echo x > {p}", "{c}",
         "exec 3<>/dev/tcp/127.0.0.1/{port} && echo con""nected; exec 3>&-",
         "kill -0 {pid} && echo sig""nalled"),
    Lang("javascript", "node", "globalThis.x = 41", "console.log(x + 1)",
         "require('fs').writeFileSync({p!r}, 'x')",
         "require('child_process').execSync({c!r}, {{stdio: 'inherit'}})",
         "new Promise((ok, bad) => {{ const s = require('net').connect({port}, '127.0.0.1', "
         "() => {{ console.log('con' + 'nected'); s.end(); ok(); }}); s.on('error', bad); }})",
         "process.kill({pid}, 0); console.log('sig' + 'nalled')"),
    Lang("ruby", "ruby", "x = 41", "puts x + 1", "File.write({p!r}, 'x')", "system({c!r})",
         "require 'socket'\nTCPSocket.new('127.0.0.1', {port}).close\nputs 'con' + 'nected'",
         "Process.kill(0, {pid})\nputs 'sig' + 'nalled'"),
    Lang("r", "R", "x <- 41", "cat(x + 1, '\\n')", "writeLines('x', {p!r})", "system({c!r})",
         "con <- socketConnection('127.0.0.1', {port}, open = 'r+', blocking = TRUE, "
         "timeout = 5)\nclose(con)\ncat(paste0('con', 'nected'), '\\n')",
         "if (tools::pskill({pid}, 0L)) cat(paste0('sig', 'nalled'), '\\n')"),
]
PARAMS = [pytest.param(lang, id=lang.name, marks=pytest.mark.skipif(
    not shutil.which(lang.program), reason=f"{lang.program} not installed")) for lang in LANGS]

Make = Callable[[str, Sandbox], Executor]


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    made: list[Executor] = []
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def create(language: str, sandbox: Sandbox) -> Executor:
        ex = registry.create(registry.canonical(language), workspace,
                             registry.ReplOptions(sandbox=sandbox))
        made.append(ex)
        return ex

    yield create
    for ex in made:
        await ex.shutdown()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 (connects complete in its backlog): its port."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        yield server.getsockname()[1]


async def run(ex: Executor, code: str) -> tuple[str, str]:
    out: list[Chunk] = []
    result = await ex.execute(code, out.append, 120)
    return result.status, "".join(c.content for c in out)


async def eventually(path: Path, seconds: float = 20) -> None:
    async with asyncio.timeout(seconds):
        while not path.exists():  # noqa: ASYNC110, ASYNC240 (another process writes it)
            await asyncio.sleep(0.05)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lang", PARAMS)
async def test_workspace_write(make: Make, lang: Lang, tmp_path: Path, listener: int) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    ex = make(lang.name, Sandbox("workspace-write", network=True))
    assert (await run(ex, lang.set_x))[0] == "ok"
    # The REPL itself: the workspace yes, a fresh folder elsewhere under /tmp no.
    await run(ex, lang.write.format(p=str(ws / "inside")))
    assert (ws / "inside").read_text().strip() == "x"
    _, text = await run(ex, lang.write.format(p=str(outside / "repl")))
    assert "ermission denied" in text or "EACCES" in text
    assert not (outside / "repl").exists()
    # A child, and a daemon (setsid, its parent gone: a double fork) are confined too.
    child = f"echo x > {outside / 'child'}; echo x > {ws / 'child'}"
    await run(ex, lang.shell.format(c=child))
    assert (ws / "child").exists() and not (outside / "child").exists()
    daemon = (f"setsid sh -c 'sleep 0.3; echo x > {outside / 'daemon'}; "
              f"echo x > {ws / 'daemon'}' >/dev/null 2>&1 &")
    await run(ex, lang.shell.format(c=daemon))
    await eventually(ws / "daemon")
    assert not (outside / "daemon").exists()
    # The network is open; the server (here: this test's process) cannot be signalled.
    assert "connected" in (await run(ex, lang.connect.format(port=listener)))[1]
    assert "signalled" not in (await run(ex, lang.signal.format(pid=os.getpid())))[1]
    status, text = await run(ex, lang.print_x)  # its variables survived all of it
    assert status == "ok" and "42" in text
    assert ex.sandbox_state() == "workspace-write"
    record("sandbox", **{f"escapes_{lang.name}": "4 tried (the REPL, a child, a daemon write "
                                                  "outside; a signal to the server), 0 worked"})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lang", PARAMS)
async def test_read_only_no_network(make: Make, lang: Lang, tmp_path: Path,
                                    listener: int) -> None:
    ws = tmp_path / "ws"
    ex = make(lang.name, Sandbox("read-only", network=False))
    _, text = await run(ex, lang.write.format(p=str(ws / "inside")))
    assert not (ws / "inside").exists()
    _, text = await run(ex, lang.connect.format(port=listener))
    assert "connected" not in text
    # Its private temporary folder stays writable (TMPDIR points there).
    _, text = await run(ex, lang.shell.format(c='echo x > "$TMPDIR/t" && echo wrote-temp'))
    assert "wrote-temp" in text
    assert ex.sandbox_state() == "read-only"


def test_unenforceable_sandbox_is_refused() -> None:
    """A rule this kernel cannot enforce refuses the start, with the reason."""
    rules = landlock.Rules(network=False)
    with pytest.raises(landlock.Unavailable, match="ABI 4"):
        landlock.check(rules, version=3)
    with pytest.raises(landlock.Unavailable, match="Landlock"):
        landlock.check(landlock.Rules(), version=0)
    assert isinstance(Sandbox("workspace-write").check(), str)
    assert issubclass(SandboxUnavailable, RuntimeError)


def test_launcher_exits_as_its_program_and_refuses_what_it_cannot_enforce(
        tmp_path: Path) -> None:
    launch = [sys.executable, "-m", "oi_lsp.executors.sandbox.launch"]
    done = subprocess.run([*launch, "--", "sh", "-c", "exit 3"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    killed = subprocess.run([*launch, "--", "sh", "-c", "kill -TERM $$"], timeout=60)
    assert killed.returncode == -signal.SIGTERM
    refused = subprocess.run([*launch, "--confine", "--write", str(tmp_path / "missing"), "--",
                              "sh", "-c", f"touch {tmp_path / 'ran'}"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 126 and "refusing to start sh" in refused.stderr
    assert not (tmp_path / "ran").exists()


def test_launcher_whose_server_died_already_starts_nothing(tmp_path: Path) -> None:
    """A server that dies while its REPL's launcher is still starting never sends the death
    signal the launcher asks for (asked too late): the launcher sees it has another parent
    and starts nothing, rather than a REPL that outlives its server. Its own parent is
    followed as before."""
    launch = [sys.executable, "-m", "oi_lsp.executors.sandbox.launch"]
    ran = tmp_path / "ran"
    orphan = subprocess.run([*launch, "--follow-parent", str(os.getpid() + 10**6), "--",
                             "sh", "-c", f"touch {ran}"], timeout=60)
    assert orphan.returncode == 128 + signal.SIGTERM and not ran.exists()
    followed = subprocess.run([*launch, "--follow-parent", str(os.getpid()), "--",
                               "sh", "-c", f"touch {ran}"], timeout=60)
    assert followed.returncode == 0 and ran.exists()
