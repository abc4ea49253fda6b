"""Calibrate what slurm-ab ships on simulated campaigns, under noise the methods do not assume.

``nice -n 5 python benchmarks/calibrate_stats.py [--campaigns 2000] [--pilots 100] [--quick] [--json]``

No cluster, no emulator process; its own simulation code (it shares with slurm-ab only what is
being calibrated: the analysis and the stop rule). Sections:

1. The primary's estimator: the steady-state output throughput (parse.bench.steady_window, the
   collector's one estimator) over the emulator's offline simulator (``simulate(noise_seed=...)``,
   costs.toml noise) at the seed's workload (tp32, C=8, 40 prompts of 16K -> 512): its bias
   against the emulator's true service rate (a noiseless 400-prompt run) and the noise it adds
   over the injected engine noise (the replicas' launch x pass factors), beside the makespan
   figure, at the default window ratio 0.5 and alternatives (ratio, prompts per pass).
2. Fixed designs (the default 4 x 2 counterbalanced, and the blocked one) under every noise
   condition: launch CoV 0.5 / 1.5 / 3 %, pass CoV 1.5 / 7.4 % (7.4 %: steady TPS measured on
   the local cluster), AR(1) 0.3 of a launch's passes, drift 0.25 %/pass, a slow first pass,
   missing passes; the primary carries its estimator noise (section 1). Rows go through
   ``ab_stats.family.compare`` as ``slurm-ab compare`` runs them: A/A false better/worse of the
   primary and of the whole table, A/A 'equivalent within ±3 %', +5 % and +10 % detected,
   coverage of the primary's interval.
3. Sequential designs (the stop rule the job runs, ab_stats.looks, with sequential.critical_table's
   boundaries) of at most K blocks: A/A false better/worse with every look counted, A/A
   equivalence, coverage of the final interval, and at +10 % the expected node-hours against
   the maximum (the one time model, the seed's sizes: load 15 min, pass 5 min, 8 nodes).
4. The planner with pilot uncertainty: simulated 4 x 2 pilots, their variance components (REML)
   and serial estimates -> ``planner.plan`` (detect 5 % at 80 %) -> the chosen design's true power,
   simulated through ``ab_stats.delta`` at the true noise: its median and 10th percentile.
5. A prior for the first look (--prior-from): the pilot's launch-mean variance pooled into every
   look (ab_stats.looks.pooled) where the planner's maxima have 2-5 blocks (pass CoV 1.5 %), from
   simulated 4 x 2 pilots through components/pilot_noise: right, 2x too small, 2x too large, and
   pilots of another day (launch CoV 3x smaller / larger); the F guard at several levels on the same
   campaigns; power-2 and power-1 spending. A/A false better/worse with every look, coverage, and
   the +10% expected node-hours against the maximum, with and without the prior.
6. The planner priced with a prior (plan --sequential --prior-from): per condition (the local
   cluster's measured launch 0.27 % / pass 7.37 % too, also as stated: no AR(1), drift, cold pass
   or gaps) and spending, the design ``planner.plan`` picks for 5 % at 80 % without a prior and
   with a right one (the true launch-mean variance, df 5: a 4 x 2 pilot's), each simulated here
   through the stop rule with ``sequential.rule_spec`` (the job's boundaries and prior): at +10 %
   and A/A the expected node-hours against the maximum, with and without the prior on the same
   campaigns, and the A/A error with it.

Exit 1 when a target is missed. Targets (issue 30): A/A false better/worse <= 7.5 % (fixed
primary, and sequential with every look); fixed whole table <= 10 %; blocked never plain;
coverage >= 93 %; +10 % stops on average within half the maximum node-hours (6+ blocks; with a
right prior and power-1, 5 blocks; the gap at 2-4 blocks is printed); every prior at the shipped
guard: A/A <= 7.5 %, coverage >= 93 %; planner: median true power >= 80 %, >= 70 % in 9 of 10
pilots; the planner's sequential designs with a right prior: A/A <= 7.5 %.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "testbed"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from slurm_ab.ab_stats import BETTER, WORSE, delta  # noqa: E402
from slurm_ab.ab_stats import looks  # noqa: E402
from slurm_ab.ab_stats.family import compare  # noqa: E402
from slurm_ab.ab_stats.sequential import PRIOR_GUARD  # noqa: E402
from slurm_ab.ab_stats.verdicts import kind  # noqa: E402
from slurm_ab.model.campaign import SPENDING_DEFAULT, schedule  # noqa: E402
from slurm_ab_testbed.emulator.costs import load_costs  # noqa: E402
from slurm_ab_testbed.emulator.noise import lognormal_factor  # noqa: E402

PLAIN = (BETTER, WORSE)
MARGIN = 3.0
FIELDS = {"ttft_mean_s": "mean_ttft_ms", "tpot_mean_ms": "mean_tpot_ms", "e2e_mean_s": "mean_e2e_ms",
          "ttft_p95_s": "p95_ttft_ms", "tpot_p95_ms": "p95_tpot_ms", "e2e_p95_s": "p95_e2e_ms"}
TP32 = ["--tp-size", "32", "--ep-size", "4", "--model-path", "/m", "--disable-radix-cache",
        "--chunked-prefill-size", "8192"]
LAUNCH_COVS = (0.005, 0.015, 0.03)
PASS_COVS = (0.015, 0.074)


# ---- 1. the steady-state estimator on the emulator's simulator ---------------------------------

def _steady(res, ratio: float, concurrency: int = 8) -> float | None:
    """The collector's steady-state estimator over one simulated benchmark: requests replayed from
    their TTFT and last token (tokens spread evenly between), SGLang's window."""
    from slurm_ab.parse.bench import Request, steady_window
    reqs = []
    for start, first, done, _ in res.timings:
        n = 512
        gap = (done - first) / (n - 1)
        reqs.append(Request(True, first - start, tuple([gap] * (n - 1)), n))
    w = steady_window(reqs, concurrency, ratio)
    return w.output_tps if w else None


