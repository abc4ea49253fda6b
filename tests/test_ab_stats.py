"""A/B statistics: aggregates and deltas against independent scipy/numpy computations."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from slurm_ab import ab_stats
from slurm_ab.ab_stats import (BETTER, INCONCLUSIVE, METRICS, NO_SPREAD, SAME, WORSE, aggregate, aggregates,
                               delta, deltas)

TWO = dict(a_launches=[1, 1, 4, 4], b_launches=[2, 2, 3, 3])     # A B B A, two passes each

ROOT = Path(__file__).resolve().parents[1]


def test_aggregate_matches_the_t_interval_of_the_mean():
    agg = aggregate([10.0, 12.0, 14.0])
    assert agg.n == 3 and agg.mean == pytest.approx(12.0) and agg.sd == pytest.approx(2.0)
    assert agg.cov == pytest.approx(2.0 / 12.0)
    hw = stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)          # 4.303 * 1.1547
    assert hw == pytest.approx(4.9683, abs=1e-4)
    assert (agg.ci_low, agg.ci_high) == pytest.approx((12.0 - hw, 12.0 + hw))
    assert agg.half_width == pytest.approx(hw)
    assert agg.to_dict()["half_width"] == pytest.approx(hw)


def test_aggregate_of_one_pass_has_no_spread_or_interval():
    agg = aggregate([85.99])
    assert (agg.n, agg.mean, agg.sd, agg.cov, agg.ci_low, agg.half_width) == (1, 85.99, None, None, None, None)
    assert aggregate([]).n == 0 and aggregate([None, float("nan")]).mean is None


def test_aggregate_skips_missing_passes():
    assert aggregate([1.0, None, 3.0, float("inf")]).n == 2
    # anywhere in the column: a missing first pass does not end it; a bool or a text is no number
    agg = aggregate([None, 1.0, True, 3.0, float("nan"), "x", 5.0])
    assert (agg.n, agg.mean) == (3, 3.0)
    assert aggregate([-1.0, 1.0]).cov is None                          # mean 0: no CoV, no division
    assert aggregate([0.5, 1.5]).cov == pytest.approx(math.sqrt(0.5))      # mean 1 is a mean like any


def _welch_log_reference(a, b, confidence=0.95):
    """Independent reference: Welch-Satterthwaite by hand on log values, quantile from scipy."""
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    d = lb.mean() - la.mean()
    hw = stats.t.ppf(0.5 + confidence / 2, df) * math.sqrt(va + vb)
    return math.expm1(d - hw) * 100, math.expm1(d + hw) * 100


def test_delta_matches_a_welch_interval_on_log_values():
    a = [2797.64, 2751.20, 2840.02, 2810.33]
    b = [2218.94, 2260.10, 2190.55]
    d = delta("input_tps", a, b)
    low, high = _welch_log_reference(np.array(a), np.array(b))
    assert (d.ci_low_pct, d.ci_high_pct) == pytest.approx((low, high), rel=1e-9)
    assert d.change_pct == pytest.approx((np.mean(b) / np.mean(a) - 1) * 100)
    assert (d.n_a, d.n_b) == (4, 3)
    assert d.ci_high_pct < 0 and d.verdict == "worse (within-launch only)"   # throughput fell, one launch each
    assert d.variance_levels == ("pass",) and (d.launches_a, d.launches_b) == (1, 1)


def test_direction_of_each_metric():
    up = ([100.0, 101.0, 99.0, 100.5], [110.0, 111.0, 109.0, 110.4])
    down = (up[1], up[0])
    assert delta("output_tps", *up, **TWO).verdict == BETTER
    assert delta("output_tps", *down, **TWO).verdict == WORSE
    assert delta("tpot_mean_ms", *up, **TWO).verdict == WORSE        # latency up: worse
    assert delta("tpot_mean_ms", *down, **TWO).verdict == BETTER
    assert delta("accept_len", *up, **TWO).verdict == BETTER
    assert delta("custom", *up, better="lower", **TWO).verdict == WORSE
    with pytest.raises(ValueError, match="unknown metric"):
        delta("custom", *up)
    with pytest.raises(ValueError, match="better must be"):
        delta("custom", *up, better="up")
    assert {m.name: m.better for m in METRICS}["duration_s"] == "lower"


def test_overlapping_samples_are_no_significant_difference():
    d = delta("output_tps", [100.0, 103.0, 97.0, 99.0], [101.0, 98.0, 104.0, 100.0], **TWO)
    assert d.ci_low_pct < 0 < d.ci_high_pct and d.verdict == SAME


def test_one_pass_per_side_is_inconclusive_with_the_point_change():
    d = delta("duration_s", [238.18], [300.30])
    assert d.verdict == INCONCLUSIVE == "inconclusive (n=1)"
    assert d.change_pct == pytest.approx(26.08, abs=0.005)    # the seed's +26.08%
    assert d.ci_low_pct is None and d.ci_high_pct is None
    assert delta("duration_s", [238.18, 240.0], [300.30]).verdict == INCONCLUSIVE


def test_a_side_without_values_has_no_verdict():
    d = delta("accept_len", [None, None], [3.76, 3.70])
    assert d.a_mean is None and d.change_pct is None and d.verdict is None and d.n_a == 0


def test_no_spread_gives_no_interval_and_no_verdict():
    """[100, 100] vs [101, 101]: identical values say the noise is below the printed precision, not
    that the change is exactly +1 %: no zero-width interval, no 'better'."""
    d = delta("output_tps", [100.0, 100.0], [101.0, 101.0])
    assert d.change_pct == pytest.approx(1.0) and d.ci_low_pct is None and d.p_value is None
    assert d.verdict == f"{NO_SPREAD} (within-launch only)"
    d = delta("output_tps", [80.0, 80.0, 80.0, 80.0], [84.0, 84.0, 84.0, 84.0], **TWO)
    assert d.verdict == NO_SPREAD and d.ci_low_pct is None
    assert aggregate([5.0, 5.0]).ci_low is None and aggregate([5.0, 5.0]).sd == 0.0


def test_non_positive_values_fall_back_to_the_difference_of_means():
    a, b = [0.0, 1.0, 2.0], [3.0, 4.0, 5.0]
    d = delta("ttft_mean_s", a, b)
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert (d.ci_low_pct, d.ci_high_pct) == pytest.approx((ci.low * 100, ci.high * 100))
    assert d.verdict == "worse (within-launch only)"
    # Welch's interval, not the pooled-variance one: unequal spreads and sizes
    a, b = [0.0, 1.0, 2.0], [3.0, 9.0, 4.0, 12.0]
    d = delta("ttft_mean_s", a, b)
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert (d.ci_low_pct, d.ci_high_pct) == pytest.approx((ci.low * 100, ci.high * 100))


def test_a_metric_below_one_is_compared_on_the_log_scale_too():
    """accept_rate (0..1), a TTFT in seconds: the change of values below 1 is the change of the
    same values in other units (log scale, not the fallback for values <= 0), passes or launches."""
    a, b = [0.61, 0.64, 0.60, 0.63], [0.55, 0.57, 0.54, 0.58]
    for launches in ({}, TWO):
        small = delta("accept_rate", a, b, **launches)
        big = delta("accept_rate", [x * 1000 for x in a], [x * 1000 for x in b], **launches)
        assert small.ci_low_pct is not None and small.change_pct == pytest.approx(-9.677, abs=1e-3)
        assert (small.ci_low_pct, small.ci_high_pct, small.p_value) == pytest.approx(
            (big.ci_low_pct, big.ci_high_pct, big.p_value), rel=1e-9)


@pytest.mark.filterwarnings("ignore:Precision loss occurred in moment calculation:RuntimeWarning")
def test_one_side_without_spread_still_has_an_interval():
    """Only both sides constant is 'no spread': a constant side beside a varying one leaves a
    variance to estimate (Welch's interval takes it from the other side; scipy warns of the
    constant side's 'precision loss', which Welch's variance of it, 0, does not suffer)."""
    for a, b in (([80.0, 80.0, 80.0], [84.0, 85.0, 83.0]), ([80.0, 81.0, 79.0], [84.0, 84.0, 84.0])):
        d = delta("output_tps", a, b)
        assert d.ci_low_pct is not None and d.verdict == "better (within-launch only)", (a, b)


def test_launch_names_that_are_not_numbers_give_no_run_position():
    """Six launches named, not numbered: no run position to regress on, plain Welch on launch means."""
    d = delta("output_tps", [100.0, 101.0, 99.5], [97.0, 96.0, 97.5],
              a_launches=["x1", "x4", "x5"], b_launches=["x2", "x3", "x6"])
    assert not d.drift_adjusted and d.variance_levels == ("launch", "pass") and d.ci_low_pct is not None


def test_json_of_a_delta_has_exactly_the_documented_keys():
    d = delta("output_tps", [85.99, 86.5], [68.2, 67.9])
    keys = ["metric", "a_mean", "b_mean", "change_pct", "ci_low_pct", "ci_high_pct", "n_a", "n_b",
            "verdict", "launches_a", "launches_b", "variance_levels", "p_value", "drift_adjusted", "confidence",
            "margin_pct", "df", "estimate", "se", "log_scale", "scale", "qualifier"]
    assert list(d.to_dict()) == keys
    rec = json.loads(json.dumps(d.to_dict()))
    assert rec["verdict"] == "worse (within-launch only)" and rec["variance_levels"] == ["pass"]


def test_deltas_and_aggregates_over_rows():
    a_rows = [{"output_tps": 86.0, "tpot_mean_ms": 76.0, "launch": 1}, {"output_tps": 85.0, "tpot_mean_ms": 75.5, "launch": 4}]
    b_rows = [{"output_tps": 68.0, "tpot_mean_ms": 98.0, "launch": 2}, {"output_tps": 69.0, "tpot_mean_ms": 99.0, "launch": 3}]
    out = {d.metric: d for d in deltas(a_rows, b_rows)}
    assert [d.metric for d in deltas(a_rows, b_rows)] == [m.name for m in METRICS]
    assert out["output_tps"].verdict == WORSE and out["tpot_mean_ms"].verdict == WORSE
    assert out["accept_len"].verdict is None
    aggs = aggregates(a_rows)
    assert aggs["output_tps"].mean == pytest.approx(85.5) and aggs["ttft_mean_s"].n == 0


def test_interval_is_95_percent_by_default_and_widens_with_confidence():
    a, b = [100.0, 102.0, 98.0, 101.0], [104.0, 107.0, 103.0, 106.0]
    d95, d99 = delta("output_tps", a, b), delta("output_tps", a, b, confidence=0.99)
    assert d99.ci_low_pct < d95.ci_low_pct < d95.ci_high_pct < d99.ci_high_pct
    assert ab_stats.CONFIDENCE == 0.95


def test_importing_ab_stats_and_dry_run_import_no_scipy_or_numpy():
    code = ("import sys, slurm_ab.ab_stats\n"
            "from slurm_ab.cli.main import main\n"
            "try:\n    main(['dry-run', 'tp32'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('scipy', 'numpy', 'pandas') if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY []" in r.stderr, r.stderr[-2000:]
