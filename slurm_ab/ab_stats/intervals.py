"""Intervals over plain numbers: the t interval of a mean, and Welch's interval of a B/A change.

Pure functions; scipy and numpy are imported inside them (importing this module costs nothing, so
the CLI stays fast). The change is Welch's t on log values turned into a ratio (docs/statistics.md
says why); what the numbers are (passes, or launch means) is the caller's choice.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Sequence

CONFIDENCE = 0.95


def finite(values: Iterable[Optional[float]]) -> list[float]:
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


@dataclass(frozen=True)
class Aggregate:
    n: int
    mean: Optional[float] = None
    sd: Optional[float] = None          # sample standard deviation (ddof=1); None for n < 2
    cov: Optional[float] = None         # sd / mean (fraction); None for n < 2 or mean 0
    ci_low: Optional[float] = None      # Student t interval of the mean; None for n < 2 or sd 0
    ci_high: Optional[float] = None

    @property
    def half_width(self) -> Optional[float]:
        if self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2.0

    def to_dict(self) -> dict:
        return dict(asdict(self), half_width=self.half_width)


def aggregate(values: Iterable[Optional[float]], confidence: float = CONFIDENCE) -> Aggregate:
    """Mean, sd, CoV and the t interval of the mean of one metric over passes.

    No spread among n >= 2 values gives no interval: identical values say the noise is below the
    printed precision, not that the mean is known exactly."""
    xs = finite(values)
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
        return Aggregate(n, mean, 0.0, cov)
    from scipy import stats
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sd / math.sqrt(n))
    return Aggregate(n, mean, sd, cov, float(low), float(high))


@dataclass(frozen=True)
class Interval:
    """An interval of a B/A change in percent, its two-sided p-value against no change, and what
    it was made of (the estimate and its standard error on the log or raw scale, the degrees of
    freedom), so the same change can be stated at another level (`at`: a family's adjusted
    intervals, a sequential look's repeated interval)."""

    low_pct: float
    high_pct: float
    p_value: float
    df: float
    estimate: float = 0.0       # log(B/A) (log) or B - A (raw)
    se: float = 0.0
    log: bool = True
    scale: float = 100.0        # raw: 100 / |mean of A| (percent of A's mean)

    def at(self, confidence: float) -> tuple[float, float]:
        """(low, high) percent at another confidence level."""
        from scipy import stats
        hw = float(stats.t.ppf(0.5 + confidence / 2.0, self.df)) * self.se
        return to_pct(self.estimate - hw, self.log, self.scale), to_pct(self.estimate + hw, self.log, self.scale)


def to_pct(x: float, log: bool, scale: float = 100.0) -> float:
    """A change on the analysis scale as a percent change."""
    return math.expm1(x) * 100.0 if log else x * scale


def log_ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """B/A - 1 in percent: Welch's t interval of mean(log B) - mean(log A), exponentiated.

    `a` and `b` are positive, at least 2 each, not all identical (the caller checks)."""
    import numpy as np
    from scipy import stats
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    res = stats.ttest_ind(lb, la, equal_var=False)
    ci = res.confidence_interval(confidence)
    se = math.sqrt(float(la.var(ddof=1)) / len(la) + float(lb.var(ddof=1)) / len(lb))
    return Interval(math.expm1(float(ci.low)) * 100.0, math.expm1(float(ci.high)) * 100.0,
                    float(res.pvalue), float(res.df), float(lb.mean() - la.mean()), se, True)


def difference_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """For metrics with values <= 0 (no logarithm): Welch's interval of the difference of means,
    as a percentage of A's mean."""
    import numpy as np
    from scipy import stats
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = 100.0 / abs(float(xa.mean()))
    res = stats.ttest_ind(xb, xa, equal_var=False)
    ci = res.confidence_interval(confidence)
    se = math.sqrt(float(xa.var(ddof=1)) / len(xa) + float(xb.var(ddof=1)) / len(xb))
    return Interval(float(ci.low) * scale, float(ci.high) * scale, float(res.pvalue), float(res.df),
                    float(xb.mean() - xa.mean()), se, False, scale)


def no_spread(a: Sequence[float], b: Sequence[float]) -> bool:
    """Both sides identical within themselves: no variance can be estimated."""
    return max(a) == min(a) and max(b) == min(b)
