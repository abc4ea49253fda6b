"""Small pure-Python statistics (numpy is not a dependency of slurm-ab)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """numpy.percentile's default ('linear'): x[i] + (x[i+1]-x[i]) * frac at rank q/100*(n-1)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of an empty sequence")
    rank = (q / 100.0) * (n - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    a, b = sorted_values[lo], sorted_values[hi]
    return a + (b - a) * frac


@dataclass(frozen=True)
class Dist:
    """Mean and percentiles of one latency metric, in milliseconds."""

    n: int
    mean: float
    p50: float
    p95: float
    p99: float
    p90: float | None = None
    min: float | None = None
    max: float | None = None
    std: float | None = None        # sample standard deviation (n - 1); None for one value

    @classmethod
    def of(cls, values: Iterable[float]) -> "Dist | None":
        xs = sorted(values)
        if not xs:
            return None
        m = math.fsum(xs) / len(xs)
        sd = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
        return cls(len(xs), m, percentile(xs, 50), percentile(xs, 95), percentile(xs, 99),
                   percentile(xs, 90), xs[0], xs[-1], sd)


def mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None
