"""The collector job that submit chains after the experiment (sbatch --dependency=afterany).

submitit pickles `collect_after_job` by reference and runs it on a node once the experiment has
ended, whatever its state; its return value is the job's result (<id>_0_result.pkl).
"""
from __future__ import annotations

from pathlib import Path


def collect_after_job(run_dir: str, job_id: str) -> str:
    """Collect the run and write its summary files; return its verdict ("ok", "failed", ...)."""
    from .campaign import campaign_of, collect_campaign_and_write
    from .run import collect_and_write

    if campaign_of(Path(run_dir)) is not None:   # a campaign: "ok" when every pass is ok
        result, _written = collect_campaign_and_write(Path(run_dir), job_id=job_id, final=True)
        bad = sorted({r["verdict"] for r in result["passes"]} - {"ok"})
        return "ok" if result["passes"] and not bad else (bad[0] if bad else "failed")
    summary, _written = collect_and_write(Path(run_dir), job_id=job_id, final=True)
    return summary.verdict
