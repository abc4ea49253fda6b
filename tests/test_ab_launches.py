"""Launch-aware changes, the primary/secondary family, percentile precision, variance components:
each against an independent computation (numpy/scipy by hand, statsmodels) or a simulation."""
from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest
from scipy import stats

from slurm_ab.ab_stats import INCONCLUSIVE, SAME, delta
from slurm_ab.ab_stats.components import components, first_pass
from slurm_ab.ab_stats.family import compare, holm, primary_note
from slurm_ab.ab_stats.metrics import comparison_rows, row_label
from slurm_ab.ab_stats.percentiles import lognormal_sigma, percentile_cov, percentile_noise


def _welch_on_launch_means(a_groups, b_groups):
    """Reference: mean of logs per launch, Welch-Satterthwaite by hand, quantile from scipy."""
    ua = np.array([np.mean(np.log(g)) for g in a_groups])
    ub = np.array([np.mean(np.log(g)) for g in b_groups])
    va, vb = ua.var(ddof=1) / len(ua), ub.var(ddof=1) / len(ub)
    df = (va + vb) ** 2 / (va ** 2 / (len(ua) - 1) + vb ** 2 / (len(ub) - 1))
    d = ub.mean() - ua.mean()
    hw = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    return math.expm1(d - hw) * 100, math.expm1(d + hw) * 100


def test_two_or_more_launches_per_side_compare_launch_means():
    a_groups = [[100.0, 101.5, 99.0], [103.0, 104.1], [98.0, 97.5, 99.1]]      # unequal passes
    b_groups = [[95.0, 96.2, 94.1], [99.0, 98.3, 97.7]]
    a = [x for g in a_groups for x in g]
    b = [x for g in b_groups for x in g]
    la = [i for i, g in enumerate(a_groups) for _ in g]
    lb = [10 + i for i, g in enumerate(b_groups) for _ in g]
    d = delta("output_tps", a, b, a_launches=la, b_launches=lb)
    assert (d.ci_low_pct, d.ci_high_pct) == pytest.approx(_welch_on_launch_means(a_groups, b_groups), rel=1e-9)
    assert d.variance_levels == ("launch", "pass") and (d.launches_a, d.launches_b, d.n_a, d.n_b) == (3, 2, 8, 6)
    assert "within-launch" not in d.verdict
    # the same passes read as one launch per side: narrower, and never a plain verdict
    flat = delta("output_tps", a, b)
    assert flat.variance_levels == ("pass",) and flat.verdict.endswith("(within-launch only)")
    assert flat.ci_high_pct - flat.ci_low_pct < d.ci_high_pct - d.ci_low_pct


def test_six_launches_of_one_job_regress_out_a_drift():
    """A B B A A B: launch means on mode and run position; the mode coefficient's t interval
    (reference: least squares and its covariance by hand, quantile from scipy)."""
    pos_a, pos_b = [1, 4, 5], [2, 3, 6]
    a = [100.0 * 1.01 ** p * (1 + 0.004 * (-1) ** p) for p in pos_a]
    b = [97.0 * 1.01 ** p * (1 - 0.003 * (-1) ** p) for p in pos_b]
    d = delta("output_tps", a, b, a_launches=pos_a, b_launches=pos_b)
    y = np.log(a + b)
    x = np.column_stack([np.ones(6), [0, 0, 0, 1, 1, 1], pos_a + pos_b])
    beta, res, _, _ = np.linalg.lstsq(x, y, rcond=None)
    s2 = res[0] / 3
    se = math.sqrt(s2 * np.linalg.inv(x.T @ x)[1, 1])
    hw = stats.t.ppf(0.975, 3) * se
    assert d.drift_adjusted and (d.ci_low_pct, d.ci_high_pct) == pytest.approx(
        (math.expm1(beta[1] - hw) * 100, math.expm1(beta[1] + hw) * 100), rel=1e-6)
    assert beta[1] == pytest.approx(math.log(0.97), abs=0.01)      # the 1 %/launch drift is gone
    # two separate campaigns (both start at launch 1): no common run position, plain Welch
    d2 = delta("output_tps", a, b, a_launches=[1, 2, 3], b_launches=[1, 2, 3])
    assert not d2.drift_adjusted and d2.variance_levels == ("launch", "pass")


