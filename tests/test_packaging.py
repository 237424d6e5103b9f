"""The package builds as PyPI takes it now: an SPDX license expression with its license file,
without setuptools' deprecation of the TOML-table license (builds stop after 2027-02-18)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_has_an_spdx_license_and_builds_without_warnings(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", str(ROOT),
                            "-w", str(tmp_path)], capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    log = built.stdout + built.stderr
    assert "project.license" not in log and "License classifiers are deprecated" not in log
    [wheel] = tmp_path.glob("oi_lsp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert b"License-Expression: MIT" in metadata
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
