"""End to end on the real local Slurm cluster: the three modes, and the DFlash OOM at 0.86.

Each job runs through `slurm-ab submit --wait` (submitit, het-aware watcher), the emulator stands
in for the GPU engine, the router and bench_serving are the real ones.
"""
import json
import re
import time
from pathlib import Path

import pytest

from helpers import CLIENT_052, SMALL, set_args
from helpers.jobdrive import launch_of
from helpers.jobs import events, final_sacct, run_tracked, slurm_ab, wait_no_processes
from helpers.rundir_builder import KEY
from slurm_ab.model.rundir import Layout

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

MODES = ("tp32", "pp8", "tp32-dflash")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def runs(workdir):
    """Run the three modes once (sequentially, as a user would) and keep their outcomes."""
    out = {}
    for mode in MODES:
        run_id = f"e2e-{mode}-{int(time.time())}"
        t0 = time.monotonic()
        r, tracker = run_tracked(["submit", mode, "--site", "local", "--run-id", run_id, "--wait"], cwd=workdir)
        out[mode] = dict(proc=r, run_dir=workdir / "results" / run_id, seconds=time.monotonic() - t0,
                         tracker=tracker)
    return out


def _job_id(run_dir: Path) -> str:
    return json.loads(Layout(run_dir).manifest.read_text())["job_id"]


def _bench(run_dir: Path) -> dict:
    lines = [l for l in launch_of(run_dir).bench(KEY).read_text().splitlines() if l.strip()]
    return json.loads(lines[-1])


def _summary(run_dir: Path) -> dict:
    """summary.json as other programs read it."""
    return json.loads(Layout(run_dir).summary("json").read_text())


def _pass(run_dir: Path) -> dict:
    """The record of the job's one pass (a run of one mode: the campaign of one launch and one pass)."""
    (one,) = _summary(run_dir)["passes"]
    return one


def _ts(line: str) -> str | None:
    m = STAMP.match(line)
    return m.group(1) if m else None


@pytest.mark.parametrize("mode", MODES)
def test_mode_completes_with_all_requests(runs, mode):
    run = runs[mode]
    assert run["proc"].returncode == 0, run["proc"].stdout[-3000:] + run["proc"].stderr[-3000:]
    info = final_sacct(_job_id(run["run_dir"]))
    assert info["state"] == "COMPLETED", info
    assert set(info["components"]) == {f"{info['job_id']}+0", f"{info['job_id']}+1"}
    rec = _bench(run["run_dir"])
    assert rec["completed"] == 40 and all(e == "" for e in rec["errors"])
    assert len(rec["ttfts"]) == 40


@pytest.mark.parametrize("mode", MODES)
def test_every_node_ran_its_rank(runs, mode):
    lay = launch_of(runs[mode]["run_dir"])
    for g in (0, 1):
        for rank in range(4):
            text = lay.server_log(g, rank).read_text()
            assert f"nnodes=4, node_rank={rank}," in text, (g, rank)


@pytest.mark.parametrize("mode", MODES)
def test_warmup_first_then_round_robin(runs, mode):
    run_dir = runs[mode]["run_dir"]
    ev = events(run_dir)
    kinds = [k for _, k, _ in ev]
    assert kinds.index("warmup_done") < kinds.index("router_launch") < kinds.index("bench_start")
    done = [kv for _, k, kv in ev if k == "warmup_done"]
    assert sorted(kv["replica"] for kv in done) == ["0", "1"] and all(kv["ok"] == "1" for kv in done)
    bench_start = next(l for l in launch_of(run_dir).events.read_text().splitlines() if " bench_start" in l).split()
    bench_start_ts = f"{bench_start[1]} {bench_start[2]}"
    counts = []
    for g in (0, 1):
        lines = launch_of(run_dir).server_log(g, 0).read_text().splitlines()
        # the direct warm-up and the client (backend sglang) both POST /generate
        posts = [l for l in lines if '"POST /generate HTTP/1.1" 200' in l]
        warm = [l for l in posts if _ts(l) < bench_start_ts]
        bench = [l for l in posts if _ts(l) >= bench_start_ts]
        assert warm, f"replica {g}: no direct warm-up before the benchmark"
        counts.append(len(bench))
    # 40 prompts split round robin (bench_serving's own warm-up is off: the direct ones replace it)
    assert counts == [20, 20], counts


