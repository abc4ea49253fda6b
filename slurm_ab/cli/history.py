"""`slurm-ab history`: settings, the index's update, the series and their output (docs/history.md)."""
from __future__ import annotations

from pathlib import Path

import click

from ..model.errors import ConfigError, ConfigErrors, UsageError


def run(src, results: Path, *, modes=(), workload: str = "", since=None, metric=None, rebuild: bool = False,
        index=None, fmt: str = "md", html: bool = False) -> tuple[str, str]:
    """(the text to print, the page when html) of the history under `results`."""
    from ..ab_stats import METRIC_BY_NAME
    from ..collect import history as hist
    from ..collect.index import default_index, points, update
    from ..model.experiment import history_of
    from ..model.sources import load_tree_for
    from ..model.telemetry_checks import check_history
    from ..report.select import parse_since
    from ..tables.history import history_text

    tree = load_tree_for(src)
    errors = check_history(tree)
    settings = history_of(tree) if not errors else None
    name = metric if metric is not None else (settings.metric if settings else "")
    if name and name not in METRIC_BY_NAME:
        errors.append(ConfigError("--metric" if metric is not None else "history.metric", name, "unknown metric",
                                  ", ".join(METRIC_BY_NAME)))
    if errors:
        raise ConfigErrors(errors)
    path = Path(index) if index else default_index(results, settings.index)
    inside = Path(results).resolve()
    if path.resolve() == inside or inside in path.resolve().parents:
        raise ConfigError("--index" if index else "history.index", str(path), "lies under the results directory",
                          "a path on a local disk outside it: the index is derived, results/ may be read-only "
                          "or on a shared file system where SQLite's locks are unsafe")
    if not Path(results).is_dir():
        raise UsageError(f"no results directory {results}")
    up = update(results, path, rebuild=rebuild)
    click.echo(f"index {up.path}: {up.added} run(s) added, {up.refreshed} refreshed, {up.removed} removed"
               + (f"; not collected (slurm-ab collect them): {', '.join(up.not_collected)}" if up.not_collected else ""),
               err=True)
    series = hist.build(points(up.path), settings, name, tuple(modes), workload, parse_since(since) if since else None)
    text = history_text(series, settings, fmt, str(up.path))
    page = ""
    if html:
        from ..report.history import render_history
        page = render_history(series, history_text(series, settings, "md"), str(up.path))
    return text, page
