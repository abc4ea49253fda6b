"""Telemetry, profiles and the history's real ingest on the local cluster (issue 34): one tp32 job for
them all, and a small prefill/decode job for a profile with each role's own step window.

tp32 with 0.5.2's client, two timed passes and a dedicated profiled pass (--profile extra). One node
of replica 1 runs the fake GPUs' `throttle,gap` faults (1215 MHz and 430 W under load, HW slowdown
reasons; its looping sampler stalls once for 4 s inside the first pass); the client burns a second
thread beside its event loop (it wants more than a core). The job's telemetry must give:
- J/token and power per GPU equal to the integral of the scripted power (gpu_activity) within 1 %
  over each pass's window, in summary.json, summary.md and the page (pass 2; pass 1's is invalid);
- the 4 s gap making pass 1's energy unknown, naming the node and the gap;
- the throttled node named in both passes' verdicts; the busy client flagged;
- one trace per node and GPU rank of every replica from the profiled pass, which no statistic
  counts (the aggregates are those of the two timed passes alone);
- nothing left running (the samplers end with the teardown);
- the history index ingesting this real collection.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import textwrap

import pytest

from helpers import CLIENT_052, NO_IMPORT
from helpers.jobdrive import Job, cli
from helpers.lanes import idle_nodes
from slurm_ab.collect.rows import aggregates, pass_row
from slurm_ab.collect.write import read_summary
from slurm_ab.model.rundir import Layout

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# bench_serving 0.5.2 run by its own Python with a thread that never sleeps beside it: the client
# process wants two cores' worth of CPU time for as long as it runs
BUSY_CLIENT = textwrap.dedent('''
    import runpy, sys, threading
    def burn():
        while True:
            pass
    threading.Thread(target=burn, daemon=True).start()
    sys.argv[0] = "sglang.bench_serving"
    runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
''')
PYTHON = "/var/lib/slurm-ab-local/clients/sglang-0.5.2-env/bin/python3"
FINE = "telemetry.interval_ms=200"      # the energy split at a pass's bounds under 1 % (testbed/sites/local.toml)


@pytest.fixture(scope="module")
def ran(tmp_path_factory, local_cluster):
    work = tmp_path_factory.mktemp("telemetry")
    busy = work / "busy-client.toml"
    busy.write_text(f"[client_profiles.sglang_0_5_2]\ncommand = {json.dumps([PYTHON, '-c', BUSY_CLIENT])}\n")
    _, r1 = idle_nodes()
    node = r1[1]
    job = Job(work, "telemetry", FINE, "benchmark.num_prompts=24", "benchmark.output_len=256",
              'server.env.SLURM_AB_FAKE_GPU_FAULT="throttle,gap"', f'server.env.SLURM_AB_FAKE_GPU_FAULT_NODES="{node}"',
              client=(*CLIENT_052, "--config", str(busy)), extra=("--repeats", "2", "--profile", "extra"), report=True)
    try:
        rc = job.finish(360)
        yield job, rc, node, work
    finally:
        job.cleanup()


def _expected(t0: float, t1: float, nodes, fault_node: str) -> float:
    from slurm_ab_testbed.gpu_activity import expected_energy_j
    env = {"SLURM_AB_FAKE_GPU_FAULT": "throttle,gap", "SLURM_AB_FAKE_GPU_FAULT_NODES": fault_node}
    return sum(expected_energy_j(t0, t1, node=n, env=env, gpus=8) for n in nodes)


def test_energy_equals_the_scripted_power_and_a_gap_makes_it_unknown(ran):
    job, rc, node, _ = ran
    assert rc == 0, job.output()[-3000:]
    cs = read_summary(job.run_dir)
    assert [p.ref.key for p in cs.passes] == ["c8-r1", "c8-r2"]
    hosts = [h for g in sorted(job.hosts()) for h in job.hosts()[g]]
    if node not in hosts:
        pytest.fail(f"the job did not get the predicted nodes (cluster busy?): {hosts}")
    first, second = cs.passes
    # pass 1: the fault node's sampler stalled 4 s inside the benchmark -> no energy, node and gap named
    t1 = first.telemetry
    assert t1.energy_j is None and t1.j_per_token is None
    # the 4 s stall plus the loop's 0.25 s and its sleep's overshoot on a loaded host
    assert re.search(rf"{node} \(replica 1 node rank 1\): no GPU sample for (3\.[5-9]|[45]\.\d) s", t1.invalid), t1.invalid
    assert any(r.startswith("energy not computed: " + node) for r in first.reasons), first.reasons
    assert pass_row(first).value("energy_j_per_token") is None
    # pass 2: every node's energy is the scripted integral over the window the summary reports
    t2 = second.telemetry
    assert t2.window_source == "benchmark" and t2.gpus == 64 and t2.invalid is None
    w0, w1 = t2.window
    assert abs((w1 - w0) - second.bench.duration_s) < 1e-6
    expected = _expected(w0, w1, hosts, node)
    assert abs(t2.energy_j / expected - 1) < 0.01, (t2.energy_j, expected)
    assert abs(t2.j_per_token / (expected / second.bench.output_tokens) - 1) < 0.01
    assert abs(t2.power_w / (expected / (w1 - w0) / 64) - 1) < 0.01
    for n in t2.nodes:                                   # and per node, per GPU
        e = _expected(w0, w1, [n.node], node)
        assert abs(n.energy_j / e - 1) < 0.01 and len(n.per_gpu) == 8, (n.node, n.energy_j, e)
    # the tables and the page show it
    md = Layout(job.run_dir).summary("md").read_text()
    assert f"{t2.j_per_token:.3f}" in md and "Energy (J/token)" in md
    (row1,) = [x for x in md.splitlines() if re.match(r"\| tp32 +\| +8 \| c8-r1 ", x)]     # every flag of the pass
    assert "energy not computed: " + node in row1 and "suspect bottleneck: the benchmark client" in row1, row1
    html = Layout(job.run_dir).report_html.read_text()
    assert "telemetry-launch1-tp32.png" in html and f"{t2.j_per_token:.3f}" in html
    assert (job.run_dir / "plots" / "telemetry-launch1-tp32.png").stat().st_size > 10000


def test_the_throttled_node_and_the_busy_client_are_named(ran):
    job, rc, node, _ = ran
    cs = read_summary(job.run_dir)
    for p in cs.passes:
        assert p.verdict == "ok"
        named = [r for r in p.reasons if r.startswith(f"{node} (replica 1 node rank 1): ")]
        assert named and "SM clock 1215 MHz under load" in named[0] and "HW slowdown" in named[0], p.reasons
        assert not [r for r in p.reasons if re.match(r"node\d+ \(replica", r) and not r.startswith(node)], p.reasons
        busy = [r for r in p.reasons if r.startswith("suspect bottleneck: the benchmark client")]
        assert busy and p.telemetry.host.client_demand_pct >= 90, (p.reasons, p.telemetry.host)


def test_the_profiled_pass_leaves_a_trace_per_rank_and_no_figure(ran):
    job, rc, node, _ = ran
    cs = read_summary(job.run_dir)
    (pr,) = cs.profiles
    assert pr.key == "c8-profile" and pr.verdict == "ok" and pr.problems == ()
    for c in pr.components:                              # TP ranks 0..31 of each replica, once each
        ranks = sorted(int(re.search(r"-TP-(\d+)-", t).group(1)) for t in c.traces)
        assert ranks == list(range(32)) and all(t.startswith(f"launch1-tp32/profiles/c8-profile/r{c.group}-c8-profile-TP-")
                                                 for t in c.traces), c.traces
    events = [e for e in job.events() if e[1] in ("profile_start", "profile_stop")]
    assert [(k, kv["replica"], kv["http"]) for _, k, kv in events if k == "profile_start"] == \
        [("profile_start", "0", "200"), ("profile_start", "1", "200")]
    # out of every statistic: the aggregates are the timed passes' alone
    rows = json.loads(Layout(job.run_dir).summary("json").read_text())
    assert [r["pass"] for r in rows["rows"]] == ["c8-r1", "c8-r2"]
    timed = [pass_row(p) for p in cs.passes]
    assert rows["aggregates"] == [a.to_dict() for a in aggregates(timed)]
    assert "c8-profile: ok (profiled, left out of the statistics)" in cs.launches[0].passes
    html = Layout(job.run_dir).report_html.read_text()
    assert "r1-c8-profile-TP-31-EP-3.trace.json.gz" in html


def _without_profiled_pass(run_dir, copy, key: str = "c8-profile") -> None:
    """`copy`: the run directory as a job without its profiled pass would have left it - the
    schedule (manifest, launch_plan) without the pass, none of its events, files or traces, no
    derived file (summary, page, plots)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, list):
            return [strip(v) for v in x if not (isinstance(v, dict) and v.get("profile") is True)]
        return x
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("summary.*", "report.html", "plots", "profiles",
                                                                   f"*{key}*"))
    man = Layout(copy).manifest
    man.write_text(json.dumps(strip(json.loads(man.read_text())), indent=2))
    for ev in copy.rglob("events.log"):
        lines = [re.sub(r",\d+:-1:\d+:profile", "", x) for x in ev.read_text().splitlines(keepends=True)
                 if key not in x and not re.search(r" profile_(start|stop) ", x)]
        ev.write_text("".join(lines))


