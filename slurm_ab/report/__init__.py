"""Pictures of runs: a self-contained HTML report with plots (PNG files too).

Reads only a run directory's files: summary.json read back into the collector's records (the
one schema of every job), summary.md, manifests, events, client outputs and server logs, every
path through rundir.open_run. matplotlib is imported only when a plot is drawn.

    write_run_report(run_dir) -> Path           report.html + plots/*.png of one run
    render_runs_html(run_dirs, table_md) -> str  `slurm-ab report RUN... --html FILE`
    render_compare_html(a, b, compare_md) -> str `slurm-ab compare A B --html FILE`
"""
from __future__ import annotations


def write_run_report(run_dir, **kw):
    from .write import write_run_report as f
    return f(run_dir, **kw)


def render_runs_html(run_dirs, table_md, **kw):
    from .html import render_runs as f
    return f(run_dirs, table_md, **kw)


def render_compare_html(run_a, run_b, compare_md, **kw):
    from .html import render_compare as f
    return f(run_a, run_b, compare_md, **kw)


__all__ = ["write_run_report", "render_runs_html", "render_compare_html"]
