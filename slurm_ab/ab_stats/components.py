"""Variance components of a finished campaign: how much a launch and a pass each add.

On the log scale a pass value is  mode effect + launch effect (sd sigma_L) + pass noise (sd
sigma_P); for small sigmas each sd is the CoV it adds. The estimate is REML of that random-effects
model (statsmodels MixedLM: mode x concurrency fixed, a random intercept per launch), which
handles missing passes and unequal launches. What a campaign cannot tell is said, not guessed:
one launch per mode gives no launch variance; one pass per launch cannot split the two.

Also the first-pass effect: does the first timed pass of a launch differ from its later passes
(cold caches, JIT)? The evidence behind the burn-in default (docs/statistics.md).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Mapping, Optional, Sequence

from .intervals import aggregate, finite


@dataclass(frozen=True)
class Components:
    metric: str
    launch_cov: Optional[float]     # None: not estimable from this campaign
    pass_cov: Optional[float]
    launches: int
    passes: int
    launch_df: int                  # sum over modes of (launches - 1)
    pass_df: int                    # sum over launch x concurrency of (passes - 1)
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _points(rows: Sequence[Mapping], metric: str) -> list[tuple[str, str, float]]:
    """(cell = mode@concurrency, launch key, log value) of every positive value."""
    out = []
    for r in rows:
        v = finite([r.get(metric)])
        if v and v[0] > 0:
            out.append((f"{r.get('mode')}@{r.get('concurrency')}", f"{r.get('mode')}#{r.get('launch')}",
                        math.log(v[0])))
    return out


def components(rows: Sequence[Mapping], metric: str) -> Components:
    """Launch and pass CoV of `metric` over the ok pass rows of a campaign (every mode)."""
    pts = _points(rows, metric)
    cells: dict = {}
    for cell, launch, y in pts:
        cells.setdefault((cell, launch), []).append(y)
    launches = {launch for _, launch, _ in pts}
    per_mode: dict = {}
    for launch in launches:
        per_mode.setdefault(launch.split("#")[0], set()).add(launch)
    launch_df = sum(len(x) - 1 for x in per_mode.values())
    pass_df = sum(len(ys) - 1 for ys in cells.values())
    base = dict(metric=metric, launches=len(launches), passes=len(pts), launch_df=launch_df, pass_df=pass_df)
    if pass_df == 0 and launch_df == 0:
        return Components(launch_cov=None, pass_cov=None, note="one pass per launch and one launch per "
                          "mode: no variance can be estimated", **base)
    if launch_df == 0:      # blocked: pass variance only (pooled within launches)
        ss = sum((y - sum(ys) / len(ys)) ** 2 for ys in cells.values() for y in ys)
        return Components(launch_cov=None, pass_cov=math.sqrt(ss / pass_df), note="one launch per mode: "
                          "launch-to-launch variance cannot be estimated (confounded with the mode)", **base)
    sigma_l2, sigma_p2 = _reml(pts)
    if pass_df == 0:        # one pass per launch: only the sum is identified
        return Components(launch_cov=math.sqrt(sigma_l2 + sigma_p2), pass_cov=None, note="one pass per "
                          "launch: launch and pass variance cannot be told apart; all of it is "
                          "counted as launch variance (the cautious choice for planning)", **base)
    note = "launch variance estimated as 0 (at the boundary)" if sigma_l2 <= 1e-12 else ""
    if launch_df < 4:
        note = (note + "; " if note else "") + (f"launch variance from {launch_df} degree(s) of freedom: "
                                                "a rough estimate")
    return Components(launch_cov=math.sqrt(max(sigma_l2, 0.0)), pass_cov=math.sqrt(sigma_p2), note=note, **base)


def _reml(pts: list[tuple[str, str, float]]) -> tuple[float, float]:
    """(launch variance, pass variance) by REML (statsmodels MixedLM); launches without spread
    between them converge to the boundary 0, which is kept."""
    import numpy as np
    from statsmodels.regression.mixed_linear_model import MixedLM
    cells = sorted({c for c, _, _ in pts})
    exog = np.array([[1.0 if c == k else 0.0 for k in cells] for c, _, _ in pts])
    y = np.array([v for _, _, v in pts])
    groups = np.array([g for _, g, _ in pts])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # boundary/Hessian notes: the boundary is reported
        fit = MixedLM(y, exog, groups=groups).fit(reml=True)
    return float(np.asarray(fit.cov_re).ravel()[0]), float(fit.scale)


@dataclass(frozen=True)
class FirstPass:
    launches: int                       # launches with a first and a later pass
    change_pct: Optional[float]         # mean over launches of first / mean(later) - 1
    ci_low_pct: Optional[float]
    ci_high_pct: Optional[float]

    def text(self) -> str:
        if self.change_pct is None:
            return (f"first pass of a launch: {self.launches} launch(es) with two or more passes; "
                    "not enough to tell")
        ci = "" if self.ci_low_pct is None else f", 95% CI [{self.ci_low_pct:+.2f}%, {self.ci_high_pct:+.2f}%]"
        differs = self.ci_low_pct is not None and (self.ci_low_pct > 0 or self.ci_high_pct < 0)
        return (f"first pass of a launch against its later passes: {self.change_pct:+.2f}%{ci} over "
                f"{self.launches} launches: " + ("it differs: use --burn-in" if differs else
                                                  "no difference found: no burn-in needed"))


def first_pass(rows: Sequence[Mapping], metric: str) -> FirstPass:
    """Per launch (at its first concurrency): log(first pass) - mean log(later passes); their mean
    and t interval over launches, as a percent change."""
    by_launch: dict = {}
    for r in rows:
        v = finite([r.get(metric)])
        if v and v[0] > 0 and r.get("repeat") is not None:
            by_launch.setdefault((r.get("mode"), r.get("launch")), []).append(
                (r.get("concurrency"), int(r["repeat"]), math.log(v[0])))
    diffs = []
    for passes in by_launch.values():
        c0 = passes[0][0]
        ys = [y for _, _, y in sorted(p for p in passes if p[0] == c0)]
        if len(ys) >= 2:
            diffs.append(ys[0] - sum(ys[1:]) / len(ys[1:]))
    if len(diffs) < 2:
        return FirstPass(len(diffs), None, None, None)
    agg = aggregate(diffs)
    pct = lambda x: None if x is None else math.expm1(x) * 100.0  # noqa: E731
    return FirstPass(len(diffs), pct(agg.mean), pct(agg.ci_low), pct(agg.ci_high))
