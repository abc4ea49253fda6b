"""Group-sequential campaigns: boundaries against published values and a multivariate-normal
reference, the look (stdlib only) against statsmodels, and the look's decisions."""
from __future__ import annotations

import ast
import json
import math
import random

import numpy as np
import pytest
from scipy import stats

from slurm_ab.ab_stats import looks
from slurm_ab.ab_stats.sequential import boundaries, critical_table, exit_probabilities, nominal_alpha, spending


def test_power_spending_spends_alpha_t_squared():
    """Kim-DeMets alpha t^2: the first of K = 4 looks spends 0.05 / 16 (two-sided)."""
    assert spending(0.25, 0.05, "power-2") == pytest.approx(0.05 / 16)
    cs = boundaries(4, 0.05, "power-2")
    assert 2 * stats.norm.sf(cs[0]) == pytest.approx(0.05 / 16, rel=1e-6)
    assert sum(exit_probabilities(4, 0.0, 0.05, "power-2")) == pytest.approx(0.05, abs=1e-8)
    assert cs[0] < boundaries(4)[0] and cs[-1] > boundaries(4)[-1]     # more early, less at the end


def test_obrien_fleming_boundaries_are_the_published_ones():
    """rpact getDesignGroupSequential(kMax = 4, alpha = 0.05, sided = 2, typeOfDesign = "asOF")
    and gsDesign sfLDOF: 4.333, 2.963, 2.359, 2.014."""
    assert boundaries(4) == pytest.approx((4.3326, 2.9631, 2.3590, 2.0141), abs=1e-4)
    assert spending(1.0) == pytest.approx(0.05)
    assert sum(exit_probabilities(4, 0.0)) == pytest.approx(0.05, abs=1e-9)
    for k in (2, 3, 6):
        assert sum(exit_probabilities(k, 0.0)) == pytest.approx(0.05, abs=1e-8)


def test_exit_probabilities_against_scipy_multivariate_normal():
    """P(no stop at looks 1..3) of K = 3 under no change: the canonical joint normal
    (corr sqrt(t_i / t_j)) integrated by scipy over the continuation box."""
    cs = boundaries(3)
    t = np.arange(1, 4) / 3
    r = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    inside = stats.multivariate_normal.cdf(np.array(cs), np.zeros(3), r, lower_limit=-np.array(cs),
                                           abseps=1e-8, releps=1e-8, rng=np.random.default_rng(1))
    assert 1 - inside == pytest.approx(0.05, abs=2e-5)
    assert nominal_alpha(3)[-1] == pytest.approx(2 * stats.norm.sf(cs[-1]))


def test_critical_table_is_the_t_quantile_at_each_looks_nominal_level():
    b = critical_table(3, 10)
    for k, p in enumerate(b.nominal):
        for df in (1, 5, 10):
            assert b.critical[k][df - 1] == pytest.approx(stats.t.isf(p / 2, df), rel=1e-5)


def test_looks_module_imports_the_standard_library_only():
    """The job runs this file with the client's Python: no slurm_ab, numpy or scipy."""
    tree = ast.parse(open(looks.__file__).read())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "json", "math", "re", "sys"}, mods
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def test_mode_effect_is_statsmodels_ols_on_mode_and_position():
    from statsmodels.regression.linear_model import OLS
    rng = random.Random(3)
    units = [(i, m == "B", math.log(100) + (0.05 if m == "B" else 0) + 0.002 * i + rng.gauss(0, 0.02))
             for i, m in enumerate("ABBAABBAABBA", 1)]
    est, s2, df, inv = looks.mode_fit(units)
    se = math.sqrt(s2 * inv)
    x = np.array([[1.0, float(b), float(p)] for p, b, _ in units])
    fit = OLS(np.array([y for _, _, y in units]), x).fit()
    assert (est, se, df) == pytest.approx((fit.params[1], fit.bse[1], fit.df_resid), rel=1e-9)
    assert looks.mode_fit(units[:3]) is None


