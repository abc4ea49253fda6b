"""The collector job that submit chains after the experiment (sbatch --dependency=afterany).

submitit pickles `collect_after_job` by reference and runs it on a node once the experiment has
ended, whatever its state; its return value is the job's result (<id>_0_result.pkl).
"""
from __future__ import annotations

from pathlib import Path


def collect_after_job(run_dir: str, job_id: str) -> str:
    """Collect the run (or campaign) and write its summary files; return its verdict."""
    from .run import collect_and_write

    cs, _written = collect_and_write(Path(run_dir), job_id=job_id, final=True)
    return cs.verdict         # a campaign's: "ok" when every pass is ok
