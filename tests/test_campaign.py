"""Campaign schedules (pure) and the campaign tables."""
from __future__ import annotations

import pytest

from slurm_ab.model.rundir import launch_dirname
from slurm_ab.model.campaign import Campaign, parse_concurrencies, prompts_for, schedule
from slurm_ab.collect import rows as data
from slurm_ab.collect.rows import PassRow
from slurm_ab.tables import campaign as ct


def test_a_run_of_one_mode_is_a_campaign_of_one_pass():
    c = schedule(("tp32",), 1, (8,), "blocked", False, 40)
    assert len(c.launches) == 1 and len(c.passes) == 1 and launch_dirname(c.launches[0]) == "launch1-tp32"
    p = c.passes[0]
    assert (p.launch, p.mode, p.concurrency, p.repeat, p.prompts, p.key) == (1, "tp32", 8, 1, 40, "c8-r1")


def test_blocked_launches_each_mode_once():
    c = schedule(("tp32", "tp32-dflash"), 3, (1, 8), "blocked", False, 40)
    assert [(x.index, x.mode, launch_dirname(x)) for x in c.launches] == [
        (1, "tp32", "launch1-tp32"), (2, "tp32-dflash", "launch2-tp32-dflash")]
    assert [p.key for p in c.launches[0].passes] == ["c1-r1", "c1-r2", "c1-r3", "c8-r1", "c8-r2", "c8-r3"]
    assert len(c.passes) == 12 and "within one launch only" in c.variance


def test_interleaved_relaunches_per_repeat():
    c = schedule(("a", "b"), 1, (8,), "interleaved", False, 40, launches=3)
    assert [(x.mode, [p.repeat for p in x.passes]) for x in c.launches] == [
        ("a", [1]), ("b", [1]), ("a", [2]), ("b", [2]), ("a", [3]), ("b", [3])]
    assert "across launches" in c.variance


def test_burn_in_pass_per_launch_is_not_a_timed_pass():
    c = schedule(("a", "b"), 2, (4, 8), "blocked", True, 40, prompts_per_concurrency=5)
    first = c.launches[0].passes[0]
    assert first.burn_in and first.key == "c4-burnin" and first.prompts == 20
    assert all(not p.burn_in for p in c.passes) and len(c.passes) == 8
    one = schedule(("a",), 1, (8,), "blocked", True, 40)
    assert [p.key for p in one.launches[0].passes] == ["c8-burnin", "c8-r1"] and len(one.passes) == 1


def test_prompts_scale_with_concurrency_only_when_asked():
    assert prompts_for(1, 40, 0) == 40 and prompts_for(16, 40, 5) == 80


def test_round_trip_through_the_manifest_dict():
    c = schedule(("a", "b"), 2, (1, 8), "interleaved", True, 40, 5)
    assert Campaign.from_dict(c.to_dict()) == c


def test_parse_concurrencies():
    assert parse_concurrencies("1, 8,16,8") == (1, 8, 16)
    for bad in ("0", "x", "", "1,-2"):
        with pytest.raises(ValueError):
            parse_concurrencies(bad)


def _rows():
    rows = []
    for mode, tps, tpot in (("tp32", (86.0, 85.2, 86.9), 76.0), ("tp32-dflash", (68.2, 67.5, 69.0), 98.4)):
        for k, v in enumerate(tps, 1):
            rows.append({"mode": mode, "concurrency": 8, "repeat": k, "launch": 1 if mode == "tp32" else 2,
                         "verdict": "ok", "reason": "", "output_tps": v, "input_tps": v * 32,
                         "tpot_mean_ms": tpot + k / 10})
    rows.append({"mode": "tp32-dflash", "concurrency": 8, "repeat": 4, "launch": 2, "verdict": "failed",
                 "reason": "replica 0: OOM", "output_tps": None})
    return [PassRow.of(r) for r in rows]


