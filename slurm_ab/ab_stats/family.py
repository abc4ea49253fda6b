"""A whole comparison: one primary metric with the headline verdict, the others Holm-adjusted.

Nine metrics tested at 5 % each call something 'significant' in an A/A campaign far more often
than 5 %. The primary metric (benchmark.primary_metric) is tested alone at 5 %; the secondary rows
form one family whose p-values are Holm-adjusted (family-wise 5 %), so the whole printed table
errs at most ~10 % of the time under no change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from .intervals import CONFIDENCE
from .launches import SAME, Delta, column, delta, direction, qualified
from .metrics import METRIC_BY_NAME, PRIMARY_DEFAULT, SAME_MEASUREMENT, STEADY, comparison_rows, row_label

PRIMARY, SECONDARY = "primary", "secondary"


@dataclass(frozen=True)
class Row:
    """One printed row: its Delta (interval unadjusted) and the verdict the table states."""

    delta: Delta
    role: str                       # PRIMARY or SECONDARY
    verdict: Optional[str]          # primary: the Delta's; secondary: from the Holm-adjusted p
    p_holm: Optional[float] = None

    @property
    def metric(self) -> str:
        return self.delta.metric

    @property
    def label(self) -> str:
        return row_label(self.metric)

    def to_dict(self) -> dict:
        """The JSON record of one metric (docs/statistics.md lists the keys)."""
        d = self.delta.to_dict()
        d.update(label=self.label, role=self.role, verdict=self.verdict, p_holm=self.p_holm,
                 same_as=list(SAME_MEASUREMENT.get(self.metric, ())))
        return d


def steady_available(a_rows: Sequence[Mapping], b_rows: Sequence[Mapping]) -> bool:
    """Every compared pass carries the steady-state throughput."""
    rows = list(a_rows) + list(b_rows)
    return bool(rows) and all(isinstance(r.get(STEADY), (int, float)) and not isinstance(r.get(STEADY), bool)
                              and math.isfinite(r[STEADY]) for r in rows)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values: the i-th smallest times (m - i + 1), made monotone, capped at 1.

    The step-down is written here because statsmodels' multipletests runs a full garbage
    collection on every call (~0.2 s: the calibration makes thousands); tests/test_ab_launches.py
    checks this against multipletests(method="holm")."""
    m = len(p_values)
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def compare(a_rows: Sequence[Mapping], b_rows: Sequence[Mapping], primary: str = PRIMARY_DEFAULT,
            confidence: float = CONFIDENCE) -> list[Row]:
    """The primary row, then every secondary row that has a value on either side."""
    head, others = comparison_rows(primary, steady_available(a_rows, b_rows))

    def one(name: str) -> Delta:
        (va, la), (vb, lb) = column(a_rows, name), column(b_rows, name)
        return delta(name, va, vb, METRIC_BY_NAME[name].better, confidence, la, lb)

    first = one(head)
    rest = [d for d in (one(n) for n in others) if d.a_mean is not None or d.b_mean is not None]
    tested = [d for d in rest if d.tested]
    adjusted = dict(zip((d.metric for d in tested), holm([d.p_value for d in tested])))
    rows = [Row(first, PRIMARY, first.verdict)]
    for d in rest:
        if d.metric not in adjusted:
            rows.append(Row(d, SECONDARY, d.verdict))
            continue
        p = adjusted[d.metric]
        v = direction(d.ci_low_pct, d.ci_high_pct, METRIC_BY_NAME[d.metric].better) \
            if p < 1.0 - confidence else SAME
        rows.append(Row(d, SECONDARY, qualified(v, d.variance_levels), p))
    return rows


def primary_note(rows: Sequence[Row], primary: str) -> str:
    """Which throughput (or metric) the headline verdict uses, and why."""
    head = rows[0].metric
    if head == STEADY:
        return ("primary metric: output throughput in the steady state (SGLang's steady_state.py window: "
                "the longest with at least benchmark.steady_concurrency_ratio x the peak concurrency in "
                "flight): the drain is left "
                "out, it moves with how variable request times are, not with the server's rate; the "
                "makespan Output TPS is a secondary row")
    if head == PRIMARY_DEFAULT == primary:
        return ("primary metric: Output TPS over the makespan (ramp-up and drain included): not every "
                "pass has a steady-state throughput")
    return f"primary metric: {METRIC_BY_NAME[head].label} (benchmark.primary_metric)"
