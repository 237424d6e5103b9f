"""The benchmark harness keeps working: a tiny `bench.run --quick` completes and reports every
metric of issue 6. Timings are never asserted here (they belong to bench/RESULTS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
METRICS = ["1a", "1b", "2", "3a", "3b", "4a", "4b", "4c", "4d", "4e", "4f", "5a", "5b",
           "6a", "6b", "6c", "6d", "6e", "6f", "6g", "6h", "6i", "7a", "7b", "7c",
           "8a", "8b", "8c", "8d", "8e", "8f", "8g", "8h", "9", "10", "11a", "11b", "11c", "11d",
           "12"]


@pytest.mark.timeout(600)  # a dozen servers, kernels and a kernel gateway on a shared machine
def test_quick_bench_prints_every_metric(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    # Baseline B needs its own venv (minutes to install): the full bench measures it.
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--runs", "2", "--heavy", "1",
         "--flood-lines", "2000", "--big-mb", "2", "--workspaces", "2", "--pieces", "3",
         "--no-oi",
         "--output", str(results)],
        cwd=ROOT, capture_output=True, text=True, timeout=580, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for metric in METRICS:
        assert any(line.startswith(f"[{metric}] ") for line in lines), f"metric {metric} missing"
        assert any(line.startswith(f"| {metric} | ") for line in lines), f"row {metric} missing"
    assert "baseline B skipped (--no-oi)" in proc.stdout
    assert "Targets missed:" in proc.stdout

    written = results.read_text()
    assert "- machine: " in written and "- versions: " in written and "- date: " in written
    for metric in METRICS:
        assert f"| {metric} | " in written
