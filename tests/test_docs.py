"""docs/testing.md's list of behaviours is the tests' own (scripts/behaviours makes it), so
that a test removed or added shows in the doc and in review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_of_behaviours_is_the_tests() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "behaviours"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_check_notices_a_test_missing_from_the_list(tmp_path: Path) -> None:
    sandbox = tmp_path / "tree"
    (sandbox / "tests").mkdir(parents=True)
    (sandbox / "docs").mkdir()
    (sandbox / "scripts").mkdir()
    script = sandbox / "scripts" / "behaviours"
    script.write_text((ROOT / "scripts" / "behaviours").read_text())
    (sandbox / "tests" / "test_a.py").write_text('"""A. More."""\ndef test_one(): pass\n')
    (sandbox / "docs" / "testing.md").write_text("# Testing\n")
    run = [sys.executable, str(script)]
    assert subprocess.run([*run, "--check"], capture_output=True).returncode == 1
    subprocess.run([*run, "--write"], check=True)
    assert "  - one" in (sandbox / "docs" / "testing.md").read_text()
    assert subprocess.run([*run, "--check"], capture_output=True).returncode == 0
    (sandbox / "tests" / "test_a.py").write_text('"""A."""\ndef test_two(): pass\n')
    assert subprocess.run([*run, "--check"], capture_output=True).returncode == 1