def _cov(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) / m


def estimator_noise(seeds: int) -> dict:
    """Bias against the true service rate and the noise the estimator adds over the injected one."""
    from slurm_ab_testbed.emulator.simulate import simulate
    truth = simulate(TP32, num_prompts=400)
    true_rate = _steady(truth, 0.5)
    out = {"true_rate": true_rate, "variants": []}
    for prompts, ratio in ((40, 0.5), (40, 0.75), (40, 1.0), (80, 0.5), (160, 0.5)):
        est, mk, inj, resid = [], [], [], []
        for s in range(1, seeds + 1):
            r = simulate(TP32, num_prompts=prompts, noise_seed=s)
            v = _steady(r, ratio)
            f = sum(1.0 / x for x in r.factors) / len(r.factors)      # the injected rate factor
            est.append(v)
            mk.append(r.output_throughput)
            inj.append(f)
            resid.append(math.log(v / (true_rate * f)))
        added = math.sqrt(sum((x - sum(resid) / len(resid)) ** 2 for x in resid) / (len(resid) - 1))
        out["variants"].append({"prompts": prompts, "ratio": ratio, "bias_pct": (sum(est) / len(est) / true_rate - 1) * 100,
                                "steady_cov": _cov(est), "makespan_cov": _cov(mk), "injected_cov": _cov(inj),
                                "added_sd": added, "makespan_bias_pct": (sum(mk) / len(mk) / true_rate - 1) * 100})
    return out


def metric_noise(seeds: int) -> dict[str, tuple[float, float, float]]:
    """Secondary metrics: (base, slope on the time factor, own per-pass log-sd), fitted on `seeds`
    noisy simulated launches of tp32 (C=8, 40 prompts)."""
    from slurm_ab_testbed.emulator.simulate import simulate
    runs = [simulate(TP32, noise_seed=s) for s in range(1, seeds + 1)]
    x = [math.log(r.duration) for r in runs]
    mx = sum(x) / len(x)
    sxx = sum((v - mx) ** 2 for v in x)
    out = {}
    for metric, field in FIELDS.items():
        y = [math.log(getattr(r, field)) for r in runs]
        my = sum(y) / len(y)
        slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx
        resid = math.sqrt(sum((b - my - slope * (a - mx)) ** 2 for a, b in zip(x, y)) / (len(x) - 2))
        out[metric] = (math.exp(my), slope, resid)
    return out


# ---- simulated campaigns -------------------------------------------------------------------------

class Condition:
    def __init__(self, launch_cov, pass_cov, ar1=0.3, drift=0.25, cold=2.0, missing=0.03, est_sd=0.0):
        self.launch_cov, self.pass_cov, self.ar1, self.drift = launch_cov, pass_cov, ar1, drift
        self.cold, self.missing, self.est_sd = cold, missing, est_sd

    def name(self) -> str:
        return (f"launch {self.launch_cov:.1%}, pass {self.pass_cov:.1%}, AR {self.ar1:g}, drift "
                f"{self.drift:g}%/pass, cold {self.cold:g}%, missing {self.missing:.0%}")


def campaign_rows(order: str, launches: int, repeats: int, cond: Condition, metrics: dict, effect: float,
                  rng: random.Random) -> tuple[list, list]:
    """Pass rows of A and B of one simulated campaign (B's throughput x (1 + effect)). The primary
    (steady_output_tps) = base / time factor x its estimator noise; the makespan Output TPS the
    same without the estimator's own noise; secondaries follow the time factor with theirs."""
    sched = schedule(("A", "B"), repeats, (8,), order, False, 40, launches=launches)
    rows = {"A": [], "B": []}
    t = 0
    for launch in sched.launches:
        lf = lognormal_factor(rng, cond.launch_cov)
        e = None
        for j, p in enumerate(launch.passes):
            z = math.log(lognormal_factor(rng, cond.pass_cov))
            e = z if e is None else cond.ar1 * e + math.sqrt(1.0 - cond.ar1 ** 2) * z
            tf = lf * math.exp(e) * (1.0 + cond.drift / 100.0) ** t * (1.0 + (cond.cold / 100.0 if j == 0 else 0.0))
            t += 1
            if rng.random() < cond.missing:
                continue
            if launch.mode == "B":
                tf /= 1.0 + effect
            row = {"launch": launch.index, "mode": launch.mode, "repeat": p.repeat, "concurrency": 8,
                   "verdict": "ok", "requests_ok": 40, "output_tps": 85.0 / tf,
                   "steady_output_tps": 86.0 / tf * math.exp(rng.gauss(0.0, cond.est_sd))}
            for m, (base, slope, resid) in metrics.items():
                row[m] = base * tf ** slope * math.exp(rng.gauss(0.0, resid))
            rows[launch.mode].append(row)
    return rows["A"], rows["B"]