def test_the_figures_are_those_of_the_job_without_its_profiled_pass(ran, tmp_path):
    """--profile changes no figure: collecting the job as if it had had no profiled pass gives the
    same rows, aggregates and per-pass records (verdicts, reasons, telemetry)."""
    from slurm_ab.collect import collect
    from slurm_ab.collect.slurm_facts import slurm_facts
    job, rc, node, _ = ran
    copy = tmp_path / job.run_dir.name
    _without_profiled_pass(job.run_dir, copy)
    plain = collect(copy, sacct=slurm_facts(str(job.job_id), run_dir=copy))
    assert plain.profiles == () and all(not p.profile for la in plain.campaign.launches for p in la.passes)
    cs = read_summary(job.run_dir)
    assert len(plain.passes) == len(cs.passes) == 2
    for mine, theirs in zip(plain.passes, cs.passes):
        a, b = mine.to_dict(), theirs.to_dict()
        assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    timed = [pass_row(p) for p in cs.passes]
    assert [a.to_dict() for a in aggregates([pass_row(p) for p in plain.passes])] == \
        [a.to_dict() for a in aggregates(timed)]


def test_nothing_left_and_the_history_ingests_the_run(ran):
    job, rc, node, work = ran
    job.assert_nothing_left()
    steps = [kv for _, k, kv in job.events() if k == "telemetry_start"]
    assert steps and steps[0]["samplers"] == "3"
    r = cli("history", "--site", "local", "--format", "json", cwd=work,
            env={"XDG_CACHE_HOME": str(work / "cache")})
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    (series,) = [s for s in rec["series"] if s["mode"] == "tp32"]
    (point,) = series["points"]
    assert point["run_id"] == job.run_id and point["n"] == 2
    assert point["energy_j_per_token"] is not None


