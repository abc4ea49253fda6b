"""Verdicts that mean what they say (issue 30): equivalence against a margin, families whose
printed intervals agree with their verdicts, descriptive percentiles, confounded jobs."""
from __future__ import annotations

import math
import random

import pytest
from statsmodels.stats.multitest import multipletests

from slurm_ab.ab_stats import delta
from slurm_ab.ab_stats.family import Row, compare, compare_all, holm, holm_levels
from slurm_ab.ab_stats.percentiles import min_requests
from slurm_ab.ab_stats.verdicts import (ACROSS_JOBS, BETTER, DESCRIPTIVE, SAME, WORSE, colour, decide, equivalent,
                                        kind)


def _launch_rows(effect: float, sd: float, launches: int = 4, seed: int = 1, **extra) -> tuple[list, list]:
    rng = random.Random(seed)
    rows = {"A": [], "B": []}
    for i, m in enumerate(("A", "B", "B", "A") * (launches // 2), 1):
        u = rng.gauss(0, sd)
        for r in (1, 2):
            v = 100 * (1 + (effect if m == "B" else 0)) * math.exp(u + rng.gauss(0, sd / 2))
            rows[m].append({"launch": i, "repeat": r, "output_tps": v, "ttft_mean_s": 2.0 * math.exp(rng.gauss(0, 0.05)),
                            "ttft_p95_s": 3.0 * math.exp(rng.gauss(0, 0.05)), **extra})
    return rows["A"], rows["B"]


def test_decide_orders_change_before_equivalence():
    assert decide(0.5, 2.0, "higher", 3) == BETTER             # a real change inside the margin is a change
    assert decide(-2.0, 1.0, "higher", 3) == equivalent(3) == "equivalent within ±3%"
    assert decide(-2.0, 4.0, "higher", 3) == SAME               # neither
    assert decide(-2.0, 1.0, "higher", None) == SAME            # no margin, no equivalence
    assert decide(-2.0, -1.0, "lower", 3) == BETTER
    assert [kind(v) for v in ("better (within-launch only)", "equivalent within ±3% (separate jobs)", SAME,
                              "inconclusive (n=1)", DESCRIPTIVE)] == ["better", "equivalent", "same",
                                                                     "inconclusive", "descriptive"]
    assert colour(BETTER) != colour(WORSE) != colour(equivalent(3))


def test_an_aa_campaign_with_little_noise_is_equivalent_within_the_margin():
    a, b = _launch_rows(0.0, 0.003, launches=8)
    d = delta("output_tps", [r["output_tps"] for r in a], [r["output_tps"] for r in b],
              a_launches=[r["launch"] for r in a], b_launches=[r["launch"] for r in b], margin_pct=3.0)
    assert d.verdict == "equivalent within ±3%" and -3 < d.ci_low_pct < 0 < d.ci_high_pct < 3
    noisy = delta("output_tps", [r["output_tps"] for r in a], [r["output_tps"] * (1 + 0.1 * (i % 2))
                                                               for i, r in enumerate(b)],
                  a_launches=[r["launch"] for r in a], b_launches=[r["launch"] for r in b], margin_pct=3.0)
    assert noisy.verdict in (SAME, BETTER)


def test_holm_levels_make_every_interval_agree_with_its_adjusted_p():
    rng = random.Random(5)
    for i in range(300):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 9))]
        adj, levels = holm(ps), holm_levels(ps)
        if i < 20:      # multipletests runs a full garbage collection per call
            assert adj == pytest.approx(list(multipletests(ps, method="holm")[1]))
        for p, a, lvl in zip(ps, adj, levels):
            assert (a < 0.05) == (p < 1 - lvl)       # rejected exactly when p is below the step's alpha
            assert lvl >= 0.95


def test_secondary_intervals_are_stated_at_their_holm_level_and_agree_with_the_verdict():
    a, b = _launch_rows(0.06, 0.01, launches=8, seed=3)
    for r in b:
        r["ttft_mean_s"] *= 1.2
    rows = compare(a, b, "output_tps", margin_pct=3.0)
    for row in rows:
        d = row.delta
        if row.verdict == DESCRIPTIVE:
            assert d.ci_low_pct is None and d.p_value is None and row.p_holm is None
            continue
        if d.ci_low_pct is None:
            continue
        excludes = d.ci_low_pct > 0 or d.ci_high_pct < 0
        assert excludes == (row.verdict in (BETTER, WORSE)), row
        if row.p_holm is not None:
            assert excludes == (row.p_holm < 0.05) and d.confidence >= 0.95
    assert {r.metric: r.verdict for r in rows}["ttft_p95_s"] == DESCRIPTIVE
    back = [Row.from_dict(r.to_dict()) for r in rows]
    assert [(r.verdict, r.delta.ci_low_pct, r.family) for r in back] == [(r.verdict, r.delta.ci_low_pct, r.family)
                                                                         for r in rows]


def test_several_comparisons_make_their_primaries_one_family():
    pairs = [_launch_rows(0.0, 0.02, launches=4, seed=s) for s in (1, 2, 3)]
    alone = [compare(a, b)[0] for a, b in pairs]
    tables = compare_all(pairs)
    for t, one in zip(tables, alone):
        head = t[0]
        assert head.family == 3 and head.p_holm >= one.delta.p_value
        assert head.delta.ci_high_pct - head.delta.ci_low_pct >= one.delta.ci_high_pct - one.delta.ci_low_pct
    assert compare_all(pairs[:1])[0][0].family == 1


def test_launch_means_exactly_on_a_drift_line_give_no_zero_width_interval():
    pos_a, pos_b = [1, 4, 5], [2, 3, 6]
    a = [100.0 * 1.01 ** p for p in pos_a]
    b = [97.0 * 1.01 ** p for p in pos_b]
    d = delta("output_tps", a, b, a_launches=pos_a, b_launches=pos_b)
    assert d.verdict == "inconclusive (no spread)" and d.ci_low_pct is None


def test_separate_jobs_never_get_a_plain_verdict_unless_asked():
    a, b = _launch_rows(0.2, 0.01, launches=4)
    for r in b:
        r["launch"] -= 0          # two jobs: both sides' launches start at 1
    ja = [dict(r, launch=i // 2 + 1) for i, r in enumerate(a)]
    jb = [dict(r, launch=i // 2 + 1) for i, r in enumerate(b)]
    head = compare(ja, jb, confound=ACROSS_JOBS)[0]
    assert head.verdict == f"{BETTER} ({ACROSS_JOBS})"
    assert compare(ja, jb)[0].verdict == BETTER


def test_minimum_requests_for_a_percentile_claim_follow_mlperfs_binomial_rule():
    assert min_requests(0.99, 0.99) == 459        # MLPerf LoadGen: p99 at 99 % with no overshoot
    assert min_requests(0.95, 0.99) == 90
