"""Every broken run gets a verdict and a readable reason, never a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.rundir_builder import KEY, TP32_DFLASH, RunSpec, build_oom_run, build_run, launch_layout
from slurm_ab.collect import collect
from slurm_ab.model.rundir import Layout

from helpers.rundir_builder import collect_one as collect_run  # noqa: E402
from slurm_ab.tables.runs import main_row, runs_text  # noqa: E402
from slurm_ab.collect.write import write_summary  # noqa: E402

DONE = {"state": "COMPLETED"}


def _ok(tmp_path, **kw) -> Path:
    return build_run(tmp_path, RunSpec(**kw))


def test_healthy_run_is_ok_with_or_without_slurm_state(tmp_path):
    run = _ok(tmp_path)
    assert collect_run(run, sacct=DONE).verdict == "ok"
    s = collect_run(run)           # no sacct: events.log job_end rc=0 says it finished
    assert s.verdict == "ok" and s.job.source == "none" and s.job.job_id == "4242"


def test_oom_run_names_replica_node_phase_and_fraction(tmp_path):
    run = build_oom_run(tmp_path)
    for sacct in ({"state": "FAILED", "exit_code": "1:0"}, None):
        s = collect_run(run, sacct=sacct)
        assert s.verdict == "failed"
        first = s.reasons[0]
        assert first.startswith("replica 1 node rank 2 (node07): CUDA out of memory during "
                                "first prefill (mem_fraction_static=0.86)")
        assert f"{Layout(run).rel(launch_layout(run).server_log(1, 2))}:" in first
        assert "job: server step of replica 1 exited with status 1" in s.reasons
        oom = next(f for f in s.findings if f.kind == "oom")
        assert oom.details["replica"] == 1 and oom.details["node_rank"] == 2
        assert oom.details["mem_fraction_static"] == 0.86
    row = main_row(s)
    assert row["Verdict"] == "failed"                    # the word; the reason below the table
    assert runs_text([s]).count(f"- {s.run_id}: failed: replica 1 node rank 2 (node07): CUDA out of memory") == 1
    assert row["Input TPS"] == "-" and row["TTFT mean / p95"] == "-"
    assert write_summary(collect(run), run)       # failed runs are final: summaries are written


def _unfinished(run: Path) -> Path:
    """The run with its pass cut short: a bench_start and no bench_end."""
    own = launch_layout(run).events
    own.write_text("\n".join(l for l in own.read_text().splitlines() if " bench_end " not in l) + "\n")
    return run


@pytest.mark.parametrize("state,verdict,text", [
    ("CANCELLED by 1000", "cancelled", "job CANCELLED by 1000 (Slurm)"),
    ("TIMEOUT", "timeout", "job hit its time limit (TIMEOUT)"),
    ("NODE_FAIL", "failed", "job NODE_FAIL (Slurm, exit code ?)"),
    ("PENDING", "running", "job is PENDING (Slurm)"),
])
def test_slurm_states(tmp_path, state, verdict, text):
    s = collect_run(_unfinished(_ok(tmp_path)), sacct={"state": state})
    assert s.verdict == verdict and text in s.reasons


@pytest.mark.parametrize("state", ["CANCELLED by 1000", "TIMEOUT", "NODE_FAIL", "FAILED"])
def test_a_completed_pass_is_not_judged_by_what_befell_the_job_later(tmp_path, state):
    """Its client ended with status 0 and its numbers were final: a cancel, the time limit or a
    failure of the job afterwards (teardown, a later launch) does not change its verdict, as in
    every campaign; Slurm's state stays the job's."""
    run = _ok(tmp_path)
    cs = collect(run, sacct={"state": state, "exit_code": "1:0"})
    (s,) = cs.passes
    assert s.verdict == cs.verdict == "ok" and s.reasons == ()
    assert s.job.state == cs.job.state == state.split()[0] and s.job.source == "sacct"
    running = collect(run, sacct={"state": "RUNNING"})
    assert running.passes[0].verdict == "ok" and running.running and running.verdict == "running"


def test_cancelled_and_timeout_from_slurm_lines_without_sacct(tmp_path):
    run = _unfinished(_ok(tmp_path))
    job = Layout(run).events
    job.write_text("\n".join(l for l in job.read_text().splitlines() if " job_end " not in l) + "\n")
    assert collect_run(run).verdict == "running"
    out = Layout(run).slurm_out(4242)
    out.write_text(out.read_text() + "slurmstepd: error: *** JOB 4242 ON node01 CANCELLED AT "
                   "2026-09-02T12:40:00 ***\n")
    s = collect_run(run)
    assert s.verdict == "cancelled" and s.reasons[0] == "job was cancelled (Slurm/job log)"
    out.write_text(out.read_text().replace("***\n", "DUE TO TIME LIMIT ***\n"))
    assert collect_run(run).verdict == "timeout"


def test_missing_replica_logs(tmp_path):
    run = _ok(tmp_path)
    lay = launch_layout(run)
    for p in lay.server_log_map()[1].values():
        p.unlink()
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "invalid"
    assert f"replica 1: no server log ({Layout(run).rel(lay.server_log(1, '*'))} missing)" in s.reasons
    assert s.replicas[1].logs == () and s.replicas[1].requests_served is None


def test_empty_files(tmp_path):
    run = _ok(tmp_path)
    lay = launch_layout(run)
    for p in lay.server_log_map()[0].values():
        p.write_bytes(b"")
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "invalid" and "replica 0: server logs are empty" in s.reasons
    assert "replica 0 served no requests during the benchmark" in s.reasons
    lay.bench(KEY).write_bytes(b"")
    lay.client_log(KEY).write_bytes(b"")
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "failed" and s.reasons[-1].startswith("no benchmark result")


def test_truncated_jsonl_uses_last_complete_record(tmp_path):
    run = _ok(tmp_path)
    bench = launch_layout(run).bench(KEY)
    good = bench.read_text()
    bench.write_text(good + good[: len(good) // 2])
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "ok"
    assert main_row(s)["TTFT mean / p95"] == "8.35s / 20.79s"
    assert any("truncated" in n for n in s.notes)


def test_only_a_truncated_record_falls_back_to_stdout(tmp_path):
    run = _ok(tmp_path)
    bench = launch_layout(run).bench(KEY)
    bench.write_text(bench.read_text()[:1000])
    s = collect_run(run, sacct=DONE)
    assert s.bench.source == "stdout" and s.bench.latency_source == "stdout"
    assert main_row(s)["Input TPS"] == "2797.64"
    assert s.bench.ttft.p95 is None                  # 0.5.2 prints no p95 TTFT
    assert s.verdict == "ok" and any("no per-request details" in n for n in s.notes)


def test_binary_garbage_in_logs(tmp_path):
    run = _ok(tmp_path, target=TP32_DFLASH)
    lay = launch_layout(run)
    p = lay.server_log(0, 0)
    data = p.read_bytes().split(b"\n")
    data.insert(5, b"\x00\xff\xfe\x89PNG\r\x1a garbage Decode batch \xc3\x28")
    data.insert(9, bytes(range(256)))
    p.write_bytes(b"\n".join(data) + b"\x00\x00\x00")
    lay.events.write_bytes(lay.events.read_bytes() + b"\xff\xfe\x00\n")
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "ok" and s.accept.samples == 37
    assert f"{s.accept.accept_len:.2f}" == "3.76"
    assert "events.log: 1 unreadable line(s)" in s.notes


def test_replica_that_served_nothing(tmp_path):
    s = collect_run(_ok(tmp_path, served=(41, 0)), sacct=DONE)
    assert s.verdict == "invalid"
    assert s.reasons == ("replica 1 served no requests during the benchmark",)
    assert s.replicas[1].requests_served == 0 and s.replicas[0].requests_served == 41


def test_missing_warmup(tmp_path):
    s = collect_run(_ok(tmp_path, warmed=(True, False)), sacct=DONE)
    assert s.verdict == "invalid"
    assert len(s.reasons) == 1
    assert s.reasons[0].startswith("replica 1 was not warmed up: no warm-up recorded in "
                                   "events.log")


def test_warmup_claimed_but_not_in_server_log(tmp_path):
    run = _ok(tmp_path)
    p = launch_layout(run).server_log(1, 0)
    p.write_text("\n".join(l for l in p.read_text().splitlines()
                           if "#new-token: 8192, #cached-token: 0, token usage: 0.20, "
                              "#running-req: 0," not in l and "12:33:" not in l) + "\n")
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "invalid"
    assert "events.log says ok=1 but the server log shows no 16384-token prefill" in \
        s.reasons[0]


def test_request_errors_make_the_run_invalid(tmp_path):
    s = collect_run(_ok(tmp_path, errors={0: "Internal Server Error", 5: "Internal Server "
                                          "Error"}), sacct=DONE)
    assert s.verdict == "invalid"
    assert s.reasons[:2] == ("only 38/40 requests succeeded",
                             "2 request(s) failed: Internal Server Error")
    assert main_row(s)["Requests ok/total"] == "38/40"
    assert main_row(s)["Verdict"] == "invalid"
    assert f"- {s.run_id}: invalid: only 38/40 requests succeeded (+1 more in its summary)" in runs_text([s])


def test_client_failure_and_missing_everything(tmp_path):
    run = _ok(tmp_path)
    own, job = launch_layout(run).events, Layout(run).events
    own.write_text(own.read_text().replace(f"bench_end pass={KEY} rc=0", f"bench_end pass={KEY} rc=1"))
    job.write_text(job.read_text().replace("job_end rc=0", "job_end rc=1"))
    s = collect_run(run, sacct={"state": "FAILED"})
    assert s.verdict == "failed"
    assert "benchmark client exited with status 1" in s.reasons
    empty = tmp_path / "empty-run"
    empty.mkdir()
    s = collect_run(empty, sacct={"state": "FAILED"})
    assert s.verdict == "failed" and s.reasons
    s = collect_run(empty)
    assert s.verdict == "running"
    s = collect_run(tmp_path / "does-not-exist", sacct={"state": "COMPLETED"})
    assert s.verdict == "failed" and s.reasons[-1] == "launch 1 (?) never started"
    assert s.reasons[-2].startswith("no benchmark result")
    assert "failed" in runs_text([s])


def test_no_bench_window(tmp_path):
    run = _ok(tmp_path, target=TP32_DFLASH)
    own = launch_layout(run).events
    own.write_text("\n".join(l for l in own.read_text().splitlines() if "bench_" not in l) + "\n")
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "invalid"
    assert "no bench_start in events.log: the benchmark window is unknown" in s.reasons
    assert s.accept.samples == 0                     # nothing to window: no samples ...
    assert collect_run(run, sacct=DONE, all_samples=True).accept.samples == 37 + 4  # ... unless asked


def test_an_interrupted_benchmark_never_counts_more_successes_than_prompts(tmp_path):
    """The router's retries (a PD decode that lost its prefill) put more HTTP 200s in the access
    logs than the client sent prompts: the reason says the count is unknown, not '22 of 16'."""
    from types import SimpleNamespace

    from slurm_ab.collect.passes import interrupted_reason
    from slurm_ab.parse.events import read_events

    ev = tmp_path / "events.log"
    ev.write_text("1.000 2026-12-01 17:50:06.000 bench_start pass=c8-r1\n"
                  "21.000 2026-12-01 17:50:26.000 fail kind=step_exited\n")
    rep = lambda n: SimpleNamespace(requests_served=n, role="decode", requests_source="access_log", name="decode 0")
    events = read_events(ev)
    assert interrupted_reason(events, [rep(12)], 16, False).startswith(
        "benchmark interrupted 20 s after it started: at most 12 of 16 requests had succeeded")
    text = interrupted_reason(events, [rep(22)], 16, False)
    assert "22 of 16" not in text and "more than the 16 prompts: the router retried some" in text