@pytest.fixture(scope="module")
def pd_ran(ran, tmp_path_factory):
    """pd-1p1d, 16 x 128 with 0.5.2's client (vllm backend through the PD router), no module imports
    in the preflight, --profile extra: after the tp32 job (one job at a time in a lane)."""
    work = tmp_path_factory.mktemp("telemetry-pd")
    job = Job(work, "pd-profile", FINE, NO_IMPORT, "benchmark.num_prompts=16", "benchmark.output_len=128",
              mode="pd-1p1d", extra=("--profile", "extra"))
    try:
        yield job, job.finish(300)
    finally:
        job.cleanup()


def test_a_pd_profile_has_each_roles_traces_and_step_window(pd_ran):
    job, rc = pd_ran
    assert rc == 0, job.output()[-3000:]
    cs = read_summary(job.run_dir)
    (pr,) = cs.profiles
    assert [(c.component, c.role, len(c.traces), c.expected, c.start_http) for c in pr.components] == \
        [("prefill 0", "prefill", 32, 32, "200"), ("decode 0", "decode", 32, 32, "200")], pr.problems
    # each role's own window ([profile.roles]): the prefill's traces hold 3 forwards, the decode's 10
    for c, steps in zip(pr.components, (3, 10)):
        for trace in (c.traces[0], c.traces[-1]):
            events = json.load(gzip.open(job.run_dir / trace))["traceEvents"]
            assert sum(1 for e in events if e.get("cat") == "user_annotation") == steps, trace
    # the pass's energy over both roles' nodes; a prefill node is compared with prefill nodes only
    (p,) = cs.passes
    t = p.telemetry
    assert p.verdict == "ok" and t.energy_j is not None and t.gpus == 64 and t.low_nodes == ()
    assert sorted({n.role for n in t.nodes}) == ["decode", "prefill"]
    job.assert_nothing_left()
