"""Kernelspecs are found where Jupyter and IPython put them, and neither listing them nor
starting a kernel imports IPython into the server (jupyter_client's own default would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from oi_lsp.executors import registry

async def main():
    kernels = registry.installed_kernels()
    program = registry.kernel_program("py-in-ipython-dir")
    ex = registry.create("python", Path(sys.argv[1]), registry.ReplOptions())
    out = []
    try:
        result = await ex.execute("print(6 * 7)", out.append, 60)
    finally:
        await ex.shutdown()
    print(json.dumps({"kernels": kernels, "program": program, "status": result.status,
                      "output": "".join(c.content for c in out),
                      "ipython": sorted(m for m in sys.modules if m.split(".")[0] == "IPython")}))

asyncio.run(main())
"""


def spec(folder: Path, name: str, language: str) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "kernel.json").write_text(json.dumps({
        "argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": name, "language": language}))


def test_specs_in_the_ipython_folder_count_and_ipython_stays_out(tmp_path: Path) -> None:
    ipython = tmp_path / "ipython"
    spec(ipython / "kernels", "fake-in-ipython-dir", "fakelang")
    spec(ipython / "kernels", "py-in-ipython-dir", "python")
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(work)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "IPYTHONDIR": str(ipython)})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["kernels"]["fakelang"] == "fake-in-ipython-dir"
    assert seen["program"] == sys.executable  # "python3" in the spec: this interpreter
    assert (seen["status"], seen["output"]) == ("ok", "42\n")
    assert seen["ipython"] == []
