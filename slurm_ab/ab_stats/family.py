"""A whole comparison: one primary metric with the headline verdict, the others a Holm family.

Nine metrics tested at 5 % each call something 'significant' in an A/A campaign far more often
than 5 %. The primary metric (benchmark.primary_metric) is tested alone at 5 %; the secondary rows
form one family whose p-values are Holm-adjusted (family-wise 5 %), so the whole printed table
errs at most ~10 % of the time under no change. A campaign of several comparisons (B modes x
concurrencies) makes its primaries one family too, Holm across them (`compare_all`).

Every printed interval agrees with its verdict: a row tested in a family is restated at the level
of its Holm step (`holm_levels`: 1 - 0.05 / (m - i) for the i-th smallest p up to the first that
is not rejected, that step's level for the rest), so its interval excludes 0 exactly when the
Holm-adjusted p is below 0.05. Percentile rows are descriptive (no interval, no test).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from .intervals import CONFIDENCE
from .launches import Delta, column, delta
from .metrics import (LATENCY_PERCENTILES, METRIC_BY_NAME, PRIMARY_DEFAULT, SAME_MEASUREMENT, STEADY,
                      comparison_rows, row_label)
from .verdicts import DESCRIPTIVE

PRIMARY, SECONDARY = "primary", "secondary"


@dataclass(frozen=True)
class Row:
    """One printed row: its Delta (its interval at the level the row's test used) and the verdict
    the table states."""

    delta: Delta
    role: str                       # PRIMARY or SECONDARY
    verdict: Optional[str]          # the Delta's at its (adjusted) level; DESCRIPTIVE for percentiles
    p_holm: Optional[float] = None  # Holm-adjusted p within its family (None: tested alone)
    family: int = 1                 # hypotheses in its family

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
                 family=self.family, same_as=list(SAME_MEASUREMENT.get(self.metric, ())))
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "Row":
        """A row back from its JSON record (summary.json): the tables print what was collected."""
        names = Delta.__dataclass_fields__
        fields = {k: v for k, v in d.items() if k in names}
        fields["variance_levels"] = tuple(fields.get("variance_levels") or ())
        return cls(Delta(**fields), str(d.get("role") or SECONDARY), d.get("verdict"), d.get("p_holm"),
                   int(d.get("family") or 1))


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


def holm_levels(p_values: Sequence[float], confidence: float = CONFIDENCE) -> list[float]:
    """The confidence level of each hypothesis' Holm step: 1 - alpha / (m - rank) for the ranks
    Holm rejects, the level of the first step that does not reject for the others. An interval
    at that level excludes 0 exactly when the Holm-adjusted p is below alpha."""
    alpha, m = 1.0 - confidence, len(p_values)
    out = [confidence] * m
    stop = None
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        if stop is None and p_values[i] > alpha / (m - rank):
            stop = rank
        out[i] = 1.0 - alpha / (m - (rank if stop is None else stop))
    return out


def _descriptive(d: Delta) -> Delta:
    """A percentile row: its change, no interval, no test."""
    return replace(d, ci_low_pct=None, ci_high_pct=None, p_value=None, verdict=DESCRIPTIVE if d.verdict else None)


def _restated(deltas: Sequence[Delta], confidence: float) -> list[tuple[Delta, Optional[float]]]:
    """(Delta at its Holm step's level, Holm-adjusted p) of each tested Delta of one family."""
    tested = [d for d in deltas if d.tested]
    ps = [d.p_value for d in tested]
    adj = dict(zip((id(d) for d in tested), zip(holm(ps), holm_levels(ps, confidence))))
    return [(d.at(adj[id(d)][1]), adj[id(d)][0]) if id(d) in adj else (d, None) for d in deltas]


def compare(a_rows: Sequence[Mapping], b_rows: Sequence[Mapping], primary: str = PRIMARY_DEFAULT,
            confidence: float = CONFIDENCE, margin_pct: Optional[float] = None,
            confound: Optional[str] = None) -> list[Row]:
    """The primary row, then every secondary row that has a value on either side."""
    head, others = comparison_rows(primary, steady_available(a_rows, b_rows))

    def one(name: str) -> Delta:
        (va, la), (vb, lb) = column(a_rows, name), column(b_rows, name)
        return delta(name, va, vb, METRIC_BY_NAME[name].better, confidence, la, lb, margin_pct, confound)

    first = one(head)
    rest = [d for d in (one(n) for n in others) if d.a_mean is not None or d.b_mean is not None]
    family = [d for d in rest if d.metric not in LATENCY_PERCENTILES]
    stated = dict(zip((d.metric for d in family), _restated(family, confidence)))
    m = sum(1 for d in family if d.tested)
    rows = [Row(first, PRIMARY, first.verdict)]
    for d in rest:
        if d.metric in LATENCY_PERCENTILES:
            pd = _descriptive(d)
            rows.append(Row(pd, SECONDARY, pd.verdict))
            continue
        sd, p = stated[d.metric]
        rows.append(Row(sd, SECONDARY, sd.verdict, p, m if p is not None else 1))
    return rows


def compare_all(pairs: Sequence[tuple[Sequence[Mapping], Sequence[Mapping]]], primary: str = PRIMARY_DEFAULT,
                confidence: float = CONFIDENCE, margin_pct: Optional[float] = None,
                confound: Optional[str] = None) -> list[list[Row]]:
    """Several comparisons of one campaign (each B mode against A, at each concurrency): each
    compared as `compare` does, their primary rows one Holm family (restated at their steps'
    levels) so a sweep or several B modes err no more often than one comparison."""
    tables = [compare(a, b, primary, confidence, margin_pct, confound) for a, b in pairs]
    if len(tables) < 2:
        return tables
    firsts = [t[0].delta for t in tables]
    m = sum(1 for d in firsts if d.tested)
    for t, (d, p) in zip(tables, _restated(firsts, confidence)):
        t[0] = Row(d, PRIMARY, d.verdict, p, m if p is not None else 1)
    return tables


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
