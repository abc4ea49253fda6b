"""The collector's side of issue 20: the right job in sacct, NCCL's transport per node, the job's
own guards (stalled replica, pass time limit, NCCL fallback) as reasons, router retries."""
from __future__ import annotations

from datetime import datetime

from helpers.rundir_builder import build_run
from slurm_ab.collect.job import expand_hostlist, identity_problem, job_info, parse_elapsed
from helpers.rundir_builder import collect_one as collect_run
from slurm_ab.collect.verdict import (RouterRetries, diagnosis_reasons, guard_reasons, nccl_network_reasons,
                                     router_retries, router_retry_reasons)
from slurm_ab.parse.diagnose import Finding, diagnose
from slurm_ab.parse.events import EventLog, read_events
from slurm_ab.parse.nccl import nccl_network
from slurm_ab.model.rundir import Layout

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


def _log(tmp_path, replica, rank, *chunks):
    p = Layout(tmp_path).server_log(replica, rank)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(chunks))
    return p


def test_nccl_network_per_log(tmp_path):
    noise = "[2027-01-15 08:00:01 TP0] Load weight begin. avail mem=70.00 GB\n" * 50
    ib = nccl_network(_log(tmp_path, 0, 0, noise, IB_LINES, noise))
    assert ib.networks == ("IB",) and ib.line == 54 and ib.cause is None and not ib.other_than("IB")
    sock = nccl_network(_log(tmp_path, 1, 1, noise, SOCKET_LINES))
    assert sock.networks == ("Socket",) and sock.other_than("IB") == ("Socket",)
    assert sock.cause == "node06:3101:3140 [0] NCCL INFO NET/IB : No device found." and sock.cause_line == 53
    old = nccl_network(_log(tmp_path, 1, 2, OLD_LINES), block=64)   # lines across blocks
    assert old.networks == ("Socket",) and "Failed to open libibverbs.so[.1]" in old.cause and old.cause_line == 2
    assert nccl_network(_log(tmp_path, 1, 3, noise)) is None
    assert nccl_network(tmp_path / "missing.log") is None


def test_nccl_network_reasons_name_the_node(tmp_path):
    logs = [_log(tmp_path, 0, 0, IB_LINES), _log(tmp_path, 1, 1, SOCKET_LINES),
            _log(tmp_path, 1, 2, "no nccl here\n")]
    nodes = {"0": ["node01", "node02", "node03", "node04"], "1": ["node05", "node06", "node07", "node08"]}
    got = nccl_network_reasons(logs, "IB", nodes, root=tmp_path)
    assert got == ["replica 1 node rank 1 (node06): NCCL used network Socket, not IB (cluster.nccl_network): "
                   "node06:3101:3140 [0] NCCL INFO NET/IB : No device found. [logs/server-r1-n1.log:3]"]
    assert nccl_network_reasons(logs, "", nodes) == []
    # a fallback without a line saying why: the reason shows the "Using network" line itself
    bare = [_log(tmp_path, 1, 3, "noise\n", SOCKET_LINES.splitlines(keepends=True)[-1])]
    assert nccl_network_reasons(bare, "IB", nodes, root=tmp_path) == [
        "replica 1 node rank 3 (node08): NCCL used network Socket, not IB (cluster.nccl_network): "
        "node06:3101:3140 [0] NCCL INFO Using network Socket [logs/server-r1-n3.log:2]"]
    assert nccl_network_reasons(logs[1:2], "Socket", nodes) == []


# The HPC-X/SHARP plugin (nccl-rdma-sharp-plugins ib_plugin.c: .name = "IBext_v8") and aws-ofi-nccl
# ("AWS Libfabric" when NCCL_NET names it so): NCCL prints the plugin's name (src/init.cc)
PLUGIN_LINES = """node01:10:10 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)
node01:10:20 [0] NCCL INFO P2P plugin v8 IBext_v8
node01:10:20 [0] NCCL INFO Using network IBext_v8
"""