def _spec(k_max: int, margin: float = 3.0) -> dict:
    b = critical_table(k_max, 4 * k_max)
    return {"critical": [list(r) for r in b.critical], "blocks": [[0]] * k_max, "margin_pct": margin,
            "better": "higher", "log": True}


def _units(blocks: int, effect: float, sd: float, seed: int = 1):
    rng = random.Random(seed)
    return [(4 * b + j + 1, m == "B", math.log1p(effect if m == "B" else 0.0) + rng.gauss(0, sd))
            for b in range(blocks) for j, m in enumerate("ABBA")]


def test_a_look_decides_better_worse_equivalent_or_goes_on():
    spec = _spec(4)
    assert looks.decide(_units(1, -0.2, 0.01), 1, spec)["decision"] == "continue"   # df 1: never at look 1
    d = looks.decide(_units(2, -0.2, 0.01), 2, spec)
    assert d["decision"] == "worse" and d["high_pct"] < 0 and d["df"] == 5
    assert looks.decide(_units(2, 0.2, 0.01), 2, spec)["decision"] == "better"
    eq = looks.decide(_units(3, 0.0, 0.002), 3, spec)
    assert eq["decision"] == "equivalent" and -3 < eq["low_pct"] < 0 < eq["high_pct"] < 3
    assert looks.decide(_units(2, 0.0, 0.002), 2, _spec(4, 0.0))["decision"] == "continue"   # no margin
    assert looks.decide(_units(4, 0.0, 0.05), 4, spec)["decision"] == looks.MAX_DECISION
    lower = dict(spec, better="lower")
    assert looks.decide(_units(2, -0.2, 0.01), 2, lower)["decision"] == "better"


def test_a_look_reads_the_clients_own_files(tmp_path):
    """Steady-state block of the client log first, else the record's makespan figure; a pass
    without a value is named as missing."""
    spec = dict(_spec(2), metric="output_tps", a="x", b="y", launches=[], blocks=[[1, 2, 3, 4], [5, 6, 7, 8]])
    for i, m in enumerate("xyyxxyyx", 1):
        d = tmp_path / f"launch{i}-{m}"
        (d / "logs").mkdir(parents=True)
        v = 100.0 * (1.3 if m == "y" else 1.0) * (1 + 0.01 * ((i * 7) % 5 - 2))
        (d / "bench-c8-r1.jsonl").write_text('{"output_throughput": %r}\n{"cut' % (v * 0.9))
        if i != 3:
            (d / "logs" / "client-c8-r1.log").write_text(
                "==== Steady-State Result ====\nOutput token throughput (tok/s):   %.2f\n" % v)
        spec["launches"].append({"index": i, "mode": m, "dir": d.name, "passes": [
            {"key": "c8-r1", "bench": "bench-c8-r1.jsonl", "client_log": "logs/client-c8-r1.log"},
            {"key": "c8-r2", "bench": "bench-c8-r2.jsonl", "client_log": "logs/client-c8-r2.log"}]})
    out = looks.look(spec, 2, str(tmp_path))
    assert out["passes"] == 8 and out["missing"].count(":c8-r2") == 8
    assert out["decision"] == "better" and 20 < out["estimate_pct"] < 40
    assert looks.pass_value("output_tps", str(tmp_path / "launch3-y/bench-c8-r1.jsonl"),
                            str(tmp_path / "launch3-y/logs/client-c8-r1.log"))[1] == "record"
    line = " ".join(looks.fields(out))
    assert line.startswith("look=2 blocks=2 of=2 launches_a=4 launches_b=4 passes=8 ") and "decision=better" in line


def _sequential_campaign(blocks: int = 3):
    from slurm_ab.model.campaign import schedule
    return schedule(("tp32", "tp32-dflash"), 1, (8,), "counterbalanced", False, 16, launches=2 * blocks,
                    margin_pct=3.0, sequential=True)


