"""Write a run's report.html and plots/*.png: atomic, idempotent (same inputs, same bytes).

Only derived files are written; a file whose content would not change is left alone.
"""
from __future__ import annotations

from pathlib import Path

from ..model.rundir import Layout, write_atomic


def write_run_report(run_dir: str | Path) -> list[Path]:
    """report.html and plots/<name>.png in the run directory (a job of one timed pass: that
    pass's page; of several: the campaign page); returns the files that changed."""
    from ..collect.write import read_summary
    from ..tables.campaign import the_pass
    from .campaign import render_campaign
    from .html import render_run

    run_dir = Path(run_dir)
    job = read_summary(run_dir)
    pl: list = []
    if job is not None and the_pass(job) is None:
        text = render_campaign(run_dir, plots_out=pl)
    else:
        text = render_run(run_dir, plots_out=pl)
    changed = []
    lay = Layout(run_dir)
    if pl:
        lay.plots.mkdir(exist_ok=True)
        for name, _, data in pl:
            p = lay.plot(name)
            if write_atomic(p, data):
                changed.append(p)
    p = lay.report_html
    if write_atomic(p, text):
        changed.append(p)
    return changed


def write_html(path: str | Path, text: str) -> Path:
    path = Path(path)
    write_atomic(path, text)
    return path