def test_one_launch_on_either_side_is_within_launch_only():
    a, b = [100.0, 101.0, 99.5, 100.2], [90.0, 91.0, 90.5, 90.2]
    d = delta("output_tps", a, b, a_launches=[1, 1, 3, 3], b_launches=[2, 2, 2, 2])
    assert d.variance_levels == ("pass",) and d.verdict == "worse (within-launch only)"
    assert (d.launches_a, d.launches_b) == (2, 1)


def test_n1_n2_missing_and_unequal_passes():
    assert delta("output_tps", [100.0], [90.0, 91.0]).verdict == INCONCLUSIVE
    # interleaved, one pass per launch, two launches a side: Welch on 2 vs 2 (df ~2), wide but valid
    d = delta("output_tps", [100.0, 102.0], [95.0, 96.0], a_launches=[1, 3], b_launches=[2, 4])
    assert d.variance_levels == ("launch", "pass")
    assert (d.ci_low_pct, d.ci_high_pct) == pytest.approx(_welch_on_launch_means([[100.0], [102.0]], [[95.0], [96.0]]))
    # a launch whose passes are all missing is not a launch of the comparison
    d = delta("output_tps", [100.0, None, 101.0, 99.0], [95.0, 96.0, None, 94.0],
              a_launches=[1, 3, 5, 5], b_launches=[2, 4, 4, 6])
    assert (d.n_a, d.launches_a, d.n_b, d.launches_b) == (3, 2, 3, 3)


def test_holm_matches_the_step_down_by_hand():
    p = [0.01, 0.04, 0.03, 0.20]
    order = sorted(range(4), key=lambda i: p[i])
    ref, run = [0.0] * 4, 0.0
    for rank, i in enumerate(order):
        run = max(run, min(1.0, (4 - rank) * p[i]))
        ref[i] = run
    assert holm(p) == pytest.approx(ref)          # [0.04, 0.09, 0.09, 0.2]
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(11)
    for _ in range(20):
        ps = list(rng.uniform(0, 0.2, int(rng.integers(1, 9))))
        assert holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]))


def _rows(mode_shift: float, launches, seed: int, steady: bool = False, k: int = 3):
    rng = random.Random(seed)
    rows = []
    for launch in launches:
        f = math.exp(rng.gauss(0, 0.015))
        for r in range(k):
            g = f * math.exp(rng.gauss(0, 0.015))
            row = {"launch": launch, "repeat": r + 1, "mode": "m", "concurrency": 8, "verdict": "ok",
                   "output_tps": 85.0 * mode_shift / g, "input_tps": 2700.0 * mode_shift / g,
                   "duration_s": 240.0 * g / mode_shift, "ttft_mean_s": 8.0 * g * math.exp(rng.gauss(0, 0.04)),
                   "ttft_p95_s": 20.0 * g * math.exp(rng.gauss(0, 0.09)), "tpot_mean_ms": 76.0 * g,
                   "tpot_p95_ms": 88.0 * g * math.exp(rng.gauss(0, 0.04)), "e2e_mean_s": 47.0 * g,
                   "e2e_p95_s": 59.0 * g, "requests_ok": 40, "accept_len": None}
            if steady:
                row["steady_output_tps"] = 88.0 * mode_shift / g
            rows.append(row)
    return rows


