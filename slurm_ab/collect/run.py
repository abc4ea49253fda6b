"""Collect one run end to end: Slurm's facts + the run directory -> summary files.

``collect_and_write`` is what `slurm-ab collect`, `submit --wait` and the chained collector job
(collect.chained) call; all three give the same files. Raw logs are only read.
"""
from __future__ import annotations

from pathlib import Path

from ..model import rundir
from .campaign import collect
from .records import CampaignSummary
from .slurm_facts import slurm_facts
from .write import write_summary


def collect_and_write(run_dir: Path, *, job_id: str | None = None, final: bool = True,
                      all_samples: bool = False, report: bool = True) -> tuple[CampaignSummary, list[Path]]:
    """Collect a job; write its summary files unless the job is still running.

    Returns the summary and the summary files that changed. final=False skips asking Slurm;
    report=False draws no missing report.html (most of collect's time: the next collect or
    `report --html` does), so the tables of `report` and `compare` never draw a history's pages;
    a page that exists is still redrawn when its summary changed, never left stale.
    """
    jid = job_id or rundir.job_id_of(run_dir)
    facts = slurm_facts(str(jid) if jid else None, run_dir=run_dir) if final else None
    cs = collect(run_dir, sacct=facts, all_samples=all_samples)
    running = cs.verdict == "running"
    written = write_summary(cs, run_dir)
    written += write_report(run_dir, changed=bool(written), running=running, missing=report)
    rundir.record_nodes(run_dir, dict(cs.job.node_lists or {}))
    return cs, written


def write_report(run_dir: Path, *, changed: bool, running: bool, missing: bool = True) -> list[Path]:
    """report.html and plots/ next to summary.md (a run's or a campaign's), redrawn when the
    summary changed, drawn when the page is missing and MISSING says so. A plotting failure never
    costs the summary: it is said on stderr."""
    if running:
        return []
    page = rundir.Layout(Path(run_dir)).report_html
    if not (changed if page.exists() else missing):
        return []
    try:
        from ..report import write_run_report
        return write_run_report(run_dir)
    except Exception as e:  # noqa: BLE001 - the summary is written; say why the page is not
        import sys
        print(f"slurm-ab: warning: {page} not written: {type(e).__name__}: {e}", file=sys.stderr)
        return []
