"""collect_run: a single run's directory -> its PassSummary (pure: reads files, writes nothing).

The same collector as every campaign (collect.campaign.collect): a single run is the campaign of
one launch and one pass. This is that pass, for callers that want the run's one record.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .records import PassSummary


def collect_run(run_dir: str | Path, *, all_samples: bool = False,
                sacct: Mapping | None = None, workers: int | None = None) -> PassSummary:
    """Summarise one single run's directory (layout in rundir.Layout).

    sacct: Slurm facts from the caller (see collect.job); None when unknown.
    all_samples: count decode samples of the whole log instead of the benchmark window.
    workers: processes for scanning server logs (None: automatic, 1: in-process).
    """
    from .campaign import collect

    cs = collect(run_dir, sacct=sacct, all_samples=all_samples, workers=workers)
    if not cs.single:
        raise ValueError(f"{run_dir} is a campaign: collect.campaign.collect gives all its passes")
    return cs.only


__all__ = ["collect_run"]