def test_a_comparison_has_one_primary_row_and_folds_the_same_measurement():
    a, b = _rows(1.0, (1, 4), 1), _rows(0.90, (2, 3), 2)
    rows = compare(a, b)
    assert [r.role for r in rows][:2] == ["primary", "secondary"]
    assert rows[0].metric == "output_tps" and rows[0].label == "Output TPS (= Input TPS, Duration)"
    assert {r.metric for r in rows}.isdisjoint({"input_tps", "duration_s", "accept_len"})
    assert rows[0].verdict == "worse" and rows[0].p_holm is None
    assert primary_note(rows, "output_tps").startswith("primary metric: Output TPS over the makespan")
    sec = [r for r in rows if r.role == "secondary" and r.delta.tested]
    assert sec and all(r.p_holm >= r.delta.p_value for r in sec)
    assert rows[0].to_dict()["same_as"] == ["input_tps", "duration_s"]
    # a steady-state throughput on every pass carries the headline; the makespan row is secondary
    a, b = _rows(1.0, (1, 4), 1, steady=True), _rows(0.90, (2, 3), 2, steady=True)
    rows = compare(a, b)
    assert rows[0].metric == "steady_output_tps"
    assert primary_note(rows, "output_tps").startswith("primary metric: output throughput in the steady state")
    assert "output_tps" in [r.metric for r in rows[1:]]
    b[0]["steady_output_tps"] = None                          # one pass without it: makespan
    assert compare(a, b)[0].metric == "output_tps"
    assert compare(a, b, primary="tpot_mean_ms")[0].metric == "tpot_mean_ms"
    with pytest.raises(ValueError, match="unknown primary metric"):
        comparison_rows("input_tps", False)
    assert row_label("ttft_p95_s") == "TTFT p95 (s)"


def test_a_secondary_significant_alone_is_not_after_holm():
    """B's TTFT mean 8 % slower, nothing else changed: alone it is 'worse' at 5 % (p ~0.03), but
    it is one of three tested secondaries (the p95 rows are descriptive, issue 30), so Holm
    multiplies its p (the smallest) by three: same, and its interval, stated at the Holm step's
    level, includes 0."""
    a, b = _rows(1.0, (1, 4, 5), 3), _rows(1.0, (2, 3, 6), 4)
    b = [dict(r, ttft_mean_s=r["ttft_mean_s"] * 1.08) for r in b]
    rows = compare(a, b)
    met = [r for r in rows[1:] if r.p_holm is not None and r.delta.p_value < 0.05 <= r.p_holm]
    assert [r.metric for r in met] == ["ttft_mean_s"]                # the condition holds, once
    tested = [r for r in rows[1:] if r.p_holm is not None]
    (ttft,) = met
    assert len(tested) == 3 and ttft.p_holm == pytest.approx(3 * ttft.delta.p_value)
    assert ttft.delta.at(0.95).verdict == "worse" and ttft.verdict == SAME == ttft.delta.verdict
    assert ttft.delta.confidence == pytest.approx(1 - 0.05 / 3) and ttft.delta.ci_low_pct < 0
    assert rows[0].verdict == SAME                                   # the primary did not move


def test_a_metric_on_one_side_only_keeps_its_row_and_the_rows_after_it():
    """A's client reported no TTFT p95: the row stays (a value on one side is news), untested and
    outside the Holm family, and every row after it is there."""
    a, b = _rows(1.0, (1, 4, 5), 3), _rows(1.0, (2, 3, 6), 4)
    a = [dict(r, ttft_p95_s=None) for r in a]
    rows = compare(a, b)
    assert [r.metric for r in rows] == ["output_tps", "ttft_mean_s", "ttft_p95_s", "tpot_mean_ms", "tpot_p95_ms",
                                        "e2e_mean_s", "e2e_p95_s"]
    p95 = rows[2]
    assert p95.delta.a_mean is None and p95.delta.b_mean == pytest.approx(np.mean([r["ttft_p95_s"] for r in b]))
    assert p95.p_holm is None and p95.verdict == p95.delta.verdict and not p95.delta.tested
    # the family: the three mean rows (p95 rows are descriptive, issue 30), not six
    assert sum(r.p_holm is not None for r in rows) == 3


