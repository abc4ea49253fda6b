"""The planner: cost formula, power against a simulation, cheapest design, time limits."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from slurm_ab.planner import Costs, Design, Noise, Target, candidates, plan, text, verify

EMU = Noise(0.015, 0.015)               # the emulator's costs.toml: launch 1.5 %, pass 1.5 %
SEED = Costs(load_min=15, pass_min=5)   # the seed: load 10-20 min, pass 4-6 min, 2 x 4 nodes


def test_node_hours_formula_with_the_seed_sizes():
    d = Design(4, 2)
    assert d.wall_min(SEED) == pytest.approx(2 * 4 * (15 + 1 + 2 * 5.1))
    assert d.node_hours(SEED) == pytest.approx(8 * 2 * 4 * (15 + 1 + 2 * 5.1) / 60)   # 27.9
    assert Design(4, 2).node_hours(Costs(10, 4)) < d.node_hours(SEED) < Design(4, 2).node_hours(Costs(20, 6))


def test_standard_error_and_power_by_hand():
    d = Design(4, 2)
    se = math.sqrt(2 * (0.015 ** 2 + 0.015 ** 2 / 2) / 4)
    assert d.se(EMU) == pytest.approx(se)
    tc, ncp = stats.t.ppf(0.975, 6), math.log(1.05) / se
    assert d.power(EMU, 5) == pytest.approx(stats.nct.sf(tc, 6, ncp) + stats.nct.cdf(-tc, 6, ncp))
    assert Design(1, 8).power(EMU, 5) == 0.0            # one launch a side: no launch-level test
    # AR(1) within a launch: passes add less than independent ones
    assert Design(4, 3).se(Noise(0.015, 0.015, ar1=0.5)) > Design(4, 3).se(EMU)


def test_candidates_are_cheapest_first_and_meet_the_target():
    cands = candidates(EMU, SEED, Target(detect_pct=5))
    assert cands and all(d.power(EMU, 5) >= 0.8 for d in cands)
    costs = [d.node_hours(SEED) for d in cands]
    assert costs == sorted(costs)
    assert all(d.halfwidth_pct(EMU) <= 2.0 for d in candidates(EMU, SEED, Target(halfwidth_pct=2)))


def test_the_recommended_design_detects_5_percent_in_80_percent_of_simulated_campaigns():
    p = plan(EMU, SEED, Target(detect_pct=5), campaigns=600)
    assert p.design is not None and p.sim_power >= 0.80
    again, fp = verify(p.design, EMU, 5, campaigns=600, seed=7)      # independent draws
    assert again >= 0.76 and fp <= 0.09
    out = text(p, ("tp32", "tp32-dflash"))
    assert "node-hours:" in out and "queue waits: 1" in out and "A/A false-positive rate" in out
    assert f"--launches {p.design.launches} --repeats {p.design.repeats}" in out


def test_out_of_reach_within_a_time_limit_is_said():
    p = plan(EMU, Costs(15, 5, time_limit_min=60), Target(detect_pct=5), campaigns=50)
    assert p.design is None and "out of reach within the time limit 60 min" in p.reason
    assert "out of reach" in text(p)