@pytest.mark.parametrize("mode", MODES)
def test_no_process_left(runs, mode):
    tracker = runs[mode]["tracker"]
    # the job's servers (8), router and client were all seen, and none of them remains
    cmds = " ".join(tracker.seen.values())
    assert "slurm_ab_testbed.emulator" in cmds and "sglang.benchmark.steady_state_serving" in cmds
    assert "sglang::router" in cmds or "launch_router" in cmds
    assert tracker.wait_gone(30) == []
    assert wait_no_processes(_job_id(runs[mode]["run_dir"]), 30) == []


def test_parallelism_reached_the_servers(runs):
    for mode, tp, pp in (("tp32", 32, 1), ("pp8", 4, 8), ("tp32-dflash", 32, 1)):
        head = launch_of(runs[mode]["run_dir"]).server_log(0, 0).read_text()
        assert f"tp_size={tp}, pp_size={pp}," in head and "ep_size=4," in head
    dflash = launch_of(runs["tp32-dflash"]["run_dir"]).server_log(1, 0).read_text()
    assert "speculative_algorithm='DFLASH'" in dflash and "accept len:" in dflash
    assert "accept len:" not in launch_of(runs["tp32"]["run_dir"]).server_log(1, 0).read_text()


def test_dflash_at_086_fails_fast_and_keeps_evidence(workdir):
    run_id = f"e2e-oom-{int(time.time())}"
    # without the preflight (the three modes above run it): the OOM comes after it
    r, tracker = run_tracked(["submit", "tp32-dflash", "--site", "local", "--run-id", run_id, "--wait",
                              "--set", "mode.args.mem-fraction-static=0.86", "--set", "preflight.enabled=false"],
                             cwd=workdir)
    assert r.returncode != 0
    run_dir = workdir / "results" / run_id
    job_id = _job_id(run_dir)
    info = final_sacct(job_id)
    assert info["state"] == "FAILED", info
    # the job ended within 60 s of the OOM (not at its time limit)
    oom_file, oom_ts = None, None
    for f in launch_of(run_dir).server_logs():
        for line in f.read_text().splitlines():
            if "torch.OutOfMemoryError: CUDA out of memory" in line:
                oom_file = f
            if oom_file == f and oom_ts is None and _ts(line):
                oom_ts = _ts(line)
        if oom_file:
            break
    assert oom_file is not None, "no OOM in the server logs"
    end = [l.split() for l in Layout(run_dir).events.read_text().splitlines() if " job_end " in l][-1]
    from datetime import datetime
    end_t = datetime.strptime(f"{end[1]} {end[2]}", "%Y-%m-%d %H:%M:%S.%f")
    lines = oom_file.read_text().splitlines()
    stamps = [s for s in (_ts(l) for l in lines) if s]
    oom_t = datetime.strptime(stamps[-1][:23], "%Y-%m-%d %H:%M:%S.%f" if "." in stamps[-1] else "%Y-%m-%d %H:%M:%S")
    assert (end_t - oom_t).total_seconds() < 60
    # all logs kept; the job's output names the replica and the OOM
    assert len(launch_of(run_dir).server_logs()) == 8
    (out,) = (p.read_text() for p in Layout(run_dir).slurm_outs())
    replica = re.search(r"server-r(\d)-n", oom_file.name).group(1)
    # the step's exit, or (when the warm-up's request meets the dying server first, seen with
    # three jobs side by side) the warm-up's failure: either way the OOM's lines follow
    assert f"server step of replica {replica} exited" in out or f"warm-up of replica {replica} failed" in out
    assert "CUDA out of memory" in out
    assert wait_no_processes(job_id, 30) == [] and tracker.wait_gone(30) == []
    # the collector's verdict: failed, diagnosed as the OOM of that replica at 0.86
    summary = _pass(run_dir)
    assert summary["verdict"] == _summary(run_dir)["verdict"] == "failed"
    first = summary["reasons"][0]
    assert f"replica {replica}" in first and "CUDA out of memory" in first and "mem_fraction_static=0.86" in first


