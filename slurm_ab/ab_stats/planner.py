"""The campaign planner: the cheapest design (launches per mode, passes per launch, order; or a
sequential design of at most K blocks) that reaches a precision target, priced in node-hours.
Pure: numbers in, designs out.

A pilot's variances are estimates: a design sized on them reaches its power only half the time.
The planner sizes on an upper confidence bound instead (`Noise.planning`, level
`ASSURANCE`): variances drawn from their distribution given the pilot's degrees of freedom
(sigma^2 df / chi^2_df, the launch-mean and the pass variance each), and says how sure it is (the
share of those draws under which the design has the target power, the power at the estimate and
its 10th percentile). Stated variances without degrees of freedom are taken as exact (said).

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

from ..model.campaign import MAX_LAUNCHES, SPENDING_DEFAULT, schedule
from ..model.duration import Estimate, TimeModel, campaign_schedule, format_time
from .launches import MIN_TREND_UNITS

ORDER = "counterbalanced"


ASSURANCE = 0.85    # plan on this upper confidence bound of the pilot's variances (the calibration's choice)
DRAWS = 4000        # posterior draws of the variances


def ar1_factor(k: int, rho: float) -> float:
    """Variance of the mean of k AR(1) passes over sigma^2 / k: 1 + 2 sum_j (1 - j/k) rho^j."""
    return 1.0 + 2.0 * sum((1.0 - j / k) * rho ** j for j in range(1, k))


@dataclass(frozen=True)
class Noise:
    launch_cov: float               # launch-to-launch CoV (log-sd)
    pass_cov: float                 # pass-to-pass CoV within a launch
    ar1: float = 0.0                # correlation of consecutive passes of a launch
    drift_pct: float = 0.0          # slow drift per pass over the job, percent
    cold_pct: float = 0.0           # the first pass of every launch slower by this, percent
    launch_df: Optional[int] = None  # degrees of freedom of the pilot's launch-mean variance (None: exact)
    pass_df: Optional[int] = None    # ... of its pass variance
    pilot_repeats: int = 0          # passes per launch of the pilot (its launch means' k)

    @property
    def uncertain(self) -> bool:
        return bool(self.launch_df)

    def launch_var(self, k: int) -> float:
        """Variance of one launch's mean of k passes (log scale)."""
        return self.launch_cov ** 2 + self.pass_cov ** 2 * ar1_factor(k, self.ar1) / k

    def draws(self, n: int = DRAWS, seed: int = 11):
        """(launch variance, pass variance) arrays drawn given the pilot: the launch-mean variance
        at the pilot's k and the pass variance each sigma^2 df / chi^2_df."""
        import numpy as np
        rng = np.random.default_rng(seed)
        k0 = self.pilot_repeats or 1
        v0 = self.launch_var(k0)
        sp2 = np.full(n, self.pass_cov ** 2)
        if self.pass_df:
            sp2 = self.pass_cov ** 2 * self.pass_df / rng.chisquare(self.pass_df, n)
        v0s = v0 * self.launch_df / rng.chisquare(self.launch_df, n)
        sl2 = np.maximum(v0s - sp2 * ar1_factor(k0, self.ar1) / k0, 0.0)
        return sl2, sp2

    @lru_cache(maxsize=64)
    def planning(self, k: int, assurance: float = ASSURANCE) -> float:
        """The launch-mean variance at k passes that the design is sized for: the estimate when
        the variances are stated as exact, else its `assurance` upper confidence bound."""
        if not self.uncertain:
            return self.launch_var(k)
        import numpy as np
        sl2, sp2 = self.draws()
        return float(np.quantile(sl2 + sp2 * ar1_factor(k, self.ar1) / k, assurance))


