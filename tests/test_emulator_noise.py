"""The emulator's run-to-run noise: seeded launch/pass factors and queueing stalls."""
from __future__ import annotations

import random
import statistics

import pytest

from slurm_ab_testbed.emulator.costs import CostConfigError, load_costs
from slurm_ab_testbed.emulator.noise import (Noise, NoiseConfig, launch_seed, lognormal_factor,
                                             pass_values)
from slurm_ab_testbed.emulator.simulate import simulate

TP32 = ["--model-path", "emulated", "--chunked-prefill-size", "8192", "--disable-radix-cache",
        "--tp-size", "32", "--ep-size", "4"]


def test_lognormal_factor_has_mean_one_and_the_configured_cov():
    rng = random.Random(7)
    xs = [lognormal_factor(rng, 0.02) for _ in range(40000)]
    assert statistics.fmean(xs) == pytest.approx(1.0, abs=0.0005)
    assert statistics.stdev(xs) == pytest.approx(0.02, rel=0.03)
    assert lognormal_factor(rng, 0.0) == 1.0


def test_pass_factor_holds_within_a_pass_and_changes_after_an_idle_gap():
    n = Noise(NoiseConfig(launch_cv=0.02, pass_cv=0.02, pass_gap_s=1.0), seed=3)
    f1 = n.forward_factor(10.0)
    for t in (10.2, 10.4, 10.9, 11.5):          # busy: gaps well under 1 s
        n.forward_done(t)
        assert n.forward_factor(t + 0.01) == f1
    n.forward_done(12.0)
    f2 = n.forward_factor(13.5)                 # idle 1.5 s: a new pass
    assert f2 != f1 and n.passes == 2
    assert f1 / n.launch != f2 / n.launch and f2 == pytest.approx(n.launch * n.pass_factor)


def test_same_seed_same_noise_different_seed_different_launch():
    cfg = NoiseConfig(launch_cv=0.02, pass_cv=0.02)
    a, b, c = Noise(cfg, 1), Noise(cfg, 1), Noise(cfg, 2)
    assert a.launch == b.launch and a.forward_factor(0.0) == b.forward_factor(0.0)
    assert a.launch != c.launch
    assert Noise(NoiseConfig(), 1).forward_factor(0.0) == 1.0     # all zero: no noise


def test_launch_seed_differs_per_slurm_step_and_port():
    env = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0"}
    s = launch_seed(0, env, 30000)
    assert s == launch_seed(0, dict(env), 30000)
    assert s != launch_seed(0, dict(env, SLURM_STEP_ID="3"), 30000)     # the next launch
    assert s != launch_seed(0, env, 30100)                              # the other replica
    assert s != launch_seed(1, env, 30000)
    assert launch_seed(5, {}, "x") == launch_seed(5, {}, "x")


def test_stalls_only_when_something_is_queued_and_grow_with_the_queue():
    cfg = NoiseConfig(stall_prob_per_queued=0.02, stall_median_ms=400.0, stall_sigma=1.0)
    n = Noise(cfg, 11)
    assert all(n.prefill_stall_s(0) == 0.0 for _ in range(1000))
    few = sum(n.prefill_stall_s(1) > 0 for _ in range(20000)) / 20000
    many = sum(n.prefill_stall_s(10) > 0 for _ in range(20000)) / 20000
    assert few == pytest.approx(0.02, abs=0.005) and many == pytest.approx(0.2, abs=0.015)
    stalls = sorted(s for s in (n.prefill_stall_s(50) for _ in range(4000)) if s > 0)
    assert statistics.median(stalls) == pytest.approx(0.4, rel=0.1)


def test_bad_noise_values_are_refused(tmp_path):
    with pytest.raises(ValueError, match="noise.pass_cv"):
        Noise(NoiseConfig(pass_cv=-0.1), 1)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[noise]\nlaunch_cv = 0.05\n")
    assert load_costs(str(cfg)).noise.launch_cv == 0.05
    assert load_costs().noise.pass_cv > 0                     # on by default in costs.toml
    cfg.write_text("[noise]\nlaunch_sd = 0.05\n")
    with pytest.raises(CostConfigError, match="noise.launch_sd"):
        load_costs(str(cfg))


def test_pass_values_scale_a_throughput_down_and_a_latency_up():
    cfg = NoiseConfig(launch_cv=0.0, pass_cv=0.0)
    assert pass_values(cfg, random.Random(1), 86.0, 3, launches=2) == [86.0] * 6
    slow = NoiseConfig(launch_cv=0.5)
    rng = random.Random(4)
    tps = pass_values(slow, rng, 100.0, 2, launches=1)
    assert tps[0] == tps[1] != 100.0                          # one launch, no pass noise
    lat = pass_values(slow, random.Random(4), 100.0, 1, higher_is_faster=False)
    assert lat[0] * tps[0] == pytest.approx(100.0 * 100.0)


def test_simulated_benchmarks_differ_by_noise_seed_only():
    quiet = simulate(TP32, num_prompts=16)
    assert simulate(TP32, num_prompts=16) == quiet                        # deterministic
    a, a2, b = (simulate(TP32, num_prompts=16, noise_seed=s) for s in (1, 1, 2))
    assert a == a2 and a.output_throughput != b.output_throughput
    assert a.output_throughput == pytest.approx(quiet.output_throughput, rel=0.1)


def test_no_queueing_stall_at_concurrency_one(tmp_path):
    cfg = tmp_path / "stalls-only.toml"
    cfg.write_text("[noise]\nlaunch_cv = 0.0\npass_cv = 0.0\nstall_prob_per_queued = 1.0\n")
    quiet = simulate(TP32, num_prompts=4, concurrency=1, config_path=str(cfg))
    c1 = simulate(TP32, num_prompts=4, concurrency=1, config_path=str(cfg), noise_seed=1)
    assert c1.mean_ttft_ms == pytest.approx(quiet.mean_ttft_ms)          # nothing queued
    c8 = simulate(TP32, num_prompts=16, concurrency=8, config_path=str(cfg), noise_seed=1)
    q8 = simulate(TP32, num_prompts=16, concurrency=8, config_path=str(cfg))
    assert c8.p95_ttft_ms > q8.p95_ttft_ms