def test_a_net_plugins_name_is_read_whole_and_counts_as_its_family(tmp_path):
    ib_names = ("IB", "IBext", "IBext_v*", "UCX", "UCX-RMA", "UCX-UCT", "UCX-UCT-RD")
    got = nccl_network(_log(tmp_path, 0, 0, PLUGIN_LINES))
    assert got.networks == ("IBext_v8",) and not got.other_than("IB", ib_names)
    assert got.other_than("IB") == ("IBext_v8",)                 # a run recorded before the families
    aws = nccl_network(_log(tmp_path, 0, 1, "x:1:1 [0] NCCL INFO Using network AWS Libfabric\n"))
    assert aws.networks == ("AWS Libfabric",) and aws.other_than("IB", ib_names) == ("AWS Libfabric",)
    nodes = {"0": ["node01", "node02"]}
    logs = [Layout(tmp_path).server_log(0, 0), Layout(tmp_path).server_log(0, 1)]
    assert nccl_network_reasons(logs, "IB", nodes, root=tmp_path, names=ib_names) == [
        "replica 0 node rank 1 (node02): NCCL used network AWS Libfabric, not IB (cluster.nccl_network): "
        "x:1:1 [0] NCCL INFO Using network AWS Libfabric [logs/server-r0-n1.log:1]"]


def test_the_diagnosis_finds_the_fallback_line(tmp_path):
    p = _log(tmp_path, 1, 1, SOCKET_LINES)
    kinds = [(f.kind, f.line) for f in diagnose([p], root=tmp_path)]
    assert kinds == [("nccl_net", 3)]


def _events(tmp_path, *lines):
    p = Layout(tmp_path).events
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


def test_srun_s_line_about_the_failed_server_step_comes_first(tmp_path):
    """The job saw replica 1's server step exit (fail step=server-r1): srun's line about a task on
    replica 1's node is the reason, named by replica and node rank, before the job's FATAL line
    and srun's other lines (replica 0's task was killed in the teardown)."""
    ev = _events(tmp_path, "fail kind=step_exited step=server-r1 rc=1")
    nodes = {"0": ["node01", "node02"], "1": ["node05", "node06"]}
    out = "slurm-4242.out"
    findings = [Finding("srun_error", out, 40, "srun: error: node01: task 0: Killed",
                        {"message": "node01: task 0: Killed"}),
                Finding("srun_error", out, 41, "srun: error: node06: task 5: Exited with exit code 1",
                        {"message": "node06: task 5: Exited with exit code 1"}),
                Finding("job_fatal", out, 50, "FATAL: replica 1 server exited",
                        {"message": "replica 1 server exited"})]
    got = diagnosis_reasons(findings, nodes, events=ev)
    assert got[:3] == ["replica 1 node rank 1 (node06): srun: task 5: Exited with exit code 1",
                       "job: replica 1 server exited", "srun: node01: task 0: Killed"]


def _sacct(**kw):
    base = {"job_id": "4242", "state": "COMPLETED", "exit_code": "0:0", "elapsed": "00:06:00",
            "cluster": "abtest", "node_lists": {}}
    base.update(kw)
    return base


def _at(run, seconds=0):
    """A sacct time, local, relative to the run's job_start."""
    start = read_events(Layout(run).events).first["job_start"].epoch
    return datetime.fromtimestamp(start + seconds).strftime("%Y-%m-%dT%H:%M:%S")


def test_sacct_of_this_run_counts(tmp_path):
    run = build_run(tmp_path)
    ev = read_events(Layout(run).events)
    name = f"ab-{run.name}"
    s = _sacct(job_name=name, start=_at(run, -1), end=_at(run, 400), submit=_at(run, -3))
    assert identity_problem(s, ev) is None
    job = job_info(s, ev, "4242")
    assert job.state == "COMPLETED" and job.source == "sacct" and job.note is None


