"""Statistics of campaigns: aggregates, launch-aware A/B changes, the primary/secondary family,
percentile precision and variance components (docs/statistics.md).

One module per job: `metrics` (names, directions, the primary metric), `intervals` (t and Welch
intervals over plain numbers), `launches` (one metric's change, the launch as the unit),
`family` (a whole comparison: primary + Holm-adjusted secondaries), `percentiles` (how sure a
p95 is; pooled request percentiles), `components` (launch and pass variance of a campaign),
`verdicts` (the verdict words, equivalence, their colours), `sequential` (group-sequential
boundaries), `looks` (a sequential look, stdlib only: the job runs it too), `planner`.
Importing any of them costs nothing: numpy/scipy/statsmodels load inside the functions.
"""
from .intervals import CONFIDENCE, Aggregate, aggregate
from .launches import LAUNCH_LEVELS, PASS_LEVELS, Delta, delta, deltas
from .metrics import METRIC_BY_NAME, METRICS, PRIMARY_CHOICES, PRIMARY_DEFAULT, Metric
from .verdicts import (BETTER, DESCRIPTIVE, EQUIVALENT, HIGHER, INCONCLUSIVE, LOWER, NO_SPREAD, SAME, VERDICTS,
                       WITHIN, WORSE)


def aggregates(rows, metrics=METRICS, confidence: float = CONFIDENCE) -> dict:
    """Per metric, the Aggregate of per-pass rows (one (mode, concurrency) group)."""
    return {m.name: aggregate([r.get(m.name) for r in rows], confidence) for m in metrics}


__all__ = ["BETTER", "CONFIDENCE", "DESCRIPTIVE", "EQUIVALENT", "HIGHER", "INCONCLUSIVE", "LAUNCH_LEVELS", "LOWER", "METRICS",
           "METRIC_BY_NAME", "NO_SPREAD", "PASS_LEVELS", "PRIMARY_CHOICES", "PRIMARY_DEFAULT", "SAME",
           "VERDICTS", "WITHIN", "WORSE", "Aggregate", "Delta", "Metric", "aggregate", "aggregates",
           "delta", "deltas"]
