"""The seed's paired comparison of two runs: signed % changes from unrounded values ('+26.08%'),
and why two runs may not be comparable."""
from __future__ import annotations

import math

from ..collect.records import Latency, PassSummary
from .runs import _client_accept, _pair
from .table import Table, notes, num


def pct(a: float | None, b: float | None) -> str:
    """Signed change from a to b: '+26.08%'; 'n/a' when it cannot be computed."""
    if a is None or b is None or a == 0 or not (math.isfinite(a) and math.isfinite(b)):
        return "n/a"
    return f"{(b / a - 1.0) * 100.0:+.2f}%"


def _pct_value(a, b):
    if a is None or b is None or a == 0:
        return None
    return (b / a - 1.0) * 100.0


def _lat_row(name: str, la: Latency | None, lb: Latency | None, unit: str, scale: float):
    get = (lambda lat, k: getattr(lat, k) if lat is not None else None)
    return [name, _pair(la, unit, scale), _pair(lb, unit, scale),
            f"{pct(get(la, 'mean'), get(lb, 'mean'))} / {pct(get(la, 'p95'), get(lb, 'p95'))}"]


def compare_rows(a: PassSummary, b: PassSummary) -> tuple[list[list[str]], list[str]]:
    """Rows [metric, A, B, change] of the seed's paired table, and comparability warnings."""
    ba, bb = a.bench, b.bench
    rows = [["Benchmark duration", num(ba.duration_s, ".2f", "s"), num(bb.duration_s, ".2f", "s"),
             pct(ba.duration_s, bb.duration_s)]]
    pin, pout = _pct_value(ba.input_tps, bb.input_tps), _pct_value(ba.output_tps, bb.output_tps)
    if pin is not None and pout is not None and abs(pin - pout) <= 0.05:
        change = pct(ba.input_tps, bb.input_tps)      # they move together: one figure, as seeded
    else:
        change = f"{pct(ba.input_tps, bb.input_tps)} / {pct(ba.output_tps, bb.output_tps)}"
    rows.append(["Input / Output TPS",
                 f"{num(ba.input_tps, '.2f')} / {num(ba.output_tps, '.2f')}",
                 f"{num(bb.input_tps, '.2f')} / {num(bb.output_tps, '.2f')}", change])
    rows.append(_lat_row("TTFT mean / p95", ba.ttft, bb.ttft, "s", 1e-3))
    rows.append(_lat_row("TPOT mean / p95", ba.tpot, bb.tpot, "ms", 1.0))
    rows.append(_lat_row("E2E mean / p95", ba.e2e, bb.e2e, "s", 1e-3))
    rows.append(["Accept length", num(a.accept.accept_len, ".2f") + _client_accept(a, " "),
                 num(b.accept.accept_len, ".2f") + _client_accept(b, " "),
                 pct(a.accept.accept_len, b.accept.accept_len)])
    ca, cb = _counter_accept(a), _counter_accept(b)
    if ca is not None or cb is not None:
        rows.append(["Accept length (counters)", num(ca, ".2f"), num(cb, ".2f"), pct(ca, cb)])
    ea, eb = (s.telemetry.j_per_token if s.telemetry else None for s in (a, b))
    if ea is not None or eb is not None:          # telemetry (docs/telemetry.md)
        rows.append(["Energy (J/token)", num(ea, ".3f"), num(eb, ".3f"), pct(ea, eb)])
    return rows, comparability(a, b)


def _counter_accept(s: PassSummary) -> float | None:
    """The token-weighted acceptance length from the servers' /metrics counters (pooled)."""
    sm = s.server_metrics
    return sm.pooled.accept_len if sm is not None and getattr(sm, "available", False) else None


def comparability(a: PassSummary, b: PassSummary) -> list[str]:
    """Why the two runs may not be comparable (empty when they are)."""
    out = []
    fields = (("dataset", "dataset"), ("input_len", "input length"),
              ("output_len", "output length"), ("num_prompts", "prompts"),
              ("max_concurrency", "concurrency"), ("request_rate", "request rate"))
    for attr, name in fields:
        va, vb = getattr(a.spec, attr), getattr(b.spec, attr)
        if va != vb:
            out.append(f"benchmark spec differs: {name} {va if va is not None else '?'} vs "
                       f"{vb if vb is not None else '?'}")
    if (a.bench.completed, a.bench.total) != (b.bench.completed, b.bench.total):
        out.append(f"successful requests differ: {a.bench.completed}/{a.bench.total} vs "
                   f"{b.bench.completed}/{b.bench.total}")
    for s, name in ((a, "A"), (b, "B")):
        if s.verdict != "ok":
            out.append(f"run {name} ({s.run_id}) is {s.verdict}"
                       + (f": {s.reasons[0]}" if s.reasons else ""))
    return out


def paired_answer(a: PassSummary, b: PassSummary):
    """The answer line of two runs: the primary metric's change, no interval (one pass a side)."""
    from ..ab_stats.family import compare
    from ..ab_stats.metrics import PRIMARY_DEFAULT
    from ..collect.rows import numeric_row, pass_row
    from .answer import comparison_answer, pair_answers

    found = pair_answers(a.run_id, [pass_row(a)], b.run_id, [pass_row(b)])
    return found[0] if found else comparison_answer(a.run_id, b.run_id, None, compare(
        [numeric_row(a)], [numeric_row(b)], PRIMARY_DEFAULT), separate=True)


def paired_table(a: PassSummary, b: PassSummary) -> tuple[Table, list[str]]:
    """The seed's paired comparison of run A (baseline) and run B, and why they may not compare."""
    rows, warnings = compare_rows(a, b)
    headers = ["metric", a.mode or a.run_id, b.mode or b.run_id, "change"]
    if headers[1] == headers[2]:
        headers[1], headers[2] = a.run_id, b.run_id
    return Table.of(headers, rows, ("left", "right", "right", "right")), warnings


def paired_text(a: PassSummary, b: PassSummary, fmt: str = "md", metrics: list | None = None,
                width: int | None = None) -> str:
    """`slurm-ab compare A B` of two runs: the table with warnings below (md; fitted to `width`
    columns when given), its cells (csv), or {rows, warnings[, metrics]} (json; metrics: the
    per-metric records of ab_stats)."""
    table, warnings = paired_table(a, b)
    if fmt == "md":
        return table.text(width) + "\n" + notes(warnings, "> warning: ", width) + ("\n" if warnings else "")
    if fmt == "csv":
        return table.csv()
    if fmt == "json":
        import json
        data = {"rows": table.records(), "warnings": warnings}
        if metrics is not None:
            data["metrics"] = metrics
        return json.dumps(data, indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r} (md, csv, json)")
