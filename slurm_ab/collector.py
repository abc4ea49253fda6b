"""The collector's edge: Slurm's view (sacct) + the run directory -> summary files and text.

``collect_and_write`` is what `slurm-ab collect`, `submit --wait` and the chained collector job
call; all three give the same files. Raw logs are only read.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from . import rundir
from .slurm import ACTIVE, sacct, squeue_state


def slurm_facts(job_id: str | None, *, settle_s: float = 5.0) -> dict | None:
    """sacct's view of the job for the collector; None without accounting.

    Right after a het job ends sacct briefly shows one merged allocation row; wait for the
    per-component rows (bounded) so node lists and the final state are right.
    """
    if not job_id:
        return None
    deadline = time.monotonic() + settle_s
    info = sacct(job_id)
    while info and f"{job_id}+0" not in info["components"] and info["state"] not in ACTIVE \
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


def collect_and_write(run_dir: Path, *, job_id: str | None = None, final: bool = True,
                      all_samples: bool = False):
    """Collect one run; write summary.json/csv/md unless the job is still running."""
    from .collect import collect_run, write_summary

    jid = job_id or rundir.job_id_of(run_dir)
    facts = slurm_facts(str(jid) if jid else None) if final else None
    summary = collect_run(run_dir, all_samples=all_samples, sacct=facts)
    written = write_summary(summary, run_dir)
    _record_nodes(run_dir, summary)
    return summary, written


def _record_nodes(run_dir: Path, summary) -> None:
    """Add the components' node lists to the manifest once the job has run (submit cannot know them)."""
    import json

    m = rundir.read_manifest(run_dir)
    nodes = dict(summary.job.node_lists or {})
    if m and nodes and "nodes" not in m:
        m["nodes"] = {f"het_group_{k}": v for k, v in nodes.items()}
        rundir.write_atomic(run_dir / "manifest.json", json.dumps(m, indent=2) + "\n")


def print_summary(summary, echo: Callable[[str], None] = print) -> None:
    from .collect import report

    echo(report([summary], "md"))
    echo(f"verdict: {summary.verdict}")
    for r in summary.reasons:
        echo(f"  - {r}")
    if summary.accept and summary.accept.samples:
        echo(f"accept length {summary.accept.accept_len:.2f}, rate {summary.accept.accept_rate or 0:.3f} "
             f"over {summary.accept.samples} decode samples of both replicas "
             f"({'whole logs' if summary.all_samples else 'benchmark window only'})")