def _stats(values):
    xs = sorted(values)
    k = (len(xs) - 1) * 0.95
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return sum(xs) / len(xs), xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@pytest.mark.parametrize("mode", MODES)
def test_summary_matches_independent_recomputation(runs, mode):
    run_dir = runs[mode]["run_dir"]
    s = _pass(run_dir)
    assert s["verdict"] == "ok", s["reasons"]
    rec = _bench(run_dir)
    ok = [i for i, e in enumerate(rec["errors"]) if not e]
    ttft = [rec["ttfts"][i] * 1000 for i in ok]
    e2e = [(rec["ttfts"][i] + sum(rec["itls"][i])) * 1000 for i in ok]
    tpot = [(e2e[j] - ttft[j]) / (rec["output_lens"][i] - 1) for j, i in enumerate(ok)]
    b = s["bench"]
    for name, values in (("ttft", ttft), ("e2e", e2e), ("tpot", tpot)):
        mean, p95 = _stats(values)
        assert b[name]["mean"] == pytest.approx(mean, rel=1e-9), name
        assert b[name]["p95"] == pytest.approx(p95, rel=1e-9), name
    assert b["input_tps"] == pytest.approx(rec["total_input_tokens"] / rec["duration"], rel=1e-9)
    assert b["output_tps"] == pytest.approx(rec["total_output_tokens"] / rec["duration"], rel=1e-9)
    assert b["completed"] == 40 and [r["requests_served"] for r in s["replicas"]] == [20, 20]
    assert all(r["warmup_seen"] for r in s["replicas"])
    if mode == "tp32-dflash":
        assert s["accept"]["samples"] > 0 and 2.5 < s["accept"]["accept_len"] < 5.5
    else:
        assert s["accept"]["accept_len"] is None


@pytest.mark.parametrize("mode", MODES)
def test_the_seeds_dataset_through_the_0523_client(runs, mode):
    """speed-bench prompts of ~16K tokens (chat template included), counted alike by client and
    servers; the steady state and the client's own figure agree; the report says what ran."""
    run_dir = runs[mode]["run_dir"]
    rec, s = _bench(run_dir), _pass(run_dir)
    assert rec["dataset_name"] == "speed-bench" and rec["backend"] == "sglang"
    assert sum(rec["input_lens"]) == rec["total_input_tokens"]
    assert all(15360 <= n <= 16384 for n in rec["input_lens"]) and len(set(rec["input_lens"])) > 1
    p = s["bench"]["prompt_tokens"]
    assert p["n"] == 40 and p["min"] == min(rec["input_lens"]) and p["max"] == max(rec["input_lens"])
    st = s["bench"]["steady"]
    assert st["concurrency"] == 4 and 0 < st["window_s"] <= s["bench"]["duration_s"]     # ceil(0.5 x 8)
    # the client's own figure, cross-checked, or its window was cut short on its clock (said so) and
    # the collector's is the figure; either way at or above the makespan figure (docs/metrics.md)
    assert (st["agrees"] is True and st["source"] == "client") or (
        st["agrees"] is None and st["source"] == "details" and any("is a fragment" in n for n in s["notes"])), st
    assert st["merged_requests"] == 0 and st["output_tps"] >= 0.97 * s["bench"]["output_tps"]
    assert "ran on: sglang.benchmark.steady_state_serving 0.5.23" in " ".join(s["notes"])
    page = Layout(run_dir).report_html.read_text()
    assert f"speed-bench: 40 prompts, {p['mean']:,.0f} tokens on average ({p['min']:,}-{p['max']:,})" in page
    assert "sglang_0_5_23: sglang.benchmark.steady_state_serving 0.5.23" in page