def test_expected_percentile_noise_matches_a_simulation():
    rng = np.random.default_rng(7)
    sims = np.percentile(rng.lognormal(0.0, 0.3, size=(20000, 40)), 95, axis=1)
    measured = sims.std() / sims.mean()
    assert percentile_cov(40, 0.95, 0.3) == pytest.approx(measured, rel=0.15)       # ~10 %
    mean, p95 = math.exp(0.3 ** 2 / 2), math.exp(1.6449 * 0.3)
    assert lognormal_sigma(mean, p95, 0.95) == pytest.approx(0.3, abs=1e-3)
    warn = percentile_noise([_rows(1.0, (1, 4), 1)])
    ttft = next(w for w in warn if w.metric == "ttft_p95_s")
    assert ttft.warn and "from 40 requests" in ttft.text() and "requests per pass would bring it" in ttft.text()


def test_percentile_noise_takes_the_noisier_side_and_says_what_would_fix_it():
    """Side A (40 requests a pass, p95 2.5x the mean) expects ~24 % noise per pass though its two
    passes happen to agree; B's p95 fits no lognormal (no expectation) and C's are zeros: A is
    the noisier side, it warns on the expected noise, and the request count it names brings that
    to 5 %. A p95 without its mean (E2E here) gives no entry."""
    def side(p95s, mean, reqs):
        return [{"ttft_p95_s": p, "ttft_mean_s": mean, "requests_ok": reqs, "e2e_p95_s": 60.0} for p in p95s]
    a, b, c = side([19.9, 20.1], 8.0, 40), side([100.0, 101.0], 1.0, 400), side([0.0, 0.0], 8.0, 40)
    (got,) = percentile_noise([a, b, c])
    sigma = lognormal_sigma(8.0, 20.0, 0.95)
    expected, measured = percentile_cov(40, 0.95, sigma), statistics.stdev([19.9, 20.1]) / 20.0
    assert (got.metric, got.requests) == ("ttft_p95_s", 40)
    assert (got.sigma, got.expected_cov, got.measured_cov) == pytest.approx((sigma, expected, measured))
    assert expected == pytest.approx(0.238, abs=1e-3) and measured < 0.05 and got.warn
    need = math.ceil(40 * (expected / 0.05) ** 2)
    assert got.text() == (f"TTFT p95 per pass from 40 requests, expected noise 24% per pass (lognormal request "
                          f"times, sigma {sigma:.2f} from mean and p95), measured 1% between passes; {need} "
                          "requests per pass would bring it to 5% (benchmark.num_prompts, or "
                          "prompts_per_concurrency x C)")


def test_percentile_noise_at_its_edges():
    """One request still has a noise; no request, or a mean or percentile of 0 (a failed pass's
    zeros) fits no lognormal and raises nothing; a p95 below the mean is sigma 0."""
    assert percentile_cov(1, 0.95, 0.3) == pytest.approx(0.3 * math.sqrt(0.95 * 0.05) / 0.10314, rel=1e-3)
    assert percentile_cov(0, 0.95, 0.3) == 0.0 and percentile_cov(40, 0.95, 0.0) == 0.0
    assert lognormal_sigma(0.0, 1.0, 0.95) is None and lognormal_sigma(1.0, 0.0, 0.95) is None
    assert lognormal_sigma(1.0, 0.9, 0.95) == 0.0


def _balanced(sl, sp, modes=2, launches=6, k=4, seed=5):
    rng = np.random.default_rng(seed)
    rows = []
    for m in range(modes):
        for launch in range(launches):
            u = rng.normal(0, sl)
            for r in range(k):
                rows.append({"mode": f"m{m}", "concurrency": 8, "launch": m * 100 + launch, "repeat": r + 1,
                             "output_tps": 85.0 * math.exp(0.1 * m + u + rng.normal(0, sp))})
    return rows


