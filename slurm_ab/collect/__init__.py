"""From a run directory to verdicts, summary files, tables and paired comparisons.

Public entry points (the CLI calls these):
    collect_run(run_dir, *, all_samples=False, sacct=None) -> RunSummary
    write_summary(summary, run_dir) -> list[Path]
    report(summaries, fmt="md") -> str
    compare(a, b, fmt="md") -> str
    find_run_dirs(results, job_id) -> list[Path]
pandas and tabulate are imported only inside the functions that need them.
"""
from .locate import find_run_dirs
from .summary import collect_run
from .tables import compare, compare_rows, main_row, report
from .write import write_summary

__all__ = ["collect_run", "write_summary", "report", "compare", "compare_rows", "main_row",
           "find_run_dirs"]
