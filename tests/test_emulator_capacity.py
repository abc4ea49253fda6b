"""The emulator's analytic capacity (emulator/capacity.py) from costs.toml, checked against the
emulator's own scheduler driven open loop (Poisson arrivals) in virtual time; the real open-loop
runs through the router are in test_testbed_workloads_cluster.py."""
from __future__ import annotations

import pytest

from slurm_ab_testbed.emulator.capacity import Workload, capacity, simulate_open_loop, simulated_knee
from slurm_ab_testbed.emulator.costs import load_costs

TP8 = ["--model-path", "m", "--tp-size", "8", "--chunked-prefill-size", "8192", "--disable-radix-cache"]


def test_saturation_is_the_closed_form_of_costs_toml():
    """1 / (P + S c): P the prefill, S = output - 1 steps, c the step's cost per added request."""
    c = load_costs()
    w = Workload(2048, 64)
    p_ms = 2048 * (c.prefill.compute_ms_per_token / 8 + c.prefill.tp_intra_node_ms_per_token) + c.prefill.batch_overhead_ms
    c_ms = c.decode.per_seq_ms + c.decode.kv_ms_per_1k_ctx_tokens * (2048 + 32) / 1000
    cap = capacity(TP8, w)
    assert cap.prefill_s == pytest.approx(p_ms / 1000)
    assert cap.decode_step_ms == pytest.approx(280 / 8 + 6 + c_ms, rel=1e-3)
    assert cap.saturation_rate == pytest.approx(1000 / (p_ms + 63 * c_ms), rel=0.01)
    # time scale and replicas scale the rate; the SLO-free knee is None
    cap2 = capacity(TP8, w, replicas=2, time_scale=0.05)
    assert cap2.saturation_rate == pytest.approx(cap.saturation_rate * 2 / 0.05, rel=1e-6) and cap2.knee_rate is None
    # prefix-cache hits shorten P
    assert capacity(TP8, Workload(2048, 64, cached_len=1536)).saturation_rate > 2 * cap.saturation_rate


@pytest.mark.parametrize("w", [Workload(2048, 64), Workload(512, 256)], ids=str)
def test_means_match_the_simulated_scheduler_below_the_knee(w):
    cap = capacity(TP8, w)
    for share in (0.3, 0.6):
        rate = share * cap.saturation_rate
        sim = simulate_open_loop(TP8, w, rate, num_prompts=500, warmup=50)
        p = cap.point(rate)
        assert sim.achieved_rate == pytest.approx(rate, rel=0.05)
        assert p.ttft_ms == pytest.approx(sim.mean_ttft_ms, rel=0.15)
        assert p.tpot_ms == pytest.approx(sim.mean_tpot_ms, rel=0.15)


def test_above_saturation_the_queue_grows():
    w = Workload(2048, 64)
    cap = capacity(TP8, w)
    below = simulate_open_loop(TP8, w, 0.8 * cap.saturation_rate, num_prompts=400)
    above = simulate_open_loop(TP8, w, 1.2 * cap.saturation_rate, num_prompts=400)
    q = len(above.ttft_ms) // 4
    first, last = (lambda r: sum(r.ttft_ms[:q]) / q), (lambda r: sum(r.ttft_ms[-q:]) / q)
    assert last(above) > 3 * first(above) and last(above) > 5 * last(below)      # waits grow without bound
    assert last(below) < 2 * first(below)
    assert not cap.point(1.2 * cap.saturation_rate).stable and cap.point(0.8 * cap.saturation_rate).stable


def test_speculative_and_pp_layouts():
    w = Workload(1024, 128)
    spec = capacity(TP8[:-1] + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                                "--speculative-num-draft-tokens", "16"], w)
    assert 127 / 4.2 < spec.steps_per_request < 127 / 3.4           # ~3.7 tokens per verify step
    pp = capacity(["--model-path", "m", "--tp-size", "4", "--pp-size", "2", "--chunked-prefill-size", "8192"], w)
    plain = capacity(TP8, w)
    assert pp.saturation_rate < plain.saturation_rate
    sim = simulate_open_loop(TP8[:-1] + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                                         "--speculative-num-draft-tokens", "16"], w, 0.5 * spec.saturation_rate,
                             num_prompts=300, warmup=30)
    assert spec.point(0.5 * spec.saturation_rate).tpot_ms == pytest.approx(sim.mean_tpot_ms, rel=0.2)


def test_slo_knee_brackets_the_simulated_attainment():
    """A TPOT SLO on a decode-heavy workload, 90 % attainment: the analytic knee is within a few per
    cent of the simulated one (the emulator scheduler's exact knee) and attainment holds below it
    and fails above it."""
    w = Workload(512, 256)
    cap = capacity(TP8, w, slo_tpot_ms=120, slo_ttft_ms=2000, attainment=0.9)
    assert cap.knee_rate == cap.tpot_knee_rate < cap.saturation_rate
    knee = simulated_knee(TP8, w, 0.9, 2000, 120, num_prompts=400, rel_tol=0.01)
    assert knee == pytest.approx(cap.knee_rate, rel=0.06)
    lo = simulate_open_loop(TP8, w, 0.9 * cap.knee_rate, num_prompts=400, warmup=40)
    hi = simulate_open_loop(TP8, w, 1.1 * cap.knee_rate, num_prompts=400, warmup=40)
    assert lo.attainment(2000, 120) >= 0.9 > hi.attainment(2000, 120)