def test_report_and_compare_print_the_seed_tables(runs, workdir):
    names = [runs[m]["run_dir"].name for m in MODES]
    r = slurm_ab("report", *names, "--format", "md", cwd=workdir)
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0]
    cols = ("Input TPS", "Output TPS", "TTFT mean / p95", "TPOT mean / p95", "E2E mean / p95")
    for col in cols:
        assert col in header
    assert r.stdout.count("| ok") == 3
    # on a terminal (here: 120 columns) the same table in column groups that fit, verdict first
    t = slurm_ab("report", *names, cwd=workdir)
    assert all(col in t.stdout for col in cols) and max(map(len, t.stdout.splitlines())) <= 120, t.stdout
    c = slurm_ab("compare", runs["tp32"]["run_dir"].name, runs["tp32-dflash"]["run_dir"].name, cwd=workdir)
    assert c.returncode == 0, c.stderr
    for row in ("Benchmark duration", "Input / Output TPS", "TTFT mean / p95", "TPOT mean / p95",
                "E2E mean / p95", "Accept length"):
        assert row in c.stdout
    assert re.search(r"[+-]\d+\.\d\d%", c.stdout)


def test_collect_is_idempotent_and_leaves_raw_files(runs, workdir):
    run_dir = runs["pp8"]["run_dir"]
    lay = Layout(run_dir)
    derived = {lay.summary(f) for f in ("json", "csv", "md")}
    raw = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p not in derived}
    before = {p: p.read_bytes() for p in derived}
    job_id = _job_id(run_dir)
    r = slurm_ab("collect", job_id, cwd=workdir)
    assert r.returncode == 0 and "summary files unchanged" in r.stdout, r.stdout + r.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert {p: p.read_bytes() for p in raw if p != lay.manifest} == {p: b for p, b in raw.items() if p != lay.manifest}


@pytest.mark.parametrize("mode", MODES)
def test_the_chained_collector_job_returns_the_verdict(runs, mode):
    """The one-node job submit chains after the experiment (afterany) collects it too; its
    submitit result is the verdict, as the summary the CLI wrote says."""
    import submitit

    run_dir = runs[mode]["run_dir"]
    cid = json.loads(Layout(run_dir).manifest.read_text())["collector_job_id"]
    assert cid
    job = submitit.SlurmJob(folder=Layout(run_dir).submitit, job_id=cid)
    deadline = time.monotonic() + 180
    while not job.paths.result_pickle.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert job.result() == _summary(run_dir)["verdict"] == "ok"


def test_plain_sbatch_of_a_rendered_script(workdir):
    """`sbatch` of a generated script works on its own and writes the same layout; collect finds it."""
    run_id = f"e2e-sbatch-{int(time.time())}"
    r = slurm_ab("render", "tp32", "--site", "local", "--run-id", run_id, "-o", f"{run_id}.sbatch", *CLIENT_052,
                 *set_args("preflight.enabled=false", *SMALL), cwd=workdir)
    assert r.returncode == 0, r.stderr
    import subprocess
    out = subprocess.run(["sbatch", f"results/{run_id}/job.sbatch"], cwd=workdir, capture_output=True, text=True, check=True).stdout
    job_id = re.search(r"Submitted batch job (\d+)", out).group(1)
    info = final_sacct(job_id, timeout_s=300)
    assert info["state"] == "COMPLETED", info
    run_dir = workdir / "results" / run_id
    lay = Layout(run_dir)
    assert lay.job_script.read_text() == (workdir / f"{run_id}.sbatch").read_text()
    c = slurm_ab("collect", job_id, cwd=workdir)
    assert c.returncode == 0 and "verdict: ok" in c.stdout, c.stdout + c.stderr
    # a second sbatch of the same script never overwrites the first run's evidence
    first_events = lay.events.read_bytes()
    out = subprocess.run(["sbatch", str(lay.job_script)], cwd=workdir, capture_output=True, text=True, check=True).stdout
    job2 = re.search(r"Submitted batch job (\d+)", out).group(1)
    assert final_sacct(job2, timeout_s=300)["state"] == "COMPLETED"
    assert lay.events.read_bytes() == first_events
    again = lay.resubmitted(job2)                     # its launches read from its events (no manifest)
    assert launch_of(again).bench(KEY).exists()
    c = slurm_ab("collect", str(again), cwd=workdir)
    assert c.returncode == 0 and "verdict: ok" in c.stdout, c.stdout + c.stderr
    assert wait_no_processes(job2, 30) == []


