"""The collector's side of issue 20: the right job in sacct, NCCL's transport per node, the job's
own guards (stalled replica, pass time limit, NCCL fallback) as reasons, router retries."""
from __future__ import annotations

from datetime import datetime

from helpers.rundir_builder import build_run
from slurm_ab.collect.job import expand_hostlist, identity_problem, job_info, parse_elapsed
from slurm_ab.collect.summary import collect_run
from slurm_ab.collect.verdict import guard_reasons, nccl_network_reasons, router_retry_reasons
from slurm_ab.parse.diagnose import Finding, diagnose
from slurm_ab.parse.events import EventLog, read_events
from slurm_ab.parse.nccl import nccl_network

# NCCL 2.27's init lines (src/transport/net_ib.cc, net_socket.cc, init.cc; prefix from debug.cc)
IB_LINES = """node05:2216:2216 [0] NCCL INFO NCCL version 2.27.3+cuda12.9
node05:2216:2261 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1
node05:2216:2261 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.5<0>
node05:2216:2261 [0] NCCL INFO Using network IB
node05:2217:2262 [1] NCCL INFO Using network IB
"""
SOCKET_LINES = """node06:3101:3101 [0] NCCL INFO NCCL version 2.27.3+cuda12.9
node06:3101:3140 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1
node06:3101:3140 [0] NCCL INFO NET/IB : No device found.
node06:3101:3140 [0] NCCL INFO NET/Socket : Using [0]eth0:192.168.1.6<0>
node06:3101:3140 [0] NCCL INFO Using network Socket
"""
# an older NCCL (2.21) and the libibverbs-less container (misc/ibvsymbols.cc)
OLD_LINES = """node07:77:77 [3] NCCL INFO Bootstrap : Using eth0:192.168.1.7<0>
node07:77:90 [3] NCCL INFO Failed to open libibverbs.so[.1]
node07:77:90 [3] NCCL INFO NET/Socket : Using [0]eth0:192.168.1.7<0>
node07:77:90 [3] NCCL INFO Using network Socket
"""


def _log(tmp_path, name, *chunks):
    p = tmp_path / "logs" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(chunks))
    return p


def test_nccl_network_per_log(tmp_path):
    noise = "[2027-01-15 08:00:01 TP0] Load weight begin. avail mem=70.00 GB\n" * 50
    ib = nccl_network(_log(tmp_path, "server-r0-n0.log", noise, IB_LINES, noise))
    assert ib.networks == ("IB",) and ib.line == 54 and ib.cause is None and not ib.other_than("IB")
    sock = nccl_network(_log(tmp_path, "server-r1-n1.log", noise, SOCKET_LINES))
    assert sock.networks == ("Socket",) and sock.other_than("IB") == ("Socket",)
    assert sock.cause == "node06:3101:3140 [0] NCCL INFO NET/IB : No device found." and sock.cause_line == 53
    old = nccl_network(_log(tmp_path, "server-r1-n2.log", OLD_LINES), block=64)   # lines across blocks
    assert old.networks == ("Socket",) and "Failed to open libibverbs.so[.1]" in old.cause and old.cause_line == 2
    assert nccl_network(_log(tmp_path, "server-r1-n3.log", noise)) is None
    assert nccl_network(tmp_path / "missing.log") is None


def test_nccl_network_reasons_name_the_node(tmp_path):
    logs = [_log(tmp_path, "server-r0-n0.log", IB_LINES), _log(tmp_path, "server-r1-n1.log", SOCKET_LINES),
            _log(tmp_path, "server-r1-n2.log", "no nccl here\n")]
    nodes = {"0": ["node01", "node02", "node03", "node04"], "1": ["node05", "node06", "node07", "node08"]}
    got = nccl_network_reasons(logs, "IB", nodes, root=tmp_path)
    assert got == ["replica 1 node rank 1 (node06): NCCL used network Socket, not IB (cluster.nccl_network): "
                   "node06:3101:3140 [0] NCCL INFO NET/IB : No device found. [logs/server-r1-n1.log:3]"]
    assert nccl_network_reasons(logs, "", nodes) == []
    # a fallback without a line saying why: the reason shows the "Using network" line itself
    bare = [_log(tmp_path, "server-r1-n3.log", "noise\n", SOCKET_LINES.splitlines(keepends=True)[-1])]
    assert nccl_network_reasons(bare, "IB", nodes, root=tmp_path) == [
        "replica 1 node rank 3 (node08): NCCL used network Socket, not IB (cluster.nccl_network): "
        "node06:3101:3140 [0] NCCL INFO Using network Socket [logs/server-r1-n3.log:2]"]
    assert nccl_network_reasons(logs[1:2], "Socket", nodes) == []


def test_the_diagnosis_finds_the_fallback_line(tmp_path):
    p = _log(tmp_path, "server-r1-n1.log", SOCKET_LINES)
    kinds = [(f.kind, f.line) for f in diagnose([p], root=tmp_path)]
    assert kinds == [("nccl_net", 3)]


