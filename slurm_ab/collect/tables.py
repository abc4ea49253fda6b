"""The seed's tables: one main row per run, and the paired A/B comparison.

Units follow the seed: TTFT and E2E in seconds with 2 decimals, TPOT in ms, TPS with 2 decimals,
changes as signed percentages ('+26.08%'), computed from unrounded values.
"""
from __future__ import annotations

import math
from typing import Sequence

from .metrics_tables import metrics_columns, report_md
from .records import Latency, RunSummary

MAIN_COLUMNS = ("Mode", "Input TPS", "Output TPS", "TTFT mean / p95", "TPOT mean / p95",
                "E2E mean / p95", "Duration", "Requests ok/total", "Accept len / rate",
                "Verdict")
NUMBERLESS = ("failed", "cancelled", "timeout", "running")
DASH = "-"


def _f(x, fmt: str, unit: str = "", scale: float = 1.0) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x * scale if scale != 1.0 else x:{fmt}}{unit}"


def _pair(lat: Latency | None, unit: str, scale: float) -> str:
    if lat is None:
        return DASH
    return f"{_f(lat.mean, '.2f', unit, scale)} / {_f(lat.p95, '.2f', unit, scale)}"


def _verdict_cell(s: RunSummary) -> str:
    return s.verdict if not s.reasons else f"{s.verdict}: {s.reasons[0]}"


def main_row(s: RunSummary) -> dict[str, str]:
    """One run in the seed's layout; failed runs show the verdict and first reason instead."""
    row = {c: DASH for c in MAIN_COLUMNS}
    row["Mode"] = s.mode or s.run_id
    row["Verdict"] = _verdict_cell(s)
    if s.verdict in NUMBERLESS:
        return row
    b = s.bench
    row["Input TPS"] = _f(b.input_tps, ".2f")
    row["Output TPS"] = _f(b.output_tps, ".2f")
    row["TTFT mean / p95"] = _pair(b.ttft, "s", 1e-3)
    row["TPOT mean / p95"] = _pair(b.tpot, "ms", 1.0)
    row["E2E mean / p95"] = _pair(b.e2e, "s", 1e-3)
    row["Duration"] = _f(b.duration_s, ".2f", "s")
    if b.completed is not None or b.total is not None:
        row["Requests ok/total"] = f"{_f(b.completed, 'd')}/{_f(b.total, 'd')}"
    if s.accept.accept_len is not None:
        row["Accept len / rate"] = f"{s.accept.accept_len:.2f} / " + \
            _f(s.accept.accept_rate, ".3f") + _client_accept(s, " ")
    elif s.bench.accept_length:
        row["Accept len / rate"] = _client_accept(s, "")
    return row


def _client_accept(s: RunSummary, sep: str) -> str:
    """The client's own accept length, beside the decode-log figure: it is the first worker's
    lifetime average (warm-ups included), the decode log's samples are the window's."""
    return f"{sep}(client {s.bench.accept_length:.2f})" if s.bench.accept_length else ""


def pooled_lines(s: RunSummary) -> list[str]:
    """What the decode samples and the client say about acceptance and KV pressure (summary.md)."""
    a = s.accept
    lines = [f"Decode samples pooled over replicas (one PP stage): {a.decode_samples}, "
             f"of which with accept figures: {a.samples}"
             + (f"; accept len {a.accept_len:.2f}, accept rate {_f(a.accept_rate, '.3f')}"
                if a.accept_len is not None else "")]
    if s.bench.accept_length:
        lines.append(f"Client's accept length (first worker's lifetime average, warm-ups "
                     f"included): {s.bench.accept_length:.2f}")
    events = sum(r.retractions for r in s.replicas)
    if events:
        lines.append(f"KV-cache retractions: {events} "
                     f"({sum(r.retracted_requests for r in s.replicas)} requests recomputed)")
    return lines


def numeric_row(s: RunSummary) -> dict:
    """Machine-readable counterpart of main_row (csv/json)."""
    b = s.bench
    numbers = s.verdict not in NUMBERLESS

    def g(lat, attr, scale=1.0):
        v = getattr(lat, attr) if lat is not None and numbers else None
        return v * scale if v is not None else None
    return {
        "run_id": s.run_id, "mode": s.mode, "verdict": s.verdict,
        "reason": s.reasons[0] if s.reasons else "",
        "input_tps": b.input_tps if numbers else None,
        "output_tps": b.output_tps if numbers else None,
        "ttft_mean_s": g(b.ttft, "mean", 1e-3), "ttft_p95_s": g(b.ttft, "p95", 1e-3),
        "tpot_mean_ms": g(b.tpot, "mean"), "tpot_p95_ms": g(b.tpot, "p95"),
        "e2e_mean_s": g(b.e2e, "mean", 1e-3), "e2e_p95_s": g(b.e2e, "p95", 1e-3),
        "duration_s": b.duration_s if numbers else None,
        "requests_ok": b.completed, "requests_total": b.total,
        "accept_len": s.accept.accept_len, "accept_rate": s.accept.accept_rate,
        "accept_samples": s.accept.samples,
        "client_accept_length": s.bench.accept_length,
        **bench_columns(b, numbers),
        **metrics_columns(s),
    }