@pytest.mark.parametrize("mode", MODES)
def test_server_metrics_beside_the_logs(runs, mode):
    """/metrics of both replica heads and the router, scraped raw over the benchmark window; the
    counter-based acceptance beside the decode-log one (docs/metrics.md)."""
    from slurm_ab.parse.prometheus import read_scrape

    run_dir = runs[mode]["run_dir"]
    scrapes = [kv for _, k, kv in events(run_dir) if k == "metrics_scrape"]
    for target in ("r0n0", "r1n0", "router"):
        mine = [kv for kv in scrapes if kv["target"] == target]
        assert mine[0]["phase"] == "start" and mine[-1]["phase"] == "end", mine
        assert len(mine) >= 3 and all(kv["ok"] == "1" for kv in mine), mine
        for kv in mine:
            read_scrape(launch_of(run_dir).root / kv["file"])      # raw text, Prometheus format
    sm = _pass(run_dir)["server_metrics"]
    # the two acceptance estimators agree within 5 %, unless the batch sizes varied (a loaded host:
    # the decode log's unweighted interval mean then differs from the per-token counters, and the
    # check says so with the running-request figures it measured)
    varied = [c for c in sm["checks"] if "likely: batch sizes varied (running requests peak" in c]
    assert sm["available"] and sm["checks"] == varied, sm
    for r in sm["replicas"]:
        assert r["exposed"] and r["running_peak"] >= 1 and r["kv_usage_peak"] > 0
        assert r["router_requests"] == r["requests"] == r["access_requests"] == 20
        assert r["gen_tokens"] == 20 * 512
    csv = Layout(run_dir).summary("csv").read_text().splitlines()
    row = dict(zip(csv[0].split(","), csv[1].split(",")))
    if mode == "tp32-dflash":
        for r in sm["replicas"] + [sm["pooled"]]:
            assert abs(r["diff_pct"]) <= 5 or varied, r    # counters agree with the decode log
            assert r["accept_len"] > 1 and r["log_accept_len"] > 1
        assert float(row["accept_len_counters"]) == pytest.approx(sm["pooled"]["accept_len"])
        assert "Accept len log / counters" in Layout(run_dir).summary("md").read_text()
    else:
        assert all(r["accept_len"] is None and r["verify_calls"] == 0 for r in sm["replicas"])
        assert row["accept_len_counters"] == "" and float(row["running_peak"]) >= 1
    notes = _pass(run_dir)["notes"]
    if mode == "pp8":
        # every node scraped: each stage's own KV pool, and running requests that are the client's
        # in flight (HTTP, node rank 0, minus queued), not a stage's micro-batch of ~1
        pooled = sm["pooled"]
        # (C=8, up to a few more: SGLang counts a request until its response body has closed, and
        # the client opens its next request when it has read the last chunk; requests that finish
        # in the same decode step overlap so on both replicas: 10 seen on a loaded machine. Summed
        # over the 8 stages it would be 64, a micro-batch 1-2; 16 leaves CI's overloaded host room.)
        assert 7 <= pooled["running_peak"] <= 16 and 7 <= pooled["in_flight_peak"] <= 16, pooled
        for r in sm["replicas"]:
            assert [k for k, _ in r["kv_stage_peaks"]] == list(range(8)), r["kv_stage_peaks"]
            assert all(v > 0 for _, v in r["kv_stage_peaks"]) and r["micro_batch_peak"] <= 2
        assert any("pp_rank 0,1,2,3,4,5,6,7;" in n for n in notes), notes
    else:
        assert any("tp_rank 0, pp_rank 0;" in n for n in notes), notes
