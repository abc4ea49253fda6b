"""The metrics a comparison knows: their direction, which are one measurement, which is primary.

Names are the keys of the collector's numeric row (collect/rows.numeric_row). At fixed input
and output lengths Input TPS, Output TPS and the benchmark duration are one measurement (tokens
over the same makespan): a comparison prints them as one row, tested once.
"""
from __future__ import annotations

from dataclasses import dataclass

from .verdicts import HIGHER, LOWER


@dataclass(frozen=True)
class Metric:
    name: str          # key of the collector's numeric row (collect.rows.numeric_row)
    label: str
    better: str        # HIGHER or LOWER


# Every numeric metric of the run table, in the seed's order, plus the steady-state
# throughput (issue 22's column: SGLang's steady-state window, docs/metrics.md).
METRICS = (
    Metric("input_tps", "Input TPS", HIGHER),
    Metric("output_tps", "Output TPS", HIGHER),
    Metric("ttft_mean_s", "TTFT mean (s)", LOWER),
    Metric("ttft_p95_s", "TTFT p95 (s)", LOWER),
    Metric("tpot_mean_ms", "TPOT mean (ms)", LOWER),
    Metric("tpot_p95_ms", "TPOT p95 (ms)", LOWER),
    Metric("e2e_mean_s", "E2E mean (s)", LOWER),
    Metric("e2e_p95_s", "E2E p95 (s)", LOWER),
    Metric("duration_s", "Duration (s)", LOWER),
    Metric("accept_len", "Accept length", HIGHER),
    Metric("accept_rate", "Accept rate", HIGHER),
    Metric("steady_output_tps", "Output TPS (steady state)", HIGHER),
    # GPU energy per output token over the measured benchmark (telemetry; docs/metrics.md)
    Metric("energy_j_per_token", "Energy (J/token)", LOWER),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}

# A row of a comparison -> the columns that are the same measurement (printed in its label).
SAME_MEASUREMENT = {"output_tps": ("input_tps", "duration_s")}
FOLDED = frozenset(x for xs in SAME_MEASUREMENT.values() for x in xs)

# Per-pass latency percentiles: shown, never tested (their bias depends on the distribution's
# shape: docs/statistics.md, "Percentiles"), so never the primary metric either.
LATENCY_PERCENTILES = ("ttft_p95_s", "tpot_p95_ms", "e2e_p95_s")
# benchmark.primary_metric: any metric but the folded ones (they are output_tps's row) and the
# percentiles.
PRIMARY_DEFAULT = "output_tps"
PRIMARY_CHOICES = tuple(m.name for m in METRICS if m.name not in FOLDED and m.name not in LATENCY_PERCENTILES)
STEADY = "steady_output_tps"


def row_label(name: str) -> str:
    """'Output TPS (= Input TPS, Duration)' for a folded row, else the metric's label."""
    label = METRIC_BY_NAME[name].label
    same = SAME_MEASUREMENT.get(name)
    return f"{label} (= {', '.join(METRIC_BY_NAME[x].label.split(' (')[0] for x in same)})" if same else label


def comparison_rows(primary: str, steady_available: bool) -> tuple[str, list[str]]:
    """(the metric carrying the headline verdict, the secondary rows in table order).

    A primary of output throughput is the steady-state figure when every compared pass has it:
    the makespan figure includes the client's ramp-up and drain, which move with how variable
    per-request times are (a speculative mode's tail reads as a throughput loss); the makespan row
    stays as a secondary. Folded columns never get a row of their own."""
    if primary not in PRIMARY_CHOICES:
        raise ValueError(f"unknown primary metric {primary!r}: one of {', '.join(PRIMARY_CHOICES)}")
    head = STEADY if primary == PRIMARY_DEFAULT and steady_available else primary
    rows = [m.name for m in METRICS if m.name not in FOLDED and m.name != head
            and (m.name != STEADY or steady_available)]
    return head, rows