def test_sacct_of_another_job_is_ignored_and_said(tmp_path):
    run = build_run(tmp_path)
    ev = read_events(Layout(run).events)
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
    # two brackets in one name: their product, the first outermost (Slurm 22.05.8's
    # `scontrol show hostnames 'r[1-2]-n[01-02]'` prints these four in this order)
    assert expand_hostlist("r[1-2]-n[01-02],gpu5") == ["r1-n01", "r1-n02", "r2-n01", "r2-n02", "gpu5"]
    assert expand_hostlist("node05") == ["node05"] and expand_hostlist("") == [] and expand_hostlist(None) == []
    lists = {"1": "node[03-04]", "0": "node[01-02]"}
    job = job_info(_sacct(node_lists=lists, elapsed="1-00:00:01"), EventLog(), "4242")
    assert job.node_lists == {"0": ["node01", "node02"], "1": ["node03", "node04"]} and job.elapsed_s == 86401
    assert job.job_id == "4242" and job_info({**_sacct(), "job_id": None}, EventLog(), "4243").job_id == "4243"


# smg's counters as sglang-router 0.3.2 prints them at its /metrics (TYPE lines and label sets of
# tests/fixtures/runs/slow-node/metrics/router-*.prom; the retry counters' labels worker_type and
# endpoint are smg's own, counted per retry and per request that ran out of them)
def _prom(retries=0, failures=0, exhausted=0, kinds=("regular",)):
    text = "# TYPE smg_worker_cb_outcomes_total counter\n"
    text += 'smg_worker_cb_outcomes_total{worker="http://node05:31790",outcome="success"} 20\n'
    text += 'smg_worker_cb_outcomes_total{worker="http://node01:31780",outcome="success"} 20\n'
    if failures:
        text += f'smg_worker_cb_outcomes_total{{worker="http://node05:31790",outcome="failure"}} {failures}\n'
    for name, n in (("smg_worker_retries_total", retries), ("smg_worker_retries_exhausted_total", exhausted)):
        if n:
            text += f"# TYPE {name} counter\n"
            text += "".join(f'{name}{{worker_type="{k}",endpoint="completions"}} {n}\n' for k in kinds)
    return text


def _scrapes(tmp_path, start: str, end: str):
    (tmp_path / "metrics").mkdir(exist_ok=True)
    (tmp_path / "metrics" / "router-a.prom").write_text(start)
    (tmp_path / "metrics" / "router-b.prom").write_text(end)
    return _events(tmp_path, "bench_start",
                   "metrics_scrape target=router phase=start ok=1 http=200 file=metrics/router-a.prom",
                   "metrics_scrape target=router phase=end ok=1 http=200 file=metrics/router-b.prom",
                   "bench_end rc=0")


def test_router_retries_are_counted_and_judged(tmp_path):
    ev = _scrapes(tmp_path, _prom(), _prom(retries=3, failures=2, exhausted=1))
    r = router_retries(tmp_path, ev)
    assert r == RouterRetries(3, 1, (("http://node05:31790", 2),))
    invalid, flags = router_retry_reasons(r, 40, 5.0)            # 3 of 40 = 7.5 % > 5 %
    assert flags == [] and invalid == [
        "the router retried requests during the benchmark (3 retry attempt(s) (smg_worker_retries_total); 1 "
        "request(s) out of retries (smg_worker_retries_exhausted_total); 2 failed attempt(s) at "
        "http://node05:31790; router /metrics: 7.5% of 40 requests), more than router.max_retry_pct = 5%: "
        "their latencies include a failed attempt and the replicas' shares are not the policy's"]
    invalid, flags = router_retry_reasons(r, 80, 5.0)            # 3.75 %: ok, flagged with the counts
    assert invalid == [] and flags == [
        "the router retried requests during the benchmark (3 retry attempt(s) (smg_worker_retries_total); 1 "
        "request(s) out of retries (smg_worker_retries_exhausted_total); 2 failed attempt(s) at "
        "http://node05:31790; router /metrics: 3.8% of 80 requests), within router.max_retry_pct = 5%: "
        "flagged, not invalid"]
    assert router_retry_reasons(r, 80, 0.0)[0]                    # 0: any retry is invalid
    assert router_retries(tmp_path, _scrapes(tmp_path, _prom(3, 2), _prom(3, 2))) is None     # none in the pass
    assert router_retry_reasons(None, 40, 5.0) == ([], [])


