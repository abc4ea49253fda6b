"""`slurm-ab cancel`: stop a run so that nothing of it is left on the nodes.

A plain scancel ends the job's steps at once and Slurm then refuses new ones ("Slurm job N has
expired"), so the job's own clean-up step (its named containers, its per-job cache directory)
cannot run. Here the batch script is asked first: the run's cancel request is written, then
SIGUSR1 goes to the batch script alone (scancel -b: "Children of the batch step are not signaled",
scancel(1)), whose handler tears the steps down (SIGTERM, the grace, SIGKILL), cleans the nodes
while the job still runs, and cancels its own job (state CANCELLED in sacct). Only a job that does
not end within its grace plus the clean-up's bound gets Slurm's scancel; what that leaves, the next
job's preflight on those nodes sweeps (cluster.sweep_stale), or `slurm-ab clean`.
"""
from __future__ import annotations

import getpass
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from ..model.rundir import Layout, read_manifest
from ..model.slurm import PENDING_STATES, base_state, scancel, squeue_state

CLEANUP_BOUND_S = 60      # the job's clean-up step runs under `timeout 60` (guards.sh cleanup_nodes)


def _job_dir(run_dir: Path, job_id: str) -> Path:
    """The directory the job writes (a re-submitted script writes beside its original one)."""
    alt = Layout(run_dir).resubmitted(job_id)
    return alt if alt.is_dir() else run_dir


def _forget_secrets(run_dir: Path) -> None:
    """A job that never started has not read (and removed) its secrets file: remove it."""
    Layout(run_dir).secrets.unlink(missing_ok=True)


def cancel_run(run_dir: Path, job_id: str, echo: Callable[[str], None] = print,
               poll_s: float = 1.0) -> bool:
    """Stop the run's job; True when its own teardown and clean-up ran (or nothing had started)."""
    state = squeue_state(job_id)
    if state is None:
        _forget_secrets(run_dir)
        scancel(job_id)
        echo(f"job {job_id} is not queued or running (Slurm does not list it); evidence stays in {run_dir}")
        return False
    if base_state(state) in PENDING_STATES:
        ok = scancel(job_id)
        _forget_secrets(run_dir)
        echo(f"cancelled job {job_id}; evidence stays in {run_dir} (it was {state}: nothing had started)"
             if ok else f"scancel {job_id} failed")
        return ok
    m = read_manifest(run_dir)
    c = m.config.cluster if m is not None and m.config is not None else None
    bound = (c.teardown_grace_s if c is not None and c.teardown_grace_s else 20) + CLEANUP_BOUND_S \
        + 2 * (c.poll_interval_s if c is not None and c.poll_interval_s else 2) + 10
    request = Layout(_job_dir(run_dir, job_id)).cancel_request
    request.write_text(f"{getpass.getuser()}@{socket.gethostname()} {datetime.now().isoformat(timespec='seconds')}\n")
    t0 = time.monotonic()
    if scancel(job_id, signal="USR1", batch=True):
        echo(f"job {job_id}: asked its batch script to tear down and clean its nodes (scancel -b -s USR1)")
        while time.monotonic() - t0 < bound:
            if squeue_state(job_id) is None:
                echo(f"cancelled job {job_id}; evidence stays in {run_dir} (slurm-ab collect {job_id}): torn down "
                     f"and its nodes cleaned in {time.monotonic() - t0:.0f} s")
                return True
            time.sleep(poll_s)
        echo(f"job {job_id} did not end within {bound} s (its grace plus the clean-up's bound)")
    ok = scancel(job_id)
    echo(f"cancelled job {job_id}; evidence stays in {run_dir} (slurm-ab collect {job_id}): through Slurm; "
         "what its clean-up could not remove, the next job's preflight on those nodes removes, or "
         "slurm-ab clean" if ok else f"scancel {job_id} failed")
    return False


__all__ = ["cancel_run"]
