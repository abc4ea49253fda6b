"""Faults on the real local cluster: the job fails fast, cleans up, keeps its evidence (issue 5).

Every scenario runs one real heterogeneous job (2 replicas x 4 nodes, the emulator in place of
SGLang, the real router and client) through ``slurm-ab submit --wait``, injects its fault, and
checks: how long from the fault to the job's end, the Slurm state, what the verdict says, that
the evidence is still there, and that no process of the job is left on any node (tracked by the
job's SLURM_JOB_ID marker and by the job's own slurmstepd daemons, see helpers/jobdrive.py).

Measured times are printed as 'MEASURE <scenario>: ...' (pytest -rA shows them).
"""
from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from helpers.jobdrive import Job, Tracker, access_posts, cli, processes_of_job
from helpers.lanes import heal, idle_nodes
from helpers.terminal import unwrapped
from helpers.rundir_builder import KEY
from slurm_ab.model.rundir import SUMMARY_FORMATS, Layout

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)")
# Short scenarios: the emulator's clock at 0.02 (start-up ~6 s, the benchmark ~13 s on 2 cores).
FAST = 'server.env.SLURM_AB_EMU_TIME_SCALE="0.02"'
NO_PREFLIGHT = "preflight.enabled=false"
READY_TIMEOUT = 15
ALL_JOBS: list[Job] = []          # every job of this module (the stale-process check)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture
def job(workdir):
    """job(name, *sets, **kw) starts one job; whatever happens, it does not outlive the test."""
    made: list[Job] = []

    def start(name: str, *sets: str, **kw) -> Job:
        if not any("SLURM_AB_EMU_TIME_SCALE" in x for x in sets):
            sets = (FAST,) + sets
        # these faults come after the preflight, which has its own tests (test_preflight*.py)
        sets = (NO_PREFLIGHT,) + sets
        j = Job(workdir, f"{name}-{time.strftime('%H%M%S')}", *sets, **kw)
        made.append(j)
        ALL_JOBS.append(j)
        return j

    yield start
    for j in made:
        j.cleanup()


def measure(scenario: str, seconds: float, verdict_line: str) -> None:
    print(f"MEASURE {scenario}: {seconds:.1f} s | {verdict_line}")


def last_stamp(path: Path) -> float:
    """Epoch of the last SGLang-stamped line of a log (local time, like events.log's)."""
    stamps = [m.group(1) for line in path.read_text(errors="replace").splitlines()
              if (m := STAMP.match(line))]
    assert stamps, f"no stamped line in {path}"
    s = stamps[-1]
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f" if "." in s else "%Y-%m-%d %H:%M:%S").timestamp()


def verdict_line(j: Job) -> str:
    s = j.summary()
    return f"{s['verdict']}: {s['reasons'][0]}" if s["reasons"] else s["verdict"]


def printed_verdict(j: Job, verdict: str) -> None:
    """`submit --wait` printed the verdict and its first reason to the user."""
    out = j.output()
    assert f"verdict: {verdict}" in out, out[-3000:]
    assert f"  - {j.summary()['reasons'][0]}" in unwrapped(out)


def tree_digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


# ---- 1. a server dies during start-up ------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.slow
def test_rank_crash_while_loading(job):
    """crash_rank=2 on one replica's node: fails within 30 s, names replica, node and cause."""
    _, r1 = idle_nodes()
    node = r1[2]
    j = job("crash", 'server.env.SLURM_AB_EMU_FAULT="crash_rank=2"',
            f'server.env.SLURM_AB_EMU_FAULT_NODES="{node}"')
    rc = j.finish(120)
    g = next((g for g, hosts in j.hosts().items() if hosts[2] == node), None)
    assert g is not None, f"the job did not get the predicted nodes (cluster busy?): {j.hosts()}"
    assert rc == 1
    crashed = j.launch().server_log(g, 2)
    detect = j.job_end() - last_stamp(crashed)
    assert 0 <= detect < 30, detect
    info = j.sacct()
    assert info["state"] == "FAILED", info
    s = j.summary()
    assert s["verdict"] == "failed"
    assert s["reasons"][0].startswith(f"replica {g} node rank 2 ({node}): CUDA error: ")
    assert "uncorrectable ECC error" in s["reasons"][0]
    assert f"replica {g} node rank 2 ({node}): srun: task 2: Killed" in s["reasons"]
    assert f"job: server step of replica {g} exited with status 137" in s["reasons"]
    printed_verdict(j, "failed")
    assert len(j.launch().server_logs()) == 8
    # the other replica was torn down, not left to its time limit
    teardown = [kv for _, k, kv in j.events() if k == "teardown"]
    assert teardown and teardown[0]["reason"] == "launch-end"      # the launch's own teardown
    j.assert_nothing_left()
    measure("server rank 2 dies while loading", detect, verdict_line(j))