def pilot_noise(comp, ser, ar1: Optional[float] = None, drift_pct: Optional[float] = None) -> Noise:
    """The noise a pilot campaign measured (components.components and .serial of its ok passes),
    with its degrees of freedom: the launch-mean variance at the pilot's passes per launch is what
    it estimates directly; AR(1) (stated, else estimated) moves variance from the launch to the
    passes (within-launch variance is (1 - mean correlation) x the pass variance)."""
    rho = ar1 if ar1 is not None else (ser.ar1 or 0.0)
    k0 = max(ser.repeats, 1)
    pc = comp.pass_cov / (1.0 - ser.mean_corr(rho, max(k0, 2))) ** 0.5
    v0 = comp.launch_cov ** 2 + comp.pass_cov ** 2 / k0
    lc2 = max(v0 - pc ** 2 * ar1_factor(k0, rho) / k0, 0.0)
    drift = drift_pct if drift_pct is not None else (ser.drift_pct or 0.0)
    return Noise(lc2 ** 0.5, pc, rho, drift, launch_df=comp.launch_df, pass_df=comp.pass_df or None,
                 pilot_repeats=k0)


@dataclass(frozen=True)
class PilotPrior:
    """What --prior-from measured in a pilot campaign (cli/planner.pilot_prior): its noise (the
    launch-mean variance's degrees of freedom in launch_df) and where it came from."""

    ref: str                           # the option's value, as the user gave it
    noise: Noise
    source: str                        # run id, metric, launches, passes per launch

    def at(self, repeats: int):
        """The prior of a campaign of `repeats` passes per launch as its job carries it
        (model.campaign.Prior): submit writes it, the planner's simulated looks pool it."""
        from ..model.campaign import Prior
        return Prior(float(f"{self.noise.launch_var(repeats):.6g}"), int(self.noise.launch_df), self.source)


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
        """Of the launch-level test: launch means regressed on mode and run position from 6
        launches on (ab_stats.launches), else Welch's (about 2L - 2)."""
        return 2 * self.launches - (3 if 2 * self.launches >= MIN_TREND_UNITS else 2)

    def se(self, n: Noise, var: Optional[float] = None) -> float:
        v = n.launch_var(self.repeats) if var is None else var
        return math.sqrt(2.0 * v / self.launches)

    def power(self, n: Noise, detect_pct: float, confidence: float = 0.95, var: Optional[float] = None) -> float:
        """Power to call a change of detect_pct (either sign) significant; `var`: the launch-mean
        variance to assume (default: the estimate)."""
        if self.launches < 2:
            return 0.0
        from scipy import stats
        se, df = self.se(n, var), self.df()
        if se == 0:
            return 1.0
        tc = stats.t.ppf(0.5 + confidence / 2.0, df)
        ncp = math.log1p(detect_pct / 100.0) / se
        return float(two_sided_power(tc, df, ncp))

    def planned_power(self, n: Noise, detect_pct: float) -> float:
        """Power at the variance the planner sizes for (the upper confidence bound)."""
        return self.power(n, detect_pct, var=n.planning(self.repeats))

    def assurance(self, n: Noise, detect_pct: float, power: float) -> tuple[float, float, float]:
        """(share of the pilot's plausible variances under which the design reaches `power`, its
        power at the estimate, the 10th percentile of its power) - how sure the plan is."""
        import numpy as np
        from scipy import stats
        point = self.power(n, detect_pct)
        if not n.uncertain:
            return (1.0 if point >= power else 0.0), point, point
        sl2, sp2 = n.draws(1000, seed=23)
        se = np.sqrt(2.0 * (sl2 + sp2 * ar1_factor(self.repeats, n.ar1) / self.repeats) / self.launches)
        df = self.df()
        tc = stats.t.ppf(0.975, df)
        ncp = math.log1p(detect_pct / 100.0) / se
        pw = two_sided_power(tc, df, ncp)
        return float(np.mean(pw >= power)), point, float(np.quantile(pw, 0.1))

    def halfwidth_pct(self, n: Noise, confidence: float = 0.95) -> float:
        """Typical half-width of the interval of the change, percent (at the planning variance)."""
        if self.launches < 2:
            return math.inf
        from scipy import stats
        se = self.se(n, n.planning(self.repeats))
        return math.expm1(stats.t.ppf(0.5 + confidence / 2.0, self.df()) * se) * 100.0


