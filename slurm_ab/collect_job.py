"""Runs inside the collector job that submit chains after the experiment (dependency afterany)."""
from __future__ import annotations

from pathlib import Path


def collect_after_job(run_dir: str, job_id: str) -> str:
    from .collector import collect_and_write

    summary = collect_and_write(Path(run_dir), job_id=job_id, final=True)
    return summary.get("verdict", "unknown") if isinstance(summary, dict) else str(summary)