# ---- 2. a server dies mid-benchmark ---------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.slow
def test_replica_head_killed_mid_benchmark(job):
    j = job("midkill", 'server.env.SLURM_AB_EMU_TIME_SCALE="0.03"')
    j.wait_event("bench_start")
    j.wait_for(lambda: access_posts(j.run_dir) >= 4, 60, "4 requests through the router")
    g = 1
    head = j.hosts()[g][0]
    victims = [p for p in j.find("slurm_ab_testbed.emulator", node=head) if p.cmd.startswith("python3 -m")]
    assert len(victims) == 1, victims
    t_kill = time.time()
    os.kill(victims[0].pid, signal.SIGKILL)
    assert j.finish(120) == 1
    detect = j.job_end() - t_kill
    assert detect < 60, detect
    assert j.sacct()["state"] == "FAILED"
    # the client's partial output is kept; it wrote no result
    client = j.launch().client_log(KEY).read_text()
    assert "Starting main benchmark run" in client or "#Input tokens" in client, client
    assert not j.launch().bench(KEY).exists()
    s = j.summary()
    assert s["verdict"] == "failed"
    assert s["reasons"][0] == f"replica {g} node rank 0 ({head}): srun: task 0: Killed", s["reasons"]
    m = re.match(r"benchmark interrupted \d+ s after it started: at most (\d+) of 40 requests had succeeded "
                 r"\(HTTP 200 in the server access logs: replica 0: (\d+), replica 1: (\d+)", s["reasons"][1])
    assert m, s["reasons"]
    assert int(m.group(1)) == access_posts(j.run_dir) == int(m.group(2)) + int(m.group(3)) >= 4
    assert f"job: server step of replica {g} exited with status 137" in s["reasons"]
    printed_verdict(j, "failed")
    j.assert_nothing_left()
    measure("replica head killed mid-benchmark", detect, verdict_line(j) + " / " + s["reasons"][1])