def test_a_pd_routers_retry_counts_once(tmp_path):
    """A PD router counts each retry under both its prefill and its decode worker_type."""
    ev = _scrapes(tmp_path, _prom(kinds=("prefill", "decode")), _prom(retries=2, kinds=("prefill", "decode")))
    assert router_retries(tmp_path, ev) == RouterRetries(2, 0, ())


def _stored_run_with_router_scrapes(tmp_path, end_scrape: str, max_retry_pct=None):
    """tests/fixtures/runs/tp32-stored (an ok run of 8 requests) with the router's /metrics at its
    pass's start and end, as the job scrapes them (events.log, metrics/router-*.prom)."""
    import json
    import shutil

    from helpers import ROOT

    run = tmp_path / "tp32-stored"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "tp32-stored", run)
    lines = (run / "events.log").read_text().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if " bench_start" in ln)
    end = next(i for i, ln in enumerate(lines) if " bench_end" in ln)
    stamp = lambda ln: " ".join(ln.split()[:3])  # noqa: E731
    (run / "metrics").mkdir()
    (run / "metrics" / "router-start.prom").write_text(_prom())
    (run / "metrics" / "router-end.prom").write_text(end_scrape)
    lines.insert(end + 1, f"{stamp(lines[end])} metrics_scrape target=router phase=end round=end ok=1 http=200 "
                          "file=metrics/router-end.prom\n")
    lines.insert(start + 1, f"{stamp(lines[start])} metrics_scrape target=router phase=start round=start ok=1 "
                            "http=200 file=metrics/router-start.prom\n")
    (run / "events.log").write_text("".join(lines))
    if max_retry_pct is not None:
        m = json.loads((run / "manifest.json").read_text())
        m["config"]["router"]["max_retry_pct"] = max_retry_pct
        (run / "manifest.json").write_text(json.dumps(m))
    return run


def test_a_run_whose_router_retried_is_not_plain_ok(tmp_path):
    """Issue 29: collected end to end, a stored ok run whose router retried 1 of its 8 requests
    (12.5 %) is invalid under the default router.max_retry_pct = 5; with the run's own setting at
    20 it stays ok, flagged with the counts; without retries it is plain ok."""

    s = collect_run(_stored_run_with_router_scrapes(tmp_path / "a", _prom(retries=1, failures=1)))
    assert s.verdict == "invalid" and s.reasons == (
        "the router retried requests during the benchmark (1 retry attempt(s) (smg_worker_retries_total); "
        "1 failed attempt(s) at http://node05:31790; router /metrics: 12.5% of 8 requests), more than "
        "router.max_retry_pct = 5%: their latencies include a failed attempt and the replicas' shares are "
        "not the policy's",)
    s = collect_run(_stored_run_with_router_scrapes(tmp_path / "b", _prom(retries=1, failures=1), 20.0))
    assert s.verdict == "ok" and len(s.reasons) == 1 and "12.5% of 8 requests), within router.max_retry_pct = 20%" \
        in s.reasons[0]
    from slurm_ab.tables.runs import runs_text
    assert "ok: the router retried requests during the benchmark (1 retry attempt(s)" in runs_text([s], "md")
    s = collect_run(_stored_run_with_router_scrapes(tmp_path / "c", _prom()))
    assert s.verdict == "ok" and s.reasons == ()


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


