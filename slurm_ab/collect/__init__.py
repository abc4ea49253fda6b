"""From a run directory to typed records: a job's launches, its passes' numbers and verdicts.

Public entry points (the CLI calls these):
    collect_and_write(run_dir, *, job_id=None, final=True, all_samples=False)
        -> (CampaignSummary, [changed summary files])   asks Slurm (sacct), writes summary.*
    collect(run_dir, *, sacct=None, all_samples=False) -> CampaignSummary   pure: reads files only
    write_summary(summary, run_dir) -> list[Path]
    read_summary(run_dir) -> CampaignSummary | None     summary.json read back
The records are printed by slurm_ab.tables (markdown, CSV, JSON, HTML tables) and drawn by
slurm_ab.report (HTML pages). The chained collector job runs collect.chained.collect_after_job.
Run lookup (by run id or job id) lives in slurm_ab.model.rundir.
"""
from .campaign import collect
from .run import collect_and_write
from .write import read_summary, write_summary

__all__ = ["collect", "collect_and_write", "read_summary", "write_summary"]
