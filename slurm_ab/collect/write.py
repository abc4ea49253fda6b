"""Write summary.json / .csv / .md into the run directory: atomic and idempotent.

Each file is written to a temporary name in the same directory and renamed over the old one, so
a reader never sees half a file; a file whose content would not change is not rewritten. No
collection timestamp is written, so the same inputs give byte-identical outputs. Raw files are
never opened for writing. A running job gets nothing (its numbers are not final).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..model.rundir import SUMMARY_FILES, Layout, write_atomic
from .records import CampaignSummary, PassSummary
from .rows import campaign_record, numeric_row


def render_json(s: PassSummary) -> str:
    return json.dumps(s.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_summary(cs: CampaignSummary | PassSummary, run_dir: str | Path) -> list[Path]:
    """Write the three summary files of a run (its one pass) or a campaign (every pass, the
    aggregates and comparisons); return those that changed ([] for a running job)."""
    if cs.verdict == "running":
        return []
    from ..tables.table import numeric_frame

    lay = Layout(Path(run_dir))
    if isinstance(cs, CampaignSummary) and not cs.single:
        from ..tables.campaign import campaign_md
        record = campaign_record(cs)
        texts = {"summary.json": json.dumps(record, indent=2, sort_keys=True, default=str) + "\n",
                 "summary.csv": numeric_frame(record["passes"], "csv"),
                 "summary.md": campaign_md(record)}
        return [lay.summary(n) for n, t in texts.items() if write_atomic(lay.summary(n), t)]
    from ..tables.runs import run_md
    s = cs.only if isinstance(cs, CampaignSummary) else cs
    texts = {"summary.json": render_json(s), "summary.csv": numeric_frame([numeric_row(s)], "csv"),
             "summary.md": run_md(s)}
    return [lay.summary(n) for n, t in texts.items() if write_atomic(lay.summary(n), t)]


__all__ = ["write_summary", "render_json", "SUMMARY_FILES"]
