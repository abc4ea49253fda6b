"""Change points of a metric over runs (issue 34 item 3): e-divisive means with a permutation test,
then each change confirmed by the points' own intervals.

E-divisive (Matteson & James 2014, "A nonparametric approach for multiple change point analysis of
multivariate data", JASA; the R package ecp's e.divisive with alpha = 1, as Hunter/Otava and
MongoDB's signal-processing-algorithms use it): the best split of a segment maximises the
divergence between the two sides,

    Q(tau) = m (n - m) / n * [ 2/(m (n - m)) sum_{i <= tau < j} |x_i - x_j|
                               - 1/C(m, 2) sum_{i < k <= tau} |x_i - x_k|
                               - 1/C(n - m, 2) sum_{tau < j < l} |x_j - x_l| ],

splits are found hierarchically (the segment whose best split is largest first), and each is
kept only if a permutation test (the points shuffled within each current segment, R times) gives
p = (1 + #{Q_perm >= Q}) / (R + 1) < alpha. Why not a library: signal-processing-algorithms
(MongoDB's e-divisive with this test) pins numpy < 2 and gevent; apache-otava brings Google Cloud
BigQuery, Postgres drivers and older numpy/scipy; ruptures has no significance test. The test is
deterministic (a fixed seed), so a history reads the same every time.

A kept split is then stated and confirmed with the points' own uncertainty: each side's mean
weights its points by 1 / (between-point variance + the point's own squared standard error) (a
campaign's interval gives one; a single run has none), the change's 95 % interval is Welch's over
those, and a change whose interval includes 0, or whose size is below min_change_pct, is dropped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .metrics import HIGHER

REGRESSION, IMPROVEMENT = "regression", "improvement"


@dataclass(frozen=True)
class Point:
    value: float
    se: float | None = None          # the point's own standard error (a campaign's), None for one run


@dataclass(frozen=True)
class ChangePoint:
    index: int                       # the first point of the new level: the run where it began
    p_value: float                   # the permutation test's
    before: float                    # the weighted means of the two sides (the segments around it)
    after: float
    change_pct: float
    ci_pct: tuple[float, float]      # 95 % interval of the change, % of `before`
    kind: str                        # REGRESSION | IMPROVEMENT

    def to_dict(self) -> dict:
        return {"index": self.index, "p_value": self.p_value, "before": self.before, "after": self.after,
                "change_pct": self.change_pct, "ci_pct": list(self.ci_pct), "kind": self.kind}


def _best_split(x, lo: int, hi: int, min_seg: int):
    """(Q, tau) of the best split of x[lo:hi] (tau absolute: the first index of the right side)."""
    import numpy as np

    seg = x[lo:hi]
    n = len(seg)
    if n < 2 * min_seg:
        return -math.inf, None
    d = np.abs(seg[:, None] - seg[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)

    def block(a, b, c, e):
        return p[b, e] - p[a, e] - p[b, c] + p[a, c]
    m = np.arange(min_seg, n - min_seg + 1)
    between = block(0, m, m, n)
    within_a = block(0, m, 0, m) / 2.0
    within_b = block(m, n, m, n) / 2.0
    q = (m * (n - m) / n) * (2.0 * between / (m * (n - m)) - within_a / (m * (m - 1) / 2.0)
                              - within_b / ((n - m) * (n - m - 1) / 2.0))
    k = int(np.argmax(q))
    return float(q[k]), lo + int(m[k])


def e_divisive(values: Sequence[float], alpha: float = 0.01, permutations: int = 499, min_segment: int = 4,
               seed: int = 0) -> list[tuple[int, float]]:
    """Significant change points (index of the first point after each, permutation p), in order."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    cuts = [0, len(x)]
    found: list[tuple[int, float]] = []
    while True:
        best = max(((*_best_split(x, a, b, min_segment), a, b) for a, b in zip(cuts, cuts[1:])),
                   key=lambda r: r[0], default=(-math.inf, None, 0, 0))
        q, tau = best[0], best[1]
        if tau is None:
            break
        exceed = 0
        for _ in range(permutations):
            y = x.copy()
            for a, b in zip(cuts, cuts[1:]):
                y[a:b] = rng.permutation(y[a:b])
            qp = max(_best_split(y, a, b, min_segment)[0] for a, b in zip(cuts, cuts[1:]))
            exceed += qp >= q
        p = (1 + exceed) / (permutations + 1)
        if p >= alpha:
            break
        found.append((tau, p))
        cuts = sorted(cuts + [tau])
    return sorted(found)


def _side(points: Sequence[Point]) -> tuple[float, float, int]:
    """(weighted mean, its standard error, n) of one side: weights 1 / (between-point variance +
    the point's own variance), the between-point variance by moments (sample variance minus the
    points' mean own variance, at least 0)."""
    n = len(points)
    vals = [p.value for p in points]
    mean = sum(vals) / n
    own = [(p.se or 0.0) ** 2 for p in points]
    sample = sum((v - mean) ** 2 for v in vals) / (n - 1) if n > 1 else 0.0
    between = max(0.0, sample - sum(own) / n)
    var = [between + o for o in own]
    if all(v <= 0 for v in var):
        return mean, 0.0, n
    w = [1.0 / v if v > 0 else 1e12 for v in var]
    mu = sum(wi * v for wi, v in zip(w, vals)) / sum(w)
    return mu, math.sqrt(1.0 / sum(w)), n


def detect(points: Sequence[Point], better: str = HIGHER, alpha: float = 0.01, permutations: int = 499,
           min_segment: int = 4, min_change_pct: float = 2.0, seed: int = 0) -> list[ChangePoint]:
    """Regressions and improvements of a series (oldest first): e-divisive's significant splits,
    each stated against the segments around it and kept when its 95 % interval excludes 0 and its
    size reaches min_change_pct."""
    from scipy import stats

    if len(points) < 2 * min_segment:
        return []
    splits = e_divisive([p.value for p in points], alpha, permutations, min_segment, seed)
    cuts = [0] + [i for i, _ in splits] + [len(points)]
    out = []
    for k, (i, p) in enumerate(splits):
        a, sa, na = _side(points[cuts[k]:i])
        b, sb, nb = _side(points[i:cuts[k + 2]])
        if a == 0:
            continue
        se = math.hypot(sa, sb)
        dfs = [x for x in ((sa ** 2, na), (sb ** 2, nb)) if x[1] > 1]
        df = (se ** 4 / sum(v ** 2 / (m - 1) for v, m in dfs)) if se > 0 and dfs and all(v > 0 for v, _ in dfs) \
            else max(na + nb - 2, 1)
        half = stats.t.ppf(0.975, df) * se
        lo, hi = 100.0 * (b - a - half) / abs(a), 100.0 * (b - a + half) / abs(a)
        pct = 100.0 * (b - a) / abs(a)
        if abs(pct) < min_change_pct or lo <= 0 <= hi:
            continue
        up = b > a
        out.append(ChangePoint(i, p, a, b, pct, (lo, hi), IMPROVEMENT if up == (better == HIGHER) else REGRESSION))
    return out


__all__ = ["IMPROVEMENT", "REGRESSION", "ChangePoint", "Point", "detect", "e_divisive"]