def _write_passes(root, campaign, effect: float, upto: int):
    """Each launch's client result file (makespan figure only, as SGLang 0.5.2 writes it)."""
    from slurm_ab.model.rundir import launch_dirname
    rng = random.Random(7)
    for la in campaign.launches[:upto]:
        d = root / launch_dirname(la)
        (d / "logs").mkdir(parents=True, exist_ok=True)
        for p in la.passes:
            v = 1000.0 * (1 + (effect if la.mode == "tp32-dflash" else 0)) * (1 + rng.gauss(0, 0.01))
            (d / f"bench-{p.key}.jsonl").write_text(json.dumps({"output_throughput": v}) + "\n")


def test_the_collector_recomputes_every_look_and_says_whether_the_job_agrees(tmp_path):
    from slurm_ab.ab_stats.sequential import job_spec
    from slurm_ab.collect.sequential import recompute
    from slurm_ab.parse.events import read_events
    c = _sequential_campaign()
    _write_passes(tmp_path, c, -0.3, 8)
    spec = job_spec(c)
    lines = []
    for k in (1, 2):
        r = looks.look(spec, k, str(tmp_path))
        lines.append(f"1.0 2026-12-03 10:00:00.000 sequential_look {' '.join(looks.fields(r))}")
    assert r["decision"] == "worse"
    lines.append("2.0 2026-12-03 10:00:01.000 sequential_stop look=2 decision=worse launches_run=8 launches_planned=12")
    (tmp_path / "events.log").write_text("\n".join(lines) + "\n")
    rec = recompute(tmp_path, c, read_events(tmp_path / "events.log"))
    assert rec.agree and rec.stopped_at == 2 and rec.decision == "worse" and rec.verdict == "worse"
    assert [x.agrees for x in rec.looks] == [True, True] and rec.high_pct < 0
    # the record goes into summary.json and back (CampaignSummary.sequential, typed)
    from slurm_ab.collect.records import CampaignSummary, read_record
    back = read_record(CampaignSummary, json.loads(json.dumps(CampaignSummary("r", None, c, sequential=rec).to_dict())))
    assert back.sequential == rec
    # the comparison's primary row is the deciding look's answer, not a fixed-design interval
    from slurm_ab.collect.rows import PassRow, comparisons_of
    from slurm_ab.model.rundir import Layout
    rows = [PassRow.of({"mode": la.mode, "concurrency": 8, "repeat": p.repeat, "launch": la.index, "verdict": "ok",
                        "output_tps": json.loads(Layout(tmp_path).launch(la).bench(p.key).read_text())["output_throughput"]})
            for la in c.launches[:8] for p in la.passes]
    fixed = comparisons_of(c, rows)[0].rows[0]
    (cmp,) = comparisons_of(c, rows, rec)
    head = cmp.rows[0]
    assert head.verdict == "worse" and (head.delta.ci_low_pct, head.delta.ci_high_pct) == (rec.low_pct, rec.high_pct)
    assert head.delta.p_value is None and head.delta.confidence == pytest.approx(1 - rec.nominal)
    assert fixed.delta.p_value is not None and cmp.rows[1:] == comparisons_of(c, rows)[0].rows[1:]
    # a job whose logged look differs from the raw files is said to differ
    (tmp_path / "events.log").write_text("\n".join([lines[0].replace("passes=4", "passes=3")] + lines[1:]) + "\n")
    assert not recompute(tmp_path, c, read_events(tmp_path / "events.log")).agree


