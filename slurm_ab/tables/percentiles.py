"""The percentile table per metric (AIPerf's console, genai-bench): for each run or (mode, C) and
each latency, how many values, their mean, p50/p90/p95/p99, min, max and standard deviation, so a
tail is read beside its spread and its sample size. A percentile resting on too few values to have
one above it (ab_stats.percentiles.thin: a p99 of 40 requests) is marked '*' and said below."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..ab_stats.percentiles import tail_requests, thin
from ..parse.stats import Dist
from .table import DASH, Table, notes

# (key of the per-request values, label, unit, scale from ms)
METRICS = (("ttft", "TTFT", "ms", 1.0), ("tpot", "TPOT", "ms", 1.0), ("itl", "ITL", "ms", 1.0),
           ("e2e", "E2E", "s", 0.001))
QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))
HEADERS = ("Run", "Metric", "n", "mean", "p50", "p90", "p95", "p99", "min", "max", "std")


def percentile_rows(groups: Sequence[tuple[str, Mapping[str, Sequence[float]]]]) -> list[tuple[str, str, Dist]]:
    """(label, metric label with unit, Dist) per group and metric with values; groups: (label,
    {ttft|tpot|itl|e2e: per-request values in ms})."""
    out = []
    for label, values in groups:
        for key, name, unit, _ in METRICS:
            d = Dist.of(values.get(key) or ())
            if d is not None:
                out.append((label, f"{name} ({unit})", d))
    return out


def _cell(x: float | None, scale: float) -> str:
    return DASH if x is None else f"{x * scale:.2f}"


def percentile_table(groups: Sequence[tuple[str, Mapping[str, Sequence[float]]]],
                     width: int | None = None) -> str:
    """The table of per-request values (markdown, fitted to `width` when given) and its notes:
    '*' on a percentile with no value above it. Empty when no group has per-request values."""
    return dist_table(percentile_rows(groups), width)


def summary_rows(label: str, bench) -> list[tuple[str, str, object]]:
    """(label, metric, Latency) of a pass's collected figures (collect.records.BenchResult: the
    client's p50/p95/p99, and p90/min/max/std/n from its per-request details)."""
    out = []
    for key, name, unit, _ in METRICS:
        lat = getattr(bench, key, None) if bench is not None else None
        if lat is not None and lat.mean is not None:
            out.append((label, f"{name} ({unit})", lat))
    return out


def dist_table(rows: Sequence[tuple[str, str, object]], width: int | None = None) -> str:
    """rows: (label, metric label, figures with n, mean, p50, p90, p95, p99, min, max, std in ms)."""
    body, marked = [], set()
    scale = {f"{n} ({u})": s for _, n, u, s in METRICS}
    for label, metric, d in rows:
        sc = scale[metric]
        n = getattr(d, "n", None)
        cells = []
        for name, q in QUANTILES:
            v = _cell(getattr(d, name, None), sc)
            if v != DASH and thin(q, n):
                v += "*"
                marked.add(q)
            cells.append(v)
        body.append([label, metric, DASH if n is None else str(n), _cell(d.mean, sc), *cells,
                     *(_cell(getattr(d, k, None), sc) for k in ("min", "max", "std"))])
    if not body:
        return ""
    table = Table.of(HEADERS, body, ("left", "left") + ("right",) * (len(HEADERS) - 2))
    lines = [f"* p{round(q * 100)} of fewer than {tail_requests(q)} values: no value lies above it, so it is the "
             "largest values interpolated, not a tail" for q in sorted(marked)]
    return table.text(width, 2) + "\n" + (notes(lines, width=width) if lines else "")


__all__ = ["percentile_rows", "percentile_table", "summary_rows", "dist_table", "METRICS", "QUANTILES"]