def test_a_completed_run_whose_nccl_used_the_fallback_is_invalid(tmp_path):
    """Wired (issue 29 item 5): a completed run whose server log shows NCCL on sockets where the
    site declares IB is invalid, naming the node and NCCL's own line; the same run declaring
    Socket stays ok."""
    import json
    import shutil

    from helpers import ROOT

    def run(where, expected):
        d = tmp_path / where
        shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "tp32-stored", d)
        log = d / "logs" / "server-r1-n1.log"
        log.write_text(SOCKET_LINES + log.read_text())
        m = json.loads((d / "manifest.json").read_text())
        m["config"]["cluster"]["nccl_network"] = expected
        (d / "manifest.json").write_text(json.dumps(m))
        return collect_run(d)

    s = run("ib", "IB")
    assert s.verdict == "invalid" and len(s.reasons) == 1
    assert s.reasons[0].startswith("replica 1 node rank 1 (") and "NCCL used network Socket, not IB" in s.reasons[0]
    assert "NET/IB : No device found. [logs/server-r1-n1.log:3]" in s.reasons[0]
    assert run("socket", "Socket").verdict == "ok"


def test_a_root_cause_logged_after_the_jobs_failure_is_a_teardown_consequence(tmp_path):
    """The router refused its flags (fail at 08:00:00); the job stopped the servers and rank 0
    then logged an NCCL error about its exited peers (08:00:02). NCCL outranks the router by kind,
    but the router's line came first: it is the reason, the NCCL line follows it."""
    ev = _events(tmp_path, "fail kind=step_exited step=router rc=2")
    nodes = {"0": ["node01", "node02"]}
    findings = [Finding("nccl", "logs/server-r0-n0.log", 132, "NCCL error: remote process exited",
                        {"label": "NCCL error", "ts": "2027-01-15T08:00:02.500000", "replica": 0, "node_rank": 0}),
                Finding("router", "logs/router.log", 3, "error: unexpected argument '--no-such-flag'",
                        {"label": "invalid command-line arguments"})]
    got = diagnosis_reasons(findings, nodes, events=ev)
    assert got[0].startswith("logs/router.log: invalid command-line arguments"), got
    assert "NCCL error" in got[1], got
    # the same NCCL line before the failure is the cause again
    early = [Finding("nccl", f.file, f.line, f.excerpt, {**f.details, "ts": "2027-01-15T07:59:58.000000"})
             if f.kind == "nccl" else f for f in findings]
    assert "NCCL error" in diagnosis_reasons(early, nodes, events=ev)[0]


def test_a_signalled_node_goes_before_its_peers_nccl_lines(tmp_path):
    """Replica 1's head was SIGKILLed: its peers' NCCL 'remote process exited' lines (logged before
    the job noticed, on a slow host) follow srun's line about the head; a peer's NCCL error of
    another wording, or one in a replica without a signalled task, keeps its place."""
    ev = _events(tmp_path, "fail kind=step_exited step=server-r1 rc=137")
    nodes = {"0": ["node01", "node02"], "1": ["node05", "node06"]}
    out = "slurm-4242.out"
    gone = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
            "remote process exited or there was a network error, NCCL version 2.27.3")
    peer = Finding("nccl", "logs/server-r1-n1.log", 117, gone,
                   {"label": "NCCL error", "ts": "2026-09-02T12:35:01", "replica": 1, "node_rank": 1})
    killed = Finding("srun_error", out, 40, "srun: error: node05: task 0: Killed", {"message": "node05: task 0: Killed"})
    got = diagnosis_reasons([peer, killed], nodes, events=ev)
    assert got[:2] == ["replica 1 node rank 0 (node05): srun: task 0: Killed",
                       f"replica 1 node rank 1 (node06): NCCL error: {gone} [logs/server-r1-n1.log:117]"]
    # the head exited with a code (it logged its own cause): the peer's line is evidence in order
    exited = Finding("srun_error", out, 40, "srun: error: node05: task 0: Exited with exit code 1",
                     {"message": "node05: task 0: Exited with exit code 1"})
    assert diagnosis_reasons([peer, exited], nodes, events=ev)[0].startswith("replica 1 node rank 1 (node06): NCCL")
    # a collective timeout (the watchdog's wording) is not an echo of the kill
    timeout = Finding("nccl", "logs/server-r1-n1.log", 90, "Watchdog caught collective operation timeout",
                      {"label": "NCCL error", "ts": "2026-09-02T12:35:01", "replica": 1, "node_rank": 1})
    assert diagnosis_reasons([timeout, killed], nodes, events=ev)[0].startswith("replica 1 node rank 1 (node06): NCCL")