def two_sided_power(tc, df, ncp):
    """P(|T| > tc) for a noncentral t: both tails through nct.sf. scipy 1.17's nct.cdf returns NaN
    far in the lower tail (cdf(-2.57, 5, ncp=10)), which made "how sure" print nan%; the lower
    tail is sf at -ncp by symmetry, which stays finite (equal to the digit where both are)."""
    from scipy import stats
    return stats.nct.sf(tc, df, ncp) + stats.nct.sf(tc, df, -ncp)


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
        return d.planned_power(n, self.detect_pct) >= self.power

    def text(self) -> str:
        if self.halfwidth_pct is not None:
            return f"95% interval half-width <= {self.halfwidth_pct:g}%"
        return f"detect a {self.detect_pct:g}% change at {self.power:.0%} power (95%)"


@dataclass(frozen=True)
class Sequential:
    """A sequential design's operating characteristics (simulated through ab_stats.looks, the
    stop rule the job runs): how often it decides what, and what it costs on average."""

    blocks: int                         # at most
    power: float                        # share calling the target change (its direction)
    stop_share: tuple[float, ...]       # share stopping at each look, at the target change
    aa_stop_share: tuple[float, ...]    # ... under no change
    aa_false: float                     # share calling better/worse under no change
    aa_equivalent: float                # share declaring equivalence under no change
    expected_node_hours: float          # at the target change
    aa_expected_node_hours: float       # under no change
    max_node_hours: float
    campaigns: int
    spending: str = ""                  # the boundaries' alpha-spending function

    @property
    def share(self) -> float:
        """Expected node-hours at the target change over the maximum's."""
        return self.expected_node_hours / self.max_node_hours

    @property
    def aa_share(self) -> float:
        return self.aa_expected_node_hours / self.max_node_hours


@dataclass(frozen=True)
class Plan:
    design: Optional[Design]            # None: out of reach
    target: Target
    noise: Noise
    costs: Costs
    power: Optional[float] = None       # analytic, at the planning variance
    halfwidth_pct: Optional[float] = None
    sim_power: Optional[float] = None   # simulated through ab_stats (verify)
    sim_false_positive: Optional[float] = None
    campaigns: int = 0
    reason: str = ""
    alternatives: tuple = ()            # (Design, node-hours) of the next cheapest
    sure: Optional[float] = None        # share of plausible variances with the target power
    point_power: Optional[float] = None  # power at the pilot's estimate
    low_power: Optional[float] = None   # its 10th percentile over the pilot's uncertainty
    sequential: Optional[Sequential] = None
    margin_pct: float = 0.0
    prior: Optional[PilotPrior] = None  # --prior-from: pooled into the sequential design's looks
    without_prior: Optional[Sequential] = None  # the same design and campaigns without it


def candidates(n: Noise, c: Costs, target: Target, max_launches: int = MAX_LAUNCHES,
               max_repeats: int = 12) -> list[Design]:
    """Every design meeting the target (at the planning variance), cheapest first (ties: fewer
    launches)."""
    out = [Design(L, k) for L in range(2, max_launches + 1) for k in range(1, max_repeats + 1)
           if target.met(Design(L, k), n)]
    return sorted(out, key=lambda d: (d.node_hours(c), d.launches))