def _events(tmp_path, *lines):
    p = tmp_path / "events.log"
    p.write_text("".join(f"1800000000.000 2027-01-15 08:00:00.000 {x}\n" for x in lines))
    return read_events(p)


def test_guard_reasons_from_the_jobs_own_failures(tmp_path):
    ev = _events(tmp_path,
                 "fail kind=stalled replica=1 node=node05 pass=c8-r1 seconds=16 inflight=4 finished=12 metrics=answered",
                 "fail kind=pass_timeout pass=c8-r2 limit=60 seconds=61",
                 "fail kind=nccl_network node=node06 replica=1 node_rank=1 network=Socket expected=IB")
    finding = Finding("nccl_net", "logs/server-r1-n1.log", 3, "node06:3101:3140 [0] NCCL INFO NET/IB : No device found.", {})
    got = guard_reasons(ev, [finding], {})
    assert got[0] == ("replica 1 (head node05) stalled in pass c8-r1: no request finished for 16 s while 4 "
                      "were in flight (12 finished before; its /metrics answered); the job stopped the pass "
                      "(watchdog.stall_s)")
    assert got[1].startswith("pass c8-r2 ran 61 s, past its limit of 60 s")
    unreachable = _events(tmp_path, "fail kind=stalled replica=1 node=node05 pass=c8-r1 seconds=16 inflight=2 "
                                    "finished=2 metrics=did")
    assert guard_reasons(unreachable, [], {}) == [
        "replica 1 (head node05) stalled or unreachable in pass c8-r1: no request seen to finish for 16 s "
        "while 2 were in flight (2 finished before; its /metrics did not answer the batch host: a hung "
        "server or a network path down); the job stopped the pass (watchdog.stall_s)"]
    assert got[2] == ("NCCL on node06 (replica 1 node rank 1) used network Socket, not IB (cluster.nccl_network): "
                      "every collective of replica 1 crossed the fallback, so the job stopped before the "
                      "benchmark: node06:3101:3140 [0] NCCL INFO NET/IB : No device found. [logs/server-r1-n1.log:3]")


def _sacct(**kw):
    base = {"job_id": "4242", "state": "COMPLETED", "exit_code": "0:0", "elapsed": "00:06:00",
            "cluster": "abtest", "node_lists": {}}
    base.update(kw)
    return base


def _at(run, seconds=0):
    """A sacct time, local, relative to the run's job_start."""
    start = read_events(run / "events.log").first["job_start"].epoch
    return datetime.fromtimestamp(start + seconds).strftime("%Y-%m-%dT%H:%M:%S")


def test_sacct_of_this_run_counts(tmp_path):
    run = build_run(tmp_path)
    ev = read_events(run / "events.log")
    name = f"ab-{run.name}"
    s = _sacct(job_name=name, start=_at(run, -1), end=_at(run, 400), submit=_at(run, -3))
    assert identity_problem(s, ev) is None
    job = job_info(s, ev, "4242")
    assert job.state == "COMPLETED" and job.source == "sacct" and job.note is None


def test_sacct_of_another_job_is_ignored_and_said(tmp_path):
    run = build_run(tmp_path)
    ev = read_events(run / "events.log")
    other = _sacct(state="FAILED", exit_code="1:0", job_name="wrap", start=_at(run, 86400), end=_at(run, 86500))
    problem = identity_problem(other, ev)
    assert problem.startswith(f"its name is wrap, this run's job was ab-{run.name}; it started at ")
    job = job_info(other, ev, "4242")
    assert job.state is None and job.source == "ignored" and job.note.startswith(
        "sacct ignored: Slurm's job 4242 is another job (its name is wrap")
    summary = collect_run(run, sacct=other, workers=1)
    assert summary.verdict == "ok" and summary.job.note == job.note
    # same name (ids wrapped on a rebuilt cluster), but another cluster or another submit time
    same = _sacct(job_name=f"ab-{run.name}", cluster="other", start=_at(run), end=_at(run, 300),
                  expected={"cluster": "abtest", "submitted_at": None, "job_name": None})
    assert identity_problem(same, ev) == "it ran on cluster other, this run on abtest"
    late = _sacct(job_name=f"ab-{run.name}", submit="2030-01-01T00:00:00", start=_at(run), end=_at(run, 300),
                  expected={"submitted_at": datetime.fromtimestamp(ev.first["job_start"].epoch).astimezone()
                            .strftime("%Y-%m-%dT%H:%M:%S%z")})
    assert identity_problem(late, ev).startswith("it was submitted at 2030-01-01T00:00:00, this run at ")
    # a FAILED run must not become COMPLETED through another job's record either
    assert identity_problem(_sacct(job_name=f"ab-{run.name}", start=_at(run, -3600), end=_at(run, -3000)), ev) \
        .startswith("it ended at ")


