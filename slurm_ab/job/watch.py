"""Follow a submitted job: its state through submitit's (het-aware) watcher, its events as they happen."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..model.rundir import Layout
from ..model.slurm import PENDING_STATES, base_state, is_active, pending_reason, pending_text, squeue_state


def _events_file(run_dir: Path, job_id: str) -> Path:
    # A re-submitted script writes beside its original directory (see the job script).
    alt = Layout(run_dir).resubmitted(job_id)
    return Layout(alt if alt.is_dir() else run_dir).events


def _all_events(job_events: Path) -> list[Path]:
    """The job's events file, then each of its launches' that exists so far."""
    from ..model.rundir import open_run

    run = open_run(job_events.parent)
    launches = [run.launch_layout(la).events for la in run.campaign.launches]
    return [job_events] + [p for p in launches if p != job_events and p.exists()]


def _new_lines(path: Path, offsets: dict[Path, int]) -> list[str]:
    """Whole lines of `path` since the last call (a partial last line is read next time)."""
    try:
        with open(path, errors="replace") as f:
            f.seek(offsets.get(path, 0))
            chunk = f.read()
    except OSError:
        return []
    whole = chunk[: chunk.rfind("\n") + 1]
    offsets[path] = offsets.get(path, 0) + len(whole.encode())
    return whole.splitlines()


def _settle(job_id: str, events: Path, timeout_s: float = 30.0) -> None:
    """sacct turns final (CANCELLED, NODE_FAIL) while the batch script may still be tearing down
    and recording why; wait, bounded, for its job_end event or for the job to leave the queue."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if b" job_end " in events.read_bytes()[-4096:]:
                return
        except OSError:
            pass
        if squeue_state(job_id) is None:
            return
        time.sleep(0.5)


# Events worth a line of their own while following a job (the phase line or bar says the rest):
# why it fails, which node Slurm lost, how a campaign's launch ended.
NOTABLE = ("fail", "node_state", "launch_end", "time_stop")


def shown(line: str, verbose: bool) -> bool:
    """Whether an events.log line is echoed: all with verbose, else the NOTABLE ones."""
    parts = line.split(" ", 4)          # epoch, date, time, event, fields
    return verbose or (len(parts) >= 4 and parts[3] in NOTABLE)


def follow(job_id: str, run_dir: Path, *, poll_s: float = 2.0, timeout_s: float | None = None,
           echo: Callable[[str], None] = print,
           on_poll: Callable[[str, Path], None] | None = None, verbose: bool = False) -> str:
    """Block until the job ends; echo new event lines (every one with verbose, else failures, lost
    nodes, launch ends and a campaign's stop at a block boundary: a metrics_scrape every few seconds would bury the progress); return the
    final Slurm state.

    on_poll(state, directory the job writes) runs after every poll (live progress)."""
    from .hetjob import HetSlurmJob

    job = HetSlurmJob(folder=Layout(run_dir).submitit, job_id=job_id)
    start = time.monotonic()
    offsets: dict[Path, int] = {}
    last_state = None
    while True:
        ev = _events_file(run_dir, job_id)
        for path in _all_events(ev):
            for line in _new_lines(path, offsets):
                if not shown(line, verbose):
                    continue
                parts = line.split(" ", 3)
                echo("  " + (f"{parts[2]} {parts[3]}" if len(parts) == 4 else line))
        state = job.watcher.get_state(job_id, mode="force")
        if base_state(state) in PENDING_STATES | {"UNKNOWN", None}:
            reason = pending_reason(job_id)        # why it waits (squeue %r): the user may act on it
            state = f"PENDING ({pending_text(reason)})" if reason else state
        if state != last_state:
            echo(f"job {job_id}: {state}")
            last_state = state
        if on_poll is not None:
            on_poll(state, ev.parent)
        base = base_state(state) or "UNKNOWN"   # UNKNOWN: submitit has no sacct row yet
        if not is_active(base) and base != "UNKNOWN":
            _settle(job_id, ev)
            return base
        if base == "UNKNOWN" and time.monotonic() - start > 30 and squeue_state(job_id) is None:
            return "UNKNOWN"  # no accounting and no longer queued: it has ended
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            return base
        time.sleep(poll_s)