def test_a_killed_head_goes_before_its_peers_whole_fatal_sequence(tmp_path):
    """The emulator's peers of a SIGKILLed head log SGLang's whole fatal sequence ('Scheduler hit an
    exception' with NCCL's 'remote process exited' traceback, then the launcher's sigquit line) and
    kill themselves a moment later (srun's first line is the head's). Through diagnose() on those
    lines, the head's srun line is the first reason whatever the peers logged before the job noticed."""
    from slurm_ab_testbed.emulator.tracebacks import SIGQUIT, peer_lost_traceback

    nodes = {"0": ["node01", "node02", "node03"], "1": ["node05", "node06", "node07"]}
    head = _log(tmp_path, 1, 0, "[2026-09-02 12:34:50 TP0] Decode batch, #running-req: 8\n")
    peers = [_log(tmp_path, 1, r, f"[2026-09-02 12:35:01 TP{8 * r}] Lost connection to node rank 0 (10.0.0.5): "
                                  "connection closed\n",
                  f"[2026-09-02 12:35:01 TP{8 * r}] Scheduler hit an exception: "
                  f"{peer_lost_traceback('node rank 0 (10.0.0.5)').rstrip()}\n",
                  f"[2026-09-02 12:35:01] {SIGQUIT}\n") for r in (1, 2)]
    out = Layout(tmp_path).slurm_out(4242)
    out.write_text("srun: error: node05: task 0: Killed\nsrun: error: node06: task 1: Killed\n"
                   "srun: error: node07: task 2: Killed\n"
                   "2027-01-15 08:00:00 slurm-ab: FATAL: server step of replica 1 exited with status 137\n")
    ev = _events(tmp_path, "fail kind=step_exited step=server-r1 replica=1 rc=137")
    findings = diagnose([head, *peers, out], root=tmp_path)
    assert {f.kind for f in findings if f.details.get("node_rank") == 1} >= {"nccl", "scheduler_exception",
                                                                             "child_failed"}
    got = diagnosis_reasons(findings, nodes, events=ev)
    assert got[0] == "replica 1 node rank 0 (node05): srun: task 0: Killed", got
    # the peers' lines are kept as evidence, after it
    assert got[1].startswith("replica 1 node rank 1 (node06): NCCL error: ") and "remote process exited" in got[1]
    # srun reports the nodes' exits as they arrive: a peer (dead by SGLang's fatal sequence) may come
    # before the head (seen in a suite run: node25 task 2 first, the head node23 task 0 fourth)
    out.write_text("srun: error: node07: task 2: Killed\nsrun: launch/slurm: _step_signal: Terminating StepId=1206.3\n"
                   "srun: error: node06: task 1: Killed\nsrun: error: node05: task 0: Killed\n"
                   "srun: Force Terminated StepId=1206.3\n"
                   "2027-01-15 08:00:00 slurm-ab: FATAL: server step of replica 1 exited with status 137\n")
    got = diagnosis_reasons(diagnose([head, *peers, out], root=tmp_path), nodes, events=ev)
    assert got[0] == "replica 1 node rank 0 (node05): srun: task 0: Killed", got
    assert got[1].startswith("replica 1 node rank ") and "NCCL error: " in got[1], got
    # without the head's srun line (an older Slurm, a lost output) the peers' lines are all there is
    out.write_text("2027-01-15 08:00:00 slurm-ab: FATAL: server step of replica 1 exited with status 137\n")
    got = diagnosis_reasons(diagnose([head, *peers, out], root=tmp_path), nodes, events=ev)
    assert got[0].startswith("replica 1 node rank 1 (node06): "), got
