"""Fixtures of the VS Code extension's tests: its npm build, and the e2e stack (Node 24,
code-server, playwright-core, Chromium) that scripts/setup.d/50-vscode installs and caches."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.modelserver import ModelServer
from tests.vscode.workbench import ARTIFACTS, EXT, ROOT, Workbench, free_port

__all__ = ["ARTIFACTS", "EXT", "ROOT", "run"]


def run(args: Sequence[str | Path], *, cwd: Path = EXT, timeout: float = 600,
        env: dict[str, str] | None = None) -> str:
    """Run a command; fail the test with its output when it fails."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{output}"
    return output


@pytest.fixture(scope="session")
def vscode_stack() -> Path:
    """The installed stack (a marker check when it is there already) and the extension's
    node_modules, so a fresh clone or worktree runs these tests by itself."""
    run([ROOT / "scripts" / "setup.d" / "50-vscode"], cwd=ROOT, timeout=1800,
        env={"OI_SKIP_VSCODE": ""})
    return Path((ARTIFACTS / "vscode-stack").read_text().strip())


def run_dir(factory: pytest.TempPathFactory) -> Path:
    """The folder this run's workers share (each xdist worker has its own basetemp in it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def exclusive(factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What writes clients/vscode's dist/ or out/, one worker at a time (two would write the
    same files together, and a test reading them would see them half written)."""
    shared = run_dir(factory)
    with (shared / "vscode-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield shared
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(factory: pytest.TempPathFactory, *, dev: bool) -> Path:
    """The packaged extension (what vsce printed beside it, .txt), and with `dev` the
    development build in dist/ and out/: each made once per run, the package first (its
    prepublish step writes dist/ for production), so that once a worker has what it asked
    for, nothing writes dist/ again while its tests read it."""
    with exclusive(factory) as shared:
        vsix = shared / "oi-lsp.vsix"
        if not vsix.exists():
            output = run(["npx", "@vscode/vsce", "package", "-o", vsix], timeout=600)
            vsix.with_suffix(".txt").write_text(output)
        if dev and not (shared / "vscode-built").exists():
            run(["npm", "run", "compile"])
            run(["npx", "tsc", "-p", "tsconfig.test.json"])
            (shared / "vscode-built").touch()
    return vsix


@pytest.fixture(scope="session")
def built_extension(vscode_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ (the esbuild bundles) and out/ (the pure modules compiled for node)."""
    build(tmp_path_factory, dev=True)
    return EXT


@pytest.fixture(scope="session")
def playwright_env(vscode_stack: Path) -> dict[str, str]:
    """The environment node scripts use to find playwright-core and Chromium."""
    return {"NODE_PATH": str(vscode_stack / "cs" / "node_modules"),
            "CHROMIUM": os.environ.get("CHROMIUM", "/usr/lib/chromium/chromium")}


@pytest.fixture(scope="module")
def stack_env(vscode_stack: Path, playwright_env: dict[str, str],
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    node24 = vscode_stack / "node" / "node_modules" / "node" / "bin"
    scratch = tmp_path_factory.mktemp("cs-env")
    for sub in ("xdg", "tmp"):
        (scratch / sub).mkdir()
    return {**os.environ, **playwright_env, "PATH": f"{node24}:{os.environ['PATH']}",
            "XDG_CONFIG_HOME": str(scratch / "xdg"), "TMPDIR": str(scratch / "tmp")}


@pytest.fixture(scope="session")
def vsix(vscode_stack: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory, dev=False)


@pytest.fixture(scope="module")
def vscode(vscode_stack: Path, stack_env: dict[str, str], vsix: Path, model_server: ModelServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workbench, Path]]:
    base = tmp_path_factory.mktemp("code-server")
    workspace = base / "project"
    workspace.mkdir()
    (workspace / "numbers.py").write_text("numbers = [3, 4, 5]\nprint(sum(numbers) * 1000)\n")
    user = base / "ud" / "User"
    user.mkdir(parents=True)
    (user / "settings.json").write_text(json.dumps({
        "oi.serverPath": str(ROOT / ".venv" / "bin" / "oi-lsp"),
        "oi.model": "openai/scripted", "oi.apiBase": model_server.url,
        "workbench.startupEditor": "none", "telemetry.telemetryLevel": "off",
        "security.workspace.trust.enabled": False, "extensions.autoUpdate": False,
        "workbench.tips.enabled": False, "chat.disableAIFeatures": True,
    }))
    code_server = vscode_stack / "cs" / "node_modules" / ".bin" / "code-server"
    dirs = ["--user-data-dir", str(base / "ud"), "--extensions-dir", str(base / "ext")]
    run([code_server, *dirs, "--install-extension", vsix], env=stack_env, timeout=300)
    port = free_port()
    env = {**stack_env, "PYTHONPATH": str(ROOT), "OI_LSP_DATA_DIR": str(base / "data"),
           "OI_API_KEY": "sk-from-env"}
    log = (base / "code-server.log").open("w")
    server = subprocess.Popen(
        [code_server, "--bind-addr", f"127.0.0.1:{port}", "--auth", "none",
         "--disable-telemetry", "--disable-update-check", *dirs, str(workspace)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    workbench = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
                break
            except OSError:
                assert server.poll() is None, (base / "code-server.log").read_text()
                assert time.monotonic() < deadline, "code-server did not answer in 120 s"
                time.sleep(0.5)
        ARTIFACTS.mkdir(exist_ok=True)
        workbench = Workbench(env)
        workbench("open", url=f"http://127.0.0.1:{port}/?folder={workspace}")
        workbench("command", title="Open Interpreter: Open Chat")
        workbench("chatWait", selector="#oi-header:not([hidden])")
        yield workbench, workspace
    finally:
        if workbench is not None:
            workbench.close()
        # code-server leaves a watcher child: stop the whole group (its server, oi-lsp, kernels).
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@contextlib.contextmanager
def code_server(stack: Path, env: dict[str, str], vsix: Path, base: Path, *,
                settings: dict[str, Any], open_path: Path,
                extra_env: dict[str, str] | None = None,
                drop_env: Sequence[str] = ()) -> Iterator[Workbench]:
    """A code-server of its own (user settings, environment, folder or .code-workspace to open)
    with the .vsix installed, and a Workbench on it; for scenarios the shared `vscode` fixture
    cannot hold (no API key, several folders, no oi-lsp). Stopped with its whole group."""
    user = base / "ud" / "User"
    user.mkdir(parents=True)
    (user / "settings.json").write_text(json.dumps({
        "workbench.startupEditor": "none", "telemetry.telemetryLevel": "off",
        "security.workspace.trust.enabled": False, "extensions.autoUpdate": False,
        "workbench.tips.enabled": False, "chat.disableAIFeatures": True, **settings}))
    binary = stack / "cs" / "node_modules" / ".bin" / "code-server"
    dirs = ["--user-data-dir", str(base / "ud"), "--extensions-dir", str(base / "ext")]
    run([binary, *dirs, "--install-extension", vsix], env=env, timeout=300)
    port = free_port()
    full = {**env, "PYTHONPATH": str(ROOT), "OI_LSP_DATA_DIR": str(base / "data"),
            **(extra_env or {})}
    for name in drop_env:
        full.pop(name, None)
    log = (base / "code-server.log").open("w")
    server = subprocess.Popen(
        [binary, "--bind-addr", f"127.0.0.1:{port}", "--auth", "none", "--disable-telemetry",
         "--disable-update-check", *dirs, str(open_path)],
        env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    workbench = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
                break
            except OSError:
                assert server.poll() is None, (base / "code-server.log").read_text()
                assert time.monotonic() < deadline, "code-server did not answer in 120 s"
                time.sleep(0.5)
        ARTIFACTS.mkdir(exist_ok=True)
        workbench = Workbench(env)
        kind = "workspace" if open_path.suffix == ".code-workspace" else "folder"
        workbench("open", url=f"http://127.0.0.1:{port}/?{kind}={open_path}")
        yield workbench
    finally:
        if workbench is not None:
            workbench.close()
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