def fixed_rates(order: str, launches: int, repeats: int, cond: Condition, metrics, n: int, rng) -> dict:
    aa_p = aa_t = aa_eq = ab5 = ab10 = cover = 0
    for _ in range(n):
        rows = compare(*campaign_rows(order, launches, repeats, cond, metrics, 0.0, rng), margin_pct=MARGIN)
        aa_p += rows[0].verdict in PLAIN
        aa_t += any(r.verdict in PLAIN for r in rows)
        aa_eq += kind(rows[0].verdict) == "equivalent"
        for eff in (0.05, 0.10):
            rows = compare(*campaign_rows(order, launches, repeats, cond, metrics, eff, rng), margin_pct=MARGIN)
            d = rows[0].delta
            if eff == 0.05:
                ab5 += rows[0].verdict == BETTER
                cover += d.ci_low_pct is not None and d.ci_low_pct <= 5.0 <= d.ci_high_pct
            else:
                ab10 += rows[0].verdict == BETTER
    return {"order": order, "launches": launches, "repeats": repeats, "aa_primary": aa_p / n, "aa_table": aa_t / n,
            "aa_equivalent": aa_eq / n, "detect5": ab5 / n, "detect10": ab10 / n, "coverage": cover / n}


# ---- 3. sequential ------------------------------------------------------------------------------

def seed_costs():
    from slurm_ab.ab_stats.planner import Costs, Runs
    from slurm_ab.model.duration import Figure, History, time_model
    from slurm_ab.model.sources import Sources, load_experiment
    exp = load_experiment(Sources("example", (), ("paths.results=/nonexistent-results",)), "tp32")
    ab = ("tp32", "tp32-dflash")
    tm = time_model(exp, ab, History(), Figure(900.0, "stated"), Figure(300.0, "stated"))
    return Costs(tm, Runs(ab, (8,), 40), 8, None)


def planned_max(cond: Condition, costs) -> tuple[int, int]:
    """(blocks, passes per launch) of the sequential design the planner sizes to detect 5 % at
    80 % under the condition's noise (stated, so exact): the maximum a user would submit."""
    from slurm_ab.ab_stats.planner import Noise, Target, plan
    n = Noise(cond.launch_cov, math.hypot(cond.pass_cov, cond.est_sd), cond.ar1, cond.drift)
    p = plan(n, costs, Target(detect_pct=5.0), campaigns=0, sequential=True)
    return max(2, math.ceil(p.design.launches / 2)), p.design.repeats


def sequential_rates(blocks: int, repeats: int, cond: Condition, metrics, n: int, rng, costs) -> dict:
    from slurm_ab.ab_stats.planner import Design
    from slurm_ab.ab_stats.sequential import critical_table
    b = critical_table(blocks, 4 * blocks)
    spec = {"critical": [list(r) for r in b.critical], "blocks": [()] * blocks, "margin_pct": MARGIN,
            "better": "higher", "log": True}
    hours = [Design(2 * k, repeats).node_hours(costs) for k in range(1, blocks + 1)]

    def run(effect: float):
        a, bb = campaign_rows("counterbalanced", 2 * blocks, repeats, cond, metrics, effect, rng)
        means: dict = {}
        for r in a + bb:
            means.setdefault((r["launch"], r["mode"]), []).append(math.log(r["steady_output_tps"]))
        units = sorted((la, m == "B", sum(v) / len(v)) for (la, m), v in means.items())
        for k in range(1, blocks + 1):
            out = looks.decide([u for u in units if u[0] <= 4 * k], k, spec)
            if out["decision"] != looks.CONTINUE:
                return k, out
        return blocks, out

    aa = [run(0.0) for _ in range(n)]
    ab = [run(0.10) for _ in range(n)]
    cover = sum(1 for _, o in ab if o["low_pct"] is not None and o["low_pct"] <= 10.0 <= o["high_pct"]) / n
    return {"blocks": blocks, "repeats": repeats,
            "aa_false": sum(1 for _, o in aa if o["decision"] in PLAIN) / n,
            "aa_equivalent": sum(1 for _, o in aa if o["decision"] == "equivalent") / n,
            "aa_expected_share": sum(hours[k - 1] for k, _ in aa) / n / hours[-1],
            "ab10_better": sum(1 for _, o in ab if o["decision"] == BETTER) / n,
            "ab10_expected_share": sum(hours[k - 1] for k, _ in ab) / n / hours[-1],
            "ab10_coverage": cover, "max_node_hours": hours[-1]}


# ---- 3b. a prior for the first look: the pilot's launch-mean variance pooled into every look ------

PRIOR_GUARDS = (None, 0.10, 0.25, 0.50)     # None: no guard (the prior always pooled)
PRIOR_SPENDINGS = ("power-2", "power-1")


