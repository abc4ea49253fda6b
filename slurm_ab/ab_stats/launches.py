"""The change of one metric from A to B, with the server launch as the experimental unit.

A launch (servers started once, model loaded) is a level of the experiment: its passes share a
launch-wide speed (clocks, placement, NCCL rings) that the next launch redraws. When each side has
two or more launches, the passes of a launch are averaged (on the log scale) and the launch means
are compared: the interval then holds launch-to-launch variance, the variance a user sees on
another day. With one launch on a side, launch and mode are confounded: the passes can only say
how the two launches differed, so the verdict says `(within-launch only)` and never a plain
better/worse. docs/statistics.md gives the reasons and the calibration.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Iterable, Mapping, Optional, Sequence

from .intervals import CONFIDENCE, Interval, difference_interval, finite, log_ratio_interval, no_spread, to_pct
from .metrics import METRIC_BY_NAME, METRICS, Metric
from .verdicts import (BETTER, HIGHER, INCONCLUSIVE, LOWER, NO_SPREAD, SAME, VERDICTS, WITHIN, WORSE, decide,
                       qualify)

LAUNCH_LEVELS, PASS_LEVELS = ("launch", "pass"), ("pass",)
__all__ = ["BETTER", "INCONCLUSIVE", "LAUNCH_LEVELS", "NO_SPREAD", "PASS_LEVELS", "SAME", "VERDICTS", "WITHIN",
           "WORSE", "Delta", "column", "delta", "deltas", "direction", "qualified"]


@dataclass(frozen=True)
class Delta:
    metric: str
    a_mean: Optional[float]
    b_mean: Optional[float]
    change_pct: Optional[float]         # (b_mean / a_mean - 1) * 100, means over passes
    ci_low_pct: Optional[float]         # interval of the change, in percent, at `confidence`
    ci_high_pct: Optional[float]
    n_a: int                            # passes with a value
    n_b: int
    verdict: Optional[str]              # verdicts.VERDICTS, qualified; None: no value
    launches_a: int = 0
    launches_b: int = 0
    variance_levels: tuple[str, ...] = PASS_LEVELS   # what the interval includes
    p_value: Optional[float] = None     # two-sided p against no change
    drift_adjusted: bool = False        # launch means regressed on mode and run position
    confidence: float = CONFIDENCE      # the interval's level (a family's adjusted level when restated)
    margin_pct: Optional[float] = None  # equivalence margin: 'equivalent within ±M%' inside (-M, +M)
    df: Optional[float] = None          # of the t interval
    estimate: Optional[float] = None    # log(B/A) (log scale) or B - A, the interval's centre
    se: Optional[float] = None
    log_scale: bool = True
    scale: float = 100.0                # raw scale: percent of A's mean per unit
    qualifier: Optional[str] = None     # WITHIN or verdicts.ACROSS_JOBS: no plain verdict

    @property
    def tested(self) -> bool:
        return self.p_value is not None

    def at(self, confidence: float, better: Optional[str] = None) -> "Delta":
        """The same change stated at another level: its interval and the verdict it gives."""
        if not self.tested or self.se is None:
            return self
        iv = Interval(0.0, 0.0, self.p_value, self.df, self.estimate, self.se, self.log_scale, self.scale)
        low, high = iv.at(confidence)
        better = better or METRIC_BY_NAME[self.metric].better
        return replace(self, ci_low_pct=low, ci_high_pct=high, confidence=confidence,
                       verdict=qualify(decide(low, high, better, self.margin_pct), self.qualifier))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["variance_levels"] = list(self.variance_levels)
        return d


def direction(low: float, high: float, better: str, margin_pct: Optional[float] = None) -> str:
    """better / worse / equivalent / no significant difference of an interval of the change."""
    return decide(low, high, better, margin_pct)


def qualified(verdict: str, levels: Sequence[str]) -> str:
    """'worse (within-launch only)' when the interval holds pass variance only."""
    return verdict if tuple(levels) == LAUNCH_LEVELS else qualify(verdict, WITHIN)


def _by_launch(values: Sequence[Optional[float]], launches: Optional[Sequence]) -> dict:
    """launch -> its finite values (unknown launches: one launch)."""
    out: dict = {}
    for i, v in enumerate(values):
        f = finite([v])
        if f:
            out.setdefault(launches[i] if launches is not None else None, []).append(f[0])
    return out


def _unit_means(groups: dict, log: bool) -> list[float]:
    """One number per launch: the mean of its passes (of their logs when `log`)."""
    import numpy as np
    return [float(np.mean(np.log(xs))) if log else float(np.mean(xs)) for xs in groups.values()]


MIN_TREND_UNITS = 6     # launches (both sides) before a run-position term is worth its degree of freedom


def _positions(ga: dict, gb: dict) -> Optional[tuple[list, list]]:
    """Run positions of the launches when both sides come from one job: numeric launch indices,
    none shared between the sides (two separate campaigns both start at launch 1)."""
    keys = list(ga) + list(gb)
    if len(keys) < MIN_TREND_UNITS or set(ga) & set(gb):
        return None
    if not all(isinstance(k, (int, float)) and not isinstance(k, bool) for k in keys):
        return None
    return [float(k) for k in ga], [float(k) for k in gb]


def _trend_interval(ua: list, ub: list, pos: tuple, log: bool, confidence: float) -> Optional[Interval]:
    """Launch means on mode and run position (OLS, statsmodels): the mode coefficient's t interval.
    A slow drift over the job then leaves the residual variance instead of inflating it; with
    counterbalanced order mode and position are orthogonal, so the estimate is unchanged. None when
    the launch means lie on the fitted line (no residual: a zero-width interval would claim an
    exact difference)."""
    import numpy as np
    from statsmodels.regression.linear_model import OLS
    y = np.asarray(ua + ub, dtype=float)
    x = np.column_stack([np.ones(len(y)), [0.0] * len(ua) + [1.0] * len(ub), pos[0] + pos[1]])
    fit = OLS(y, x).fit()
    if not fit.ssr > 1e-24 * max(1.0, float(np.sum(y * y))):
        return None
    low, high = (float(v) for v in fit.conf_int(1.0 - confidence)[1])
    p, est, se, df = float(fit.pvalues[1]), float(fit.params[1]), float(fit.bse[1]), float(fit.df_resid)
    scale = 100.0 if log else 100.0 / abs(sum(ua) / len(ua))
    return Interval(to_pct(low, log, scale), to_pct(high, log, scale), p, df, est, se, log, scale)


def _interval(ga: dict, gb: dict, levels: tuple, confidence: float) -> tuple[Optional[Interval], bool]:
    """(interval or None when nothing varies, whether it is drift-adjusted)."""
    a = [x for xs in ga.values() for x in xs]
    b = [x for xs in gb.values() for x in xs]
    positive = min(a) > 0 and min(b) > 0
    if levels == LAUNCH_LEVELS:
        ua, ub = _unit_means(ga, positive), _unit_means(gb, positive)
        if no_spread(ua, ub):
            return None, False
        pos = _positions(ga, gb)
        if pos is not None:
            return _trend_interval(ua, ub, pos, positive, confidence), True
        if positive:    # launch means of logs: Welch on them, exponentiated
            import numpy as np
            return log_ratio_interval(np.exp(ua), np.exp(ub), confidence), False
        return difference_interval(ua, ub, confidence), False
    if no_spread(a, b):
        return None, False
    return (log_ratio_interval if positive else difference_interval)(a, b, confidence), False


def delta(metric: str, a_values: Iterable[Optional[float]], b_values: Iterable[Optional[float]],
          better: Optional[str] = None, confidence: float = CONFIDENCE,
          a_launches: Optional[Sequence] = None, b_launches: Optional[Sequence] = None,
          margin_pct: Optional[float] = None, confound: Optional[str] = None) -> Delta:
    """The change from A to B of one metric, its interval and verdict.

    `a_launches`/`b_launches` name each value's server launch (None: all values of a side come
    from one launch). Two or more launches on both sides: launch means are the units (Welch; with
    6+ launches of one job, regressed on mode and run position so a drift cancels); else passes,
    and the verdict is 'within-launch only'. Fewer than 2 units on a side: 'inconclusive (n=1)'
    with the point change; no spread at all: 'inconclusive (no spread)' (no zero-width interval).
    `margin_pct`: an interval inside (-margin, +margin) that includes 0 is 'equivalent within
    ±margin%'. `confound`: a qualifier the verdict carries when the launches do not already
    (verdicts.ACROSS_JOBS: the sides are separate jobs)."""
    if better is None:
        if metric not in METRIC_BY_NAME:
            raise ValueError(f"unknown metric {metric!r}: pass better='higher' or 'lower'")
        better = METRIC_BY_NAME[metric].better
    if better not in (HIGHER, LOWER):
        raise ValueError(f"better must be {HIGHER!r} or {LOWER!r}, got {better!r}")
    a_values, b_values = list(a_values), list(b_values)
    ga, gb = _by_launch(a_values, a_launches), _by_launch(b_values, b_launches)
    a = [x for xs in ga.values() for x in xs]
    b = [x for xs in gb.values() for x in xs]
    a_mean = math.fsum(a) / len(a) if a else None
    b_mean = math.fsum(b) / len(b) if b else None
    levels = LAUNCH_LEVELS if len(ga) >= 2 and len(gb) >= 2 else PASS_LEVELS
    qualifier = WITHIN if levels == PASS_LEVELS else confound
    base = dict(metric=metric, a_mean=a_mean, b_mean=b_mean, n_a=len(a), n_b=len(b),
                launches_a=len(ga), launches_b=len(gb), variance_levels=levels, confidence=confidence,
                margin_pct=margin_pct, qualifier=qualifier)
    if a_mean is None or b_mean is None or a_mean == 0:
        return Delta(change_pct=None, ci_low_pct=None, ci_high_pct=None, verdict=None, **base)
    change = (b_mean / a_mean - 1.0) * 100.0
    if len(a) < 2 or len(b) < 2:
        return Delta(change_pct=change, ci_low_pct=None, ci_high_pct=None, verdict=INCONCLUSIVE, **base)
    iv, adjusted = _interval(ga, gb, levels, confidence)
    if iv is None:
        return Delta(change_pct=change, ci_low_pct=None, ci_high_pct=None,
                     verdict=qualify(NO_SPREAD, qualifier), **base)
    return Delta(change_pct=change, ci_low_pct=iv.low_pct, ci_high_pct=iv.high_pct,
                 verdict=qualify(decide(iv.low_pct, iv.high_pct, better, margin_pct), qualifier),
                 p_value=iv.p_value, drift_adjusted=adjusted, df=iv.df, estimate=iv.estimate, se=iv.se,
                 log_scale=iv.log, scale=iv.scale, **base)


def column(rows: Sequence[Mapping], name: str) -> tuple[list, list]:
    """(values, launches) of one metric over pass rows (rows without 'launch': one launch)."""
    return [r.get(name) for r in rows], [r.get("launch") for r in rows]


def deltas(a_rows: Sequence[Mapping], b_rows: Sequence[Mapping],
           metrics: Sequence[Metric] = METRICS, confidence: float = CONFIDENCE) -> list[Delta]:
    """One Delta per metric from per-pass rows (numeric_row keys plus 'launch')."""
    out = []
    for m in metrics:
        (va, la), (vb, lb) = column(a_rows, m.name), column(b_rows, m.name)
        out.append(delta(m.name, va, vb, m.better, confidence, la, lb))
    return out
