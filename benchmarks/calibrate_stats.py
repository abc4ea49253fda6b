"""Calibrate the A/B statistics on simulated campaigns under noise the method does not assume.

``python benchmarks/calibrate_stats.py [--campaigns 2000] [--launches 4 --repeats 2] [--ar1 0.3]
[--drift 0.25] [--cold 2] [--effect 5] [--seed 1] [--json]``

No cluster, no emulator process. Each simulated campaign runs the schedule slurm-ab would run
(`campaign.schedule`: counterbalanced, interleaved or blocked) and gives every pass a time factor

    launch factor x pass factor x drift x cold first pass

where launch and pass factors are the emulator's own (``noise.lognormal_factor`` with
``launch_cv``/``pass_cv`` from its costs.toml: 1.5 % each), the pass factors of a launch are made
AR(1)-correlated (rho --ar1; the marginal is unchanged), the drift grows by --drift % per pass
over the job, and the first pass of every launch is --cold % slower. Every metric of the table
follows the time factor with its own per-pass noise, both measured from the emulator's offline
simulator (``simulate(noise_seed=...)``: slope and residual sd of log metric on log duration),
so TTFT p95 from 40 requests is as noisy as the emulator makes it. The rows go through
``ab_stats.family.compare`` exactly as ``slurm-ab compare`` does. Reported per order:

- A/A, primary metric: share of campaigns with a plain better/worse (target 2.5-7.5 % at 95 %);
- A/A, whole table: share with a plain better/worse anywhere (family-wise; target <= 10 %);
- A/A, qualified: share whose verdicts say 'within-launch only' and would have been significant
  (what blocked order used to print as plain verdicts);
- A/B: B's throughput +effect %: share whose primary verdict is a plain 'better' (power), and
  whose interval covers the true change (coverage).

Exit 1 when the default design misses a target, so the calibration can fail.
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

from slurm_ab.ab_stats import BETTER, WORSE  # noqa: E402
from slurm_ab.ab_stats.family import compare  # noqa: E402
from slurm_ab.model.campaign import schedule  # noqa: E402
from slurm_ab_testbed.emulator.costs import load_costs  # noqa: E402
from slurm_ab_testbed.emulator.noise import lognormal_factor  # noqa: E402

PLAIN = (BETTER, WORSE)
# table metric -> the emulator simulator's Result field (ms figures are scaled, the ratio is what counts)
FIELDS = {"output_tps": "output_throughput", "ttft_mean_s": "mean_ttft_ms", "ttft_p95_s": "p95_ttft_ms",
          "tpot_mean_ms": "mean_tpot_ms", "tpot_p95_ms": "p95_tpot_ms", "e2e_mean_s": "mean_e2e_ms",
          "e2e_p95_s": "p95_e2e_ms"}
TP32 = ["--tp-size", "32", "--ep-size", "4", "--model-path", "/m", "--disable-radix-cache",
        "--chunked-prefill-size", "8192"]


def metric_noise(seeds: int) -> dict[str, tuple[float, float, float]]:
    """metric -> (base value, slope on the time factor, own per-pass log-sd), fitted on `seeds`
    noisy launches of tp32 in the emulator's offline simulator (C=8, 40 prompts)."""
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
        if metric == "output_tps":
            slope, resid = -1.0, 0.0        # tokens over the makespan: exactly 1 / time
        else:
            resid = math.sqrt(sum((b - my - slope * (a - mx)) ** 2 for a, b in zip(x, y)) / (len(x) - 2))
        out[metric] = (math.exp(my), slope, resid)
    return out


def campaign_rows(order: str, launches: int, repeats: int, noise, args, metrics, effect: float,
                  rng: random.Random) -> tuple[list, list]:
    """Pass rows of A and B of one simulated campaign (B's throughput x (1 + effect))."""
    sched = schedule(("A", "B"), repeats, (8,), order, False, 40, launches=launches)
    rows = {"A": [], "B": []}
    t = 0
    rho = args.ar1
    for launch in sched.launches:
        lf = lognormal_factor(rng, noise.launch_cv)
        e = None
        for j, p in enumerate(launch.passes):
            z = math.log(lognormal_factor(rng, noise.pass_cv))
            e = z if e is None else rho * e + math.sqrt(1.0 - rho * rho) * z
            tf = lf * math.exp(e) * (1.0 + args.drift / 100.0) ** t * (1.0 + (args.cold / 100.0 if j == 0 else 0.0))
            if launch.mode == "B":
                tf /= 1.0 + effect
            t += 1
            row = {"launch": launch.index, "mode": launch.mode, "repeat": p.repeat, "concurrency": 8,
                   "verdict": "ok", "requests_ok": 40}
            for m, (base, slope, resid) in metrics.items():
                row[m] = base * tf ** slope * math.exp(rng.gauss(0.0, resid))
            rows[launch.mode].append(row)
    return rows["A"], rows["B"]


