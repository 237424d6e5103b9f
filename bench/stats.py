"""Summaries of repeated measurements: min / median / p95, and ratios between them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    min: float
    median: float
    p95: float

    def ms(self) -> str:
        """`min / median / p95 ms (n)` for seconds."""
        return (f"{self.min * 1e3:.1f} / {self.median * 1e3:.1f} / {self.p95 * 1e3:.1f} ms"
                f" (n={self.n})")

    def s(self) -> str:
        return f"{self.min:.2f} / {self.median:.2f} / {self.p95:.2f} s (n={self.n})"


def summarize(values: list[float]) -> Summary | None:
    if not values:
        return None
    ordered = sorted(values)
    # Nearest-rank p95: with 20 runs it is the 19th value, never an interpolation.
    rank = max(0, min(len(ordered) - 1, -(-95 * len(ordered) // 100) - 1))
    return Summary(len(ordered), ordered[0], statistics.median(ordered), ordered[rank])


def ratio(ours: Summary | None, base: Summary | None) -> float | None:
    """Median over median: what the reader compares."""
    if ours is None or base is None or base.median <= 0:
        return None
    return ours.median / base.median
