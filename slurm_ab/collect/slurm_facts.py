"""Slurm's view of a finished job for the collector (runs sacct/squeue: the collector's one edge
to Slurm; collect.job turns the result into JobInfo)."""
from __future__ import annotations

import time
from pathlib import Path

from ..model.slurm import is_active, sacct, squeue_state


def slurm_facts(job_id: str | None, *, settle_s: float = 5.0, run_dir: Path | None = None) -> dict | None:
    """sacct's view of the job in the shape collect.job reads; None without accounting.

    Right after a het job ends sacct briefly shows one merged allocation row; wait for the
    per-component rows (bounded) so node lists and the final state are right. With run_dir, what
    the run's manifest recorded at submission (job name, submit time, cluster) goes along as
    "expected": collect.job refuses sacct's answer when it describes another job.
    """
    if not job_id:
        return None
    expected = _expected(run_dir) if run_dir is not None else {}
    deadline = time.monotonic() + settle_s
    info = sacct(job_id)
    # (a record of another job, by its name, is not waited for: collect.job ignores it anyway)
    while info and f"{job_id}+0" not in info["components"] and not is_active(info["state"]) \
            and info.get("job_name") in (None, expected.get("job_name") or info.get("job_name")) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
        info = sacct(job_id)
    if not info:
        state = squeue_state(job_id)
        return {"job_id": job_id, "state": state, "expected": expected} if state else None
    nodes = {}
    for comp, row in info["components"].items():
        _, plus, offset = comp.partition("+")
        if plus and row.get("nodes") and row["nodes"] not in ("None assigned", ""):
            nodes[offset] = row["nodes"]
    return {"job_id": job_id, "state": info["state_text"] or info["state"], "elapsed": info["elapsed"],
            "exit_code": info["exit_code"], "node_lists": nodes, "job_name": info.get("job_name"),
            "submit": info.get("submit"), "start": info.get("start"), "end": info.get("end"),
            "cluster": info.get("cluster"), "expected": expected}


def _expected(run_dir: Path) -> dict:
    """The run's own record of its job: name, submit time and cluster from manifest.json."""
    from ..model.rundir import read_manifest

    m = read_manifest(Path(run_dir))
    if m is None:
        return {}
    return {"job_name": m.job_name, "submitted_at": m.submitted_at, "cluster": m.extra.get("cluster")}
