"""Which words of a piece of code name workspace files (ACP tool call locations)."""

from __future__ import annotations

from pathlib import Path

from oi_lsp.acp.locations import MAX_LOCATIONS, named_files


def test_paths_quoted_bare_relative_and_absolute_inside_the_folder_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    for name in ("data.csv", "src/app.py", "my notes.txt"):
        (ws / name).write_text("x")
    (tmp_path / "outside.txt").write_text("x")
    (ws / "link.txt").symlink_to(tmp_path / "outside.txt")
    code = (f"df = pd.read_csv('data.csv')\nos.path.join(x)\n"
            f"open(\"my notes.txt\")\ncat src/app.py {ws / 'data.csv'}\n"
            f"open('../outside.txt'); open('{tmp_path / 'outside.txt'}'); open('link.txt')\n"
            f"open('missing.txt'); import numpy as np; np.array\n")
    assert [x.path for x in named_files(code, ws)] == [
        str(ws / "data.csv"), str(ws / "my notes.txt"), str(ws / "src/app.py")]


def test_bounded_for_any_code(tmp_path: Path) -> None:
    for n in range(30):
        (tmp_path / f"f{n}.txt").write_text("x")
    code = " ".join(f"f{n}.txt" for n in range(30))
    assert len(named_files(code, tmp_path)) == MAX_LOCATIONS
    assert named_files("'\0bad.txt' " + "a.b " * 10_000, tmp_path) == []
