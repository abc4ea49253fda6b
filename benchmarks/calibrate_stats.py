"""Calibrate the A/B statistics on simulated campaigns drawn from the emulator's noise model.

``python benchmarks/calibrate_stats.py [--campaigns 5000] [--repeats 5] [--cov 0.02]
[--effect 5] [--seed 1] [--json]``

No cluster, no emulator process: each simulated campaign draws per-pass output throughputs from
``slurm_ab_testbed.emulator.noise.pass_values`` (the same launch/pass factors the emulator applies
to its forwards) and runs ``slurm_ab.ab_stats.delta`` on them, exactly as ``slurm-ab compare``
does. Reported per scenario and per number of repeats R:

- A/A: both modes identical; the share of campaigns called significant (target: 2.5-7.5 % at 95 %);
- A/B: B's true throughput +effect %; the share called 'better' (power; target >= 80 % at the
  default repeats) and the share whose interval contains the true change (coverage).

Scenarios (total per-pass CoV = --cov in each):
- within-launch: all noise is pass-to-pass (launch_cv = 0), one launch per mode (blocked);
- interleaved: noise split between launch and pass; every pass in its own launch (A B A B ...);
- blocked+launch: the same split, but all passes of a mode in one launch: repeats do not see the
  launch-to-launch part, so the interval is too narrow (why `compare` says what it includes).
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

from slurm_ab.ab_stats import BETTER, SAME, WORSE, delta  # noqa: E402
from slurm_ab_testbed.emulator.noise import NoiseConfig, pass_values  # noqa: E402

BASE_TPS = 85.99   # the seed's tp32 output throughput (tok/s); the value itself does not matter


def scenarios(cov: float) -> dict[str, tuple[NoiseConfig, bool]]:
    """name -> (noise, interleaved). The launch/pass split keeps the total per-pass CoV ~ cov."""
    half = math.sqrt(cov * cov / 2.0)
    return {
        "within-launch": (NoiseConfig(launch_cv=0.0, pass_cv=cov), False),
        "interleaved": (NoiseConfig(launch_cv=half, pass_cv=half), True),
        "blocked+launch": (NoiseConfig(launch_cv=half, pass_cv=half), False),
    }


def campaign(cfg: NoiseConfig, interleaved: bool, repeats: int, effect_pct: float,
             rng: random.Random):
    def side(base):
        if interleaved:
            return pass_values(cfg, rng, base, 1, launches=repeats)
        return pass_values(cfg, rng, base, repeats, launches=1)
    a = side(BASE_TPS)
    b = side(BASE_TPS * (1.0 + effect_pct / 100.0))
    return delta("output_tps", a, b)


def rates(cfg, interleaved, repeats, effect_pct, campaigns, rng) -> dict:
    aa = [campaign(cfg, interleaved, repeats, 0.0, rng) for _ in range(campaigns)]
    ab = [campaign(cfg, interleaved, repeats, effect_pct, rng) for _ in range(campaigns)]
    fp = sum(d.verdict in (BETTER, WORSE) for d in aa) / campaigns
    power = sum(d.verdict == BETTER for d in ab) / campaigns
    covered = sum(d.ci_low_pct <= effect_pct <= d.ci_high_pct for d in ab) / campaigns
    aa_covered = sum(d.ci_low_pct <= 0.0 <= d.ci_high_pct for d in aa) / campaigns
    assert all(d.verdict in (BETTER, WORSE, SAME) for d in aa + ab)
    return {"repeats": repeats, "aa_significant": fp, "ab_detected": power,
            "ab_coverage": covered, "aa_coverage": aa_covered}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5, help="the default repeats to check")
    ap.add_argument("--sweep", default="2,3,4,5,6", help="repeats to tabulate")
    ap.add_argument("--cov", type=float, default=0.02, help="total per-pass CoV")
    ap.add_argument("--effect", type=float, default=5.0, help="planted throughput change, percent")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    sweep = sorted({int(x) for x in a.sweep.split(",")} | {a.repeats})
    t0 = time.perf_counter()
    results = {}
    for name, (cfg, interleaved) in scenarios(a.cov).items():
        results[name] = [rates(cfg, interleaved, r, a.effect, a.campaigns, rng) for r in sweep]
    elapsed = time.perf_counter() - t0
    default = {r["repeats"]: r for r in results["within-launch"]}[a.repeats]
    inter = {r["repeats"]: r for r in results["interleaved"]}[a.repeats]
    ok = all(0.025 <= x["aa_significant"] <= 0.075 and x["ab_detected"] >= 0.80
             for x in (default, inter))
    if a.json:
        print(json.dumps({"campaigns": a.campaigns, "cov": a.cov, "effect_pct": a.effect,
                          "default_repeats": a.repeats, "seed": a.seed, "seconds": elapsed,
                          "targets_met": ok, "scenarios": results}, indent=2))
        return 0 if ok else 1
    print(f"{a.campaigns} campaigns per cell, per-pass CoV {a.cov:.1%}, planted change "
          f"{a.effect:+.1f}% (output TPS), Welch t on log values, 95%; {elapsed:.1f} s\n")
    print("| scenario | repeats | A/A called significant | +5% detected | CI covers +5% | CI covers 0 (A/A) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        for r in rows:
            mark = " *" if r["repeats"] == a.repeats else ""
            print(f"| {name} | {r['repeats']}{mark} | {r['aa_significant']:.1%} | "
                  f"{r['ab_detected']:.1%} | {r['ab_coverage']:.1%} | {r['aa_coverage']:.1%} |")
    print(f"\n* default repeats. Targets (A/A 2.5-7.5 %, detection >= 80 % at R={a.repeats}, "
          f"within-launch and interleaved): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
