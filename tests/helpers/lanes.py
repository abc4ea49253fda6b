"""This test worker's lane of the local cluster.

``make test`` runs pytest-xdist with one worker per lane: ``cluster.sh`` makes every 9 nodes a
partition of their own (lane1 = node[01-09], lane2 = node[10-18], ...), and tests/conftest.py
points each worker's Slurm commands at its lane through Slurm's own input variables
(SBATCH_PARTITION, SALLOC_PARTITION, SLURM_PARTITION: they override the scripts' ``#SBATCH
--partition``, for every component of a het job). A worker's jobs then never take another
worker's nodes, and the tests below predict node names within their lane. Without xdist there is
no lane: the whole cluster (partition ``gpu``) is the test's.
"""
from __future__ import annotations

import os
import subprocess
import time

VARS = ("SBATCH_PARTITION", "SALLOC_PARTITION", "SLURM_PARTITION")


def lane_of(worker: str | None) -> str | None:
    """pytest-xdist worker gwN -> partition lane(N+1)."""
    return f"lane{int(worker.removeprefix('gw')) + 1}" if worker else None


def partition() -> str | None:
    return os.environ.get("SBATCH_PARTITION")


def _part() -> list[str]:
    p = partition()
    return ["-p", p] if p else []


def nodes() -> list[str]:
    """This lane's nodes, in order (node01.. on lane1)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N", *_part()], capture_output=True, text=True).stdout
    return sorted(set(out.split()))


def wait_idle(timeout_s: float = 180) -> None:
    """Wait (bounded) until no slurm-ab job (name ab-*, collectors included) is queued or running in
    this lane, so that jobs do not slow each other down and node assignment is predictable."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%j", *_part()], capture_output=True, text=True).stdout
        if not [line for line in out.splitlines() if line.startswith("ab-")]:
            return
        time.sleep(0.5)


def heal(node: str) -> None:
    """Repair NODE after a test's fault (`cluster.sh heal`: link up, no rate limit or block, its
    slurmd restarted if it died, resumed if Slurm marked it down); this node only, where `up`
    would undo the faults other lanes' tests hold on theirs."""
    from slurm_ab_testbed.cluster import net
    net("heal", node, timeout=180)


def idle_nodes(timeout_s: float = 120) -> tuple[list[str], list[str]]:
    """The nodes the next seed-shaped job's two components get: Slurm gives each component the
    lowest idle nodes of the partition, in order (tests check the real assignment in events.log)."""
    wait_idle()
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N", *_part()], capture_output=True,
                             text=True).stdout
        idle = sorted(set(out.split()))
        if len(idle) >= 8 or time.monotonic() > deadline:
            return idle[:4], idle[4:8]
        time.sleep(0.5)
