"""The results table: one row per figure, with its baseline, ratio and whether the target holds."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil


@dataclass(slots=True)
class Row:
    metric: str  # "1", "4b", ...: the numbering
    what: str
    ours: str
    baseline: str = "—"
    ratio: str = "—"
    target: str = "—"
    verdict: str = "—"  # met / MISSED / skipped / — (no target)


@dataclass(slots=True)
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    workload: str = ""
    # Other work on the machine slows every side, but not alike: say how busy it was.
    load: str = field(default_factory=lambda: " / ".join(f"{x:.2f}" for x in os.getloadavg()))

    def add(self, row: Row) -> None:
        self.rows.append(row)
        # Printed as measured, so a long run shows progress and a crash keeps what was done.
        print(f"[{row.metric}] {row.what}: {row.ours} | baseline {row.baseline} | "
              f"ratio {row.ratio} | target {row.target} | {row.verdict}", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"note: {text}", flush=True)

    def table(self) -> str:
        head = ["#", "figure", "oi-lsp", "baseline", "ratio", "target", "verdict"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            cells = [r.metric, r.what, r.ours, r.baseline, r.ratio, r.target,
                     f"**{r.verdict}**" if r.verdict == "MISSED" else r.verdict]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        return "\n".join(lines)

    def markdown(self) -> str:
        missed = [r for r in self.rows if r.verdict == "MISSED"]
        parts = [
            "# Benchmark results",
            "",
            "Written by `.venv/bin/python -m bench.run` (see the README's Benchmarks section). "
            "Times are min / median / p95 over n runs; ratios are median over median, against "
            "baselines measured in the same run, interleaved with ours, each side's turn 50 ms "
            "after the last one's (what a side leaves going after its answer, a save or Open "
            "Interpreter's housekeeping, is not timed in the next). Every baseline runs in a "
            "fresh process of its own that does nothing else and times itself: A (raw "
            "jupyter_client) in bench/raw_child.py, one process for the warm and flood figures, "
            "one per cold start, one driving the scale figure's kernels (each kernel as "
            "ipykernel starts by default); A′, A's kernel started with the options oi-lsp "
            "gives its own (row 8h), in one more; B in Open "
            "Interpreter's own venv. oi-lsp's figures are timed by the benchmark's client, "
            "request sent to response read.",
            "",
            f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
            f"- machine: {machine()}",
            f"- load average when the run started: {self.load}",
            f"- versions: {', '.join(f'{k} {v}' for k, v in self.versions.items())}",
            f"- workload: {self.workload}",
            "",
            self.table(),
            "",
            f"Targets missed: {len(missed)}"
            + (" (" + ", ".join(f"{r.metric} {r.what}" for r in missed) + ")" if missed else ""),
        ]
        if self.notes:
            parts += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(parts) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.markdown())


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = psutil.virtual_memory().total / 2**30
    return (f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores, "
            f"{mem:.0f} GiB RAM, Python {platform.python_version()}")


def package_versions(*names: str) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"
