"""The campaign planner: the cheapest design (launches per mode, passes per launch, order) that
reaches a precision target, priced in node-hours. Pure: numbers in, designs out.

Model (docs/statistics.md): on the log scale a pass of a mode is  mode + launch effect (sd
launch_cov) + pass noise (sd pass_cov, AR(1) within a launch). The comparison averages the passes
of each launch and compares launch means (ab_stats.launches), so with L launches per mode and k
passes per launch the standard error of log(B/A) is

    se = sqrt(2 (launch_cov^2 + pass_cov^2 c(k, rho) / k) / L),  c = 1 + 2 sum_j (1 - j/k) rho^j

with about 2L - 2 degrees of freedom. Power to detect a change d at 95 %: the noncentral t
(scipy.stats.nct) with noncentrality log(1 + d) / se. A design's duration is the one time model's
(model/duration.py: what dry-run --time auto asks for the same campaign, preflight, teardown,
client start-up per pass, margin and early stops included), its cost in one allocation (one queue
wait):

    node-hours = N nodes x the job's expected duration

A candidate is checked by simulating campaigns through the same analysis slurm-ab compare runs
(`verify`), with drift and correlation when given.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

from ..model.campaign import schedule
from ..model.duration import Estimate, TimeModel, campaign_schedule, format_time

ORDER = "counterbalanced"


@dataclass(frozen=True)
class Noise:
    launch_cov: float               # launch-to-launch CoV (log-sd)
    pass_cov: float                 # pass-to-pass CoV within a launch
    ar1: float = 0.0                # correlation of consecutive passes of a launch
    drift_pct: float = 0.0          # slow drift per pass over the job, percent
    cold_pct: float = 0.0           # the first pass of every launch slower by this, percent


@dataclass(frozen=True)
class Runs:
    """What every launch of a mode runs: the campaign options dry-run and submit would use."""

    modes: tuple[str, ...]
    concurrencies: tuple[int, ...]
    num_prompts: int
    prompts_per_concurrency: int = 0
    burn_in: bool = False


@dataclass(frozen=True)
class Costs:
    time: TimeModel                 # the one time model (model/duration.py)
    runs: Runs
    nodes: int = 8                  # the job's nodes (replicas x nodes per replica)
    time_limit_s: Optional[int] = None

    @property
    def modes(self) -> int:
        return len(self.runs.modes)


@dataclass(frozen=True)
class Design:
    launches: int                   # per mode
    repeats: int                    # passes per launch
    order: str = ORDER

    def estimate(self, c: Costs) -> Estimate:
        """The job's duration as dry-run --time auto computes it for this design's campaign."""
        return _estimate(self, c)

    def node_hours(self, c: Costs) -> float:
        return c.nodes * self.estimate(c).seconds / 3600.0

    def fits(self, c: Costs) -> bool:
        return c.time_limit_s is None or self.estimate(c).limit_s <= c.time_limit_s

    def df(self) -> int:
        return 2 * self.launches - 2

    def se(self, n: Noise) -> float:
        k, rho = self.repeats, n.ar1
        c = 1.0 + 2.0 * sum((1.0 - j / k) * rho ** j for j in range(1, k))
        return math.sqrt(2.0 * (n.launch_cov ** 2 + n.pass_cov ** 2 * c / k) / self.launches)

    def power(self, n: Noise, detect_pct: float, confidence: float = 0.95) -> float:
        if self.launches < 2:
            return 0.0
        from scipy import stats
        se, df = self.se(n), self.df()
        if se == 0:
            return 1.0
        tc = stats.t.ppf(0.5 + confidence / 2.0, df)
        ncp = math.log1p(detect_pct / 100.0) / se
        return float(stats.nct.sf(tc, df, ncp) + stats.nct.cdf(-tc, df, ncp))

    def halfwidth_pct(self, n: Noise, confidence: float = 0.95) -> float:
        """Typical half-width of the interval of the change, percent."""
        if self.launches < 2:
            return math.inf
        from scipy import stats
        return math.expm1(stats.t.ppf(0.5 + confidence / 2.0, self.df()) * self.se(n)) * 100.0


@lru_cache(maxsize=4096)
def _estimate(d: Design, c: Costs) -> Estimate:
    r = c.runs
    camp = schedule(r.modes, d.repeats, r.concurrencies, d.order, r.burn_in, r.num_prompts,
                    r.prompts_per_concurrency, d.launches)
    return c.time.estimate(campaign_schedule(camp))


@dataclass(frozen=True)
class Target:
    detect_pct: Optional[float] = None     # smallest change to detect ...
    power: float = 0.8                     # ... this often
    halfwidth_pct: Optional[float] = None  # or: a typical interval half-width

    def met(self, d: Design, n: Noise) -> bool:
        if self.halfwidth_pct is not None:
            return d.halfwidth_pct(n) <= self.halfwidth_pct
        return d.power(n, self.detect_pct) >= self.power

    def text(self) -> str:
        if self.halfwidth_pct is not None:
            return f"95% interval half-width <= {self.halfwidth_pct:g}%"
        return f"detect a {self.detect_pct:g}% change at {self.power:.0%} power (95%)"


@dataclass(frozen=True)
class Plan:
    design: Optional[Design]            # None: out of reach
    target: Target
    noise: Noise
    costs: Costs
    power: Optional[float] = None       # analytic, at the target's change
    halfwidth_pct: Optional[float] = None
    sim_power: Optional[float] = None   # simulated through ab_stats (verify)
    sim_false_positive: Optional[float] = None
    campaigns: int = 0
    reason: str = ""
    alternatives: tuple = ()            # (Design, node-hours) of the next cheapest


def candidates(n: Noise, c: Costs, target: Target, max_launches: int = 30, max_repeats: int = 12) -> list[Design]:
    """Every design meeting the target (analytically), cheapest first (ties: fewer launches)."""
    out = [Design(L, k) for L in range(2, max_launches + 1) for k in range(1, max_repeats + 1)
           if target.met(Design(L, k), n)]
    return sorted(out, key=lambda d: (d.node_hours(c), d.launches))


def verify(d: Design, n: Noise, detect_pct: float, campaigns: int = 2000, seed: int = 1) -> tuple[float, float]:
    """(share of A/B campaigns with a planted +detect_pct % called better, share of A/A campaigns
    called significant), simulated under `n` and analysed by ab_stats.delta as compare does."""
    import numpy as np

    from . import BETTER, WORSE, delta
    from ..model.campaign import launch_order

    rng = np.random.default_rng(seed)
    seq = launch_order(("A", "B"), d.launches, d.order)

    def one(effect: float) -> str:
        vals = {"A": [], "B": []}
        launches = {"A": [], "B": []}
        t = 0
        for i, mode in enumerate(seq):
            u = rng.normal(0.0, n.launch_cov)
            e = rng.normal(0.0, n.pass_cov, d.repeats)
            for j in range(1, d.repeats):
                e[j] = n.ar1 * e[j - 1] + math.sqrt(1.0 - n.ar1 ** 2) * e[j]
            for j in range(d.repeats):
                log_time = u + e[j] + math.log1p(n.drift_pct / 100.0) * t
                if j == 0:
                    log_time += math.log1p(n.cold_pct / 100.0)
                t += 1
                vals[mode].append(100.0 * (1.0 + (effect if mode == "B" else 0.0)) * math.exp(-log_time))
                launches[mode].append(i)
        return delta("output_tps", vals["A"], vals["B"], a_launches=launches["A"], b_launches=launches["B"]).verdict

    ab = sum(one(detect_pct / 100.0) == BETTER for _ in range(campaigns)) / campaigns
    aa = sum(one(0.0) in (BETTER, WORSE) for _ in range(campaigns)) / campaigns
    return ab, aa


def plan(n: Noise, c: Costs, target: Target, campaigns: int = 2000, seed: int = 1) -> Plan:
    """The cheapest design meeting the target that fits the time limit, checked by simulation
    (a candidate whose simulated power falls short gives way to the next)."""
    cands = candidates(n, c, target)
    fits = [d for d in cands if d.fits(c)]
    base = Plan(None, target, n, c)
    if not cands:
        return replace(base, reason="no design of up to 30 launches x 12 passes per mode reaches the target")
    if not fits:
        best = cands[0]
        return replace(base, reason=(f"out of reach within the time limit {format_time(c.time_limit_s)}: the "
                                     f"cheapest design that reaches it ({best.launches} launches x "
                                     f"{best.repeats} passes per mode) needs --time "
                                     f"{format_time(best.estimate(c).limit_s)} in one job; raise the limit or "
                                     "relax the target"), alternatives=((best, best.node_hours(c)),))
    detect = target.detect_pct if target.detect_pct is not None else target.halfwidth_pct
    for i, d in enumerate(fits[:8]):
        sim_power, sim_fp = verify(d, n, detect, campaigns, seed)
        if target.halfwidth_pct is not None or sim_power >= target.power:
            return Plan(d, target, n, c, d.power(n, detect), d.halfwidth_pct(n), sim_power, sim_fp,
                        campaigns, alternatives=tuple((x, x.node_hours(c)) for x in fits[i + 1:i + 4]))
    d = fits[0]
    return replace(base, reason=(f"the analytic candidates fall short in simulation (e.g. {d.launches} x "
                                 f"{d.repeats}: {sim_power:.0%})"))


def _costs_line(c: Costs) -> str:
    t = c.time
    per_pass = (f"pass {t.pass_s.seconds / 60:g} min ({t.pass_s.source})" if t.pass_s else
                "pass ceil(prompts / C) x " + ", ".join(f"{m} {f.seconds:g} s" for m, f in t.requests)
                + f" + {t.pass_overhead_s:g} s")
    return (f"costs: model load {t.load.seconds / 60:g} min ({t.load.source}), warm-ups {t.warmup.seconds:g} s, "
            f"{per_pass}, {c.nodes} nodes, {c.modes} modes"
            + (f", time limit {format_time(c.time_limit_s)}" if c.time_limit_s else ""))


def text(p: Plan, modes: tuple[str, str] = ("A", "B")) -> str:
    """The plan as the `slurm-ab plan` command prints it."""
    n, c = p.noise, p.costs
    lines = [f"target: {p.target.text()}",
             f"noise: launch CoV {n.launch_cov:.2%}, pass CoV {n.pass_cov:.2%}"
             + (f", AR(1) {n.ar1:g}" if n.ar1 else "") + (f", drift {n.drift_pct:g}%/pass" if n.drift_pct else ""),
             _costs_line(c)]
    if p.design is None:
        return "\n".join(lines + [p.reason if p.reason.startswith("out of reach") else f"out of reach: {p.reason}"]) + "\n"
    d = p.design
    est = d.estimate(c)
    seq = " ".join((modes[0] if m == "A" else modes[1]) for m in __import__(
        "slurm_ab.model.campaign", fromlist=["launch_order"]).launch_order(("A", "B"), d.launches, d.order))
    lines += ["",
              f"design: {d.launches} launches per mode x {d.repeats} passes per launch, {d.order} order "
              f"({2 * d.launches} launches: {seq})",
              f"wall time: {format_time(est.limit_s)} in one job, what dry-run --time auto asks for this "
              f"design ({est.text})",
              f"node-hours: {d.node_hours(c):.1f} = {c.nodes} nodes x {est.seconds / 3600:.2f} h",
              f"queue waits: 1 (one allocation; as separate jobs: {c.modes * d.launches})",
              f"expected: power {p.power:.0%} at {p.target.detect_pct or p.target.halfwidth_pct:g}% "
              f"(simulated {p.sim_power:.1%} of {p.campaigns} campaigns), 95% half-width ~{p.halfwidth_pct:.1f}%",
              f"A/A false-positive rate: {p.sim_false_positive:.1%} (simulated; nominal 5%)",
              f"submit: slurm-ab submit {modes[0]} {modes[1]} --launches {d.launches} --repeats {d.repeats} "
              f"--order {d.order}"]
    for alt, nh in p.alternatives:
        lines.append(f"  next: {alt.launches} x {alt.repeats}: {nh:.1f} node-hours, power {alt.power(n, p.target.detect_pct or 0):.0%}"
                     if p.target.detect_pct else f"  next: {alt.launches} x {alt.repeats}: {nh:.1f} node-hours")
    return "\n".join(lines) + "\n"
