"""Tables of a campaign: per-pass rows, per-(mode, concurrency) aggregates, the A/B comparison
with 95% intervals, and the throughput-latency curve of a concurrency sweep.

Input rows are plain dicts: the numeric row of one pass (tables.numeric_row keys) plus mode,
concurrency, repeat, launch, verdict and reason. Only `ok` passes enter aggregates and
comparisons; the others are listed with their verdict. tabulate/pandas are imported lazily.
"""
from __future__ import annotations

import json
import math
from typing import Iterable, Mapping, Sequence

from ..ab_stats import (INCONCLUSIVE, METRIC_BY_NAME, METRICS, Aggregate, aggregate, deltas)

DASH = "-"
# Display of each metric: number format (the seed's: 2 decimals; rates 3).
FORMATS = {"accept_rate": ".3f"}
TABLE_METRICS = ("input_tps", "output_tps", "ttft_mean_s", "ttft_p95_s", "tpot_mean_ms",
                 "tpot_p95_ms", "e2e_mean_s", "e2e_p95_s", "duration_s", "accept_len")
CURVE_METRICS = ("output_tps", "tpot_mean_ms", "ttft_mean_s", "ttft_p95_s")


def _fmt(x, metric: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x:{FORMATS.get(metric, '.2f')}}"


def value_pm(agg: Aggregate, metric: str) -> str:
    """'85.99 ± 1.20' (95% half-width); one pass: the value alone."""
    if agg.n == 0:
        return DASH
    hw = agg.half_width
    return _fmt(agg.mean, metric) if hw is None else f"{_fmt(agg.mean, metric)} ± {_fmt(hw, metric)}"


def _pct(x) -> str:
    return DASH if x is None else f"{x:+.2f}%"


def ok_rows(rows: Iterable[Mapping]) -> list[Mapping]:
    return [r for r in rows if r.get("verdict") == "ok"]


def groups(rows: Sequence[Mapping]) -> list[tuple[str, int]]:
    """(mode, concurrency) in first-seen order."""
    out: list[tuple[str, int]] = []
    for r in rows:
        k = (r["mode"], int(r["concurrency"]))
        if k not in out:
            out.append(k)
    return out


def aggregate_records(rows: Sequence[Mapping]) -> list[dict]:
    """Per (mode, concurrency): passes ok/total and each metric's mean, sd, CoV, 95% CI."""
    out = []
    for mode, c in groups(rows):
        mine = [r for r in rows if r["mode"] == mode and int(r["concurrency"]) == c]
        good = ok_rows(mine)
        out.append({"mode": mode, "concurrency": c, "passes_ok": len(good), "passes": len(mine),
                    "metrics": {m.name: aggregate([r.get(m.name) for r in good]).to_dict()
                                for m in METRICS}})
    return out


def _tab(rows, headers, align) -> str:
    from tabulate import tabulate
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                    colalign=align) + "\n"


def aggregate_table(rows: Sequence[Mapping]) -> str:
    """One line per (mode, concurrency): mean ± 95% half-width of each metric over its ok passes."""
    headers = ["Mode", "C", "n ok/total"] + [METRIC_BY_NAME[m].label for m in TABLE_METRICS]
    body = []
    for rec in aggregate_records(rows):
        line = [rec["mode"], str(rec["concurrency"]), f"{rec['passes_ok']}/{rec['passes']}"]
        for m in TABLE_METRICS:
            line.append(value_pm(Aggregate(**{k: v for k, v in rec["metrics"][m].items()
                                              if k != "half_width"}), m))
        body.append(line)
    return _tab(body, headers, ("left", "right", "right") + ("right",) * len(TABLE_METRICS))


def passes_table(rows: Sequence[Mapping]) -> str:
    """Every pass (burn-ins excluded by the caller): its numbers and verdict."""
    headers = ["Mode", "C", "Repeat", "Launch"] + [METRIC_BY_NAME[m].label for m in TABLE_METRICS] \
        + ["Verdict"]
    body = []
    for r in rows:
        numbers = [_fmt(r.get(m), m) for m in TABLE_METRICS]
        verdict = r.get("verdict") or DASH
        if r.get("reason"):
            verdict += f": {r['reason']}"
        body.append([r["mode"], str(r["concurrency"]), str(r["repeat"]), str(r.get("launch", DASH))]
                    + numbers + [verdict])
    return _tab(body, headers, ("left", "right", "right", "right") + ("right",) * len(TABLE_METRICS)
                + ("left",))


def curve_table(rows: Sequence[Mapping]) -> str:
    """The throughput-latency curve of each mode: one line per concurrency, with intervals."""
    headers = ["Mode", "C", "n"] + [METRIC_BY_NAME[m].label for m in CURVE_METRICS]
    body = []
    for rec in aggregate_records(rows):
        line = [rec["mode"], str(rec["concurrency"]), str(rec["passes_ok"])]
        for m in CURVE_METRICS:
            d = {k: v for k, v in rec["metrics"][m].items() if k != "half_width"}
            line.append(value_pm(Aggregate(**d), m))
        body.append(line)
    return _tab(body, headers, ("left", "right", "right") + ("right",) * len(CURVE_METRICS))


def comparison(a_rows: Sequence[Mapping], b_rows: Sequence[Mapping]) -> list[dict]:
    """Per metric (ok passes only): the JSON records of ab_stats.Delta."""
    return [d.to_dict() for d in deltas(ok_rows(a_rows), ok_rows(b_rows))]


def comparison_table(a_name: str, b_name: str, a_rows: Sequence[Mapping], b_rows: Sequence[Mapping],
                     variance: str | None = None) -> str:
    """A, B (mean ± half-width), % change, its 95% CI and the verdict of each metric."""
    a_ok, b_ok = ok_rows(a_rows), ok_rows(b_rows)
    body = []
    for d in deltas(a_ok, b_ok):
        if d.a_mean is None and d.b_mean is None:
            continue
        m = d.metric
        ci = DASH if d.ci_low_pct is None else f"[{d.ci_low_pct:+.2f}%, {d.ci_high_pct:+.2f}%]"
        body.append([METRIC_BY_NAME[m].label,
                     value_pm(aggregate([r.get(m) for r in a_ok]), m),
                     value_pm(aggregate([r.get(m) for r in b_ok]), m),
                     _pct(d.change_pct), ci, d.verdict or DASH])
    headers = ["metric", f"{a_name} (n={len(a_ok)})", f"{b_name} (n={len(b_ok)})", "change",
               "95% CI", "verdict"]
    text = _tab(body, headers, ("left", "right", "right", "right", "right", "left"))
    notes = []
    if len(a_ok) < 2 or len(b_ok) < 2:
        notes.append(f"{INCONCLUSIVE}: with fewer than 2 ok passes per side no interval can be "
                     "given; the change is one run against one run (use --repeats)")
    else:
        notes.append("A ± / B ±: 95% t interval of the mean; change: B mean / A mean - 1; 95% CI: "
                     "Welch's t on log values (docs/statistics.md)")
    if variance:
        notes.append(f"variance included: {variance}")
    for side, rows, ok in (("A", a_rows, a_ok), ("B", b_rows, b_ok)):
        bad = len(rows) - len(ok)
        if bad:
            notes.append(f"{side}: {bad} pass(es) not ok left out")
    return text + "".join(f"\n> {n}" for n in notes) + "\n"


def to_json(payload: dict) -> str:
    return json.dumps(payload, indent=2, default=str) + "\n"