def _simulated_values(d: Design, n: Noise, effect: float, rng, var: Optional[float] = None):
    """(values, launches) of A and B of one simulated campaign of design d: launch effects, AR(1)
    passes, drift over the job and a cold first pass, B's throughput x (1 + effect). `var`: the
    launch-mean variance to simulate (default the estimate's), split as the noise splits it."""
    from ..model.campaign import launch_order
    scale = math.sqrt(var / n.launch_var(d.repeats)) if var is not None and n.launch_var(d.repeats) > 0 else 1.0
    vals = {"A": [], "B": []}
    launches = {"A": [], "B": []}
    t = 0
    for i, mode in enumerate(launch_order(("A", "B"), d.launches, d.order)):
        u = rng.normal(0.0, n.launch_cov * scale)
        e = rng.normal(0.0, n.pass_cov * scale, d.repeats)
        for j in range(1, d.repeats):
            e[j] = n.ar1 * e[j - 1] + math.sqrt(1.0 - n.ar1 ** 2) * e[j]
        for j in range(d.repeats):
            log_time = u + e[j] + math.log1p(n.drift_pct / 100.0) * t
            if j == 0:
                log_time += math.log1p(n.cold_pct / 100.0)
            t += 1
            vals[mode].append(100.0 * (1.0 + (effect if mode == "B" else 0.0)) * math.exp(-log_time))
            launches[mode].append(i)
    return vals, launches


def verify(d: Design, n: Noise, detect_pct: float, campaigns: int = 2000, seed: int = 1,
           var: Optional[float] = None) -> tuple[float, float]:
    """(share of A/B campaigns with a planted detect_pct % change called in its direction, share
    of A/A campaigns called significant), simulated under `n` and analysed by ab_stats.delta as
    compare does."""
    import numpy as np

    from . import BETTER, WORSE, delta

    rng = np.random.default_rng(seed)
    want = BETTER if detect_pct >= 0 else WORSE

    def one(effect: float) -> str:
        vals, launches = _simulated_values(d, n, effect, rng, var)
        return delta("output_tps", vals["A"], vals["B"], a_launches=launches["A"], b_launches=launches["B"]).verdict

    ab = sum(one(detect_pct / 100.0) == want for _ in range(campaigns)) / campaigns
    aa = sum(one(0.0) in (BETTER, WORSE) for _ in range(campaigns)) / campaigns
    return ab, aa


def sequential_oc(d: Design, n: Noise, c: Costs, detect_pct: float, margin_pct: float = 0.0,
                  campaigns: int = 2000, seed: int = 5, var: Optional[float] = None, aa: bool = True,
                  spending: str = SPENDING_DEFAULT, prior: Optional[PilotPrior] = None) -> Sequential:
    """Simulate a sequential campaign of d.launches / 2 blocks looking after each block with the
    job's own stop rule (looks.decide, the boundaries and prior of sequential.rule_spec): power,
    stops per look, A/A errors and equivalence, expected and maximum node-hours (the time model's
    estimate of the blocks run). A prior is the pilot's fixed value (the user has that pilot),
    pooled as the job pools it; the campaigns' noise is `n` (and `var`) as without one, and a
    seed gives the same campaigns with and without it."""
    import numpy as np

    from ..model.campaign import LAUNCHES_PER_BLOCK
    from . import looks
    from .sequential import rule_spec

    blocks = d.launches // LAUNCHES_PER_BLOCK
    spec = {**rule_spec(blocks, spending, prior.at(d.repeats) if prior else None), "blocks": [()] * blocks,
            "margin_pct": margin_pct, "better": "higher", "log": True}
    rng = np.random.default_rng(seed)
    want = "better" if detect_pct >= 0 else "worse"

    def run(effect: float) -> tuple[int, str]:
        vals, launches = _simulated_values(d, n, effect, rng, var)
        means: dict = {}
        for mode in ("A", "B"):
            for v, la in zip(vals[mode], launches[mode]):
                means.setdefault((la, mode), []).append(math.log(v))
        units = sorted((la + 1, mode == "B", sum(xs) / len(xs)) for (la, mode), xs in means.items())
        size = LAUNCHES_PER_BLOCK * 2
        for k in range(1, blocks + 1):
            dec = looks.decide(units[:k * size], k, spec)["decision"]
            if dec != looks.CONTINUE:
                return k, dec
        return blocks, looks.MAX_DECISION

    ab = [run(detect_pct / 100.0) for _ in range(campaigns)]
    aa = [run(0.0) for _ in range(campaigns)] if aa else [(blocks, looks.MAX_DECISION)]
    hours = [Design(LAUNCHES_PER_BLOCK * k, d.repeats, d.order).node_hours(c) for k in range(1, blocks + 1)]
    share = tuple(sum(1 for k, _ in ab if k == j) / campaigns for j in range(1, blocks + 1))
    aa_share = tuple(sum(1 for k, _ in aa if k == j) / len(aa) for j in range(1, blocks + 1))
    return Sequential(blocks, sum(1 for _, x in ab if x == want) / campaigns, share, aa_share,
                      sum(1 for _, x in aa if x in ("better", "worse")) / len(aa),
                      sum(1 for _, x in aa if x == "equivalent") / len(aa),
                      sum(p * h for p, h in zip(share, hours)), sum(p * h for p, h in zip(aa_share, hours)),
                      hours[-1], campaigns, spending)