def pilot_pool(cond: Condition, metrics, pilots: int, rng, repeats: int) -> list[tuple[float, int]]:
    """(launch-mean variance at `repeats` passes per launch, df) of simulated 4 x 2 pilots under
    `cond`, as --prior-from computes them: components + serial -> planner.pilot_noise (AR(1) stated,
    since 2 passes per launch cannot estimate it) -> Noise.launch_var."""
    from slurm_ab.ab_stats.components import components, serial
    from slurm_ab.ab_stats.planner import pilot_noise
    out = []
    while len(out) < pilots:
        a, b = campaign_rows("counterbalanced", 4, 2, cond, metrics, 0.0, rng)
        comp, ser = components(a + b, "steady_output_tps"), serial(a + b, "steady_output_tps")
        if comp.launch_cov is None or comp.pass_cov is None or not comp.launch_df:
            continue
        n = pilot_noise(comp, ser, ar1=cond.ar1)
        out.append((n.launch_var(repeats), comp.launch_df))
    return out


def _units(blocks: int, repeats: int, cond: Condition, metrics, effect: float, rng) -> list:
    a, bb = campaign_rows("counterbalanced", 2 * blocks, repeats, cond, metrics, effect, rng)
    means: dict = {}
    for r in a + bb:
        means.setdefault((r["launch"], r["mode"]), []).append(math.log(r["steady_output_tps"]))
    return sorted((la, m == "B", sum(v) / len(v)) for (la, m), v in means.items())


def _path(units, blocks: int, spec: dict):
    """(look that decided, its fields) of one campaign through the stop rule."""
    out = None
    for k in range(1, blocks + 1):
        out = looks.decide([u for u in units if u[0] <= 4 * k], k, spec)
        if out["decision"] != looks.CONTINUE:
            return k, out
    return blocks, out


def prior_rates(cond: Condition, metrics, n: int, pilots: int, rng, costs, spending: str = SPENDING_DEFAULT) -> dict:
    """The sequential design of section 3 without a prior and with one from a 4 x 2 pilot: right,
    its variance 2x too small and 2x too large, and pilots of another day (launch CoV 3x smaller,
    3x larger than the campaign's); each guard level (None: pooled always) on the same campaigns."""
    from slurm_ab.ab_stats.planner import Design
    from slurm_ab.ab_stats.sequential import critical_table, prior_spec
    blocks, repeats = planned_max(cond, costs)
    pools = {"pilot": pilot_pool(cond, metrics, pilots, rng, repeats)}
    for name, f in (("other day, launch CoV / 3", 1 / 3), ("other day, launch CoV x 3", 3.0)):
        day = Condition(cond.launch_cov * f, cond.pass_cov, cond.ar1, cond.drift, cond.cold, cond.missing, cond.est_sd)
        pools[name] = pilot_pool(day, metrics, pilots, rng, repeats)
    scenarios = {"none": None, "pilot": ("pilot", 1.0), "pilot variance x 0.5": ("pilot", 0.5),
                 "pilot variance x 2": ("pilot", 2.0), "other day, launch CoV / 3": ("other day, launch CoV / 3", 1.0),
                 "other day, launch CoV x 3": ("other day, launch CoV x 3", 1.0)}
    max_df0 = max(df for pool in pools.values() for _, df in pool)
    b = critical_table(blocks, 4 * blocks + max_df0, name=spending)
    base = {"critical": [list(r) for r in b.critical], "blocks": [()] * blocks, "margin_pct": MARGIN,
            "better": "higher", "log": True}
    f_up = {(df, g): prior_spec(1.0, df, 4 * blocks, g if g is not None else 1e-12)["f_upper"]
            for df in {d for pool in pools.values() for _, d in pool} for g in PRIOR_GUARDS}
    hours = [Design(2 * k, repeats).node_hours(costs) for k in range(1, blocks + 1)]
    cells: dict = {}
    for effect in (0.0, 0.10):
        for _ in range(n):
            units = _units(blocks, repeats, cond, metrics, effect, rng)
            for sc, how in scenarios.items():
                guards = (None,) if how is None else PRIOR_GUARDS
                if how is not None:
                    v, df = rng.choice(pools[how[0]])
                for g in guards:
                    spec = base if how is None else dict(base, prior={"variance": v * how[1], "df": df,
                                                                      "f_upper": f_up[(df, g)]})
                    k, out = _path(units, blocks, spec)
                    c = cells.setdefault((sc, g, effect), {"false": 0, "eq": 0, "hours": 0.0, "better": 0, "cover": 0,
                                                           "used1": 0})
                    c["false"] += out["decision"] in PLAIN
                    c["eq"] += out["decision"] == "equivalent"
                    c["better"] += out["decision"] == BETTER
                    c["hours"] += hours[k - 1] / hours[-1]
                    lo, hi = out["low_pct"], out["high_pct"]
                    c["cover"] += lo is not None and lo <= effect * 100 <= hi
                    c["used1"] += looks.decide([u for u in units if u[0] <= 4], 1, spec).get("prior") == "used"
    rows = []
    for sc, how in scenarios.items():
        for g in ((None,) if how is None else PRIOR_GUARDS):
            aa, ab = cells[(sc, g, 0.0)], cells[(sc, g, 0.10)]
            pool = pools[how[0]] if how else []
            rows.append({"prior": sc, "guard": g, "aa_false": aa["false"] / n, "aa_equivalent": aa["eq"] / n,
                         "aa_expected_share": aa["hours"] / n, "ab10_better": ab["better"] / n,
                         "ab10_expected_share": ab["hours"] / n, "ab10_coverage": ab["cover"] / n,
                         "aa_coverage": aa["cover"] / n,
                         "prior_used_look1": (aa["used1"] + ab["used1"]) / (2 * n) if how else None,
                         "prior_over_truth": (sum(v for v, _ in pool) / len(pool) * how[1] / _true_var(cond, repeats)
                                              if how else None)})
    return {"blocks": blocks, "repeats": repeats, "spending": spending, "max_node_hours": hours[-1],
            "first_look_share": hours[0] / hours[-1],
            "rows": rows}


