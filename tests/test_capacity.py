"""The capacity search (issue 33 item 2): the job's stdlib program and the collector decide alike,
the bracket narrows by bisection, the options are validated, the job script runs the program."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ab.ab_stats import capacity as search
from slurm_ab.collect.capacity import compare_capacity, search_result
from slurm_ab.collect.records import BenchResult, PassRef, PassSummary
from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
from slurm_ab.model.errors import ConfigErrors
from slurm_ab.model.sources import Sources

SPEC = {"slo_ms": {"tpot": 60.0}, "attainment": 0.9, "lo": 2.0, "hi": 10.0, "probes": 4,
        "passes": [{"key": f"probe{k}", "bench": f"bench-probe{k}.jsonl"} for k in range(1, 5)]}


def _bench(path: Path, rate: float, knee: float, n: int = 40) -> None:
    """A probe's client output: below the knee every request's TPOT is 40 ms, above it a third are 80 ms."""
    tpot = [0.04 if rate <= knee or i % 3 else 0.08 for i in range(n)]
    rec = {"ttfts": [0.1] * n, "itls": [[t] * 9 for t in tpot], "output_lens": [10] * n, "errors": [""] * n,
           "duration": n / rate + 1, "completed": n}
    path.write_text(json.dumps(rec) + "\n")


def _run_search(tmp_path: Path, knee: float) -> list[float]:
    """The job's loop: before each probe the program (as a subprocess, stdlib only) names its rate."""
    spec = tmp_path / "capacity.json"
    spec.write_text(json.dumps(SPEC))
    prog = tmp_path / "capacity.py"
    prog.write_text(Path(search.__file__).read_text())
    rates = []
    for p in SPEC["passes"]:
        out = subprocess.run([sys.executable, "-S", str(prog), str(spec), str(tmp_path), p["key"]],
                             capture_output=True, text=True, check=True).stdout.split()[-1]
        rates.append(float(out))
        _bench(tmp_path / p["bench"], rates[-1], knee)
    return rates


def test_bisection_brackets_the_knee_and_the_collector_agrees(tmp_path):
    rates = _run_search(tmp_path, knee=5.3)
    assert rates == [6.0, 4.0, 5.0, 5.5]
    passes = [PassSummary("R", "tp32", bench=BenchResult(duration_s=40 / r + 1), ref=PassRef(1, f"probe{k}", "tp32", 40, k, 40, r))
              for k, r in enumerate(rates, 1)]
    res = search_result("tp32", 1, SPEC, passes, [tmp_path / p["bench"] for p in SPEC["passes"]])
    assert res.agrees and (res.capacity_rps, res.upper_rps) == (5.0, 5.5)
    assert [p.met for p in res.probes] == [False, True, True, False]
    assert res.probes[1].attainment == 1.0 and res.probes[0].attainment == pytest.approx(26 / 40)
    assert res.text == "5 req/s (met; 5.5 req/s did not)"
    # a job whose decisions differ from the recomputed ones is said
    bad = search_result("tp32", 1, SPEC, passes[:1] + [PassSummary("R", ref=PassRef(1, "probe2", rate=3.0))],
                        [tmp_path / p["bench"] for p in SPEC["passes"][:2]])
    assert not bad.agrees and "the job ran 3 req/s, the recomputed search gives 4" in bad.notes[0]


def test_capacities_are_compared_only_when_their_brackets_do_not_overlap(tmp_path):
    from slurm_ab.collect.capacity import CapacitySummary
    a = CapacitySummary("a", 1, {}, 0.9, 2, 10, (), 5.0, 5.5)
    b = CapacitySummary("b", 2, {}, 0.9, 2, 10, (), 6.0, 6.5)
    c = CapacitySummary("c", 3, {}, 0.9, 2, 10, (), 5.5, 7.0)
    d = CapacitySummary("d", 4, {}, 0.9, 2, 10, (), 5.5, 6.0)
    assert "b's capacity is higher (+20%) (brackets apart; one probe per rate" in compare_capacity(a, b)
    assert "a's capacity is lower (-17%)" in compare_capacity(b, a)
    assert "not resolved" in compare_capacity(b, c)
    # touching brackets (a failed at 5.5 req/s, d met it): one probe's noise apart, never a direction (lane 3: 0.5.24 measured [6, 7) above 0.5.23's [5, 6)
    # though its analytic knee, 5.21 req/s, is below 0.5.23's 5.37)
    assert "not resolved" in compare_capacity(a, d) and "not resolved" in compare_capacity(d, a)


@pytest.mark.parametrize("args, words", [
    (["--slo", "tpot"], "--slo = 'tpot': 'tpot' is not METRIC:MS"),
    (["--slo", "tpot:60", "--attainment", "190%"], "--attainment = '190%': not a share"),
    (["--slo", "tpot:60", "--rates", "8:2"], "capacity.rate_hi = 2.0: the bracket needs 0 < rate_lo (8) < rate_hi"),
    (["--slo", "tpot:60", "--probes", "0"], "capacity.probes = 0: not a number of probes"),
    ([], "capacity.slo_ttft_ms = 0.0: the capacity search needs an SLO"),
])
def test_bad_capacity_options_exit_2_naming_them(tmp_path, args, words):
    r = subprocess.run([sys.executable, "-m", "slurm_ab", "capacity", "tp32", "--dry-run", *args], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_the_job_runs_the_program_before_each_probe(tmp_path):
    plan = plan_job(Sources("example", (), ("paths.results=/r", "capacity.slo_tpot_ms=60")), ["tp32", "tp32-dflash"],
                    "R", CampaignOptions(capacity=True))
    c = plan.campaign.campaign
    assert [la.mode for la in c.launches] == ["tp32", "tp32-dflash"] and c.capacity["probes"] == 5
    assert [p.spec.rsplit(":", 1)[1] for p in plan.campaign.launches[0].passes] == ["search"] * 5
    from slurm_ab.job.render import render_script
    text = render_script(plan)
    assert "if [[ $PASS_RATE == search ]]; then capacity_rate || break; fi" in text
    assert Path(search.__file__).read_text() in text           # the program, verbatim
    assert json.loads(plan.capacity.spec)["passes"][0] == {"key": "probe1", "bench": "bench-probe1.jsonl"}