def _by_expected_cost(fits: list[Design], n: Noise, c: Costs, detect: float, margin_pct: float,
                      seed: int, spending: str, prior: Optional[PilotPrior]) -> list[Design]:
    """Sequential candidates in order of their expected node-hours at the target change
    (simulated roughly at the planning variance): per passes per launch the three smallest
    numbers of blocks that reach the target as fixed designs."""
    short: list[Design] = []
    for k in sorted({d.repeats for d in fits}):
        short += [d for d in fits if d.repeats == k][:3]
    short = sorted(short, key=lambda d: d.node_hours(c))[:9]
    scored = [(sequential_oc(d, n, c, detect, margin_pct, 300, seed, n.planning(d.repeats), aa=False,
                             spending=spending, prior=prior), d)
              for d in short]
    return [d for _, d in sorted(scored, key=lambda x: x[0].expected_node_hours)]


def plan(n: Noise, c: Costs, target: Target, campaigns: int = 2000, seed: int = 1,
         sequential: bool = False, margin_pct: float = 0.0, spending: str = SPENDING_DEFAULT,
         prior: Optional[PilotPrior] = None, plain_spending: Optional[str] = None) -> Plan:
    """The cheapest design meeting the target that fits the time limit, checked by simulation
    (a candidate whose simulated power falls short gives way to the next). Sequential: designs of
    whole blocks (even launches per mode, 2 blocks or more), priced by their maximum, checked by
    simulating the stop rule at the planning variance; with a prior (--prior-from) its looks pool
    it, and the same design's campaigns without it (at `plain_spending`, what the campaign would
    spend without a prior: benchmark.spending "auto") show what it buys."""
    cands = candidates(n, c, target)
    if sequential:
        cands = [d for d in cands if d.launches % 2 == 0 and d.launches >= 4]
    fits = [d for d in cands if d.fits(c)]
    base = Plan(None, target, n, c, margin_pct=margin_pct, prior=prior)
    if not cands:
        return replace(base, reason=f"no design of up to {MAX_LAUNCHES} launches x 12 passes per mode reaches the target")
    if not fits:
        best = cands[0]
        return replace(base, reason=(f"out of reach within the time limit {format_time(c.time_limit_s)}: the "
                                     f"cheapest design that reaches it ({best.launches} launches x "
                                     f"{best.repeats} passes per mode) needs --time "
                                     f"{format_time(best.estimate(c).limit_s)} in one job; raise the limit or "
                                     "relax the target"), alternatives=((best, best.node_hours(c)),))
    detect = target.detect_pct if target.detect_pct is not None else target.halfwidth_pct
    sim_power = 0.0
    if sequential:
        fits = _by_expected_cost(fits, n, c, detect, margin_pct, seed, spending, prior)
    if campaigns <= 0:          # analytic only (the calibration's many pilots)
        d = fits[0]
        sure, point, low = d.assurance(n, detect, target.power) if target.detect_pct is not None else (None,) * 3
        return Plan(d, target, n, c, d.planned_power(n, detect), d.halfwidth_pct(n), sure=sure, point_power=point,
                    low_power=low, margin_pct=margin_pct, prior=prior)
    for i, d in enumerate(fits[:8]):
        var = n.planning(d.repeats)
        if sequential:
            oc = sequential_oc(d, n, c, detect, margin_pct, campaigns, seed, var, spending=spending, prior=prior)
            sim_power, sim_fp = oc.power, oc.aa_false
        else:
            oc = None
            sim_power, sim_fp = verify(d, n, detect, campaigns, seed, var)
        if target.halfwidth_pct is not None or sim_power >= target.power:
            sure, point, low = d.assurance(n, detect, target.power)
            plain = None
            if sequential:      # costs at the estimate, not the bound
                oc = replace(sequential_oc(d, n, c, detect, margin_pct, campaigns, seed + 1, spending=spending,
                                           prior=prior), power=oc.power)
                if prior:
                    plain = sequential_oc(d, n, c, detect, margin_pct, campaigns, seed + 1,
                                          spending=plain_spending or spending)
            return Plan(d, target, n, c, d.planned_power(n, detect), d.halfwidth_pct(n), sim_power, sim_fp,
                        campaigns, alternatives=tuple((x, x.node_hours(c)) for x in fits[i + 1:i + 4]),
                        sure=sure, point_power=point, low_power=low, sequential=oc, margin_pct=margin_pct,
                        prior=prior, without_prior=plain)
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


