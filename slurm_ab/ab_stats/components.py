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


def _positions(rows: Sequence[Mapping], metric: str) -> Optional[list[float]]:
    """Each point's run position (its launch index) when the launches of one job are numbered and
    there are enough of them (ab_stats.launches.MIN_TREND_UNITS) for the analysis to regress a
    drift out: then the variance components leave the drift out too."""
    from .launches import MIN_TREND_UNITS
    pos = [r.get("launch") for r in rows if (v := finite([r.get(metric)])) and v[0] > 0]
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in pos):
        return None
    return [float(p) for p in pos] if len(set(pos)) >= MIN_TREND_UNITS else None


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
    pos = _positions(rows, metric)
    sigma_l2, sigma_p2 = _reml(pts, pos)
    if pos is not None:
        launch_df -= 1
        base["launch_df"] = launch_df
    if pass_df == 0:        # one pass per launch: only the sum is identified
        return Components(launch_cov=math.sqrt(sigma_l2 + sigma_p2), pass_cov=None, note="one pass per "
                          "launch: launch and pass variance cannot be told apart; all of it is "
                          "counted as launch variance (the cautious choice for planning)", **base)
    note = "launch variance estimated as 0 (at the boundary)" if sigma_l2 <= 1e-12 else ""
    if launch_df < 4:
        note = (note + "; " if note else "") + (f"launch variance from {launch_df} degree(s) of freedom: "
                                                "a rough estimate")
    return Components(launch_cov=math.sqrt(max(sigma_l2, 0.0)), pass_cov=math.sqrt(sigma_p2), note=note, **base)


def _reml(pts: list[tuple[str, str, float]], positions: Optional[list[float]] = None) -> tuple[float, float]:
    """(launch variance, pass variance) by REML (statsmodels MixedLM), run position a fixed effect
    when given (a drift is not launch variance: the analysis regresses it out); launches without
    spread between them converge to the boundary 0, which is kept."""
    import numpy as np
    from statsmodels.regression.mixed_linear_model import MixedLM
    cells = sorted({c for c, _, _ in pts})
    exog = np.array([[1.0 if c == k else 0.0 for k in cells] for c, _, _ in pts])
    if positions is not None:
        exog = np.column_stack([exog, np.asarray(positions) - float(np.mean(positions))])
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


@dataclass(frozen=True)
class Serial:
    """What a campaign says about the order of its passes: AR(1) within a launch, drift over the
    job."""

    repeats: int                        # passes per launch (the median)
    ar1: Optional[float]                # None: not estimable (fewer than 3 passes per launch)
    ar1_pairs: int
    drift_pct: Optional[float]          # per pass, percent; None: too few launches
    drift_ci: Optional[tuple[float, float]] = None

    @staticmethod
    def mean_corr(rho: float, k: int = 2) -> float:
        """Mean correlation of two passes of one launch under AR(1) (within-launch variance is
        (1 - it) x the pass variance)."""
        if k < 2 or rho == 0:
            return 0.0
        return 2.0 / (k * (k - 1)) * sum((k - j) * rho ** j for j in range(1, k))

    def text(self) -> str:
        ar = (f"AR(1) of passes within a launch {self.ar1:.2f} (from {self.ar1_pairs} pairs, corrected for the "
              f"launch mean's -1/{self.repeats} bias)" if self.ar1 is not None else
              f"AR(1) not estimable with {self.repeats} pass(es) per launch (launch variance and a correlation of "
              "two passes look alike; give --ar1 if you know it)")
        dr = ("drift not estimable (too few launches)" if self.drift_pct is None else
              f"drift {self.drift_pct:+.3f}%/pass" + (f" (95% CI [{self.drift_ci[0]:+.3f}, {self.drift_ci[1]:+.3f}])"
                                                       if self.drift_ci else "")
              + ": counterbalanced order cancels it in the mean and the analysis regresses it out from 6 "
                "launches on")
        return f"{ar}; {dr}"


def serial(rows: Sequence[Mapping], metric: str) -> Serial:
    """AR(1) of the passes within each launch (pooled lag-1 correlation of deviations from the
    launch mean, + 1/k for the bias of demeaning; needs 3+ passes) and drift per pass (launch
    means regressed on mode and run position, statsmodels OLS), at each launch's first
    concurrency."""
    by_launch: dict = {}
    for r in rows:
        v = finite([r.get(metric)])
        if v and v[0] > 0 and r.get("repeat") is not None and r.get("launch") is not None:
            by_launch.setdefault((r.get("mode"), r.get("launch")), []).append(
                (r.get("concurrency"), int(r["repeat"]), math.log(v[0])))
    series = []
    for (mode, launch), passes in by_launch.items():
        c0 = passes[0][0]
        series.append((mode, launch, [y for _, _, y in sorted(p for p in passes if p[0] == c0)]))
    ks = sorted(len(ys) for _, _, ys in series)
    k = ks[len(ks) // 2] if ks else 0
    num = den = 0.0
    pairs = 0
    for _, _, ys in series:
        if len(ys) >= 3:
            m = sum(ys) / len(ys)
            d = [y - m for y in ys]
            num += sum(a * b for a, b in zip(d, d[1:]))
            den += sum(x * x for x in d)
            pairs += len(ys) - 1
    ar1 = None
    if den > 0 and pairs and k >= 3:
        ar1 = min(max(num / den + 1.0 / k, 0.0), 0.9)
    drift = ci = None
    launches = [(mode, launch, sum(ys) / len(ys)) for mode, launch, ys in series
                if isinstance(launch, (int, float)) and not isinstance(launch, bool)]
    modes = sorted({m for m, _, _ in launches})
    if len(launches) >= len(modes) + 2 and k:
        import numpy as np
        from statsmodels.regression.linear_model import OLS
        x = np.array([[1.0 if m == mm else 0.0 for mm in modes] + [float(la)] for m, la, _ in launches])
        fit = OLS(np.array([y for _, _, y in launches]), x).fit()
        slope = float(fit.params[-1]) / k              # per pass
        lo, hi = (float(v) / k for v in fit.conf_int(0.05)[-1])
        drift, ci = math.expm1(slope) * 100.0, (math.expm1(lo) * 100.0, math.expm1(hi) * 100.0)
    return Serial(k, ar1, pairs, drift, ci)
