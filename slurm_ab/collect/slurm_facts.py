"""Slurm's view of a finished job for the collector (runs sacct/squeue: the collector's one edge
to Slurm; collect.job turns the result into JobInfo)."""
from __future__ import annotations

import time

from ..slurm import is_active, sacct, squeue_state


def slurm_facts(job_id: str | None, *, settle_s: float = 5.0) -> dict | None:
    """sacct's view of the job in the shape collect.job reads; None without accounting.

    Right after a het job ends sacct briefly shows one merged allocation row; wait for the
    per-component rows (bounded) so node lists and the final state are right.
    """
    if not job_id:
        return None
    deadline = time.monotonic() + settle_s
    info = sacct(job_id)
    while info and f"{job_id}+0" not in info["components"] and not is_active(info["state"]) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
        info = sacct(job_id)
    if not info:
        state = squeue_state(job_id)
        return {"job_id": job_id, "state": state} if state else None
    nodes = {}
    for comp, row in info["components"].items():
        _, plus, offset = comp.partition("+")
        if plus and row.get("nodes") and row["nodes"] not in ("None assigned", ""):
            nodes[offset] = row["nodes"]
    return {"job_id": job_id, "state": info["state_text"] or info["state"], "elapsed": info["elapsed"],
            "exit_code": info["exit_code"], "node_lists": nodes}