PRIOR_NAMES = ("none", "pilot", "pilot variance x 0.5", "pilot variance x 2", "other day, launch CoV / 3",
               "other day, launch CoV x 3")


def prior_tables(pri: list) -> str:
    """Section 5 in short (docs/statistics.md): per design and spending, each prior at the shipped
    guard: A/A better/worse, +10% node-hours / max, the lower coverage (A/A, +10%); then the guard
    levels where a prior is too small."""
    out = ["| CoV | design | spending | first look / max | measure | " + " | ".join(PRIOR_NAMES) + " |",
           "|---|---|---|---:|---|" + "---:|" * len(PRIOR_NAMES)]
    for p in pri:
        rows = {r["prior"]: r for r in p["rows"] if r["guard"] in (None, PRIOR_GUARD)
                and (r["prior"] == "none" or r["guard"] == PRIOR_GUARD)}
        lc = ", ".join(p["condition"].split(", ")[:2])
        head = f"| {lc} | {p['blocks']} x {p['repeats']} | {p['spending']} | {p['first_look_share']:.0%} |"
        for label, f in (("A/A better/worse", lambda r: f"{r['aa_false']:.1%}"),
                         ("+10% node-hours / max", lambda r: f"{r['ab10_expected_share']:.0%}"),
                         ("coverage (lower of A/A, +10%)", lambda r: f"{min(r['aa_coverage'], r['ab10_coverage']):.1%}")):
            out.append(f"{head} {label} | " + " | ".join(f(rows[n]) for n in PRIOR_NAMES) + " |")
            head = "| | | | |"
    out += ["", "| CoV | design | spending | prior | guard off | 0.10 | 0.25 | 0.50 |",
            "|---|---|---|---|---:|---:|---:|---:|"]
    for p in pri:
        lc = ", ".join(p["condition"].split(", ")[:2])
        for name, what, f in (("pilot", "+10% node-hours / max", lambda r: f"{r['ab10_expected_share']:.0%}"),
                              ("pilot variance x 0.5", "A/A better/worse", lambda r: f"{r['aa_false']:.1%}"),
                              ("other day, launch CoV / 3", "A/A better/worse", lambda r: f"{r['aa_false']:.1%}")):
            by = {r["guard"]: r for r in p["rows"] if r["prior"] == name}
            out.append(f"| {lc} | {p['blocks']} x {p['repeats']} | {p['spending']} | {name}: {what} | "
                       + " | ".join(f(by[g]) for g in PRIOR_GUARDS) + " |")
    return "\n".join(out)


# ---- 6. the planner's sequential design priced with a prior ------------------------------------

LOCAL = (0.0027, 0.0737)    # the local cluster's steady TPS (docs/campaigns.md): estimator noise included


def planner_prior_rates(cond: Condition, metrics, n: int, rng, costs, spending: str, planner_campaigns: int) -> dict:
    """The designs plan() picks for 5 % at 80 % without and with a right prior (the true
    launch-mean variance at the design's passes, df 5), then `n` campaigns of each at A/A and +10 %
    through looks.decide with rule_spec's spec: expected node-hours / max with and without the
    prior (the same campaigns), A/A better/worse with it."""
    from slurm_ab.ab_stats.planner import Design, Noise, PilotPrior, Target, plan
    from slurm_ab.ab_stats.sequential import rule_spec
    noise = Noise(cond.launch_cov, math.hypot(cond.pass_cov, cond.est_sd), cond.ar1, cond.drift)
    prior = PilotPrior("pilot", Noise(noise.launch_cov, noise.pass_cov, noise.ar1, launch_df=5, pilot_repeats=2),
                       "right pilot")
    out = {"spending": spending, "cov": f"launch {cond.launch_cov:.2%}, pass {cond.pass_cov:.2%}"
           + ("" if cond.ar1 or cond.drift else " (AR(1) 0, no drift, cold pass or gaps)")}
    for key, pr in (("plain", None), ("prior", prior)):
        pl = plan(noise, costs, Target(detect_pct=5.0), campaigns=planner_campaigns, sequential=True,
                  margin_pct=MARGIN, spending=spending, prior=pr)
        d = pl.design
        if d is None:           # the planner found no design (its reason goes into the table)
            out[key] = {"reason": pl.reason}
            continue
        blocks = d.launches // 2
        hours = [Design(2 * k, d.repeats).node_hours(costs) for k in range(1, blocks + 1)]
        specs = {use: {**rule_spec(blocks, spending, prior.at(d.repeats) if use else None), "blocks": [()] * blocks,
                       "margin_pct": MARGIN, "better": "higher", "log": True} for use in (False, True)}
        cell = {use: {"ab10_share": 0.0, "aa_share": 0.0, "aa_false": 0.0} for use in ("without", "with")}
        for effect in (0.0, 0.10):
            for _ in range(n):
                units = _units(blocks, d.repeats, cond, metrics, effect, rng)
                for use, spec in specs.items():
                    k, o = _path(units, blocks, spec)
                    c = cell["with" if use else "without"]
                    c["ab10_share" if effect else "aa_share"] += hours[k - 1] / hours[-1] / n
                    c["aa_false"] += (not effect and o["decision"] in PLAIN) / n
        out[key] = {"blocks": blocks, "repeats": d.repeats, "max_node_hours": hours[-1], **cell}
    return out


