"""The planner: cost formula, power against a simulation, cheapest design, time limits."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from slurm_ab.ab_stats.planner import Costs, Design, Noise, Target, candidates, plan, text, verify
from slurm_ab.model.campaign import schedule

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


def _campaign_dir(tmp_path):
    """A collected campaign: summary.json with ok passes of 2 x 3 launches (A B B A A B) and each
    launch's events.log (load 60 s, warm-up 30 s, passes of 120 s)."""
    import random

    from slurm_ab.collect.records import BenchResult, CampaignSummary, PassRef, PassSummary
    from slurm_ab.collect.write import write_summary
    from slurm_ab.model.rundir import Layout, Manifest, write_manifest

    rng = random.Random(4)
    root = Layout(tmp_path / "camp")
    root.root.mkdir(parents=True)
    c = schedule(("a", "b"), 3, (8,), "counterbalanced", False, 40, launches=3)
    assert [la.mode for la in c.launches] == ["a", "b", "b", "a", "a", "b"]
    write_manifest(root.root, Manifest(run_id="camp", campaign=c))
    passes = []
    for la in c.launches:
        u = rng.gauss(0, 0.02)
        lay = root.launch(la)
        lay.root.mkdir()
        t0 = 1_700_000_000.0 + 1000 * la.index
        lines = [f"{t0:.3f} 2026-12-01 10:00:00.000 server_launch replica=0",
                 f"{t0 + 60:.3f} 2026-12-01 10:01:00.000 ready replica=0 seconds=60"]
        for k, p in enumerate(la.passes):
            s = t0 + 90 + k * 130
            lines += [f"{s:.3f} 2026-12-01 10:01:30.000 bench_start pass={p.key}",
                      f"{s + 120:.3f} 2026-12-01 10:03:30.000 bench_end pass={p.key} rc=0"]
            tps = 85.0 * (1.1 if la.mode == "b" else 1.0) * (1 + u + rng.gauss(0, 0.01))
            passes.append(PassSummary("camp", la.mode, verdict="ok", bench=BenchResult(output_tps=tps),
                                      ref=PassRef(la.index, p.key, la.mode, 8, p.repeat, 40)))
        lay.events.write_text("\n".join(lines) + "\n")
    write_summary(CampaignSummary("camp", None, c, passes=tuple(passes)), root.root)
    return root.root


def test_inputs_measured_from_a_campaign(tmp_path):
    from slurm_ab.cli.planner import from_campaign, inputs
    m = from_campaign(_campaign_dir(tmp_path))
    assert m["load_min"] == pytest.approx(1.0) and m["warmup_min"] == pytest.approx(0.5)
    assert m["pass_min"] == pytest.approx(2.0)
    assert m["components"].launches == 6 and m["components"].pass_cov > 0
    noise, minutes, notes = inputs(_campaign_dir(tmp_path / "x"), 0.03, None, None, 4.0, "output_tps")
    assert noise.launch_cov == 0.03 and minutes["pass_min"] == 4.0 and "first pass" in notes[1]


def test_plan_command_prints_a_design_and_its_node_hours(cli):
    code, out, err = cli("plan", "tp32", "tp32-dflash", "--launch-cov", "1.5", "--pass-cov", "1.5",
                         "--load-min", "15", "--pass-min", "5", "--detect", "5%", "--time-limit-min", "600")
    assert code == 0, err
    assert "design:" in out and "node-hours:" in out and "8 nodes x 2 x" in out and "--launches" in out
    code, out, _ = cli("plan", "tp32", "tp32-dflash", "--launch-cov", "1.5", "--pass-cov", "1.5",
                       "--load-min", "15", "--pass-min", "5")          # the example site's 2 h limit
    assert code == 1 and "out of reach within the time limit 120 min" in out
    code, _, err = cli("plan", "tp32", "tp32-dflash", "--load-min", "15", "--pass-min", "5")
    assert code == 2 and "--launch-cov" in err