def test_variance_components_agree_with_the_anova_estimator():
    rows = _balanced(0.02, 0.01)
    c = components(rows, "output_tps")
    # one-way ANOVA within each mode, pooled: MSW and (MSB - MSW) / k
    ys = {}
    for r in rows:
        ys.setdefault((r["mode"], r["launch"]), []).append(math.log(r["output_tps"]))
    msw = sum(sum((y - np.mean(v)) ** 2 for y in v) for v in ys.values()) / (len(rows) - len(ys))
    # launch means regressed on mode and run position (a drift is not launch variance, issue 30):
    # MSB = k x their residual sum of squares / (launches - 3)
    keys = sorted(ys)
    modes = sorted({m for m, _ in keys})
    x = np.array([[1.0 if m == mm else 0.0 for mm in modes] + [float(la)] for m, la in keys])
    y = np.array([np.mean(ys[k]) for k in keys])
    resid = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
    msb = 4 * float(resid @ resid) / (len(ys) - 3)
    assert c.pass_cov == pytest.approx(math.sqrt(msw), rel=1e-3)
    assert c.launch_cov == pytest.approx(math.sqrt((msb - msw) / 4), rel=1e-3)
    assert (c.launches, c.passes, c.launch_df, c.pass_df) == (12, 48, 9, 36)


def test_what_a_campaign_cannot_tell_is_said():
    blocked = components(_balanced(0.02, 0.01, launches=1, k=5), "output_tps")
    assert blocked.launch_cov is None and blocked.pass_cov > 0 and "cannot be estimated" in blocked.note
    one_pass = components(_balanced(0.02, 0.01, launches=4, k=1), "output_tps")
    assert one_pass.pass_cov is None and "cannot be told apart" in one_pass.note
    assert components([], "output_tps").launch_cov is None


def test_first_pass_effect_is_measured_per_launch():
    rows = _balanced(0.015, 0.005, launches=6, k=3, seed=9)
    assert not first_pass(rows, "output_tps").text().startswith("it differs")
    cold = [dict(r, output_tps=r["output_tps"] * (0.95 if r["repeat"] == 1 else 1.0)) for r in rows]
    fp = first_pass(cold, "output_tps")
    assert fp.launches == 12 and fp.change_pct == pytest.approx(-5.0, abs=1.0)
    assert fp.ci_high_pct < 0 and "use --burn-in" in fp.text()
    assert "no burn-in needed" in first_pass(rows, "output_tps").text()


def test_components_and_first_pass_are_scale_free_and_skip_missing_passes():
    """On log values: a metric below 1 (a TTFT of 0.2 s, throughput in thousands) gives the same
    CoVs and first-pass change as in other units; a pass without the metric is left out; two
    passes per launch, and two launches, are enough."""
    rows = _balanced(0.02, 0.01, launches=4, k=2, seed=4)
    cold = [dict(r, output_tps=r["output_tps"] * (0.95 if r["repeat"] == 1 else 1.0)) for r in rows]
    small = [dict(r, output_tps=r["output_tps"] / 1000) for r in cold]
    missing = cold + [dict(cold[0], repeat=3, output_tps=None)]
    c = components(cold, "output_tps")
    assert (c.launches, c.passes) == (8, 16) and c.launch_cov is not None and c.pass_cov is not None
    for other in (components(small, "output_tps"), components(missing, "output_tps")):
        assert (other.launches, other.passes) == (8, 16)
        assert (other.launch_cov, other.pass_cov) == pytest.approx((c.launch_cov, c.pass_cov), rel=1e-3)
    fp = first_pass(cold, "output_tps")
    assert fp.launches == 8 and fp.change_pct == pytest.approx(-5.0, abs=1.5)
    for other in (first_pass(small, "output_tps"), first_pass(missing, "output_tps")):
        assert other.launches == 8 and other.change_pct == pytest.approx(fp.change_pct, rel=1e-9)
    two = first_pass([r for r in cold if r["launch"] in (0, 1)], "output_tps")
    assert two.launches == 2 and two.change_pct is not None and two.ci_low_pct is not None
