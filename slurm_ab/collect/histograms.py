"""Latency histograms of a /metrics window: the observations between two scrapes.

Mean = delta _sum / delta _count (exact). p50/p95 are Prometheus' histogram_quantile(): the bucket
holding rank q x count, interpolated linearly inside it. Interpolation gives a number finer than
the histogram can know (SGLang 0.5.23's TPOT buckets are 2 ms wide up to 10 ms: at ~2 ms TPOT every
request falls in (0, 2] and p50 reads 1.0 ms whatever the truth), so each quantile also carries the
bucket it falls in, and tables print that bucket, not the interpolated figure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..parse.prometheus import Scrape

# Server-side TPOT histograms, newest first: SGLang 0.5.23's per-request TPOT; older releases'
# per-output-token histogram; the per-chunk inter-token latency. One name is chosen for all replicas
# of a run (server_metrics.choose_tpot), so replicas are never compared on different quantities.
TPOT_HISTOGRAMS = ("sglang:request_time_per_output_token_seconds",
                   "sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds")
E2E_HISTOGRAM = "sglang:e2e_request_latency_seconds"


@dataclass(frozen=True)
class HistogramWindow:
    """One latency histogram's observations inside the benchmark window (milliseconds)."""
    metric: str
    count: float
    mean_ms: float | None
    p50_ms: float | None                 # interpolated (Prometheus); print the bucket instead
    p95_ms: float | None
    p50_bucket: tuple | None = None      # (lower, upper) bound in ms of the bucket holding p50
    p95_bucket: tuple | None = None      # upper is inf for the +Inf bucket

    def bucket_text(self, q: str) -> str:
        """'2-4 ms', '<= 2 ms', '> 8000 ms' or '-' for q in ('p50', 'p95')."""
        return bucket_text(getattr(self, f"{q}_bucket"))


def bucket_text(b) -> str:
    if not b:
        return "-"
    lo, hi = float(b[0]), float(b[1])
    if math.isinf(hi):
        return f"> {lo:g} ms"
    if lo <= 0:
        return f"<= {hi:g} ms"
    return f"{lo:g}-{hi:g} ms"


def buckets(scrape: Scrape, name: str) -> dict[float, float]:
    """upper bound -> cumulative count, summed over every series of the histogram (streaming and
    not, every priority: the tokenizer labels each request with its own)."""
    out: dict[float, float] = {}
    for s in scrape.get(name + "_bucket"):
        try:
            le = float(s.label("le", "nan"))
        except ValueError:
            continue
        if math.isfinite(s.value) and le == le:
            out[le] = out.get(le, 0.0) + s.value
    return out


def _locate(q: float, bks: Sequence[tuple[float, float]]):
    """(lower bound, upper bound, count below, count at upper) of the bucket holding rank q."""
    rank = q * bks[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for bound, count in bks:
        if count >= rank:
            return lo_bound, bound, lo_count, count, rank
        lo_bound, lo_count = bound, count
    return lo_bound, math.inf, lo_count, lo_count, rank


def histogram_quantile(q: float, bks: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile(): the q-quantile from (upper bound, cumulative count)
    pairs sorted by bound, interpolated linearly inside its bucket (the first bucket from 0);
    in the +Inf bucket, the largest finite bound."""
    if not bks or bks[-1][1] <= 0:
        return None
    lo, hi, c_lo, c_hi, rank = _locate(q, bks)
    if math.isinf(hi):
        return lo
    if c_hi == c_lo:
        return hi
    return lo + (hi - lo) * (rank - c_lo) / (c_hi - c_lo)


def histogram_bucket(q: float, bks: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(lower, upper) bound of the bucket holding the q-quantile (upper inf: the +Inf bucket)."""
    if not bks or bks[-1][1] <= 0:
        return None
    lo, hi, *_ = _locate(q, bks)
    return lo, hi


def histogram_window(a: Scrape, b: Scrape, name: str) -> HistogramWindow | None:
    """The observations between two scrapes (None when absent, empty or reset in between)."""
    if name + "_count" not in b:
        return None
    count = (b.total(name + "_count") or 0.0) - (a.total(name + "_count") or 0.0)
    total = (b.total(name + "_sum") or 0.0) - (a.total(name + "_sum") or 0.0)
    if count <= 0 or total < 0:
        return None
    start, end = buckets(a, name), buckets(b, name)
    deltas = sorted((le, c - start.get(le, 0.0)) for le, c in end.items())
    if any(d < 0 for _, d in deltas):
        return None

    def ms(x):
        return None if x is None else x * 1000.0

    def ms_bucket(q):
        bk = histogram_bucket(q, deltas)
        return None if bk is None else (bk[0] * 1000.0, bk[1] * 1000.0)
    return HistogramWindow(name, count, total / count * 1000.0,
                           ms(histogram_quantile(0.5, deltas)), ms(histogram_quantile(0.95, deltas)),
                           ms_bucket(0.5), ms_bucket(0.95))


def latency_windows(a: Scrape, b: Scrape) -> dict[str, HistogramWindow]:
    """Every TPOT histogram and the E2E histogram the server exports, over the window."""
    out = {}
    for name in TPOT_HISTOGRAMS + (E2E_HISTOGRAM,):
        w = histogram_window(a, b, name)
        if w is not None:
            out[name] = w
    return out