def _noise_line(n: Noise) -> str:
    line = (f"noise: launch CoV {n.launch_cov:.2%}, pass CoV {n.pass_cov:.2%}"
            + (f", AR(1) {n.ar1:g}" if n.ar1 else "") + (f", drift {n.drift_pct:g}%/pass" if n.drift_pct else ""))
    if n.uncertain:
        line += (f"; planned on the {ASSURANCE:.0%} upper confidence bound of the pilot's variances (launch-mean "
                 f"variance from {n.launch_df} degree(s) of freedom"
                 + (f", pass variance from {n.pass_df}" if n.pass_df else "") + ")")
    else:
        line += "; stated values, taken as exact (a pilot's --from gives their uncertainty)"
    return line


def _expected(s: Sequential, detect: float, label: str = "", maximum: bool = True) -> str:
    return (f"expected node-hours{' ' + label if label else ''}: {s.expected_node_hours:.1f} at a {detect:+g}% change "
            f"(stops on average at {s.share:.0%} of the maximum's node-hours), {s.aa_expected_node_hours:.1f} under "
            f"no change ({s.aa_share:.0%})" + (f"; maximum {s.max_node_hours:.1f}" if maximum else ""))


def text(p: Plan, modes: tuple[str, str] = ("A", "B"), pilot: Optional[str] = None) -> str:
    """The plan as the `slurm-ab plan` command prints it; `pilot`: the --from campaign, offered as
    a sequential design's prior when none is given (not applied unasked: a prior is only right for
    a pilot of the campaign's conditions, which the user knows)."""
    from ..model.campaign import launch_order

    n, c = p.noise, p.costs
    lines = [f"target: {p.target.text()}", _noise_line(n), _costs_line(c)]
    if p.design is None:
        return "\n".join(lines + [p.reason if p.reason.startswith("out of reach") else f"out of reach: {p.reason}"]) + "\n"
    d = p.design
    est = d.estimate(c)
    seq = " ".join((modes[0] if m == "A" else modes[1]) for m in launch_order(("A", "B"), d.launches, d.order))
    detect = p.target.detect_pct if p.target.detect_pct is not None else p.target.halfwidth_pct
    kind = "at most " if p.sequential else ""
    lines += ["",
              f"design: {kind}{d.launches} launches per mode x {d.repeats} passes per launch, {d.order} order "
              f"({2 * d.launches} launches: {seq})"
              + (f"; a look after each of {p.sequential.blocks} blocks" if p.sequential else ""),
              f"wall time: {format_time(est.limit_s)} in one job, what dry-run --time auto asks for this "
              f"design ({est.text})",
              f"node-hours: {d.node_hours(c):.1f} = {c.nodes} nodes x {est.seconds / 3600:.2f} h"
              + (" (the maximum)" if p.sequential else ""),
              f"queue waits: 1 (one allocation; as separate jobs: {c.modes * d.launches})"]
    if p.sequential:
        s = p.sequential
        sim = f"simulated {s.campaigns} campaigns at the pilot's estimate through the job's stop rule"
        if p.prior:
            v = p.prior.at(d.repeats)
            per = f"{d.repeats} pass{'es' if d.repeats != 1 else ''} per launch"
            lines += [f"prior (--prior-from {p.prior.ref}): launch-mean variance {v.variance:.4g} (CoV "
                      f"{v.variance ** 0.5:.2%} at {per}), {v.df} degrees of freedom, from {v.source}; pooled into "
                      "every look as the job pools it (dropped by the F guard where a look's own variance "
                      "contradicts it)",
                      _expected(s, detect, "with the prior") + f"; {sim}",
                      _expected(p.without_prior, detect, "without it", maximum=False) + " (the same campaigns"
                      + (f"; {p.without_prior.spending} spending, {s.spending} with the prior: benchmark.spending "
                         "auto" if p.without_prior.spending != s.spending else "") + ")"]
        else:
            lines.append(_expected(s, detect) + f"; {sim}")
        lines += [f"stops per look{' with the prior' if p.prior else ''} at the change: "
                  + ", ".join(f"{x:.0%}" for x in s.stop_share)
                  + "; under no change: " + ", ".join(f"{x:.0%}" for x in s.aa_stop_share),
                  f"expected: power {p.sim_power:.0%} at {detect:+g}% (simulated at the planning variance), "
                  f"A/A false better/worse {s.aa_false:.1%}, A/A equivalent within ±{p.margin_pct:g}% "
                  f"{s.aa_equivalent:.0%}"]
    else:
        lines += [f"expected: power {p.power:.0%} at {detect:+g}% (simulated {p.sim_power:.1%} of {p.campaigns} "
                  f"campaigns), 95% half-width ~{p.halfwidth_pct:.1f}%",
                  f"A/A false-positive rate: {p.sim_false_positive:.1%} (simulated; nominal 5%)"]
    if p.sure is not None and p.target.detect_pct is not None:
        lines.append(f"how sure: the design reaches {p.target.power:.0%} power under {p.sure:.0%} of the variances "
                     f"the pilot allows; power {p.point_power:.0%} at its estimate, {p.low_power:.0%} or more in 9 "
                     "of 10" if n.uncertain else
                     f"how sure: power {p.point_power:.0%} if the stated variances are right (they are taken as "
                     "exact)")
    lines.append(f"submit: slurm-ab submit {modes[0]} {modes[1]} --launches {d.launches} --repeats {d.repeats} "
                 f"--order {d.order}" + (" --sequential" if p.sequential else "")
                 + (f" --prior-from {p.prior.ref}" if p.prior and p.sequential else ""))
    if p.sequential and not p.prior and pilot:
        lines.append(f"a prior: --prior-from {pilot} pools this pilot's launch-mean variance into every look, so the "
                     f"first look can decide; `slurm-ab plan {modes[0]} {modes[1]} --sequential --from {pilot} "
                     f"--prior-from {pilot}` prices it (use it when the pilot measured this campaign's conditions: "
                     "docs/statistics.md, \"A prior for the first look\")")
    for alt, nh in p.alternatives:
        lines.append(f"  next: {alt.launches} x {alt.repeats}: {nh:.1f} node-hours, power "
                     f"{alt.planned_power(n, p.target.detect_pct):.0%}" if p.target.detect_pct is not None
                     else f"  next: {alt.launches} x {alt.repeats}: {nh:.1f} node-hours")
    return "\n".join(lines) + "\n"