def test_aggregate_and_passes_tables():
    rows = _rows()
    agg = ct.aggregate_table(rows)
    assert "| tp32 " in agg and "3/3" in agg and "3/4" in agg and " ± " in agg
    rec = data.aggregates(rows)[0]
    assert rec.metrics["output_tps"].n == 3 and rec.metrics["output_tps"].cov > 0
    assert rec.to_dict()["metrics"]["output_tps"]["n"] == 3
    passes = ct.passes_table(rows)
    # the verdict word in the table, the reason below it
    assert "| failed " in passes and passes.count("\n") == 2 + len(rows) + 2
    assert passes.splitlines()[-1] == "- tp32-dflash 8 (launch 2): failed: replica 0: OOM"


def test_comparison_table_says_change_interval_verdict_and_variance():
    rows = _rows()
    a = [r for r in rows if r.mode == "tp32"]
    b = [r for r in rows if r.mode == "tp32-dflash"]
    text = ct.comparison_table("tp32", "tp32-dflash", a, b, variance="within one launch only")
    line = next(x for x in text.splitlines() if x.startswith("| **Output TPS"))
    assert "worse (within-launch only)" in line and "[-" in line and "%" in line and "(primary)" in line
    assert "variance included: within one launch only" in text and "B: 1 pass(es) not ok" in text
    assert "launch and mode are confounded" in text
    js = [r.to_dict() for r in data.family([(a, b)])[0]]
    assert js[0]["metric"] == "output_tps" and js[0]["role"] == "primary" and js[0]["n_b"] == 3
    assert js[0]["verdict"] == "worse (within-launch only)" and js[0]["variance_levels"] == ["pass"]
    assert all(not r["verdict"] or r["verdict"].endswith("(within-launch only)") for r in js)


def test_comparison_with_launches_as_units_has_plain_verdicts_and_holm():
    rows = [PassRow.of({"mode": m, "concurrency": 8, "repeat": k, "launch": launch, "verdict": "ok",
                        "output_tps": base * (1 + 0.004 * k) * (1 + 0.01 * (launch % 2)),
                        "tpot_mean_ms": 76.0 * (1 + 0.003 * k + 0.01 * launch), "requests_ok": 40})
            for m, base, launches in (("a", 86.0, (1, 4)), ("b", 78.0, (2, 3))) for launch in launches
            for k in (1, 2)]
    a, b = [r for r in rows if r.mode == "a"], [r for r in rows if r.mode == "b"]
    js = [r.to_dict() for r in data.family([(a, b)])[0]]
    assert js[0]["verdict"] == "worse" and js[0]["variance_levels"] == ["launch", "pass"]
    assert (js[0]["launches_a"], js[0]["launches_b"]) == (2, 2) and js[0]["p_holm"] is None
    assert js[1]["role"] == "secondary" and js[1]["p_holm"] >= js[1]["p_value"]
    text = ct.comparison_table("a", "b", a, b)
    assert "a (n=4, 2 launch(es))" in text and "launches are the units" in text
    assert "Holm-adjusted" in text and "within-launch" not in text


def test_comparison_of_single_passes_is_inconclusive_and_says_why():
    a = [PassRow.of({"mode": "x", "concurrency": 8, "repeat": 1, "verdict": "ok", "output_tps": 85.99})]
    b = [PassRow.of({"mode": "y", "concurrency": 8, "repeat": 1, "verdict": "ok", "output_tps": 68.20})]
    text = ct.comparison_table("x", "y", a, b)
    assert "inconclusive (n=1)" in text and "no interval can be given" in text
    assert "-20.69%" in text


def test_curve_table_has_a_line_per_concurrency():
    rows = [PassRow.of({"mode": "a", "concurrency": c, "repeat": r, "verdict": "ok", "output_tps": 10.0 * c + r,
                        "tpot_mean_ms": 40 + c, "ttft_mean_s": 1.0 + c / 10, "ttft_p95_s": 2.0})
            for c in (1, 8) for r in (1, 2, 3)]
    text = ct.curve_table(rows)
    assert "| a      |   1 |   3 |" in text.replace("Mode  ", "Mode  ") or text.count("| a ") == 2
    assert text.count("\n") == 4
