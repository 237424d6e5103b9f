"""CPU time of the static risk check (oi_lsp/core/risk.py) on 2000-line proposals.

It runs on every proposal, so it must stay cheap: this measures the median CPU time of
`risk.assess` over 10 runs for Python and shell code with and without the names its
readers look at, prints it, and records it for docs/reliability.md. Usage, from the
repository root: PYTHONPATH=$PWD .venv/bin/python -m bench.risk_check
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from oi_lsp.core import risk

LINES = 2000
CASES = {
    "python_plain": ("python", "\n".join(
        f"x{i} = [j * {i} for j in range(10)]\n"
        f"print(sum(x{i}), 'row {i}', open('out{i}.txt', 'w').write(str(x{i})))"
        for i in range(LINES // 2))),
    "python_busy": ("python", "import os, re, subprocess\n" + "\n".join(
        f"p{i} = re.compile(r'a{i}')\n"
        f"subprocess.run(['echo', os.path.join('d', 'f{i}')], check=True)"
        for i in range(LINES // 2))),
    "shell_plain": ("shell", "\n".join(
        f"echo line {i} | sed 's/a/b/' >> out.txt && grep -c foo data{i}.csv | sort"
        for i in range(LINES))),
    "shell_busy": ("shell", "\n".join(
        f"mv data{i}.csv archive/ && cp -r src{i} build/ && python3 tool.py {i}"
        for i in range(LINES))),
}


def measure() -> dict[str, float]:
    folder = Path(tempfile.mkdtemp())
    figures = {}
    for name, (language, code) in CASES.items():
        risk.assess(code, folder, False, language)
        times = []
        for _ in range(10):
            started = time.process_time()
            risk.assess(code, folder, False, language)
            times.append(time.process_time() - started)
        figures[f"cpu_ms_{name}"] = round(statistics.median(times) * 1000, 1)
    return figures


def main() -> None:
    figures = measure()
    for name, value in figures.items():
        print(f"{name}: {value} ms")
    try:
        from tests.hardening import record
    except ImportError:
        return
    record("risk", lines=LINES, **figures)


if __name__ == "__main__":
    main()
