"""Campaigns on the real local Slurm cluster: A/B with repeats in one allocation, a concurrency
sweep, and a campaign whose second mode OOMs at start-up. In-job overheads are measured from
events.log and printed (figures for docs/campaigns.md)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from slurm_ab.model.rundir import Layout

from helpers import CLIENT_052, SMALL, set_args
from helpers.jobs import final_sacct, slurm_ab, wait_no_processes
from slurm_ab.parse.events import read_events

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("campaign")


def _submit(workdir: Path, run_id: str, *args: str):
    t0 = time.monotonic()
    # no --time: the local site pins none, so a campaign's limit is sized by its estimate ("auto");
    # these tests are about the campaign, not the client nor the preflight (one per job, whatever
    # the campaign; test_preflight*.py has its own): 0.5.2's client, no preflight, 128 output tokens
    # (SMALL). The emulator keeps the site's clock (0.05): at 0.02 a 2-4 ms TPOT is the host's
    # jitter
    r = slurm_ab("submit", *args, "--site", "local", "--run-id", run_id, "--wait", "--no-collector",
                 "--no-report", *CLIENT_052, *set_args("preflight.enabled=false", *SMALL),
                 cwd=workdir, timeout=900)
    return r, workdir / "results" / run_id, time.monotonic() - t0


@pytest.fixture(scope="module")
def ab(workdir):
    # the default design's shape (counterbalanced launches of several passes), smaller: A B B A,
    # 2 passes per launch
    return _submit(workdir, f"camp-ab-{int(time.time())}", "tp32", "tp32-dflash", "--launches", "2",
                   "--repeats", "2")


def _summary(run_dir: Path) -> dict:
    """summary.json as other programs read it: "rows" the passes' numeric rows."""
    return json.loads(Layout(run_dir).summary("json").read_text())


def _job(run_dir: Path) -> str:
    return json.loads(Layout(run_dir).manifest.read_text())["job_id"]


def overheads(run_dir: Path) -> dict:
    """Seconds between passes (bench_end -> next bench_start in one launch) and between modes
    (previous launch's last bench_end -> next launch's first bench_start, split into teardown,
    relaunch to ready, warm-ups + router)."""
    out = {"between_passes": [], "between_modes": [], "teardown": [], "to_ready": [], "warm_router": [],
           "pass_outside_benchmark": []}
    summary = _summary(run_dir)
    durations = {(x["launch"], x["pass"]): x["duration_s"] for x in summary["rows"]}
    prev_end = None
    for la in summary["launches"]:
        ev = read_events(Layout(run_dir / la["dir"]).events).events
        starts = [e for e in ev if e.name == "bench_start"]
        ends = [e for e in ev if e.name == "bench_end"]
        out["between_passes"] += [s.epoch - e.epoch for e, s in zip(ends, starts[1:])]
        for st, en in zip(starts, ends):    # client start-up, dataset preparation, result writing
            d = durations.get((la["launch"], st.fields.get("pass")))
            if d is not None:
                out["pass_outside_benchmark"].append(round(en.epoch - st.epoch - d, 2))
        first = next((e for e in ev if e.name == "job_start"), None)
        ready = [e for e in ev if e.name == "ready"]
        rr = next((e for e in ev if e.name == "router_ready"), None)
        if prev_end is not None and starts:
            out["between_modes"].append(starts[0].epoch - prev_end[0])
            out["teardown"].append(first.epoch - prev_end[0])
        if first and ready:
            out["to_ready"].append(max(e.epoch for e in ready) - first.epoch)
        if ready and rr:
            out["warm_router"].append(rr.epoch - max(e.epoch for e in ready))
        if ends:
            prev_end = (ends[-1].epoch,)
    return out


def test_ab_campaign_runs_in_one_allocation(ab):
    r, run_dir, seconds = ab
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    job = _job(run_dir)
    info = final_sacct(job)
    assert info["state"] == "COMPLETED", info
    assert set(info["components"]) == {f"{job}+0", f"{job}+1"}       # one het allocation
    s = _summary(run_dir)
    rows = s["rows"]
    assert len(rows) == 8 and all(x["verdict"] == "ok" for x in rows), [x["reason"] for x in rows]
    assert [la["status"] for la in s["launches"]] == ["ok"] * 4
    # four server launches in the one job, counterbalanced (A B B A), each with both replicas and
    # its two passes, each torn down
    root = read_events(Layout(run_dir).events)
    assert [e.fields["mode"] for e in root.named("launch_start")] == ["tp32", "tp32-dflash", "tp32-dflash", "tp32"]
    for la in s["launches"]:
        ev = read_events(Layout(run_dir / la["dir"]).events)
        assert len(ev.named("server_launch")) == 2 and len(ev.named("bench_end")) == 2
        assert ev.named("teardown")
    # passes differ (the emulator's noise); the comparison takes the launch as its unit: the
    # primary metric's row first, with launch-level intervals and a verdict
    tps = [x["output_tps"] for x in rows if x["mode"] == "tp32"]
    assert len(set(tps)) == 4
    (cmp,) = s["comparisons"]
    primary = cmp["metrics"][0]
    # primary_metric = "output_tps": the steady-state figure when every pass has one, else the makespan one
    assert primary["role"] == "primary" and primary["metric"] in ("steady_output_tps", "output_tps")
    assert primary["variance_levels"] == ["launch", "pass"]
    assert primary["launches_a"] == primary["launches_b"] == 2 and primary["n_a"] == 4
    assert primary["ci_low_pct"] < primary["ci_high_pct"]
    assert primary["verdict"] in ("better", "worse", "equivalent within ±3%", "no significant difference")
    m = {x["metric"]: x for x in cmp["metrics"]}
    assert m["tpot_mean_ms"]["change_pct"] is not None and m["tpot_mean_ms"]["p_holm"] is not None
    # the interval column (its level beside an adjusted row's interval, issue 30)
    assert re.search(r"\|\s+interval\s+\|", r.stdout) and "variance included: across launches" in r.stdout
    assert "(primary)" in r.stdout and "within-launch only" not in r.stdout
    assert wait_no_processes(job, 30) == []
    o = overheads(run_dir)
    print(f"\nA/B campaign: {seconds:.0f} s wall; overheads {json.dumps(o)}")
    assert max(o["between_passes"]) < 5.0