# ---- 3. start-up hangs -----------------------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.slow
def test_startup_hang_hits_ready_timeout_and_collect_waits(job, workdir):
    _, r1 = idle_nodes()
    j = job("hang", 'server.env.SLURM_AB_EMU_FAULT="hang_startup"',
            f'server.env.SLURM_AB_EMU_FAULT_NODES="{r1[0]}"', f"cluster.ready_timeout_s={READY_TIMEOUT}")
    j.wait_event("server_launch", replica=1)
    # collect on a running job says so and writes nothing final
    r = cli("collect", j.run_id, cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert "verdict: running" in r.stdout and "still running; nothing final written" in r.stdout
    assert not any(Layout(j.run_dir).summary(f).exists() for f in SUMMARY_FORMATS)
    rc = j.finish(120)
    g = next((g for g, hosts in j.hosts().items() if hosts[0] == r1[0]), None)
    assert g is not None, f"the job did not get the predicted nodes (cluster busy?): {j.hosts()}"
    assert rc == 1
    launched = next(t for t, k, kv in j.events() if k == "server_launch" and kv["replica"] == str(g))
    detect = j.job_end() - launched
    assert READY_TIMEOUT - 1 <= detect < READY_TIMEOUT + 15, detect     # bash's SECONDS: 1 s steps
    assert j.sacct()["state"] == "FAILED"
    s = j.summary()
    assert s["verdict"] == "failed"
    assert s["reasons"][0] == f"job: replica {g} not healthy after {READY_TIMEOUT} s"
    assert s["reasons"][1].startswith(f"replica {g} node rank 0 ({r1[0]}): last log line: [")
    assert "Load weight begin" in s["reasons"][1]
    (out,) = (p.read_text() for p in Layout(j.run_dir).slurm_outs())
    assert f"---- last lines of {j.launch().server_log(g, 0)} ----" in out
    printed_verdict(j, "failed")
    j.assert_nothing_left()
    measure(f"start-up hangs (ready_timeout_s={READY_TIMEOUT}, from server launch)", detect, verdict_line(j))


# ---- 4. the router dies ----------------------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.slow
def test_router_bad_flag_and_resubmitted_script(job, workdir):
    j = job("badrouter", "router.args.no-such-flag=true")
    assert j.finish(120) == 1
    launched = next(t for t, k, _ in j.events() if k == "router_launch")
    detect = j.job_end() - launched
    assert detect < 15, detect
    assert j.sacct()["state"] == "FAILED"
    s = j.summary()
    assert s["verdict"] == "failed"
    router = Layout(j.run_dir).rel(j.launch().router_log)
    assert s["reasons"][0].startswith(f"{router}: invalid command-line arguments: ")
    assert "unrecognized arguments: --no-such-flag" in s["reasons"][0]
    assert "job: router exited with status 2" in s["reasons"]
    printed_verdict(j, "failed")
    j.assert_nothing_left()
    measure("router exits at once (bad flag)", detect, verdict_line(j))

    # The same script submitted again (plain sbatch) never touches the finished run's evidence.
    before = tree_digest(j.run_dir)
    jid = subprocess.run(["sbatch", "--parsable", str(Layout(j.run_dir).job_script)], capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    again = Layout(j.run_dir).resubmitted(jid)
    deadline = time.monotonic() + 120
    while subprocess.run(["squeue", "-h", "-j", jid], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "resubmitted job did not end"
        time.sleep(0.5)
    after = tree_digest(j.run_dir)
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) <= {Layout(j.run_dir).rel(Layout(j.run_dir).slurm_out(jid))}
    assert "was already used by another job" in Layout(j.run_dir).slurm_out(jid).read_text()
    assert Layout(again).events.exists() and Layout(again).slurm_out(jid).exists()
    assert "FATAL: router exited" in Layout(again).slurm_out(jid).read_text()
    r = cli("collect", str(again), cwd=workdir)
    assert "verdict: failed" in r.stdout
    assert Tracker(jid).wait_gone(30) == [] and processes_of_job(jid) == []


@pytest.mark.cluster
@pytest.mark.slow
def test_router_killed_mid_benchmark(job):
    j = job("routerkill")
    j.wait_event("bench_start")
    router = j.wait_for(lambda: [p for p in j.find("") if p.cmd == "sglang::router"
                                 or p.cmd.startswith("python3 -m sglang_router")], 30, "the router process")
    assert len(router) == 1, router
    time.sleep(1)
    t_kill = time.time()
    os.kill(router[0].pid, signal.SIGKILL)
    assert j.finish(120) == 1
    detect = j.job_end() - t_kill
    assert detect < 30, detect
    assert j.sacct()["state"] == "FAILED"
    s = j.summary()
    assert s["verdict"] == "failed"
    assert s["reasons"][0] == "job: router exited with status 137", s["reasons"]
    assert s["reasons"][1].startswith("benchmark interrupted")
    printed_verdict(j, "failed")
    j.assert_nothing_left()
    measure("router killed mid-benchmark", detect, verdict_line(j))


# ---- 5. a node is lost ----------------------------------------------------------------------------

CLUSTER_STATE = Path("/var/lib/slurm-ab-cluster")


def _node_state(node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.cluster
@pytest.mark.slow
def test_node_lost_mid_benchmark(job):
    """One of replica 1's nodes is lost mid-benchmark: its slurmd is killed (pid file) and the
    node set DOWN, which is what slurmctld does on its own SlurmdTimeout (60 s here) later.
    Slurm kills the job (NODE_FAIL, --no-requeue), the job tears down at once, records Slurm's
    view of its nodes, and the verdict names the node."""
    j = job("nodelost")
    j.wait_event("bench_start")
    node = j.hosts()[1][1]
    pid = int((CLUSTER_STATE / "run" / f"slurmd.{node}.pid").read_text())
    t_lost = time.time()
    try:
        os.kill(pid, signal.SIGKILL)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=slurm-ab-test-node-lost"],
                       check=True, capture_output=True)
        assert j.finish(120) == 1
        detect = j.job_end() - t_lost
        # the job's processes on the lost node end too (their peers are gone), slurmd or not
        j.assert_nothing_left()
    finally:
        heal(node)
    assert not re.match(r"(down|drain|fail)", _node_state(node)), _node_state(node)
    assert detect < 30, detect
    info = j.sacct()
    assert info["state"] == "NODE_FAIL", info
    states = [kv for _, k, kv in j.events() if k == "node_state"]
    # "down*" once slurmctld's ping of the killed slurmd has failed (sinfo(1): "*" = not responding)
    assert states in ([{"node": node, "state": s, "reason": "slurm-ab-test-node-lost"}] for s in ("down", "down*")), states
    # submit --wait collected as soon as Slurm said NODE_FAIL, possibly while the batch script was
    # still tearing down (before it recorded node_state); srun's line names the node either way.
    s = j.summary()
    assert s["verdict"] == "failed" and s["job"]["state"] == "NODE_FAIL"
    assert s["reasons"][0].startswith(f"node {node} (replica 1 node rank 1) failed (srun: Node failure on {node}")
    printed_verdict(j, "failed")
    r = cli("collect", j.run_id, cwd=j.workdir)
    s = j.summary()
    state = "down" if states[0]["state"] == "down" else "down (not responding)"
    assert s["reasons"][0] == (f"node {node} (replica 1 node rank 1) failed (srun: Node failure on {node}; "
                               f"Slurm: {state}, reason: slurm-ab-test-node-lost)"), s["reasons"]
    assert f"  - {s['reasons'][0]}" in unwrapped(r.stdout)
    assert "job NODE_FAIL (Slurm, exit code 0:0)" in s["reasons"]
    assert [kv for _, k, kv in j.events() if k == "fail"][0] == {"kind": "signal", "signal": "TERM"}
    measure("node lost mid-benchmark (slurmd killed + node DOWN)", detect, verdict_line(j))


# ---- 6. cancel -------------------------------------------------------------------------------------

# `slurm-ab cancel` in every phase (mid-benchmark included): tests/test_cancel_phases.py.


@pytest.mark.cluster
@pytest.mark.slow
def test_plain_scancel_during_startup(job, workdir):
    j = job("scancel")
    j.wait_event("server_launch", replica=1)
    j.wait_for(lambda: len([p for p in j.find("slurm_ab_testbed.emulator") if p.cmd.startswith("python3 -m")]) == 8,
               30, "8 server processes")
    t = time.time()
    subprocess.run(["scancel", str(j.job_id)], check=True)
    j.finish(120)
    gone = _gone_after(j, t)
    assert j.sacct()["state"] == "CANCELLED"
    r = cli("collect", str(j.job_id), cwd=workdir)
    assert "verdict: cancelled" in r.stdout, r.stdout
    # Slurm refuses the clean-up step of a cancelled job: the verdict says what may be left and
    # where (the next job's sweep on those nodes removes it)
    cache = f"/tmp/slurm-ab-cache/slurm-ab-{j.job_id}"
    assert [kv["ok"] for _, k, kv in j.events() if k == "cleanup"] in ([], ["0"])
    assert any(x.startswith(f"may be left on the nodes: cache directory {cache} on node") and
               "the next job's preflight on those nodes removes them" in x for x in j.summary()["reasons"])
    measure("scancel during start-up (until no process left)", gone, verdict_line(j))


def _gone_after(j: Job, t0: float) -> float:
    """Seconds from t0 until no process of the job is left (at most 30)."""
    j.assert_nothing_left(30)
    gone = time.time() - t0
    assert gone < 30, gone
    ev = j.events()
    assert [kv for _, k, kv in ev if k == "fail"][0] == {"kind": "signal", "signal": "TERM"}
    assert any(k == "teardown" and kv["reason"] == "signal-TERM" for _, k, kv in ev)
    return gone


# ---- 7. time limit ---------------------------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.slow
def test_time_limit_teardown_before_slurm_kills(job):
    """--signal=B:USR1@30 with a 1 min limit: Slurm checks limits every 30 s and may signal up to
    60 s early, so USR1 comes 0-30 s after the start; the slow clock keeps the job busy past that."""
    j = job("timelimit", 'server.env.SLURM_AB_EMU_TIME_SCALE="0.1"', 'cluster.time_limit="00:01:00"',
            "cluster.signal_before_limit_s=30", "estimate.enforce=false")   # shorter than the job on purpose
    assert j.finish(150) == 1
    ev = j.events()
    usr1 = next(t for t, k, kv in ev if k == "fail" and kv.get("kind") == "time_limit")
    start = next(t for t, k, _ in ev if k == "job_start")
    assert any(k == "teardown" and kv["reason"] == "time-limit" for _, k, kv in ev)
    assert [kv for _, k, kv in ev if k == "job_end"] == [{"rc": "124"}]
    detect = j.job_end() - usr1
    assert detect < 15 and j.job_end() - start < 60, (detect, j.job_end() - start)
    info = j.sacct()
    assert info["state"] == "FAILED" and info["exit_code"] == "124:0", info   # not Slurm's TIMEOUT kill
    (out,) = (p.read_text() for p in Layout(j.run_dir).slurm_outs())
    assert "teardown (time-limit) done" in out and "DUE TO TIME LIMIT" not in out
    # Slurm checks time limits every 30 s, so USR1 may come any time in the first 30 s: every
    # replica launched well before it left its logs (all 8 when it came during the benchmark).
    for t, k, kv in ev:
        if k == "server_launch" and t < usr1 - 2:
            logs = sorted(j.launch().server_log_map().get(int(kv["replica"]), {}).values())
            assert len(logs) == 4 and all(p.stat().st_size for p in logs), logs
    s = j.summary()
    assert s["verdict"] == "timeout"
    assert s["reasons"][0].startswith("job reached its time limit: Slurm's warning signal (USR1) came ")
    printed_verdict(j, "timeout")
    j.assert_nothing_left()
    measure(f"time limit (USR1 {usr1 - start:.0f} s after start)", detect, verdict_line(j))


# ---- 8. nothing stale ------------------------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.slow
def test_next_job_on_the_same_nodes_is_undisturbed(job):
    earlier = [x for x in ALL_JOBS if x.job_id]
    for x in earlier:                     # there must be nothing left of any earlier job
        assert x.tracker.leftovers() == [], (x.run_id, x.tracker.leftovers())
    used = {n for x in earlier for hosts in x.hosts().values() for n in hosts}
    j = job("after", "benchmark.num_prompts=16")
    assert j.finish(120) == 0, j.output()[-3000:]
    assert j.sacct()["state"] == "COMPLETED"
    s = j.summary()
    assert s["verdict"] == "ok", s["reasons"]
    assert s["bench"]["completed"] == 16
    mine = {n for hosts in j.hosts().values() for n in hosts}
    assert not earlier or mine & used
    j.assert_nothing_left()


# ---- the collector rules behind these verdicts (no cluster: built run directories) ------------------

from helpers.rundir_builder import RunSpec, build_run, launch_layout  # noqa: E402

from helpers.rundir_builder import collect_one as collect_run  # noqa: E402


def _stamp_of(line: str) -> tuple[float, str]:
    p = line.split()
    return float(p[0]), f"{p[1]} {p[2]}"


def _cut(run: Path, last: str, after_s: float, *extra: str, slurm_out: str = "") -> float:
    """Keep the launch's events up to the last `last` event; append `extra` events after_s later
    (the job's own end among them: the job's events lose theirs); drop server log lines after that
    moment and the client's result. Returns the cut's epoch."""
    lay, job = launch_layout(run), Layout(run)
    lines = lay.events.read_text().splitlines()
    i = max(n for n, l in enumerate(lines) if l.split()[3] == last)
    epoch, _ = _stamp_of(lines[i])
    t = epoch + after_s
    stamp = datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    lay.events.write_text("\n".join(lines[: i + 1] + [f"{t:.3f} {stamp} {e}" for e in extra]) + "\n")
    job.events.write_text("\n".join(l for l in job.events.read_text().splitlines()
                                    if l.split()[3] not in ("launch_end", "teardown", "job_end")) + "\n")
    cut = stamp[:19]
    for p in lay.server_logs():
        p.write_text("".join(l for l in p.read_text().splitlines(keepends=True) if not l.startswith("[")
                             or l[1:20] <= cut))
    lay.bench(KEY).unlink()
    lay.client_log(KEY).write_text("#Input tokens: 655360\nStarting main benchmark run...\n")
    out = job.slurm_out(4242)
    out.write_text(out.read_text().splitlines(keepends=True)[0] + slurm_out)
    return t


def _rel(run: Path, path: Path) -> str:
    """A file of a run as reasons name it (relative to the run directory)."""
    return Layout(run).rel(path)


def test_rules_replica_dies_mid_benchmark(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "bench_start", 100, "fail kind=step_exited step=server-r1 replica=1 rc=137",
         "teardown reason=exit", "job_end rc=1",
         slurm_out="srun: error: node05: task 0: Killed\n"
                   "2026-09-02 12:36:00 slurm-ab: FATAL: server step of replica 1 exited with status 137\n"
                   "srun: error: node01: task 0: Killed\n")
    s = collect_run(run, sacct={"state": "FAILED", "exit_code": "1:0"})
    assert s.verdict == "failed"
    assert s.reasons[0] == "replica 1 node rank 0 (node05): srun: task 0: Killed"
    served = [r.requests_served for r in s.replicas]
    assert 0 < sum(served) < 41
    assert s.reasons[1] == (f"benchmark interrupted 100 s after it started: at most {sum(served)} of 40 requests had "
                            f"succeeded (HTTP 200 in the server access logs: replica 0: {served[0]}, replica 1: "
                            f"{served[1]}; a streamed request is logged when its answer starts, so some may have "
                            f"been cut off); the client wrote no result")
    assert "job: server step of replica 1 exited with status 137" in s.reasons
    assert not [r for r in s.reasons if "node01" in r]          # the job's own teardown: not a cause


def test_rules_router_dies_srun_line_not_pinned_on_a_replica(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "router_ready", 1, "fail kind=step_exited step=router rc=137", "teardown reason=exit", "job_end rc=1",
         slurm_out="srun: error: node01: task 0: Killed\n"
                   "2026-09-02 12:36:00 slurm-ab: FATAL: router exited with status 137\n")
    s = collect_run(run, sacct={"state": "FAILED"})
    assert s.reasons[:2] == ("job: router exited with status 137", "srun: node01: task 0: Killed")


def test_rules_own_teardown_before_the_time_limit_is_a_timeout(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "bench_start", 20, "fail kind=time_limit", "teardown reason=time-limit", "job_end rc=124",
         slurm_out="2026-09-02 12:36:00 slurm-ab: FATAL: time limit is near: stopping before Slurm kills the job\n")
    for sacct in ({"state": "FAILED", "exit_code": "124:0"}, None):
        s = collect_run(run, sacct=sacct)
        assert s.verdict == "timeout", s.reasons
        assert s.reasons[0].startswith("job reached its time limit: Slurm's warning signal (USR1) came ")
        assert s.reasons[1].startswith("benchmark interrupted 20 s after it started")
    assert collect_run(run, sacct={"state": "TIMEOUT"}).verdict == "timeout"
    assert collect_run(run, sacct={"state": "NODE_FAIL"}).verdict == "failed"


def test_rules_lost_node_is_named(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "bench_start", 5, "fail kind=signal signal=TERM", "teardown reason=signal-TERM",
         "node_state node=node06 state=down reason=Not responding", "job_end rc=143",
         slurm_out="srun: error: Node failure on node06\n"
                   "slurmstepd: error: *** JOB 4242 ON node01 CANCELLED AT 2026-09-02T12:36:00 DUE TO NODE "
                   "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
                   "2026-09-02 12:36:00 slurm-ab: FATAL: received SIGTERM (scancel, node failure, preemption or "
                   "time limit): stopping\nsrun: error: node01: task 0: Terminated\n")
    s = collect_run(run, sacct={"state": "NODE_FAIL"})
    assert s.verdict == "failed"
    assert s.reasons[0] == ("node node06 (replica 1 node rank 1) failed (srun: Node failure on node06; Slurm: down, "
                            "reason: Not responding)")
    assert not [r for r in s.reasons if "Terminated" in r]
    # without srun's line (slurmd gone silent): Slurm's view alone names it
    out = Layout(run).slurm_out(4242)
    out.write_text(out.read_text().replace("srun: error: Node failure on node06\n", ""))
    s = collect_run(run)
    assert s.verdict == "failed" and s.reasons[0] == ("node node06 (replica 1 node rank 1) was down in Slurm when "
                                                      "the job ended (reason: Not responding)")


def test_rules_hang_shows_the_last_server_line(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "server_launch", 15, "fail kind=not_ready replicas=1", "teardown reason=exit", "job_end rc=1",
         slurm_out="srun: error: node01: task 0: Exited with exit code 1\n"     # another step's task
                   "2026-09-02 12:31:06 slurm-ab: FATAL: replica 1 not healthy after 15 s\n")
    p = launch_layout(run).server_log(1, 0)
    p.write_text(p.read_text() + "slurmstepd-node05: error: *** STEP 4243.1 ON node05 CANCELLED AT x ***\n")
    s = collect_run(run, sacct={"state": "FAILED"})
    assert s.reasons[0] == "job: replica 1 not healthy after 15 s"
    assert s.reasons[1].startswith("replica 1 node rank 0 (node05): last log line: [2026-09-02 12:30:53 TP0 EP0] "
                                   "Load weight begin.")
    assert s.reasons[1].endswith(f"[{_rel(run, p)}]")
    # srun's line about a task of a step that is not the stalled replica's (CI: the telemetry
    # sampler's on the healthy replica's head) is evidence, after where the replica stopped
    assert s.reasons[2] == "srun: node01: task 0: Exited with exit code 1"


def test_rules_signatures_and_job_output_copies(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "router_launch", 2, "fail kind=step_exited step=router rc=2", "teardown reason=exit", "job_end rc=1",
         slurm_out="launch_router.py: error: unrecognized arguments: --no-such-flag\n"
                   "2026-09-02 12:36:00 slurm-ab: FATAL: router exited with status 2\n")
    router = launch_layout(run).router_log
    router.write_text("usage: launch_router.py [-h]\n"
                      "launch_router.py: error: unrecognized arguments: --no-such-flag\n")
    s = collect_run(run, sacct={"state": "FAILED"})
    assert s.reasons[0] == (f"{_rel(run, router)}: invalid command-line arguments: launch_router.py: error: "
                            f"unrecognized arguments: --no-such-flag [{_rel(run, router)}:2]")
    out = _rel(run, Layout(run).slurm_out(4242))
    assert not [r for r in s.reasons if r.startswith(out)]              # the copy in the job output
    run2 = build_run(tmp_path / "b", RunSpec())
    _cut(run2, "server_launch", 3, "fail kind=step_exited step=server-r1 replica=1 rc=137", "job_end rc=1")
    p = launch_layout(run2).server_log(1, 2)
    p.write_text(p.read_text() + "[2026-09-02 12:30:54 TP16 EP16] Scheduler hit an exception: Traceback\n"
                 "RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    s = collect_run(run2, sacct={"state": "FAILED"})
    assert s.reasons[0] == ("replica 1 node rank 2 (node07): CUDA error: RuntimeError: CUDA error: uncorrectable "
                            f"ECC error encountered [{_rel(run2, p)}:4]")


def test_rules_corrupt_failure_evidence_never_crashes(tmp_path):
    run = build_run(tmp_path, RunSpec())
    _cut(run, "bench_start", 5, "fail", "fail kind=step_exited step=server-rX replica=?", "node_state",
         "node_state node=", "node_state node=zz state=", "fail kind=not_ready replicas=,x,99", "job_end rc=oops",
         slurm_out="srun: error: \nsrun: error: nodeX: task : \x00\xff\n2026 slurm-ab: FATAL:\n"
                   "srun: error: Node failure on\n")
    Layout(run).manifest.write_text("[1, 2]")
    for sacct in (None, {"state": "FAILED"}, {"state": "NODE_FAIL"}):
        s = collect_run(run, sacct=sacct)
        assert s.verdict == "failed" and s.reasons, sacct
    missing = _rel(run, launch_layout(run).server_log(99, 0))
    assert f"replica 99 node rank 0: its log is empty or missing [{missing}]" in s.reasons
    assert "node zz was ? in Slurm when the job ended" in s.reasons       # state unknown, said so
