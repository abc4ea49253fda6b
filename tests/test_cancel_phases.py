"""`slurm-ab cancel` in every phase of a job leaves nothing behind (issue 31), on the local cluster.

One parametrised test: a job cancelled while queued (held: its pending reason is shown), in its
preflight, while its servers load, during the warm-up, in a pass, and in its launch's teardown. In
each, within the grace plus one poll of the cancel, no process of the job is left and its per-job
cache directory is gone (the local nodes have no pyxis: the containers' part is
tests/test_leftovers.py), its events say the script tore down and cleaned its nodes, Slurm says
CANCELLED and the verdict says nothing was left (a pass that had completed before the cancel, in
the launch's teardown, keeps its verdict and says so in a note). Every job runs the way the job script must run
on bash 4.x under a comma-decimal locale: bash 5's EPOCHREALTIME, EPOCHSECONDS, SRANDOM and
BASH_ARGV0 removed by the prologue (unset in bash 5 takes their special meaning away for good)
and BASH_COMPAT=44, and the submitter's LC_ALL=de_DE.UTF-8 (sbatch exports it). The set-up
shared by all phases: a held job of this user (an active job whose cache directory the sweep
must keep) and an ended job's cache directory (which the first job's sweep removes).

Measured times: 'MEASURE cancel in <phase>: ...' lines (pytest -rA).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import NO_IMPORT, lanes
from helpers.jobdrive import Job, cli, measure
from helpers.jobs import slurm_env
from slurm_ab.model.rundir import Layout

CACHE = Path("/tmp/slurm-ab-cache")         # the local site's cache.dir
GRACE, POLL = 10, 1                          # the local site's teardown_grace_s, poll_interval_s
BASH4 = 'cluster.prologue="unset EPOCHREALTIME EPOCHSECONDS SRANDOM BASH_ARGV0; BASH_COMPAT=44"'
FAST = ('server.env.SLURM_AB_EMU_TIME_SCALE="0.02"', "benchmark.num_prompts=8", "benchmark.output_len=64",
        NO_IMPORT)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("cancel")


@pytest.fixture(scope="module")
def others(workdir):
    """An active (held) job of this user and an ended job's cache directory."""
    held = subprocess.run(["sbatch", "--parsable", "--hold", "-N1", "-t", "5", "-o", "/dev/null", "--wrap", "true"],
                          capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    active, ended = CACHE / f"slurm-ab-{held}", CACHE / "slurm-ab-1"
    for d in (active, ended):
        (d / ".cache").mkdir(parents=True, exist_ok=True)
    yield {"active": active, "ended": ended}
    subprocess.run(["scancel", held], capture_output=True)
    import shutil
    shutil.rmtree(active, ignore_errors=True)


# phase -> (event that starts it, extra --set values)
PHASES = {
    "queued": (None, ('cluster.sbatch_extra=["--hold"]',)),
    "preflight": ("preflight_start", ()),
    "loading": ("server_launch", ()),
    "warm-up": ("warmup_start", ()),
    "pass": ("bench_start", ()),
    "teardown": ("teardown", ()),
}


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("phase", list(PHASES))
def test_cancel_in_every_phase_leaves_nothing(phase, workdir, others):
    event, sets = PHASES[phase]
    j = Job(workdir, f"cancel-{phase}-{time.strftime('%H%M%S')}", *FAST, BASH4, *sets,
            env={"LC_ALL": "de_DE.UTF-8"})
    try:
        if event is None:
            j.wait_for(lambda: "PENDING (JobHeldUser: held by the user" in j.output(), 60, "the pending reason")
        else:
            j.wait_event(event, 120, **({"reason": "launch-end"} if event == "teardown" else {}))
        t0 = time.time()
        cancel = subprocess.Popen([sys.executable, "-m", "slurm_ab", "cancel", j.run_id], cwd=workdir, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=slurm_env())
        while cancel.poll() is None:
            j.tick()                     # the job's processes as they are stopped
            time.sleep(0.2)
        said = cancel.stdout.read()
        if phase == "teardown" and f"job {j.job_id} is not queued or running" in said:
            # the job's own teardown and clean-up (a second or two at this time scale) ended before
            # the cancel reached Slurm: nothing to cancel, and still nothing may be left
            assert cancel.returncode == 0 and j.finish(120) == 0 and j.sacct()["state"] == "COMPLETED", said
            j.assert_nothing_left(GRACE + POLL)
            assert not (CACHE / f"slurm-ab-{j.job_id}").exists()
            measure(f"cancel in {phase} (the job had ended)", time.time() - t0, said.strip())
            return
        assert cancel.returncode == 0 and f"cancelled job {j.job_id}" in said, said
        j.assert_nothing_left(GRACE + POLL)
        cache = CACHE / f"slurm-ab-{j.job_id}"
        assert not cache.exists()
        gone = time.time() - t0
        assert gone <= GRACE + POLL, gone
        j.finish(120)
        if phase == "queued":
            assert "it was PENDING" in said and not Layout(j.run_dir).events.exists()
            measure(f"cancel in {phase}", gone, said.strip().splitlines()[-1])
            return
        ev = j.events()
        if phase == "teardown" and not any(k == "fail" for _, k, _ in ev):
            # the cancel came while the job cleaned its nodes at its normal end (it lets that finish)
            assert [k for _, k, _ in ev][-2:] == ["cleanup", "job_end"] and j.sacct()["state"] == "COMPLETED"
            measure(f"cancel in {phase} (after its clean-up began)", gone, "completed")
            return
        assert "torn down and its nodes cleaned" in said, said
        names = [k for _, k, _ in ev]
        fails = [kv for _, k, kv in ev if k == "fail"]
        cleanup = [kv for _, k, kv in ev if k == "cleanup"]
        assert cleanup and cleanup[-1]["ok"] == "1" and cleanup[-1]["cache"] == str(cache), ev
        assert names[-1] == "job_end" and "teardown" in names
        assert j.sacct()["state"] == "CANCELLED"
        assert fails[0]["kind"] == "cancelled", fails
        sweep = [kv for _, k, kv in ev if k == "sweep"]
        assert sweep and sweep[0]["failed"] == "0"
        assert others["active"].is_dir() and not others["ended"].exists()     # kept / swept
        out = Layout(j.run_dir).slurm_out(j.job_id).read_text(errors="replace")
        assert "unbound variable" not in out and "Wert" not in out and "Ungültig" not in out, out[-3000:]
        r = cli("collect", j.run_id, "--no-report", cwd=workdir)
        s = j.summary()
        nothing_left = f"nothing left on the nodes: the job's clean-up removed cache directory {cache}"
        if phase == "teardown":
            # its pass had completed before the cancel: judged on its own numbers (a completed
            # pass is not about the job's later end); the job's end and its nodes in a note
            assert s["verdict"] == "ok", s["reasons"]
            assert any(x.startswith("job CANCELLED by ") and nothing_left in x for x in s["notes"]), s["notes"]
            measure(f"cancel in {phase} (until no process and no cache directory left)", gone, s["notes"][-1])
            return
        assert s["verdict"] == "cancelled", s["reasons"]
        assert s["reasons"][0].startswith("job CANCELLED by "), s["reasons"]
        assert any(x.startswith(nothing_left) for x in s["reasons"]), s["reasons"]
        measure(f"cancel in {phase} (until no process and no cache directory left)", gone, s["reasons"][0])
    finally:
        j.cleanup()


@pytest.mark.cluster
def test_clean_lists_then_removes_what_an_ended_run_left(workdir, others):
    """An ended run whose clean-up never ran (a killed job): `slurm-ab clean` lists its cache
    directory on its nodes and removes nothing; `--yes` runs the sweep there as a job."""
    import json

    from slurm_ab.model.sources import Sources
    from helpers.scripts import plan_for

    # its own cache.dir: the sweep every other job of the suite runs first (on any lane: the local
    # nodes share one /tmp) would remove an ended job's directory in the site's cache.dir before
    # `clean --yes` could
    own = Path("/tmp/slurm-ab-cache-clean-test")
    plan = plan_for(Sources(str(Path(__file__).parents[1] / "testbed/sites/local.toml"), (),
                            (f'cache.dir="{own}"',)), "tp32", "killed")
    run = workdir / "results" / "killed"
    run.mkdir(parents=True)
    Layout(run).manifest.write_text(json.dumps({"run_id": "killed", "job_id": "2", "config": plan.exp.to_dict()}))
    Layout(run).events.write_text(
        "1796300000.000 2026-12-03 11:00:00.000 hosts replica=0 head=node01 nodes=node01,node02 port=1 dist_port=2\n")
    left = own / "slurm-ab-2"
    (left / ".cache").mkdir(parents=True, exist_ok=True)
    # the killed job's nodes: two of this worker's lane (the clean-up job can only run there)
    a, b = lanes.nodes()[:2]
    Layout(run).events.write_text(
        f"1796300000.000 2026-12-03 11:00:00.000 hosts replica=0 head={a} nodes={a},{b} port=1 dist_port=2\n")
    r = cli("clean", cwd=workdir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"killed (job 2): may be left on the nodes: cache directory {left} on {a}, {b}: its clean-up "
            "never ran") in r.stdout and "nothing removed (dry run)" in r.stdout
    assert left.is_dir()
    t0 = time.time()
    r = cli("clean", "--yes", cwd=workdir, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"  removed cache {left}" in r.stdout and not left.exists() and others["active"].is_dir()
    measure("slurm-ab clean --yes (a sweep job on 2 nodes)", time.time() - t0, r.stdout.strip().splitlines()[-1])
