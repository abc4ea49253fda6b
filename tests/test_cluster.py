"""Real-Slurm tests against the local multi-node cluster (``testbed/slurm_ab_testbed/cluster.sh up``).

Skipped when Slurm's client commands are absent or the cluster is not up. They submit real jobs:
a 2 x 4-node heterogeneous job (node assignment, SLURM_NODEID, an --overlap step) and jobs that
complete, fail and get cancelled, then check what sacct (slurmdbd + MariaDB) records.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_ab.model.slurm import is_active
from slurm_ab_testbed.cluster import cluster_script, is_up, run


def _skip_reason() -> str | None:
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "Slurm client commands (sinfo/sbatch) not installed: run cluster.sh install"
    if not is_up(min_nodes=8):
        return f"local Slurm cluster is not up (need >= 8 usable nodes): sudo bash {cluster_script()} up"
    return None


_REASON = _skip_reason()
# Under CI the cluster is brought up by .ci/run: a cluster that is down there fails, never skips.
pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(_REASON is not None and not os.environ.get("CI"), reason=_REASON or "")]

HET_SCRIPT = """#!/bin/bash
#SBATCH --job-name=slurm-ab-test-het --time=2 --exclusive
#SBATCH --nodes=4 --ntasks-per-node=1
#SBATCH hetjob
#SBATCH --nodes=4 --ntasks-per-node=1 --exclusive
echo "batch het_size=$SLURM_HET_SIZE g0=$SLURM_JOB_NODELIST_HET_GROUP_0 g1=$SLURM_JOB_NODELIST_HET_GROUP_1"
srun --het-group=0 bash -c 'echo "step g0 $SLURMD_NODENAME $SLURM_NODEID"' &
srun --het-group=1 bash -c 'echo "step g1 $SLURMD_NODENAME $SLURM_NODEID"' &
srun --het-group=0 --nodes=1 --ntasks=1 --overlap bash -c 'echo "step ov $SLURMD_NODENAME $SLURM_NODEID"' &
wait
"""


def _submit(*args: str) -> str:
    """``sbatch --parsable ARGS`` -> job id (the het leader's id for a het job)."""
    return run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]


def _wait_gone(job_id: str, timeout: float = 60) -> None:
    """Wait until squeue no longer lists the job as pending/running/completing; cancel on timeout."""
    deadline = time.monotonic() + timeout
    while run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip():
        if time.monotonic() > deadline:
            run("scancel", job_id, check=False)
            pytest.fail(f"job {job_id} did not finish within {timeout}s (cluster busy?)")
        time.sleep(0.2)


def _sacct(job_id: str) -> dict[str, tuple[str, str]]:
    """{JobID: (State, ExitCode)} for the job, its het components and its steps."""
    proc = run("sacct", "-j", job_id, "-n", "-P", "-o", "JobID,State,ExitCode", check=False)
    rows: dict[str, tuple[str, str]] = {}
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 3:
            rows[parts[0]] = (parts[1], parts[2])
    return rows


def _wait_sacct(
    job_id: str, done: Callable[[dict[str, tuple[str, str]]], bool], timeout: float = 30
) -> dict[str, tuple[str, str]]:
    """Poll sacct until ``done(rows)``: accounting reaches slurmdbd asynchronously (~1 s), and
    right after a het job ends sacct can briefly show one merged record instead of ID+0/ID+1."""
    deadline = time.monotonic() + timeout
    rows = _sacct(job_id)
    while not done(rows) and time.monotonic() < deadline:
        time.sleep(0.3)
        rows = _sacct(job_id)
    return rows


