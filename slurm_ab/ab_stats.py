"""Statistics across passes: per-(mode, concurrency) aggregates and A/B deltas with 95% intervals.

Pure functions over plain numbers (one value per pass). The interval of a delta is Welch's t
interval on the log values, turned into a ratio (docs/statistics.md says why). scipy and numpy
are imported inside the functions: importing this module costs nothing, so the CLI stays fast.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Optional, Sequence

CONFIDENCE = 0.95
HIGHER, LOWER = "higher", "lower"          # which direction of a metric is better

BETTER, WORSE, SAME = "better", "worse", "no significant difference"
INCONCLUSIVE = "inconclusive (n=1)"
VERDICTS = (BETTER, WORSE, SAME, INCONCLUSIVE)


@dataclass(frozen=True)
class Metric:
    name: str          # key of the collector's numeric row (tables.numeric_row)
    label: str
    better: str        # HIGHER or LOWER


# Every numeric metric of today's table, in the seed's order; names = tables.numeric_row keys.
METRICS = (
    Metric("input_tps", "Input TPS", HIGHER),
    Metric("output_tps", "Output TPS", HIGHER),
    Metric("ttft_mean_s", "TTFT mean (s)", LOWER),
    Metric("ttft_p95_s", "TTFT p95 (s)", LOWER),
    Metric("tpot_mean_ms", "TPOT mean (ms)", LOWER),
    Metric("tpot_p95_ms", "TPOT p95 (ms)", LOWER),
    Metric("e2e_mean_s", "E2E mean (s)", LOWER),
    Metric("e2e_p95_s", "E2E p95 (s)", LOWER),
    Metric("duration_s", "Duration (s)", LOWER),
    Metric("accept_len", "Accept length", HIGHER),
    Metric("accept_rate", "Accept rate", HIGHER),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}


def _values(values: Iterable[Optional[float]]) -> list[float]:
    """The finite numbers of a column (missing passes and non-numbers are left out)."""
    out = []
    for v in values:
        if v is None or isinstance(v, bool):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


# ---- one (mode, concurrency): mean, sd, CoV, interval of the mean ----------------------------

@dataclass(frozen=True)
class Aggregate:
    n: int
    mean: Optional[float] = None
    sd: Optional[float] = None          # sample standard deviation (ddof=1); None for n < 2
    cov: Optional[float] = None         # sd / mean (fraction); None for n < 2 or mean 0
    ci_low: Optional[float] = None      # Student t interval of the mean; None for n < 2
    ci_high: Optional[float] = None

    @property
    def half_width(self) -> Optional[float]:
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2.0

    def to_dict(self) -> dict:
        return dict(asdict(self), half_width=self.half_width)


def aggregate(values: Iterable[Optional[float]], confidence: float = CONFIDENCE) -> Aggregate:
    """Mean, sd, CoV and the t interval of the mean of one metric over passes."""
    xs = _values(values)
    n = len(xs)
    if n == 0:
        return Aggregate(0)
    import numpy as np
    arr = np.asarray(xs, dtype=float)
    mean = float(arr.mean())
    if n < 2:
        return Aggregate(1, mean)
    sd = float(arr.std(ddof=1))
    cov = sd / abs(mean) if mean != 0 else None
    if sd == 0.0:
        return Aggregate(n, mean, 0.0, cov, mean, mean)
    from scipy import stats
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sd / math.sqrt(n))
    return Aggregate(n, mean, sd, cov, float(low), float(high))


# ---- A versus B ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Delta:
    metric: str
    a_mean: Optional[float]
    b_mean: Optional[float]
    change_pct: Optional[float]         # (b_mean / a_mean - 1) * 100
    ci_low_pct: Optional[float]         # 95% interval of the change, in percent
    ci_high_pct: Optional[float]
    n_a: int
    n_b: int
    verdict: Optional[str]              # one of VERDICTS; None when a side has no value at all

    def to_dict(self) -> dict:
        """The JSON of one metric: exactly the keys the docs promise."""
        return asdict(self)


def _verdict(low: float, high: float, better: str) -> str:
    if low > 0.0:
        return BETTER if better == HIGHER else WORSE
    if high < 0.0:
        return WORSE if better == HIGHER else BETTER
    return SAME


def _ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float) -> tuple[float, float]:
    """Interval of B/A - 1 in percent: Welch's t interval of mean(log B) - mean(log A), exponentiated.

    Both sides without spread give a point (the difference is then exact)."""
    import numpy as np
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    if la.std() == 0.0 and lb.std() == 0.0:
        d = float(lb.mean() - la.mean())
        return math.expm1(d) * 100.0, math.expm1(d) * 100.0
    from scipy import stats
    ci = stats.ttest_ind(lb, la, equal_var=False).confidence_interval(confidence)
    return math.expm1(float(ci.low)) * 100.0, math.expm1(float(ci.high)) * 100.0


def _difference_interval(a: Sequence[float], b: Sequence[float], confidence: float) -> tuple[float, float]:
    """Fallback for metrics with values <= 0 (no logarithm): Welch's interval of the difference of
    means, as a percentage of A's mean."""
    import numpy as np
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = 100.0 / abs(float(xa.mean()))
    if xa.std() == 0.0 and xb.std() == 0.0:
        d = float(xb.mean() - xa.mean()) * scale
        return d, d
    from scipy import stats
    ci = stats.ttest_ind(xb, xa, equal_var=False).confidence_interval(confidence)
    return float(ci.low) * scale, float(ci.high) * scale


