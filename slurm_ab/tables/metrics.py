"""The server-metrics tables (summary.md, `slurm-ab report`) beside the decode-log figures:
counter-based vs log-based acceptance, window counters, gauge peaks, per pipeline stage."""
from __future__ import annotations

from ..collect.histograms import HistogramWindow
from ..collect.server_metrics import ServerMetrics
from .table import Table

HEADERS = ("replica", "accept len log / counters", "diff", "accept rate log / counters",
           "gen tokens", "verify calls", "in flight peak / mean", "running peak / mean",
           "queued peak / mean", "KV usage peak", "retracted peak",
           "requests router / counter / access log")


def tpot_cell(w: HistogramWindow | None) -> str:
    """'mean / p50 / p95' of a server latency histogram: the mean exact, each quantile as the
    bucket it falls in (the histogram knows nothing finer)."""
    if w is None or w.mean_ms is None:
        return "-"
    return f"{w.mean_ms:.1f} ms / {w.bucket_text('p50')} / {w.bucket_text('p95')}"


def _f(x, fmt: str = ".2f") -> str:
    return "-" if x is None else f"{x:{fmt}}"


def _g(x) -> str:
    return "-" if x is None else f"{x:g}"


def metrics_rows(sm: ServerMetrics, log_rates: dict, names: dict | None = None) -> list[list[str]]:
    rows = []
    for r in sm.replicas:
        rows.append([
            (names or {}).get(r.replica, str(r.replica)), f"{_f(r.log_accept_len)} / {_f(r.accept_len)}",
            "-" if r.diff_pct is None else f"{r.diff_pct:+.1f}%",
            f"{_f(log_rates.get(r.replica), '.3f')} / {_f(r.accept_rate, '.3f')}",
            _g(r.gen_tokens), _g(r.verify_calls),
            f"{_g(r.in_flight_peak)} / {_f(r.in_flight_mean, '.1f')}",
            f"{_g(r.running_peak)} / {_f(r.running_mean, '.1f')}",
            f"{_g(r.queued_peak)} / {_f(r.queued_mean, '.1f')}", _f(r.kv_usage_peak, ".3f"),
            _g(r.retracted_peak),
            f"{_g(r.router_requests)} / {_g(r.requests if r.exposed else None)} / "
            f"{_g(r.access_requests)}"])
    p = sm.pooled
    rows.append(["pooled", f"{_f(p.log_accept_len)} / {_f(p.accept_len)}",
                 "-" if p.diff_pct is None else f"{p.diff_pct:+.1f}%",
                 f"{_f(log_rates.get('pooled'), '.3f')} / {_f(p.accept_rate, '.3f')}",
                 _g(p.gen_tokens), _g(p.verify_calls), f"{_g(p.in_flight_peak)} / -",
                 f"{_g(p.running_peak)} / -",
                 f"{_g(p.queued_peak)} / -", _f(p.kv_usage_peak, ".3f"), _g(p.retracted_peak),
                 f"- / {_g(p.requests)} / -"])
    return rows


def metrics_md(summary) -> str:
    """The '## Server metrics' section of summary.md ('' without metrics)."""
    sm = getattr(summary, "server_metrics", None)
    if sm is None or not sm.available:
        return ""
    rates = {r.replica: r.accept_rate for r in summary.replicas}
    rates["pooled"] = summary.accept.accept_rate
    lines = ["## Server metrics (/metrics counters over the benchmark window)", "",
             Table.of(HEADERS, metrics_rows(sm, rates, {r.replica: r.name for r in summary.replicas})).md(), "",
             "Accept len from counters = delta sglang:generation_tokens_total / delta "
             "sglang:spec_verify_calls_total (token-weighted); from the log = mean of the "
             "'Decode batch' samples. In flight: HTTP requests open on node rank 0; pooled "
             "peaks sum the replicas scrape round by scrape round (docs/metrics.md).", ""]
    lines += stage_md(sm)
    if sm.checks:
        lines += ["Checks:", ""] + [f"- {c}" for c in sm.checks] + [""]
    return "\n".join(lines)


def stage_md(sm: ServerMetrics) -> list[str]:
    """Per pipeline stage (PP > 1): KV usage peak of each stage's own pool, and the micro-batch
    num_running_reqs shows (not the replica's running requests)."""
    reps = [r for r in sm.replicas if len(r.kv_stage_peaks) > 1 or r.micro_batch_peak is not None]
    if not reps:
        return []
    stages = sorted({st for r in reps for st, _ in r.kv_stage_peaks})
    rows = [[str(r.replica), *[_f(dict(r.kv_stage_peaks).get(st), ".3f") for st in stages],
             _g(r.micro_batch_peak), r.running_source or "-"] for r in reps]
    return ["KV usage peak per pipeline stage (each stage's own pool) and the largest micro-batch "
            "a stage reported (sglang:num_running_reqs under PP):", "",
            Table.of(["replica", *[f"PP{st}" for st in stages], "micro-batch peak",
                      "running requests from"], rows).md(), ""]


def metrics_report_md(summaries, width: int | None = None) -> str:
    """One pooled server-metrics row per run, below the main table ('' when no run has any)."""
    have = [s for s in summaries if getattr(s, "server_metrics", None) is not None
            and s.server_metrics.available]
    if not have:
        return ""
    rows = []
    for s in have:
        p = s.server_metrics.pooled
        rows.append([s.run_id, s.mode or "-",
                     f"{_f(p.log_accept_len)} / {_f(p.accept_len)}",
                     "-" if p.diff_pct is None else f"{p.diff_pct:+.1f}%",
                     _g(p.running_peak), _g(p.queued_peak), _f(p.kv_usage_peak, ".3f"),
                     _g(p.retracted_peak)])
    return "\n" + Table.of(["Run", "Mode", "Accept len log / counters", "diff", "Running peak",
                            "Queued peak", "KV usage peak", "Retracted peak"], rows).text(width) + "\n"
