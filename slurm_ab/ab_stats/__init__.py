"""Statistics of campaigns: aggregates, launch-aware A/B changes, the primary/secondary family,
percentile precision and variance components (docs/statistics.md).

One module per job: `metrics` (names, directions, the primary metric), `intervals` (t and Welch
intervals over plain numbers), `launches` (one metric's change, the launch as the unit),
`family` (a whole comparison: primary + Holm-adjusted secondaries), `percentiles` (how sure a
p95 is; pooled request percentiles), `components` (launch and pass variance of a campaign).
Importing any of them costs nothing: numpy/scipy/statsmodels load inside the functions.
"""
from .intervals import CONFIDENCE, Aggregate, aggregate
from .launches import (BETTER, INCONCLUSIVE, LAUNCH_LEVELS, NO_SPREAD, PASS_LEVELS, SAME, VERDICTS, WITHIN,
                       WORSE, Delta, delta, deltas)
from .metrics import HIGHER, LOWER, METRIC_BY_NAME, METRICS, PRIMARY_CHOICES, PRIMARY_DEFAULT, Metric


def aggregates(rows, metrics=METRICS, confidence: float = CONFIDENCE) -> dict:
    """Per metric, the Aggregate of per-pass rows (one (mode, concurrency) group)."""
    return {m.name: aggregate([r.get(m.name) for r in rows], confidence) for m in metrics}


__all__ = ["BETTER", "CONFIDENCE", "HIGHER", "INCONCLUSIVE", "LAUNCH_LEVELS", "LOWER", "METRICS",
           "METRIC_BY_NAME", "NO_SPREAD", "PASS_LEVELS", "PRIMARY_CHOICES", "PRIMARY_DEFAULT", "SAME",
           "VERDICTS", "WITHIN", "WORSE", "Aggregate", "Delta", "Metric", "aggregate", "aggregates",
           "delta", "deltas"]