def test_a_sequential_script_carries_its_boundaries_and_the_stop_rule_verbatim(cli):
    import re
    import shutil
    import subprocess
    code, script, err = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--launches", "6")
    assert code == 0, err
    assert "SEQ_LOOK_AFTER=(4 8 12)" in script and "SEQ_PYTHON=(python3)" in script
    program = script.split("<<'SLURM_AB_STOP_RULE'\n")[1].split("\nSLURM_AB_STOP_RULE\n")[0]
    assert program == open(looks.__file__).read().rstrip("\n")
    spec = json.loads(script.split("<<'SLURM_AB_SEQUENTIAL_SPEC'\n")[1].split("\nSLURM_AB_SEQUENTIAL_SPEC\n")[0])
    assert spec["blocks"] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]] and spec["margin_pct"] == 3.0
    assert spec["z"] == pytest.approx(list(boundaries(3, 0.05, "power-2")), abs=1e-6) and spec["spending"] == "power-2"
    assert spec["launches"][2]["dir"] == "launch3-tp32-dflash" and spec["launches"][2]["passes"][0]["bench"] == \
        "bench-c8-r3.jsonl"     # two passes per launch, numbered per mode
    assert "sequential: a look after each of at most 3 counterbalanced blocks" in err
    assert re.search(r"look boundaries \|z\| >= 2\.773, 2\.347, 2\.062", err)
    code, script, _ = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--launches", "6", "--set",
                          "benchmark.spending=obrien-fleming")
    assert '"z": [\n  3.710' in script or "3.7103" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", "-s", "bash", "-"], input=script, text=True, capture_output=True)
        assert r.returncode == 0, r.stdout[-3000:]
    code, _, err = cli("dry-run", "tp32", "tp32-dflash", "--sequential", "--concurrency", "1,8")
    assert code == 2 and "--concurrency" in err and "one concurrency" in err


def test_an_aa_campaign_ends_equivalent_or_runs_to_its_maximum():
    """The local cluster's A/A campaign (tp32 against a copy of itself, issue 30) through the job's
    own stop rule, by simulation instead of a second job: 3 blocks at most, margin 3 %, launch noise
    from 1 % to 8 % (this machine's launch-to-launch range) and a random drift. A campaign stops only
    for 'equivalent' or at its last look ('no significant difference'), or, at the test's level,
    for better/worse: counted over every look, at most the issue's 7.5 %. With little noise it
    ends 'equivalent'."""
    from collections import Counter

    from slurm_ab.ab_stats.sequential import job_spec
    spec = job_spec(_sequential_campaign(3))
    is_b = {x["index"]: x["mode"] == spec["b"] for x in spec["launches"]}
    for cov in (0.01, 0.03, 0.08):
        rng = random.Random(30)
        ends = Counter()
        for _ in range(1000):
            drift, units = rng.gauss(0, 0.002), []
            for k, blk in enumerate(spec["blocks"], 1):
                units += [(i, is_b[i], drift * i + rng.gauss(0, cov)) for i in blk]
                d = looks.decide(units, k, spec)["decision"]
                if d != looks.CONTINUE:
                    break
            ends[d if d != looks.MAX_DECISION else f"{d} at look {k}"] += 1
        assert set(ends) <= {"better", "worse", "equivalent", f"{looks.MAX_DECISION} at look 3"}, (cov, ends)
        assert ends["better"] + ends["worse"] <= 75, (cov, ends)
        if cov == 0.01:
            assert ends["equivalent"] >= 900, ends


def test_no_look_for_a_block_the_job_did_not_finish(tmp_path):
    """A job that ended inside block 1 (launch 4 never ended: cancelled, node lost) took no look, and
    the collector computes none; once every launch of the block has ended, the look the job would
    have taken (killed before logging it) is computed."""
    from slurm_ab.collect.sequential import recompute
    from slurm_ab.parse.events import read_events
    c = _sequential_campaign()
    _write_passes(tmp_path, c, -0.3, 3)
    ends = [f"{i}.0 2026-12-03 10:00:0{i}.000 launch_end launch={i} mode={c.launches[i - 1].mode} status=ok rc=0"
            for i in (1, 2, 3)]
    (tmp_path / "events.log").write_text("\n".join(ends) + "\n")
    rec = recompute(tmp_path, c, read_events(tmp_path / "events.log"))
    assert rec.looks == () and rec.decision == "continue" and rec.stopped_at is None
    _write_passes(tmp_path, c, -0.3, 4)
    ends.append(f"4.0 2026-12-03 10:00:04.000 launch_end launch=4 mode={c.launches[3].mode} status=ok rc=0")
    (tmp_path / "events.log").write_text("\n".join(ends) + "\n")
    rec = recompute(tmp_path, c, read_events(tmp_path / "events.log"))
    assert [x.look for x in rec.looks] == [1] and rec.looks[0].job == ""