def planner_prior_table(ppr: list) -> str:
    """Section 6 (docs/statistics.md): per condition and spending, the planner's design without and
    with the prior, +10% and A/A node-hours / max without / with it, A/A better/worse with it."""
    out = ["| CoV | spending | planner's design | max node-hours | +10% node-hours / max: without / with prior | "
           "A/A node-hours / max: without / with | A/A better/worse with prior |", "|---|---|---|---:|---:|---:|---:|"]
    for r in ppr:
        lc = r["cov"]
        for key, label in (("plain", "without a prior"), ("prior", "with the prior")):
            d = r[key]
            if "reason" in d:
                out.append(f"| {lc} | {r['spending']} | {label}: no design ({d['reason']}) | - | - | - | - |")
                lc = ""
                continue
            out.append(f"| {lc} | {r['spending']} | {label}: {d['blocks']} x {d['repeats']} | {d['max_node_hours']:.0f} | "
                       f"{d['without']['ab10_share']:.0%} / {d['with']['ab10_share']:.0%} | "
                       f"{d['without']['aa_share']:.0%} / {d['with']['aa_share']:.0%} | {d['with']['aa_false']:.1%} |")
            lc = ""
    return "\n".join(out)


def _true_var(cond: Condition, repeats: int) -> float:
    """The campaign's true launch-mean variance (log scale) at `repeats` passes per launch."""
    from slurm_ab.ab_stats.planner import Noise
    return Noise(cond.launch_cov, math.hypot(cond.pass_cov, cond.est_sd), cond.ar1).launch_var(repeats)


# ---- 4. the planner from simulated pilots ------------------------------------------------------