def test_sacct_of_the_same_id_submitted_before_the_run_is_another_job(tmp_path):
    """Job ids wrap: a record of the same id and name (a rebuilt cluster, the same run id reused)
    submitted a day before this run's sbatch is another job, even with no start or end to compare
    (it was cancelled while pending); one submitted a few seconds either side is this run's."""
    run = build_run(tmp_path)
    ev = read_events(run / "events.log")
    at = ev.first["job_start"].epoch
    submitted = datetime.fromtimestamp(at - 5).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")
    expected = {"job_name": f"ab-{run.name}", "submitted_at": submitted, "cluster": "abtest"}
    early = _sacct(job_name=f"ab-{run.name}", state="CANCELLED", submit=_at(run, -86400), expected=expected)
    assert identity_problem(early, ev) == f"it was submitted at {_at(run, -86400)}, this run at {submitted}"
    job = job_info(early, ev, "4242")
    assert job.source == "ignored" and job.state is None and "is another job (it was submitted at" in job.note
    for skew in (-60, -3, 30):          # sbatch a moment after the manifest, or clocks apart
        same = _sacct(job_name=f"ab-{run.name}", submit=_at(run, skew), expected=expected)
        assert identity_problem(same, ev) is None, skew
        assert job_info(same, ev, "4242").source == "sacct"


def test_sacct_elapsed_and_hostlists_as_slurm_prints_them():
    """sacct's Elapsed ([D-]HH:MM:SS, MM:SS) and NodeList (slurm's hostlist: ranges keep their
    zero padding, a suffix after the brackets, several ranges and hosts)."""
    assert parse_elapsed("1-02:03:04") == 93784 and parse_elapsed("02:03:04.5") == 7384.5
    assert parse_elapsed("05:12") == 312 == parse_elapsed("00:05:12") == parse_elapsed(312)
    assert parse_elapsed("12.5") == 12.5 and parse_elapsed("Unknown") is None and parse_elapsed(None) is None
    assert expand_hostlist("node[01-03,7],gpu5") == ["node01", "node02", "node03", "node7", "gpu5"]
    assert expand_hostlist("n[08-10]-ib") == ["n08-ib", "n09-ib", "n10-ib"]
    assert expand_hostlist("gpu5,node[01-02]") == ["gpu5", "node01", "node02"]
    assert expand_hostlist("node05") == ["node05"] and expand_hostlist("") == [] and expand_hostlist(None) == []
    job = job_info(_sacct(node_lists={"1": "node[03-04]", "0": "node[01-02]"}, elapsed="1-00:00:01"), EventLog(), "4242")
    assert job.node_lists == {"0": ["node01", "node02"], "1": ["node03", "node04"]} and job.elapsed_s == 86401
    assert job.job_id == "4242" and job_info({**_sacct(), "job_id": None}, EventLog(), "4243").job_id == "4243"


def _prom(retries, failures):
    text = '# TYPE smg_worker_cb_outcomes_total counter\n'
    text += 'smg_worker_cb_outcomes_total{worker="http://node05:31790",outcome="success"} 20\n'
    if failures:
        text += f'smg_worker_cb_outcomes_total{{worker="http://node05:31790",outcome="failure"}} {failures}\n'
    if retries:
        text += "# TYPE smg_worker_retries_total counter\n"
        text += f'smg_worker_retries_total{{worker_type="regular",endpoint="/v1/completions"}} {retries}\n'
    return text


def test_router_retries_make_the_run_say_so(tmp_path):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "router-a.prom").write_text(_prom(0, 0))
    (tmp_path / "metrics" / "router-b.prom").write_text(_prom(3, 2))
    ev = _events(tmp_path, "bench_start",
                 "metrics_scrape target=router phase=start ok=1 http=200 file=metrics/router-a.prom",
                 "metrics_scrape target=router phase=end ok=1 http=200 file=metrics/router-b.prom",
                 "bench_end rc=0")
    got = router_retry_reasons(tmp_path, ev)
    assert got == ["the router retried requests during the benchmark (3 x smg_worker_retries_total; 2 failed "
                   "attempt(s) at http://node05:31790; router /metrics): their latencies include a failed "
                   "attempt, and the replicas' shares are not the policy's"]
    (tmp_path / "metrics" / "router-b.prom").write_text(_prom(0, 0))
    assert router_retry_reasons(tmp_path, ev) == []


def test_a_campaign_collected_with_another_jobs_sacct_keeps_its_passes_verdicts(tmp_path):
    """A campaign's passes are judged from its own files when sacct describes another job: the
    job's end (in the job's events.log, not the launches') tells they ended; none is 'running'."""
    import shutil
    from slurm_ab.collect.campaign import collect

    from helpers import ROOT
    run = tmp_path / "camp-sweep"
    shutil.copytree(ROOT / "tests" / "fixtures" / "report-campaign" / "camp-sweep", run)
    other = {"job_id": "118", "state": "CANCELLED by 0", "exit_code": "0:0", "job_name": "ab-cancel-143843",
             "submit": "2026-12-01T14:38:44", "start": "2026-12-01T14:38:44", "end": "2026-12-01T14:39:40",
             "expected": {"job_name": "ab-camp-sweep-1796053139", "submitted_at": None, "cluster": None}}
    cs = collect(run, sacct=other, workers=1)
    assert [p.verdict for p in cs.passes] == ["ok"] * 4
    assert cs.job.state is None and cs.job.note.startswith("sacct ignored: Slurm's job 118 is another job")
    assert not cs.running