def bench_columns(b, numbers: bool = True) -> dict:
    """The prompts' lengths, the steady-state throughput and goodput (docs/metrics.md): ours from
    the per-request details; the client's own figures beside them as client_*."""
    p, st, gp = b.prompt_tokens, b.steady if numbers else None, b.goodput if numbers else None
    by = gp.attainment_by_metric if gp else {}
    return {
        "prompt_tokens_mean": p.mean if p else None, "prompt_tokens_min": p.min if p else None,
        "prompt_tokens_max": p.max if p else None,
        "steady_output_tps": st.output_tps if st else None,
        "steady_window_s": st.window_s if st else None,
        "client_steady_output_tps": st.client_output_tps if st else None,
        "goodput_rps": gp.goodput_rps if gp else None,
        "slo_attainment": gp.attainment if gp else None,
        "slo_attainment_ttft": by.get("ttft"), "slo_attainment_tpot": by.get("tpot"),
        "slo_attainment_e2e": by.get("e2el"),
        "client_goodput_rps": gp.client_goodput_rps if gp else None,
        "client_slo_attainment": gp.client_attainment if gp else None,
    }


def report(summaries: Sequence[RunSummary], fmt: str = "md") -> str:
    """All runs as one table: 'md' (tabulate), 'csv' or 'json' (pandas, numeric columns)."""
    if fmt == "md":
        from tabulate import tabulate
        rows = [main_row(s) for s in summaries]
        # The run id tells apart two runs of one mode (the seed's table has one row per mode).
        return tabulate([[s.run_id] + [r[c] for c in MAIN_COLUMNS] for s, r in zip(summaries, rows)],
                        headers=("Run",) + MAIN_COLUMNS, tablefmt="github", disable_numparse=True,
                        colalign=("left", "left") + ("right",) * 8 + ("left",)) + "\n" \
            + report_md(summaries)
    if fmt in ("csv", "json"):
        import pandas as pd
        df = pd.DataFrame([numeric_row(s) for s in summaries],
                          columns=list(numeric_row(summaries[0]).keys()) if summaries else None)
        if fmt == "csv":
            return df.to_csv(index=False, lineterminator="\n")
        return df.to_json(orient="records", indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r} (md, csv, json)")


# ---- paired comparison -------------------------------------------------------------------------

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


def compare_rows(a: RunSummary, b: RunSummary) -> tuple[list[list[str]], list[str]]:
    """Rows [metric, A, B, change] of the seed's paired table, and comparability warnings."""
    ba, bb = a.bench, b.bench
    rows = [["Benchmark duration", _f(ba.duration_s, ".2f", "s"), _f(bb.duration_s, ".2f", "s"),
             pct(ba.duration_s, bb.duration_s)]]
    pin, pout = _pct_value(ba.input_tps, bb.input_tps), _pct_value(ba.output_tps, bb.output_tps)
    if pin is not None and pout is not None and abs(pin - pout) <= 0.05:
        change = pct(ba.input_tps, bb.input_tps)      # they move together: one figure, as seeded
    else:
        change = f"{pct(ba.input_tps, bb.input_tps)} / {pct(ba.output_tps, bb.output_tps)}"
    rows.append(["Input / Output TPS",
                 f"{_f(ba.input_tps, '.2f')} / {_f(ba.output_tps, '.2f')}",
                 f"{_f(bb.input_tps, '.2f')} / {_f(bb.output_tps, '.2f')}", change])
    rows.append(_lat_row("TTFT mean / p95", ba.ttft, bb.ttft, "s", 1e-3))
    rows.append(_lat_row("TPOT mean / p95", ba.tpot, bb.tpot, "ms", 1.0))
    rows.append(_lat_row("E2E mean / p95", ba.e2e, bb.e2e, "s", 1e-3))
    rows.append(["Accept length", _f(a.accept.accept_len, ".2f") + _client_accept(a, " "),
                 _f(b.accept.accept_len, ".2f") + _client_accept(b, " "),
                 pct(a.accept.accept_len, b.accept.accept_len)])
    ca, cb = _counter_accept(a), _counter_accept(b)
    if ca is not None or cb is not None:
        rows.append(["Accept length (counters)", _f(ca, ".2f"), _f(cb, ".2f"), pct(ca, cb)])
    return rows, comparability(a, b)


def _counter_accept(s: RunSummary) -> float | None:
    """The token-weighted acceptance length from the servers' /metrics counters (pooled)."""
    sm = s.server_metrics
    return sm.pooled.accept_len if sm is not None and getattr(sm, "available", False) else None


def comparability(a: RunSummary, b: RunSummary) -> list[str]:
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


def compare(a: RunSummary, b: RunSummary, fmt: str = "md") -> str:
    """The seed's paired comparison of run A (baseline) and run B, with warnings below."""
    rows, warnings = compare_rows(a, b)
    headers = ["metric", a.mode or a.run_id, b.mode or b.run_id, "change"]
    if headers[1] == headers[2]:
        headers[1], headers[2] = a.run_id, b.run_id
    if fmt == "md":
        from tabulate import tabulate
        text = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                        colalign=("left", "right", "right", "right")) + "\n"
        return text + "".join(f"\n> warning: {w}" for w in warnings) + ("\n" if warnings else "")
    if fmt in ("csv", "json"):
        import pandas as pd
        df = pd.DataFrame(rows, columns=headers)
        if fmt == "csv":
            return df.to_csv(index=False, lineterminator="\n")
        import json
        return json.dumps({"rows": df.to_dict(orient="records"), "warnings": warnings},
                          indent=2) + "\n"
    raise ValueError(f"unknown format {fmt!r} (md, csv, json)")