def planner_rates(cond: Condition, metrics, pilots: int, rng, costs, truth_campaigns: int) -> dict:
    from slurm_ab.ab_stats.components import components, serial
    from slurm_ab.ab_stats.planner import Target, pilot_noise, plan
    powers, designs, cache = [], [], {}
    out_of_reach = 0
    for _ in range(pilots):
        a, b = campaign_rows("counterbalanced", 4, 2, cond, metrics, 0.0, rng)
        rows = a + b
        comp, ser = components(rows, "steady_output_tps"), serial(rows, "steady_output_tps")
        if comp.launch_cov is None or comp.pass_cov is None or not comp.launch_df:
            continue
        # AR(1) cannot be estimated from 2 passes per launch: a user who measured it states it (--ar1)
        p = plan(pilot_noise(comp, ser, ar1=cond.ar1), costs, Target(detect_pct=5.0), campaigns=0)
        if p.design is None:
            out_of_reach += 1
            continue
        d = p.design
        key = (d.launches, d.repeats)
        if key not in cache:
            hits = 0
            for _ in range(truth_campaigns):
                ra, rb = campaign_rows("counterbalanced", d.launches, d.repeats, cond, metrics, 0.05, rng)
                v = delta("steady_output_tps", [r["steady_output_tps"] for r in ra],
                          [r["steady_output_tps"] for r in rb], a_launches=[r["launch"] for r in ra],
                          b_launches=[r["launch"] for r in rb]).verdict
                hits += v == BETTER
            cache[key] = hits / truth_campaigns
        powers.append(cache[key])
        designs.append(f"{d.launches}x{d.repeats}")
    powers.sort()
    q = lambda f: powers[min(len(powers) - 1, int(f * len(powers)))]  # noqa: E731
    return {"pilots": len(powers), "out_of_reach": out_of_reach, "median_power": q(0.5), "p10_power": q(0.1),
            "below_70": sum(1 for x in powers if x < 0.70) / len(powers),
            "designs": {k: designs.count(k) for k in sorted(set(designs))}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=2000, help="simulated campaigns per cell")
    ap.add_argument("--pilots", type=int, default=100)
    ap.add_argument("--emulator-seeds", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=0,
                    help="sequential designs' most blocks (0: the planner's design for 5%% at 80%% per condition)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run: few campaigns, one condition")
    ap.add_argument("--sections", default="123456", help="which sections to run (e.g. 34)")
    ap.add_argument("--prior-pilots", type=int, default=60, help="simulated pilots per prior (section 5)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.campaigns, a.pilots, a.emulator_seeds = min(a.campaigns, 60), min(a.pilots, 8), min(a.emulator_seeds, 6)
    rng = random.Random(a.seed)
    t0 = time.perf_counter()
    noise = load_costs(None).noise
    est = estimator_noise(a.emulator_seeds)
    est_sd = est["variants"][0]["added_sd"]
    metrics = metric_noise(a.emulator_seeds)
    costs = seed_costs()
    conds = [Condition(lc, pc, est_sd=est_sd) for lc in LAUNCH_COVS for pc in PASS_COVS]
    if a.quick:
        conds = [Condition(0.015, 0.074, est_sd=est_sd)]
    sec = a.sections
    fixed = [dict(fixed_rates("counterbalanced", 4, 2, c, metrics, a.campaigns, rng), condition=c.name())
             for c in conds] if "2" in sec else []
    blocked = fixed_rates("blocked", 1, 8, conds[-1], metrics, a.campaigns, rng) if "2" in sec else None
    seq = [dict(sequential_rates(*(planned_max(c, costs) if a.blocks == 0 else (a.blocks, 2)), c, metrics,
                                 a.campaigns, rng, costs), condition=c.name()) for c in conds] if "3" in sec else []
    pl = [dict(planner_rates(c, metrics, a.pilots, rng, costs, max(200, a.campaigns // 5)), condition=c.name())
          for c in conds if c.pass_cov == PASS_COVS[-1] or a.quick] if "4" in sec else []
    # 5: where a maximum of 2-5 blocks (pass CoV 1.5 %) cannot stop at its first look without a prior
    pri = [dict(prior_rates(c, metrics, a.campaigns, a.prior_pilots, rng, costs, sp), condition=c.name())
           for sp in PRIOR_SPENDINGS for c in conds if c.pass_cov == PASS_COVS[0] or a.quick] if "5" in sec else []
    # 6: the planner's own choice with and without a prior, the local cluster's noise first
    pp_conds = ([Condition(*LOCAL, ar1=0.0, drift=0.0, cold=0.0, missing=0.0), Condition(*LOCAL)] + conds
                if not a.quick else conds)
    ppr = [dict(planner_prior_rates(c, metrics, a.campaigns, rng, costs, sp, max(200, a.campaigns // 2)),
                condition=c.name()) for c in pp_conds for sp in PRIOR_SPENDINGS] if "6" in sec else []
    shipped = [(p, r) for p in pri for r in p["rows"] if r["guard"] in (None, PRIOR_GUARD) and
               (r["prior"] == "none" or r["guard"] == PRIOR_GUARD)]
    elapsed = time.perf_counter() - t0
    checks = {
        "fixed A/A primary <= 7.5%": all(r["aa_primary"] <= 0.075 for r in fixed),
        "fixed A/A whole table <= 10%": all(r["aa_table"] <= 0.10 for r in fixed),
        "fixed coverage >= 93%": all(r["coverage"] >= 0.93 for r in fixed),
        "blocked prints no plain verdict": blocked is None or (blocked["aa_primary"] == 0 and blocked["detect5"] == 0),
        "sequential A/A better/worse <= 7.5% (every look)": all(r["aa_false"] <= 0.075 for r in seq),
        "sequential coverage >= 93%": all(r["ab10_coverage"] >= 0.93 for r in seq),
        # a maximum of 2-5 blocks has no early look that can stop (the first has 1 degree of freedom):
        # the target applies where the planner's 5 % design has 6 blocks or more
        "sequential +10% within half the max node-hours (6+ blocks)": all(
            r["ab10_expected_share"] <= 0.5 for r in seq if r["blocks"] >= 6),
        "prior (every prior, guard as shipped): A/A better/worse <= 7.5% (every look)": all(
            r["aa_false"] <= 0.075 for _, r in shipped),
        "prior (every prior, guard as shipped): coverage >= 93% (+10% and A/A)": all(
            r["ab10_coverage"] >= 0.93 and r["aa_coverage"] >= 0.93 for _, r in shipped),
        # the claim docs/statistics.md makes: with the pilot's prior and power-1 spending a +10% change
        # stops within half the maximum node-hours at 5-block maxima; at 2-4 blocks it does not
        # (a 2-block maximum's first look alone costs 51%: the preflight and the first block), which
        # the run prints as a known gap below
        "prior (right pilot, power-1): +10% within half the max node-hours (5+ blocks)": all(
            r["ab10_expected_share"] <= 0.5 for p, r in shipped if r["prior"] == "pilot" and
            p["blocks"] >= 5 and p["spending"] == "power-1"),
        "planner with a prior: A/A better/worse <= 7.5% (every look)": all(
            r[d]["with"]["aa_false"] <= 0.075 for r in ppr for d in ("plain", "prior") if "reason" not in r[d]),
        "planner median true power >= 80%": all(r["median_power"] >= 0.80 for r in pl),
        "planner >= 70% in 9 of 10 pilots": all(r["below_70"] <= 0.10 for r in pl),
    }
    ok = all(checks.values())
    result = {"campaigns": a.campaigns, "pilots": a.pilots, "seed": a.seed, "seconds": elapsed,
              "emulator_noise": {"launch_cv": noise.launch_cv, "pass_cv": noise.pass_cv}, "estimator": est,
              "fixed": fixed, "blocked": blocked, "sequential": seq, "planner": pl, "prior": pri,
              "planner_prior": ppr, "checks": checks,
              "targets_met": ok}
    if a.json:
        print(json.dumps(result, indent=2))
        return 0 if ok else 1
    print(f"{a.campaigns} campaigns per cell, {a.pilots} pilots; {elapsed:.0f} s\n")
    print(f"1. steady-state estimator (tp32, C=8, 16K -> 512; {a.emulator_seeds} simulated launches; emulator noise "
          f"launch {noise.launch_cv:.1%}, pass {noise.pass_cv:.1%}); true service rate {est['true_rate']:.2f} tok/s\n")
    print("| prompts | window ratio | bias vs true rate | steady CoV | makespan CoV (bias) | injected CoV | "
          "added by the estimator (sd) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for v in est["variants"]:
        print(f"| {v['prompts']} | {v['ratio']:g} | {v['bias_pct']:+.2f}% | {v['steady_cov']:.2%} | "
              f"{v['makespan_cov']:.2%} ({v['makespan_bias_pct']:+.1f}%) | {v['injected_cov']:.2%} | "
              f"{v['added_sd']:.2%} |")
    print("\n2. fixed designs, 4 x 2 counterbalanced (primary: steady TPS with the estimator's noise)\n")
    print("| condition | A/A primary | A/A whole table | A/A equivalent ±3% | +5% detected | +10% detected | "
          "coverage (+5%) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in fixed:
        print(f"| {r['condition']} | {r['aa_primary']:.1%} | {r['aa_table']:.1%} | {r['aa_equivalent']:.1%} | "
              f"{r['detect5']:.1%} | {r['detect10']:.1%} | {r['coverage']:.1%} |")
    if blocked:
        print(f"\nblocked (1 launch x 8 passes per mode, {conds[-1].name()}): plain A/A verdicts "
              f"{blocked['aa_primary']:.1%}, plain +5% verdicts {blocked['detect5']:.1%}\n")
    print("3. sequential: at most the planner's design for 5% at 80% (blocks x passes per launch), a look "
          "after each block\n")
    print("| condition | design | A/A better/worse (all looks) | A/A equivalent ±3% | A/A node-hours / max | +10% better | "
          "+10% node-hours / max | coverage (+10%) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in seq:
        print(f"| {r['condition']} | {r['blocks']} x {r['repeats']} | {r['aa_false']:.1%} | {r['aa_equivalent']:.1%} | {r['aa_expected_share']:.0%} | "
              f"{r['ab10_better']:.1%} | {r['ab10_expected_share']:.0%} | {r['ab10_coverage']:.1%} |")
    if seq:
        print("(node-hours at the seed's sizes: load 15 min, pass 5 min, 8 nodes; max: " +
              ", ".join(f"{r['max_node_hours']:.0f}" for r in seq) + ")\n")
    print("4. planner from simulated 4 x 2 pilots (detect 5% at 80%), true power of its design\n")
    print("| condition | pilots planned | out of reach | median true power | 10th percentile | below 70% | designs |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in pl:
        print(f"| {r['condition']} | {r['pilots']} | {r['out_of_reach']} | {r['median_power']:.0%} | {r['p10_power']:.0%} | "
              f"{r['below_70']:.0%} | {', '.join(f'{k}: {v}' for k, v in r['designs'].items())} |")
    if pri:
        print("\n5. a prior for the first look (--prior-from): the pilot's launch-mean variance pooled into every look; "
              f"guard: one-sided F test at {PRIOR_GUARD:g} (shipped), other levels on the same campaigns\n")
        print("| condition | spending | design | first look / max | prior | prior / true variance | guard | "
              "A/A better/worse (all looks) | A/A equivalent ±3% | A/A coverage | +10% better | +10% node-hours / max | "
              "coverage (+10%) | prior pooled at look 1 |")
        print("|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for p in pri:
            for r in p["rows"]:
                ratio = "-" if r["prior_over_truth"] is None else f"{r['prior_over_truth']:.2f}"
                used = "-" if r["prior_used_look1"] is None else f"{r['prior_used_look1']:.0%}"
                guard = "-" if r["prior"] == "none" else "off" if r["guard"] is None else f"{r['guard']:g}"
                print(f"| {p['condition']} | {p['spending']} | {p['blocks']} x {p['repeats']} | "
                      f"{p['first_look_share']:.0%} | {r['prior']} | {ratio} | {guard} | {r['aa_false']:.1%} | "
                      f"{r['aa_equivalent']:.1%} | {r['aa_coverage']:.1%} | {r['ab10_better']:.1%} | "
                      f"{r['ab10_expected_share']:.0%} | {r['ab10_coverage']:.1%} | {used} |")
        print("\nin short (docs/statistics.md):\n")
        print(prior_tables(pri))
    if ppr:
        print("\n6. the planner's sequential design for 5% at 80% priced with a prior (plan --sequential "
              "--prior-from; a right prior: the true launch-mean variance, df 5), simulated at +10% and A/A; "
              "node-hours / max on the same campaigns without / with the prior\n")
        print(planner_prior_table(ppr))
    print()
    for name, passed in checks.items():
        print(f"{'met' if passed else 'NOT MET'}: {name}")
    gap = [(p, r) for p, r in shipped if r["prior"] == "pilot" and r["ab10_expected_share"] > 0.5]
    if gap:       # issue 30's target at 2-5 block maxima: said, with its figures, not hidden
        print("known gap (issue 30: +10% within half the max node-hours, right pilot): " + "; ".join(
            f"{p['blocks']} blocks {p['spending']}: {r['ab10_expected_share']:.0%} (first look alone "
            f"{p['first_look_share']:.0%})" for p, r in gap))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
