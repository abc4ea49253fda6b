"""A sequential campaign's prior (--prior-from): the pilot's launch-mean variance pooled into each
look (looks.pooled, known values), the F guard that drops it, the option's validation and
dry-run, the spec's golden, and the collector agreeing with the job's look."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from scipy import stats

from helpers.scripts import check_golden
from slurm_ab.ab_stats import looks
from slurm_ab.ab_stats.sequential import PRIOR_GUARD, critical_table, job_spec, prior_spec
from slurm_ab.model.campaign import Campaign, Prior, schedule

# four launches of block 1 (A B B A): log values; mode effect +0.10, one residual degree of freedom along (1, -3, 3, -1): rss = 0.1^2 / 20
UNITS = [(1, False, 0.00), (2, True, 0.12), (3, True, 0.09), (4, False, 0.01)]


def _spec(k_max: int, prior: dict | None = None) -> dict:
    df0 = prior["df"] if prior else 0
    b = critical_table(k_max, 4 * k_max + df0)
    out = {"critical": [list(r) for r in b.critical], "blocks": [[0]] * k_max, "margin_pct": 3.0,
           "better": "higher", "log": True}
    if prior:
        out["prior"] = prior_spec(prior["variance"], df0, 4 * k_max)
    return out


def _ols(units):
    """Independent: numpy's least squares of (1, is B, position), residual variance and (X'X)^-1."""
    x = np.array([[1.0, float(b), float(p)] for p, b, _ in units])
    y = np.array([v for _, _, v in units])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    df = len(units) - 3
    s2 = float(((y - x @ beta) ** 2).sum() / df)
    return float(beta[1]), s2, df, float(np.linalg.inv(x.T @ x)[1, 1])


def test_the_pooled_look_has_known_values():
    """Block 1 alone: estimate 0.10, own variance 0.0005 on 1 df ((X'X)^-1 of the mode 1.0);
    a prior 0.0004 on 5 df pools to (5 x 0.0004 + 1 x 0.0005) / 6 on 6 df."""
    est, s2, df, inv = _ols(UNITS)
    assert (est, s2, df, inv) == pytest.approx((0.10, 0.0005, 1, 1.0), abs=1e-12)
    assert looks.mode_fit(UNITS) == pytest.approx((est, s2, df, inv), abs=1e-12)
    prior = prior_spec(0.0004, 5, 8)
    e, se, d, use = looks.pooled(looks.mode_fit(UNITS), prior)
    assert use == "used" and d == 6 and e == pytest.approx(0.10)
    assert se == pytest.approx(math.sqrt((5 * 0.0004 + 0.0005) / 6), rel=1e-12)
    # the look: t with 6 df at the first look's nominal level of 2 blocks (power-2: 0.0125)
    spec = _spec(2, {"variance": 0.0004, "df": 5})
    out = looks.decide(UNITS, 1, spec)
    crit = stats.t.isf(0.0125 / 2, 6)
    assert out["df"] == 6 and out["crit"] == pytest.approx(crit, rel=1e-5) and out["prior"] == "used"
    assert out["low_pct"] == pytest.approx(math.expm1(0.10 - crit * se) * 100, rel=1e-6)
    assert out["decision"] == "better"
    # without a prior the same look has 1 df and cannot decide; its fields have no prior key
    plain = looks.decide(UNITS, 1, _spec(2))
    assert plain["decision"] == "continue" and plain["df"] == 1 and "prior" not in plain
    assert not any(f.startswith("prior=") for f in looks.fields(plain))
    assert looks.fields(out)[-1] == "prior=used"


def test_the_guard_drops_a_prior_the_looks_own_variance_contradicts():
    """One-sided F test at PRIOR_GUARD: own variance / prior above F_{1-g}(df, df0) drops the prior
    (own se and df, prior=dropped); below it (however far) keeps it (pooling then widens)."""
    spec = prior_spec(0.0004, 5, 8)
    assert spec["guard"] == PRIOR_GUARD
    assert spec["f_upper"] == pytest.approx([stats.f.isf(PRIOR_GUARD, d, 5) for d in range(1, 9)], rel=1e-5)
    s2 = 0.0005
    f1 = spec["f_upper"][0]
    small = dict(spec, variance=s2 / f1 * 0.999)        # own / prior just above the quantile: dropped
    e, se, d, use = looks.pooled(looks.mode_fit(UNITS), small)
    assert use == "dropped" and d == 1 and se == pytest.approx(math.sqrt(s2), rel=1e-12)
    kept = dict(spec, variance=s2 / f1 * 1.001)
    assert looks.pooled(looks.mode_fit(UNITS), kept)[3] == "used"
    assert looks.pooled(looks.mode_fit(UNITS), dict(spec, variance=1.0))[3] == "used"     # larger prior: kept
    out = looks.decide(UNITS, 1, dict(_spec(2), prior=small))
    assert out["prior"] == "dropped" and out["df"] == 1 and out["decision"] == "continue"
    # no estimate at all (3 launches): said, with the prior's field
    assert looks.decide(UNITS[:3], 1, dict(_spec(2), prior=spec))["prior"] == "-"


def test_no_spread_of_its_own_still_decides_with_a_prior():
    """Launch means exactly on the fit (own variance 0) keep the prior (ratio 0): the interval's
    width is the prior's, not zero."""
    flat = [(1, False, 0.0), (2, True, 0.1), (3, True, 0.1), (4, False, 0.0)]
    out = looks.decide(flat, 1, _spec(2, {"variance": 0.0004, "df": 5}))
    assert out["prior"] == "used" and out["se"] == pytest.approx(math.sqrt(5 * 0.0004 / 6)) and out["note"] == "-"
    assert looks.decide(flat, 1, _spec(2))["note"] == "no_spread"


def _campaign(prior: Prior | None) -> Campaign:
    import dataclasses
    c = schedule(("tp32", "tp32-dflash"), 1, (8,), "counterbalanced", False, 16, launches=4,
                 margin_pct=3.0, sequential=True)
    return dataclasses.replace(c, prior=prior)


def test_sequential_json_with_a_prior_golden_and_the_manifest_round_trip():
    prior = Prior(0.000412, 5, "pilot-1 (steady_output_tps, 8 launches, 2 passes per launch)")
    c = _campaign(prior)
    spec = job_spec(c)
    check_golden("sequential-prior.json", json.dumps(spec, indent=1, sort_keys=True) + "\n")
    assert len(spec["critical"][0]) == 8 + 5 and len(spec["prior"]["f_upper"]) == 8
    assert Campaign.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    # without a prior: the spec and the manifest as before (no key)
    plain = _campaign(None)
    assert "prior" not in job_spec(plain) and "prior" not in plain.to_dict()
    assert len(job_spec(plain)["critical"][0]) == 8


def test_the_collector_recomputes_a_look_with_the_prior_as_the_job_logged_it(tmp_path):
    from slurm_ab.collect.sequential import recompute
    from slurm_ab.model.rundir import launch_dirname
    from slurm_ab.parse.events import read_events
    c = _campaign(Prior(0.0004, 5, "pilot"))
    rng = random.Random(5)
    for la in c.launches[:4]:
        d = tmp_path / launch_dirname(la)
        d.mkdir(parents=True)
        v = 1000.0 * (1.3 if la.mode == "tp32-dflash" else 1.0) * (1 + rng.gauss(0, 0.01))
        (d / f"bench-{la.passes[0].key}.jsonl").write_text(json.dumps({"output_throughput": v}) + "\n")
    r = looks.look(job_spec(c), 1, str(tmp_path))
    assert r["decision"] == "better" and r["prior"] == "used" and r["df"] == 6
    line = " ".join(looks.fields(r))
    (tmp_path / "events.log").write_text(
        f"1.0 2026-12-03 10:00:00.000 sequential_look {line}\n"
        "2.0 2026-12-03 10:00:01.000 sequential_stop look=1 decision=better launches_run=4 launches_planned=8\n")
    rec = recompute(tmp_path, c, read_events(tmp_path / "events.log"))
    assert rec.agree and rec.stopped_at == 1 and rec.decision == "better" and "prior=used" in rec.looks[0].job
    assert rec.prior == "pilot" and rec.prior_uses == ("used",)
    from slurm_ab.collect.records import CampaignSummary, read_record
    back = read_record(CampaignSummary, json.loads(json.dumps(CampaignSummary("r", None, c, sequential=rec).to_dict())))
    assert back.sequential == rec
    from slurm_ab.tables.campaign import _sequential_note
    assert "the prior from pilot pooled at look 1;" in _sequential_note(rec)
    # the collector without the manifest's prior would not agree: the prior is part of the look
    assert not recompute(tmp_path, _campaign(None), read_events(tmp_path / "events.log")).agree


def test_prior_from_is_validated_and_shown_in_dry_run(cli, tmp_path):
    import test_planner
    pilot = test_planner._campaign_dir(tmp_path / "p")
    code, script, err = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--launches", "4", "--repeats", "2",
                            "--prior-from", str(pilot))
    assert code == 0, err
    assert "prior (--prior-from): launch-mean variance" in err and "one-sided F test at 0.25" in err
    assert "from camp (output_tps, 6 launches, 3 passes per launch)" in err
    spec = json.loads(script.split("<<'SLURM_AB_SEQUENTIAL_SPEC'\n")[1].split("\nSLURM_AB_SEQUENTIAL_SPEC\n")[0])
    assert spec["prior"]["df"] == 3 and spec["prior"]["variance"] > 0 and len(spec["critical"][0]) == 8 + 3
    # benchmark.spending "auto": power-1 with a prior (calibrations 5 and 6), power-2 without; a
    # named function is kept
    assert spec["spending"] == "power-1" and "alpha spending power-1" in err
    _, script, _ = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--launches", "4", "--repeats", "2")
    assert '"spending": "power-2"' in script
    _, script, _ = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--launches", "4", "--repeats", "2",
                       "--prior-from", str(pilot), "--set", "benchmark.spending=power-2")
    assert '"spending": "power-2"' in script
    # not sequential, no such run, a run without a summary: exit 2 naming the option, value and what is allowed
    code, _, err = cli("dry-run", "tp32", "tp32-dflash", "--prior-from", str(pilot))
    assert code == 2 and "--prior-from = " in err and "with --sequential" in err
    code, _, err = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--prior-from", str(tmp_path / "none"))
    assert code == 2 and "--prior-from = " in err and "no run" in err and "allowed: a collected campaign" in err
    (pilot / "summary.json").unlink()
    code, _, err = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--prior-from", str(pilot))
    assert code == 2 and "--prior-from = " in err and "collect it first" in err
    code, out, _ = cli("submit", "--help")
    assert code == 0 and "--prior-from CAMPAIGN" in out


def test_a_pilot_without_launch_variance_is_refused(cli, tmp_path):
    """One launch per mode (blocked): no launch-level variance to pool."""
    from slurm_ab.collect.records import BenchResult, CampaignSummary, PassRef, PassSummary
    from slurm_ab.collect.write import write_summary
    from slurm_ab.model.rundir import Layout, Manifest, write_manifest
    root = Layout(tmp_path / "blk")
    root.root.mkdir(parents=True)
    c = schedule(("a", "b"), 3, (8,), "blocked", False, 40, launches=1)
    write_manifest(root.root, Manifest(run_id="blk", campaign=c))
    passes = [PassSummary("blk", la.mode, verdict="ok", bench=BenchResult(output_tps=85.0 + p.repeat),
                          ref=PassRef(la.index, p.key, la.mode, 8, p.repeat, 40))
              for la in c.launches for p in la.passes]
    write_summary(CampaignSummary("blk", None, c, passes=tuple(passes)), root.root)
    code, _, err = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--prior-from", str(root.root))
    assert code == 2 and "--prior-from = " in err and "no launch-level variance" in err
