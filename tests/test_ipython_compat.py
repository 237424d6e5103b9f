"""What the Python active-line sampler takes from IPython's private parts.

The sampler (oi_lsp/executors/drivers/ipython_active_line.py) tells a cell's frames from
library frames by the file names in `ip.compile.<CELL_FILENAMES>`, a private attribute of
IPython's CachingCompiler. When a release renames it, the sampler falls back to an empty
mapping and reports no line at all, silently: these tests fail loudly instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from IPython.core.compilerop import CachingCompiler

from oi_lsp.executors.active_line import CELL_FILENAMES, marker

ROOT = Path(__file__).resolve().parent.parent


def test_caching_compiler_maps_cell_file_names() -> None:
    compiler = CachingCompiler()
    cells = getattr(compiler, CELL_FILENAMES, None)
    assert isinstance(cells, dict), (
        f"IPython's CachingCompiler has no {CELL_FILENAMES!r} mapping any more: update "
        "CELL_FILENAMES in oi_lsp/executors/active_line.py")
    name = compiler.cache("x = 1\n", number=7)
    assert name in cells  # the file name a cell is compiled under, as the sampler looks it up
    code = compiler("x = 1\n", name, "exec")
    assert code.co_filename in cells


def test_sampler_reports_a_running_line() -> None:
    """The shipped sampler in a real InteractiveShell: a sleeping line is reported."""
    script = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        from oi_lsp.executors import active_line

        shell = InteractiveShell.instance()
        shell.run_cell(active_line.python_setup(True, "tok"), store_history=False, silent=True)
        result = shell.run_cell("import time\\ntime.sleep(0.5)\\nx = 1\\n", store_history=True)
        assert result.success, result
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{marker('tok')}2\x03" in done.stdout, (done.stdout, done.stderr)