def rates(order: str, launches: int, repeats: int, noise, args, metrics, rng) -> dict:
    n = args.campaigns
    aa_primary = aa_table = aa_within = ab_plain = ab_cover = 0
    for _ in range(n):
        rows = compare(*campaign_rows(order, launches, repeats, noise, args, metrics, 0.0, rng))
        aa_primary += rows[0].verdict in PLAIN
        aa_table += any(r.verdict in PLAIN for r in rows)
        aa_within += any(r.verdict and r.verdict.split(" (")[0] in PLAIN and "within-launch" in r.verdict
                         for r in rows[:1])
        rows = compare(*campaign_rows(order, launches, repeats, noise, args, metrics, args.effect / 100.0, rng))
        d = rows[0].delta
        ab_plain += rows[0].verdict == BETTER
        ab_cover += d.ci_low_pct is not None and d.ci_low_pct <= args.effect <= d.ci_high_pct
    return {"order": order, "launches": launches, "repeats": repeats, "aa_primary": aa_primary / n,
            "aa_table": aa_table / n, "aa_within_significant": aa_within / n, "ab_detected": ab_plain / n,
            "ab_coverage": ab_cover / n}


def designs(a) -> list[tuple[str, int, int]]:
    """Every order at the default shape; blocked runs as many passes per mode in its one launch."""
    L, k = a.launches, a.repeats
    out = [("counterbalanced", L, k), ("interleaved", L, k), ("blocked", 1, L * k)]
    for extra in a.sweep.split(","):
        if extra:
            el, ek = (int(x) for x in extra.split("x"))
            out.append(("counterbalanced", el, ek))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=2000)
    ap.add_argument("--launches", type=int, default=4, help="launches per mode of the default design")
    ap.add_argument("--repeats", type=int, default=2, help="passes per launch of the default design")
    ap.add_argument("--sweep", default="", help="more counterbalanced designs to tabulate, e.g. 3x2,5x1")
    ap.add_argument("--ar1", type=float, default=0.3)
    ap.add_argument("--drift", type=float, default=0.25, help="percent per pass")
    ap.add_argument("--cold", type=float, default=0.0, help="first pass of a launch slower, percent")
    ap.add_argument("--effect", type=float, default=5.0, help="planted throughput change, percent")
    ap.add_argument("--emulator-seeds", type=int, default=30, help="simulated launches to fit metric noise")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    noise = load_costs(None).noise
    rng = random.Random(a.seed)
    t0 = time.perf_counter()
    metrics = metric_noise(a.emulator_seeds)
    results = [rates(o, L, k, noise, a, metrics, rng) for o, L, k in designs(a)]
    elapsed = time.perf_counter() - t0
    default = results[0]
    blocked = results[2]
    checks = {"default A/A primary in 2.5-7.5%": 0.025 <= default["aa_primary"] <= 0.075,
              "default A/A whole table <= 10%": default["aa_table"] <= 0.10,
              "blocked prints no plain verdict": blocked["aa_primary"] == 0 and blocked["aa_table"] == 0
              and blocked["ab_detected"] == 0}
    ok = all(checks.values())
    if a.json:
        print(json.dumps({"campaigns": a.campaigns, "launch_cv": noise.launch_cv, "pass_cv": noise.pass_cv,
                          "ar1": a.ar1, "drift_pct": a.drift, "cold_pct": a.cold, "effect_pct": a.effect,
                          "seed": a.seed, "seconds": elapsed, "metric_noise": metrics, "checks": checks,
                          "targets_met": ok, "designs": results}, indent=2))
        return 0 if ok else 1
    print(f"{a.campaigns} campaigns per cell; emulator noise launch {noise.launch_cv:.1%}, pass "
          f"{noise.pass_cv:.1%}; AR(1) {a.ar1:g}, drift {a.drift:g}%/pass, cold first pass {a.cold:g}%; "
          f"planted {a.effect:+g}% throughput; {elapsed:.0f} s\n")
    print("per-pass noise of each metric (emulator simulator, beyond the time factor): "
          + ", ".join(f"{m} {r:.1%}" for m, (_, _, r) in metrics.items() if m != "output_tps") + "\n")
    print("| order | launches x passes | A/A primary | A/A whole table | A/A within-launch significant | "
          "+5% detected | CI covers +5% |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['order']} | {r['launches']} x {r['repeats']} | {r['aa_primary']:.1%} | {r['aa_table']:.1%} | "
              f"{r['aa_within_significant']:.1%} | {r['ab_detected']:.1%} | {r['ab_coverage']:.1%} |")
    print()
    for name, passed in checks.items():
        print(f"{'met' if passed else 'NOT MET'}: {name}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
