"""Group-sequential boundaries: where a campaign of counterbalanced blocks may stop early.

A sequential campaign looks after each complete block (A B B A: two launches per mode, so the
design stays balanced and a linear drift cancels at every look) and stops when the answer is
clear. Its error rate stays at 5 % over all looks because each look spends part of it at
information fraction t = k / K (K blocks at most): benchmark.spending names the function, the
Kim-DeMets power family ``alpha t^R`` ('power-2', the default) or Lan-DeMets' O'Brien-Fleming type,
per side ``2 - 2 Phi(z_{1 - alpha/4} / sqrt(t))`` ('obrien-fleming', as gsDesign's sfLDOF and
rpact's asOF spend a two-sided 5 %: K = 4 gives 4.333, 2.963, 2.359, 2.014). O'Brien-Fleming spends
almost nothing early; with launch-level t statistics of few degrees of freedom a +10 % change then
stopped on average after 52-58 % of a design sized for 5 %, t^2 after 40-50 % at the same error
rate (the calibration, docs/statistics.md), so t^2 is the default.

The boundaries are on the z scale of the canonical joint distribution (independent increments);
the exit probabilities come from the standard recursive numerical integration over the
continuation region (Jennison & Turnbull, Group Sequential Methods, ch. 19), the normal
distribution from scipy. The launch-level statistic is a t with few degrees of freedom, so each
look tests at the z boundary's nominal level (Jennison & Turnbull 3.8: the significance-level
approach): ``critical_table`` holds the t quantile for every look and every degrees of freedom,
computed here at render time and written into the job script, where the stop rule
(ab_stats/looks.py, stdlib only) reads it. The calibration (benchmarks/calibrate_stats.py)
checks the error rate of the whole procedure.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..model.campaign import MAX_BLOCKS, MIN_BLOCKS, SPENDING_DEFAULT, spending_power

ALPHA = 0.05
__all__ = ["ALPHA", "Boundaries", "MAX_BLOCKS", "MIN_BLOCKS", "PRIOR_GUARD", "SPENDING_DEFAULT", "boundaries",
           "critical_table", "exit_probabilities", "job_spec", "nominal_alpha", "prior_spec", "rule_spec", "spending",
           "spending_fn", "spending_power"]
# the one-sided level of the F test that drops a prior whose variance the look's own contradicts
# (looks.pooled): chosen by the calibration (docs/statistics.md, "A prior for the first look")
PRIOR_GUARD = 0.25
GRID = 301                 # points of the integration grid per look (801 gives the same to 1e-5)


def spending_fn(name: str):
    """The alpha-spending function a name (benchmark.spending) stands for: 'obrien-fleming'
    (Lan-DeMets: per side 2 - 2 Phi(z_{1-alpha/4} / sqrt(t))) or 'power-R' (Kim-DeMets: alpha
    t^R, R in [1, 5]; R = 2 spends more at early looks than O'Brien-Fleming, which the
    calibration needs for a large change to stop early with launch-level t statistics)."""
    from scipy import stats
    if name == "obrien-fleming":
        def f(t: float, alpha: float) -> float:
            return 0.0 if t <= 0 else 4.0 * float(stats.norm.sf(stats.norm.isf(alpha / 4.0) / t ** 0.5))
        return f
    rho = spending_power(name)
    if rho is None:
        raise ValueError(f"unknown spending function {name!r}")
    return lambda t, alpha: alpha * min(max(t, 0.0), 1.0) ** rho


def spending(t: float, alpha: float = ALPHA, name: str = "obrien-fleming") -> float:
    """Two-sided error spent by information fraction t."""
    return spending_fn(name)(t, alpha)


def _exit(f, grid, dt: float, b: float, theta: float = 0.0) -> float:
    """P(|S_k| >= b and the walk was inside before) from the density f of S_{k-1} on `grid`
    (None: the first look, S_1 ~ N(theta t_1, t_1))."""
    from scipy import stats
    from scipy.integrate import simpson
    sd = dt ** 0.5
    mu = theta * dt + (grid if f is not None else 0.0)
    tails = stats.norm.sf((b - mu) / sd) + stats.norm.cdf((-b - mu) / sd)
    return float(tails) if f is None else float(simpson(f * tails, x=grid))


def _inside(f, grid, dt: float, b: float, theta: float = 0.0):
    """(grid on (-b, b), density of S_k there for the walks that never left)."""
    import numpy as np
    from scipy import stats
    from scipy.integrate import simpson
    sd = dt ** 0.5
    new = np.linspace(-b, b, GRID)
    if f is None:
        return new, stats.norm.pdf(new, loc=theta * dt, scale=sd)
    dens = stats.norm.pdf((new[:, None] - grid[None, :] - theta * dt) / sd) / sd
    return new, simpson(dens * f[None, :], x=grid, axis=1)


@lru_cache(maxsize=64)
def boundaries(blocks: int, alpha: float = ALPHA, name: str = "obrien-fleming") -> tuple[float, ...]:
    """z boundaries c_1..c_K of K equally spaced looks (two-sided, symmetric) for spending `name`."""
    from scipy import optimize, stats
    if blocks < 1:
        raise ValueError(f"blocks must be >= 1, got {blocks}")
    ts = [k / blocks for k in range(1, blocks + 1)]
    spent = [spending(t, alpha, name) for t in ts]
    out: list[float] = []
    f, grid, prev_t, prev_spent = None, None, 0.0, 0.0
    for t, s in zip(ts, spent):
        target = s - prev_spent
        dt = t - prev_t
        if f is None:
            c = float(stats.norm.isf(target / 2.0))
        else:
            def excess(c: float) -> float:
                return _exit(f, grid, dt, c * t ** 0.5) - target
            c = float(optimize.brentq(excess, 0.1, 20.0, xtol=1e-9))
        out.append(c)
        grid, f = _inside(f, grid, dt, c * t ** 0.5)
        prev_t, prev_spent = t, s
    return tuple(out)


def nominal_alpha(blocks: int, alpha: float = ALPHA, name: str = "obrien-fleming") -> tuple[float, ...]:
    """The two-sided level each look tests at: 2 (1 - Phi(c_k))."""
    from scipy import stats
    return tuple(2.0 * float(stats.norm.sf(c)) for c in boundaries(blocks, alpha, name))


def exit_probabilities(blocks: int, drift: float, alpha: float = ALPHA, name: str = "obrien-fleming") -> tuple[float, ...]:
    """P(stop at look k) on the z scale when the final look's expected z is `drift` (power and
    expected looks of the normal approximation; the planner simulates the t version)."""
    cs = boundaries(blocks, alpha, name)
    out, f, grid, prev = [], None, None, 0.0
    for k, c in enumerate(cs, 1):
        t = k / blocks
        out.append(_exit(f, grid, t - prev, c * t ** 0.5, drift))
        grid, f = _inside(f, grid, t - prev, c * t ** 0.5, drift)
        prev = t
    return tuple(out)


@dataclass(frozen=True)
class Boundaries:
    """What the job needs to decide at each look: per look the z boundary, its nominal level
    and the t critical value for every degrees of freedom 1..max_df."""

    blocks: int
    alpha: float
    spending: str
    z: tuple[float, ...]
    nominal: tuple[float, ...]
    critical: tuple[tuple[float, ...], ...]      # [look][df - 1]

    def to_dict(self) -> dict:
        return {"blocks": self.blocks, "alpha": self.alpha, "spending": self.spending, "z": list(self.z),
                "nominal": list(self.nominal),
                "critical": [list(r) for r in self.critical]}


@lru_cache(maxsize=64)
def critical_table(blocks: int, max_df: int, alpha: float = ALPHA, name: str = SPENDING_DEFAULT) -> Boundaries:
    """The boundaries of K blocks with the t critical value of every look at df 1..max_df."""
    from scipy import stats
    nom = nominal_alpha(blocks, alpha, name)
    crit = tuple(tuple(round(float(stats.t.isf(p / 2.0, df)), 6) for df in range(1, max_df + 1)) for p in nom)
    return Boundaries(blocks, alpha, name, tuple(round(c, 6) for c in boundaries(blocks, alpha, name)),
                      tuple(float(f"{p:.6g}") for p in nom), crit)


def prior_spec(variance: float, df: int, max_df: int, guard: float = PRIOR_GUARD) -> dict:
    """What the stop rule needs of a prior (looks.pooled): the launch-mean variance (log scale, at
    the campaign's passes per launch), its degrees of freedom, and the guard's upper F quantile
    F_{1 - guard}(df, df_prior) for every own degrees of freedom 1..max_df."""
    from scipy import stats
    return {"variance": float(f"{variance:.6g}"), "df": int(df), "guard": guard,
            "f_upper": [round(float(stats.f.isf(guard, d, df)), 6) for d in range(1, max_df + 1)]}


def rule_spec(blocks: int, spending: str, prior=None, own_df: int = 0) -> dict:
    """The stop rule's boundaries and prior (looks.decide reads "critical" and "prior") for at most
    `blocks` blocks: t quantiles up to own_df (default 4K) plus the prior's df, the guard's F
    quantiles up to own_df. One function, so the planner's simulated looks are the job's."""
    own_df = own_df or 4 * blocks
    b = critical_table(blocks, own_df + (prior.df if prior else 0), ALPHA, spending)
    return {"spending": b.spending, "z": list(b.z), "nominal": list(b.nominal),
            "critical": [list(r) for r in b.critical],
            **({"prior": {**prior_spec(prior.variance, prior.df, own_df), "source": prior.source}} if prior else {})}


def job_spec(campaign, critical_df: int = 0) -> dict:
    """What the job's stop rule reads (sequential.json) and the collector rebuilds to recompute
    every look: the two modes, the metric and its direction, the margin, each block's launches,
    each launch's directory and pass files (rundir.Layout's names, as the job's LAUNCH_PASSES) and the
    boundaries with a t critical value for every degrees of freedom a look can have."""
    from ..model.rundir import RELATIVE, launch_dirname
    from .metrics import METRIC_BY_NAME
    blocks = campaign.blocks
    metric = campaign.primary_metric
    return {"version": 1, "a": campaign.modes[0], "b": campaign.modes[1], "metric": metric,
            "better": METRIC_BY_NAME[metric].better, "log": True, "margin_pct": campaign.margin_pct,
            "blocks": [list(x) for x in blocks],
            "launches": [{"index": la.index, "mode": la.mode,
                          "dir": launch_dirname(la),
                          "passes": [{"key": p.key, "bench": str(RELATIVE.bench(p.key)),
                                      "client_log": str(RELATIVE.client_log(p.key))}
                                     for p in la.passes if not p.discarded]}
                         for la in campaign.launches],
            **rule_spec(len(blocks), campaign.spending, campaign.prior, critical_df)}
