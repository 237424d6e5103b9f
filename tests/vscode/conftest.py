"""Fixtures of the VS Code extension's tests: its npm build, and the e2e stack (Node 24,
code-server, playwright-core, Chromium) that scripts/setup.d/50-vscode installs and caches."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "clients" / "vscode"
ARTIFACTS = ROOT / "test-artifacts"


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


@pytest.fixture(scope="session")
def built_extension(vscode_stack: Path) -> Path:
    """dist/ (the esbuild bundles) and out/ (the pure modules compiled for node)."""
    run(["npm", "run", "compile"])
    run(["npx", "tsc", "-p", "tsconfig.test.json"])
    return EXT


@pytest.fixture(scope="session")
def playwright_env(vscode_stack: Path) -> dict[str, str]:
    """The environment node scripts use to find playwright-core and Chromium."""
    return {"NODE_PATH": str(vscode_stack / "cs" / "node_modules"),
            "CHROMIUM": os.environ.get("CHROMIUM", "/usr/lib/chromium/chromium")}