def test_het_job_node_assignment_and_accounting(tmp_path: Path) -> None:
    script = tmp_path / "het.sbatch"
    script.write_text(HET_SCRIPT)
    out_file = tmp_path / "het.out"
    job_id = _submit(f"--output={out_file}", str(script))
    _wait_gone(job_id)
    lines = out_file.read_text().splitlines()

    batch = [ln for ln in lines if ln.startswith("batch ")]
    assert len(batch) == 1 and "het_size=2" in batch[0], lines

    steps: dict[str, list[tuple[str, int]]] = {"g0": [], "g1": [], "ov": []}
    for ln in lines:
        if ln.startswith("step "):
            _, group, node, node_id = ln.split()
            steps[group].append((node, int(node_id)))

    g0_nodes = {n for n, _ in steps["g0"]}
    g1_nodes = {n for n, _ in steps["g1"]}
    assert len(steps["g0"]) == 4 and len(g0_nodes) == 4, steps
    assert len(steps["g1"]) == 4 and len(g1_nodes) == 4, steps
    assert g0_nodes.isdisjoint(g1_nodes), steps
    assert sorted(i for _, i in steps["g0"]) == [0, 1, 2, 3], steps
    assert sorted(i for _, i in steps["g1"]) == [0, 1, 2, 3], steps
    # The group-0 node with SLURM_NODEID 0 is the first node of group 0: the overlap step runs there.
    g0_first = next(n for n, i in steps["g0"] if i == 0)
    assert steps["ov"] == [(g0_first, 0)], steps
    # Node names come from the cluster (node01..nodeNN), not from the host name.
    assert all(n.startswith("node") for n in g0_nodes | g1_nodes), steps

    comps = (f"{job_id}+0", f"{job_id}+1")

    def complete(rows: dict[str, tuple[str, str]]) -> bool:
        # The batch step's end reaches slurmdbd after the job's own record (seen in CI: the
        # components COMPLETED while ID+0.batch still read RUNNING), so wait for every row to end.
        if not all(c in rows for c in comps):
            return False
        steps = [k for k in rows if k.startswith(comps[0] + ".") or k.startswith(comps[1] + ".")]
        return len(steps) >= 4 and not any(is_active(state) for state, _ in rows.values())

    rows = _wait_sacct(job_id, complete)
    for comp in comps:
        assert rows.get(comp) == ("COMPLETED", "0:0"), rows
    # batch step + 3 srun steps, spread over the two components, all completed.
    step_rows = {k: v for k, v in rows.items() if "." in k}
    assert f"{comps[0]}.batch" in step_rows, rows
    assert len(step_rows) == 4, rows
    assert all(state == "COMPLETED" for state, _ in step_rows.values()), rows


def test_failed_job_is_failed_in_sacct(tmp_path: Path) -> None:
    job_id = _submit(f"--output={tmp_path / 'fail.out'}", "--time=1", "--wrap", "exit 3")
    _wait_gone(job_id)
    rows = _wait_sacct(job_id, lambda r: r.get(job_id, ("",))[0] == "FAILED")
    assert rows.get(job_id) == ("FAILED", "3:0"), rows


def test_completed_and_cancelled_jobs_in_sacct(tmp_path: Path) -> None:
    ok_id = _submit(f"--output={tmp_path / 'ok.out'}", "--time=1", "--wrap", "echo ok")
    _wait_gone(ok_id)
    assert (tmp_path / "ok.out").read_text().strip() == "ok"

    cancel_id = _submit(f"--output={tmp_path / 'cancel.out'}", "--time=1", "--wrap", "sleep 120")
    try:
        deadline = time.monotonic() + 15
        while run("squeue", "-h", "-j", cancel_id, "-o", "%T", check=False).stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "job never started"
            time.sleep(0.2)
    finally:
        run("scancel", cancel_id, check=False)

    rows = _wait_sacct(ok_id, lambda r: r.get(ok_id, ("",))[0] == "COMPLETED")
    assert rows.get(ok_id) == ("COMPLETED", "0:0"), rows
    rows = _wait_sacct(cancel_id, lambda r: r.get(cancel_id, ("",))[0].startswith("CANCELLED"))
    assert rows.get(cancel_id, ("",))[0].startswith("CANCELLED"), rows
