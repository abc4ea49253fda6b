"""Nothing left behind (issue 31), the parts no local cluster can show: the job's sweep of what
ended jobs left on its nodes (a stand-in enroot: the local nodes have no pyxis), the cancel request
the batch script answers, and what the verdict says was left and where. The cluster part is
tests/test_cancel_phases.py."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers.scripts import layout_formats, plan_for, render, static
from slurm_ab.collect.leftovers import leftovers
from slurm_ab.collect.records import JobInfo
from slurm_ab.collect.verdict import state_verdict
from slurm_ab.model.rundir import Layout
from slurm_ab.model.sources import Sources
from slurm_ab.parse.events import EventLog, parse_event_line, read_events


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "static.sh"
    path.write_text(static(render("tp32")))
    return path


def _bash(lib: Path, tmp_path: Path, script: str, **stubs: str) -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, body in stubs.items():
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(0o755)
    run = tmp_path / "run"
    Layout(run).logs.mkdir(parents=True, exist_ok=True)
    full = f"RUN_DIR={run}\n{layout_formats()}source {lib}\ntrap - EXIT TERM INT USR1\n" + script
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run(["bash", "-c", full], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)


def test_sweep_removes_only_ended_jobs_leftovers(lib, tmp_path):
    """Job 10 sweeps: 5 has ended (gone from squeue), 7 is pending or running (never touched), 12
    was submitted after the squeue call (a larger id: never touched), 10's own leftovers are from
    an earlier use of the id (the job creates its own only later, in the preflight)."""
    store = tmp_path / "containers"
    store.write_text("\n".join(["pyxis_slurm-ab-5-0", "pyxis_slurm-ab-5-1", "pyxis_slurm-ab-7-0",
                                "pyxis_slurm-ab-12-0", "pyxis_slurm-ab-10-1", "pyxis_slurm-ab-3",
                                "pyxis_other-5-0", "mine"]) + "\n")
    cache = tmp_path / "cache"
    for d in ("slurm-ab-5", "slurm-ab-7", "slurm-ab-12", "slurm-ab-10", "other-5"):
        (cache / d / ".cache").mkdir(parents=True)
    script = f"""LIST_CMD=(cat {store}); REMOVE_CMD=(fakeremove)
