"""From a run directory to verdicts, summary files, tables and paired comparisons.

Public entry points (the CLI calls these):
    collect_and_write(run_dir, *, job_id=None, final=True, all_samples=False)
        -> (RunSummary, [changed summary files])        asks Slurm (sacct), writes summary.*
    collect_run(run_dir, *, all_samples=False, sacct=None) -> RunSummary   pure: reads files only
    write_summary(summary, run_dir) -> list[Path]
    report(summaries, fmt="md") -> str
    compare(a, b, fmt="md") -> str
The chained collector job runs collect.chained.collect_after_job. Run lookup (by run id or job id)
lives in slurm_ab.rundir. pandas and tabulate are imported only inside the functions that need them.
"""
from .run import collect_and_write, summary_text
from .summary import collect_run
from .tables import compare, compare_rows, main_row, report
from .write import write_summary

__all__ = ["collect_and_write", "summary_text", "collect_run", "write_summary", "report",
           "compare", "compare_rows", "main_row"]