def delta(metric: str, a_values: Iterable[Optional[float]], b_values: Iterable[Optional[float]],
          better: Optional[str] = None, confidence: float = CONFIDENCE) -> Delta:
    """The change from A to B of one metric, its interval and verdict.

    `better` defaults to the metric's known direction (METRICS); n < 2 on either side gives the
    point change only and the verdict 'inconclusive (n=1)'."""
    if better is None:
        if metric not in METRIC_BY_NAME:
            raise ValueError(f"unknown metric {metric!r}: pass better='higher' or 'lower'")
        better = METRIC_BY_NAME[metric].better
    if better not in (HIGHER, LOWER):
        raise ValueError(f"better must be {HIGHER!r} or {LOWER!r}, got {better!r}")
    a, b = _values(a_values), _values(b_values)
    a_mean = math.fsum(a) / len(a) if a else None
    b_mean = math.fsum(b) / len(b) if b else None
    if a_mean is None or b_mean is None:
        return Delta(metric, a_mean, b_mean, None, None, None, len(a), len(b), None)
    change = (b_mean / a_mean - 1.0) * 100.0 if a_mean != 0 else None
    if len(a) < 2 or len(b) < 2 or change is None:
        return Delta(metric, a_mean, b_mean, change, None, None, len(a), len(b),
                     INCONCLUSIVE if change is not None else None)
    if min(a) > 0 and min(b) > 0:
        low, high = _ratio_interval(a, b, confidence)
    else:
        low, high = _difference_interval(a, b, confidence)
    return Delta(metric, a_mean, b_mean, change, low, high, len(a), len(b),
                 _verdict(low, high, better))


def deltas(a_rows: Sequence[Mapping], b_rows: Sequence[Mapping],
           metrics: Sequence[Metric] = METRICS, confidence: float = CONFIDENCE) -> list[Delta]:
    """One Delta per metric from per-pass rows (dicts keyed by metric name, e.g. numeric_row)."""
    return [delta(m.name, [r.get(m.name) for r in a_rows], [r.get(m.name) for r in b_rows],
                  m.better, confidence) for m in metrics]


def aggregates(rows: Sequence[Mapping], metrics: Sequence[Metric] = METRICS,
               confidence: float = CONFIDENCE) -> dict[str, Aggregate]:
    """Per metric, the Aggregate of per-pass rows (one (mode, concurrency) group)."""
    return {m.name: aggregate([r.get(m.name) for r in rows], confidence) for m in metrics}