sweep_node 10 ",6,7,9," pyxis_slurm-ab- {cache}
"""
    r = _bash(lib, tmp_path, script, fakeremove=f'grep -vxF "$1" {store} >{store}.new; mv {store}.new {store}')
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == sorted([
        "removed container pyxis_slurm-ab-5-0", "removed container pyxis_slurm-ab-5-1",
        "removed container pyxis_slurm-ab-10-1", "removed container pyxis_slurm-ab-3",
        f"removed cache {cache}/slurm-ab-5", f"removed cache {cache}/slurm-ab-10"])
    assert store.read_text().split() == ["pyxis_slurm-ab-7-0", "pyxis_slurm-ab-12-0", "pyxis_other-5-0", "mine"]
    assert sorted(p.name for p in cache.iterdir()) == ["other-5", "slurm-ab-12", "slurm-ab-7"]


def test_the_users_listed_jobs_and_no_sweep_without_an_answer(lib, tmp_path):
    r = _bash(lib, tmp_path, "active_jobs\n", squeue='printf "6+0 6\\n6+1 7\\n9 9\\n"')
    assert r.stdout.strip() == ",6,7,9,"
    # squeue does not answer: nothing is swept, and the job says so
    script = "SWEEP=1 CT_PREFIX=pyxis_x- CACHE_BASE=/tmp; HEADS=(n1); R0_NODES=(n1)\nsweep_nodes\necho done\n"
    r = _bash(lib, tmp_path, script, squeue="exit 1", srun="echo srun-called; exit 1")
    assert "done" in r.stdout and "srun-called" not in r.stdout
    assert "sweep of ended jobs' containers and caches skipped: squeue did not answer" in r.stderr
    assert [(e.name, e.fields) for e in read_events(Layout(tmp_path / "run").events).events] == \
        [("sweep", {"skipped": "squeue"})]


def test_a_cancel_request_is_not_a_time_limit(lib, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    Layout(run).cancel_request.write_text("alice@login1 2026-12-03T11:00:00\n")
    r = _bash(lib, tmp_path, "teardown() { echo teardown $1; }\non_time_limit\n")
    assert r.returncode == 130 and "teardown cancel" in r.stdout
    assert "slurm-ab cancel: tearing down, then cleaning the nodes" in r.stderr
    (fail,) = read_events(Layout(run).events).failures()
    assert fail.fields == {"kind": "cancelled", "request": "alice@login1 2026-12-03T11:00:00"}
    Layout(run).cancel_request.unlink()
    r = _bash(lib, tmp_path, "teardown() { echo teardown $1; }\non_time_limit\n")
    assert r.returncode == 124 and "teardown time-limit" in r.stdout


def _run_dir(tmp_path: Path, events: str, *sets: str) -> Path:
    plan = plan_for(Sources("example", (), ("paths.results=/results", *sets)), "tp32", "R")
    root = tmp_path / "R"
    root.mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"run_id": "R", "job_id": "77", "config": plan.exp.to_dict(),
                                                    "components": [{"het_group": 0}, {"het_group": 1}]}))
    Layout(root).events.write_text(events)
    return root


HOSTS = ("1796300000.000 2026-12-03 11:00:00.000 hosts replica=0 head=node01 nodes=node01,node02 port=1 dist_port=2\n"
         "1796300000.000 2026-12-03 11:00:00.000 hosts replica=1 head=node05 nodes=node05,node06 port=1 dist_port=2\n")


def test_the_verdict_says_what_was_left_and_where(tmp_path):
    root = _run_dir(tmp_path, HOSTS + "1796300009.000 2026-12-03 11:00:09.000 fail kind=signal signal=TERM\n")
    lo = leftovers(root, "77")
    assert lo.left and lo.containers == ("pyxis_slurm-ab-77-0", "pyxis_slurm-ab-77-1")
    assert lo.text() == (
        "may be left on the nodes: container pyxis_slurm-ab-77-0 on node01, node02; container pyxis_slurm-ab-77-1 "
        "on node05, node06; cache directory /scratch/slurm-ab-cache/slurm-ab-77 on node01, node02, node05, node06: "
        "its clean-up never ran (Slurm refuses new steps once a job is cancelled, timed out or lost a node); the "
        "next job's preflight on those nodes removes them (cluster.sweep_stale), or `slurm-ab clean`")
    done = _run_dir(tmp_path / "b", HOSTS + "1796300010.000 2026-12-03 11:00:10.000 cleanup "
                    "container=pyxis_slurm-ab-77-* cache=/scratch/slurm-ab-cache/slurm-ab-77 ok=1\n")
    assert not leftovers(done, "77").left
    assert leftovers(done, "77").text().startswith("nothing left on the nodes: the job's clean-up removed container")
    bare = _run_dir(tmp_path / "c", HOSTS, 'container.image=""', 'cache.dir=""')
    assert leftovers(bare, "77") is None                                 # nothing was owed


def test_a_cancel_the_script_answered_is_a_cancelled_verdict(tmp_path):
    line = "1796300009.000 2026-12-03 11:00:09.000 fail kind=cancelled request=alice@login1"
    events = EventLog((parse_event_line(line, 1),), exists=True)
    failed = JobInfo(state="FAILED", state_raw="FAILED", exit_code="130:0")
    assert state_verdict(failed, events, []) == (
        "cancelled", ["job cancelled by slurm-ab cancel (alice@login1): its script tore everything down"])
    cancelled = JobInfo(state="CANCELLED", state_raw="CANCELLED by 0")
    assert state_verdict(cancelled, events, [])[1] == [
        "job CANCELLED by 0 (Slurm)", "job cancelled by slurm-ab cancel (alice@login1): its script tore everything down"]


def test_enroot_keeps_containers_on_the_node_when_it_would_use_a_shared_home(lib, tmp_path):
    """enroot's defaults are under HOME ($XDG_DATA_HOME/enroot): two nodes sharing it race in
    `enroot create`. Pyxis passes no ENROOT_* from the job to enroot, but XDG_* it does: the job
    points them to a node-local directory; a path the site's enroot.conf set (not under HOME) stays."""
    home = tmp_path / "home"
    info = (f'echo "Enroot version: 3.5.0"; echo "  ENROOT_CACHE_PATH=/raid/enroot-cache/group-1"; '
            f'echo "  ENROOT_DATA_PATH={home}/.local/share/enroot"')
    script = (f"HOME={home} ENROOT_DIR=/tmp\nenroot_paths\n"
              'echo "data=${XDG_DATA_HOME:-unset} cache=${XDG_CACHE_HOME:-unset}"\n')
    r = _bash(lib, tmp_path, script, enroot=f'[ "$1" = info ] && {{ {info}; }}')
    uid = os.getuid()
    assert f"data=/tmp/slurm-ab-enroot-{uid}/share cache=unset" in r.stdout, r.stderr
    (e,) = read_events(Layout(tmp_path / "run").events).named("enroot_paths")
    assert e.fields == {"data": f"/tmp/slurm-ab-enroot-{uid}/share/enroot", "cache": "/raid/enroot-cache/group-1"}
    # no `enroot info` (before 3.4) and no enroot.conf setting: enroot's HOME defaults, both moved
    r = _bash(lib, tmp_path / "old", script, enroot="exit 1")
    assert f"data=/tmp/slurm-ab-enroot-{uid}/share cache=/tmp/slurm-ab-enroot-{uid}/cache" in r.stdout, r.stderr
    r = _bash(lib, tmp_path / "off", f"HOME={home} ENROOT_DIR=''\nenroot_paths\necho \"${{XDG_DATA_HOME:-unset}}\"\n")
    assert r.stdout.strip() == "unset"


def test_a_pass_completed_before_the_cancel_keeps_its_verdict_and_says_what_was_left(tmp_path):
    """slurm-ab cancel in the launch's teardown: the pass had completed (judged on its numbers,
    collect/passes.py), the job's end and what its nodes may hold in a note."""
    from dataclasses import replace

    from helpers.rundir_builder import build_run, collect_one
    from slurm_ab.model.rundir import read_manifest, write_manifest

    run = build_run(tmp_path)
    m = read_manifest(run)
    write_manifest(run, replace(m, config=replace(m.config, cache=replace(m.config.cache, dir="/scratch/c"))))
    with Layout(run).events.open("a") as f:
        f.write("1796300100.000 2026-12-03 11:01:40.000 fail kind=cancelled request=alice@login1\n")
    p = collect_one(run, sacct={"state": "CANCELLED by 0", "exit_code": "0:0"})
    assert p.verdict == "ok", p.reasons
    assert p.notes[-1] == ("job CANCELLED by 0 after this pass: may be left on the nodes: cache directory "
                           "/scratch/c/slurm-ab-4242 on node01, node02, node03, node04, node05, node06, node07, "
                           "node08: its clean-up never ran (Slurm refuses new steps once a job is cancelled, "
                           "timed out or lost a node); the next job's preflight on those nodes removes them "
                           "(cluster.sweep_stale), or `slurm-ab clean`")
    assert not [n for n in collect_one(build_run(tmp_path / "b")).notes if "left on the nodes" in n]
