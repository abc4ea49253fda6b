"""Write summary.json / .csv / .md into the run directory: atomic and idempotent.

Each file is written to a temporary name in the same directory and renamed over the old one, so
a reader never sees half a file; a file whose content would not change is not rewritten. No
collection timestamp is written, so the same inputs give byte-identical outputs. Raw files are
never opened for writing. A running job gets nothing (its numbers are not final). summary.json
is one schema for every job (collect.rows.summary_record; read back by read_summary).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..model.rundir import SUMMARY_FORMATS, Layout, write_atomic
from .records import CampaignSummary, _clean, read_record
from .rows import SCHEMA, summary_record


def render_json(cs: CampaignSummary) -> str:
    return json.dumps(_clean(summary_record(cs)), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_summary(cs: CampaignSummary, run_dir: str | Path) -> list[Path]:
    """Write the three summary files of a job (every pass, the aggregates and comparisons);
    return those that changed ([] for a running job)."""
    if cs.verdict == "running":
        return []
    from ..tables.campaign import summary_md
    from ..tables.table import numeric_frame

    lay = Layout(Path(run_dir))
    record = summary_record(cs)
    texts = {"json": render_json(cs), "csv": numeric_frame(record["rows"], "csv"), "md": summary_md(cs)}
    return [lay.summary(f) for f, t in texts.items() if write_atomic(lay.summary(f), t)]


def read_summary(run_dir: str | Path) -> CampaignSummary | None:
    """The job's summary.json read back into its records; None before collection, or for a
    summary.json of an older schema (collect writes it anew)."""
    try:
        d = json.loads(Layout(Path(run_dir)).summary("json").read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("summary_schema") != SCHEMA:
        return None
    try:
        return read_record(CampaignSummary, d)
    except (KeyError, TypeError, ValueError, AttributeError):      # edited by hand, half written
        return None


__all__ = ["write_summary", "read_summary", "render_json", "SUMMARY_FORMATS"]