def test_plan_from_the_campaign_prices_a_design(ab, workdir):
    """`slurm-ab plan A B --from CAMPAIGN` estimates the variance components from the campaign's
    own passes, prices designs with the time model (which reads the campaign's events among the
    earlier runs), and prints the cheapest design with its node-hours."""
    _, run_dir, _ = ab
    # the campaign is small and fast (16 prompts, time scale 0.02): its noise is large (launch CoV
    # ~15 %), so the target is one it can price
    r = slurm_ab("plan", "tp32", "tp32-dflash", "--from", str(run_dir), "--detect", "50%",
                 "--site", "local", "--time-limit-min", "100000", *CLIENT_052, *set_args(*SMALL), cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"from {run_dir.name}:" in r.stdout and "over 8 passes in 4 launches" in r.stdout
    assert "first pass of a launch against its later passes" in r.stdout
    assert re.search(r"^design: \d+ launches per mode x \d+ passes per launch", r.stdout, re.M)
    assert re.search(r"^node-hours: [0-9.]+ = 8 nodes x [0-9.]+ h$", r.stdout, re.M)
    # its times are --time auto's: the campaign's own launches measured under paths.results
    assert "model load" in r.stdout and "(measured: the longest of " in r.stdout
    assert "A/A false-positive rate:" in r.stdout


def test_report_and_compare_of_the_campaign(ab, workdir):
    _, run_dir, _ = ab
    r = slurm_ab("report", str(run_dir), cwd=workdir)
    assert r.returncode == 0 and "4/4" in r.stdout and " ± " in r.stdout
    r = slurm_ab("report", str(run_dir), "--passes", "--format", "md", cwd=workdir)
    passes = r.stdout.split("## Passes", 1)[1].split("\n## ", 1)[0]
    assert passes.count("| tp32") == 8, r.stdout       # tp32's and tp32-dflash's 4 passes each
    r = slurm_ab("compare", str(run_dir), "--format", "json", cwd=workdir)
    data = json.loads(r.stdout)
    assert data["comparisons"][0]["metrics"][0]["role"] == "primary"
    assert "output_tps" in [x["metric"] for x in data["comparisons"][0]["metrics"]]


def test_concurrency_sweep_gives_the_curve(workdir):
    r, run_dir, seconds = _submit(workdir, f"camp-sweep-{int(time.time())}", "tp32", "--repeats", "2",
                                  "--concurrency", "1,8", "--set", "benchmark.prompts_per_concurrency=2")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    s = _summary(run_dir)
    assert [(x["concurrency"], x["prompts"], x["verdict"]) for x in s["rows"]] == \
        [(1, 2, "ok"), (1, 2, "ok"), (8, 16, "ok"), (8, 16, "ok")]
    assert "## Throughput-latency curve" in r.stdout
    agg = {a["concurrency"]: a["metrics"] for a in s["aggregates"]}
    assert agg[8]["output_tps"]["mean"] > agg[1]["output_tps"]["mean"]
    assert agg[8]["ttft_mean_s"]["mean"] > agg[1]["ttft_mean_s"]["mean"]
    print(f"\nsweep campaign: {seconds:.0f} s wall")


def test_second_mode_oom_keeps_the_first_modes_passes(workdir):
    r, run_dir, _ = _submit(workdir, f"camp-oom-{int(time.time())}", "tp32", "tp32-dflash", "--order",
                            "blocked", "--launches", "1", "--repeats", "2",
                            *set_args("modes.tp32-dflash.args.mem-fraction-static=0.86"))
    assert r.returncode == 1                      # not every pass ok
    s = _summary(run_dir)
    verdicts = [(x["mode"], x["verdict"]) for x in s["rows"]]
    assert verdicts == [("tp32", "ok"), ("tp32", "ok"), ("tp32-dflash", "failed"), ("tp32-dflash", "failed")]
    failed = [x for x in s["rows"] if x["verdict"] == "failed"][0]
    assert "CUDA out of memory" in failed["reason"] and "mem_fraction_static=0.86" in failed["reason"]
    second = Layout(run_dir / s["launches"][1]["dir"])
    assert any(Layout(run_dir).rel(log) in failed["reason"] for log in second.server_logs()), failed["reason"]
    assert [la["status"] for la in s["launches"]] == ["ok", "failed"]
    job = _job(run_dir)
    assert final_sacct(job)["state"] == "COMPLETED"
    assert wait_no_processes(job, 30) == []
