"""One run's tables: the seed's main row (one per run in `slurm-ab report`), a run's summary.md,
and what the CLI prints after collecting it.

Units follow the seed: TTFT and E2E in seconds with 2 decimals, TPOT in ms, TPS with 2 decimals.
"""
from __future__ import annotations

from typing import Sequence

from ..collect.records import Latency, PassSummary
from ..collect.rows import NUMBERLESS, numeric_row
from .metrics import metrics_md, metrics_report_md, tpot_cell
from .pd import pd_lines, pd_md
from .telemetry import telemetry_lines, telemetry_md
from .table import DASH, Table, num, numeric_frame, wrap

MAIN_COLUMNS = ("Mode", "Input TPS", "Output TPS", "TTFT mean / p95", "TPOT mean / p95",
                "E2E mean / p95", "Duration", "Requests ok/total", "Accept len / rate",
                "Verdict")


def _pair(lat: Latency | None, unit: str, scale: float) -> str:
    if lat is None:
        return DASH
    return f"{num(lat.mean, '.2f', unit, scale)} / {num(lat.p95, '.2f', unit, scale)}"


GOODPUT = "SLOs met / goodput"


def main_row(s: PassSummary) -> dict[str, str]:
    """One run in the seed's layout; the verdict as its word (its reasons go below the table)."""
    row = {c: DASH for c in MAIN_COLUMNS}
    row["Mode"] = s.mode or s.run_id
    row["Verdict"] = s.verdict
    if s.verdict in NUMBERLESS:
        return row
    b = s.bench
    row["Input TPS"] = num(b.input_tps, ".2f")
    row["Output TPS"] = num(b.output_tps, ".2f")
    row["TTFT mean / p95"] = _pair(b.ttft, "s", 1e-3)
    row["TPOT mean / p95"] = _pair(b.tpot, "ms", 1.0)
    row["E2E mean / p95"] = _pair(b.e2e, "s", 1e-3)
    row["Duration"] = num(b.duration_s, ".2f", "s")
    if b.completed is not None or b.total is not None:
        row["Requests ok/total"] = f"{num(b.completed, 'd')}/{num(b.total, 'd')}"
    if s.accept.accept_len is not None:
        row["Accept len / rate"] = f"{s.accept.accept_len:.2f} / " + \
            num(s.accept.accept_rate, ".3f") + _client_accept(s, " ")
    elif s.bench.accept_length:
        row["Accept len / rate"] = _client_accept(s, "")
    return row


def goodput_cell(s: PassSummary) -> str:
    """'92.5% / 2.85 req/s': the share of requests meeting every SLO of benchmark.slo and the good
    requests per second ('-' without SLOs or numbers)."""
    g = s.bench.goodput
    if g is None or s.verdict in NUMBERLESS:
        return DASH
    return f"{g.attainment:.1%} / {num(g.goodput_rps, '.2f', ' req/s')}"


def workload(s: PassSummary) -> str:
    """'random-ids 16384->512, C=8, 40 prompts': what the run benchmarked."""
    sp = s.spec
    lens = f" {sp.input_len}->{sp.output_len}" if sp.input_len and sp.output_len else ""
    return (f"{sp.dataset or '?'}{lens}, C={sp.max_concurrency if sp.max_concurrency is not None else '?'}, "
            f"{sp.num_prompts if sp.num_prompts is not None else '?'} prompts")


def reason_lines(summaries: Sequence[PassSummary], width: int | None = None) -> list[str]:
    """Below a table of runs: each run's first reason, '- <run>: <verdict>: <reason>' (how many
    more there are: its summary lists them)."""
    return [wrap(f"- {s.run_id}: {s.verdict}: {s.reasons[0]}"
                 + (f" (+{len(s.reasons) - 1} more in its summary)" if len(s.reasons) > 1 else ""), width, "    ")
            for s in summaries if s.reasons]


def _client_accept(s: PassSummary, sep: str) -> str:
    """The client's own accept length, beside the decode-log figure: it is the first worker's
    lifetime average (warm-ups included), the decode log's samples are the window's."""
    return f"{sep}(client {s.bench.accept_length:.2f})" if s.bench.accept_length else ""


def pooled_lines(s: PassSummary) -> list[str]:
    """What the decode samples and the client say about acceptance and KV pressure (summary.md)."""
    a = s.accept
    lines = [f"Decode samples pooled over replicas (one PP stage): {a.decode_samples}, "
             f"of which with accept figures: {a.samples}"
             + (f"; accept len {a.accept_len:.2f}, accept rate {num(a.accept_rate, '.3f')}"
                if a.accept_len is not None else "")]
    if s.bench.accept_length:
        lines.append(f"Client's accept length (first worker's lifetime average, warm-ups "
                     f"included): {s.bench.accept_length:.2f}")
    events = sum(r.retractions for r in s.replicas)
    if events:
        lines.append(f"KV-cache retractions: {events} "
                     f"({sum(r.retracted_requests for r in s.replicas)} requests recomputed)")
    return lines


def runs_table(summaries: Sequence[PassSummary], dates: Sequence[str] | None = None) -> Table:
    """All runs in the seed's layout, one row each (the run id tells two runs of a mode apart);
    a history (`dates`: when each was submitted) adds its date and workload after the run; the
    goodput column when any run has SLOs."""
    rows = [main_row(s) for s in summaries]
    good = any(s.bench.goodput is not None for s in summaries)
    head = ("Run",) + (("Submitted", "Workload") if dates is not None else ())
    cols = MAIN_COLUMNS[:-1] + ((GOODPUT,) if good else ()) + MAIN_COLUMNS[-1:]
    body = [[s.run_id] + ([d, workload(s)] if dates is not None else [])
            + [r[c] for c in MAIN_COLUMNS[:-1]] + ([goodput_cell(s)] if good else []) + [r["Verdict"]]
            for s, r, d in zip(summaries, rows, dates if dates is not None else [None] * len(rows))]
    return Table.of(head + cols, body, ("left",) * (len(head) + 1) + ("right",) * (len(cols) - 2) + ("left",))


def runs_text(summaries: Sequence[PassSummary], fmt: str = "md", width: int | None = None,
              dates: Sequence[str] | None = None) -> str:
    """`slurm-ab report`: the runs' table with each run's reasons below and the server-metrics rows
    ('md'; `width`: fitted to a terminal) or their numeric rows ('csv', 'json')."""
    if fmt == "md":
        reasons = reason_lines(summaries, width)
        table = runs_table(summaries, dates)
        if width is not None:                       # a terminal: the verdict beside the mode
            table = table.moved("Verdict", "Mode")
        return (table.text(width) + "\n" + ("\n" + "\n".join(reasons) + "\n" if reasons else "")
                + metrics_report_md(summaries, width))
    return numeric_frame([numeric_row(s) for s in summaries], fmt)


def _per_request(r) -> str:
    """A replica's decode-line speed per running request: 'mean ± sd' ('-' without lines)."""
    if r.speed_mean is None:
        return "-"
    return f"{r.speed_mean:.1f}" + (f" ± {r.speed_sd:.1f}" if r.speed_sd is not None else "")


def run_md(s: PassSummary) -> str:
    """A run's summary.md: verdict and reasons, its row, replicas, server metrics, notes."""
    lines = [f"# {s.run_id}", "", f"Verdict: **{s.verdict}**", ""]
    lines += [f"- {r}" for r in s.reasons] + ([""] if s.reasons else [])
    lines += [(runs_table([s]).md() + "\n" + metrics_report_md([s])).rstrip("\n"), ""]
    speed = _server_latency(s)
    rep = [[r.name, r.decode_samples, num(r.accept_len, ".2f"), num(r.accept_rate, ".3f"),
            num(r.gen_throughput, ".2f"), _per_request(r), *([speed[r.replica]] if speed else []),
            "-" if r.requests_served is None else f"{r.requests_served} ({r.requests_source})",
            "yes" if r.warmup_seen else "no", r.warmup] for r in s.replicas]
    if rep:
        lines += ["## Replicas", "", Table.of(
            ["replica", "decode samples", "accept len", "accept rate", "gen tok/s", "tok/s per request",
             *(["TPOT mean / p50 / p95 (server)"] if speed else []),
             "requests", "warm-up", "warm-up evidence"], rep).md(), ""]
        lines += ["tok/s per request: each decode line's gen throughput / #running-req, mean ± sd "
                  "(the decode speed of its nodes; the slow-replica rule compares it).", ""]
        if speed:
            metric = next(m.tpot.metric for m in s.server_metrics.replicas if m.tpot)
            lines += [f"TPOT (server) per replica: {metric} over the benchmark window; the mean "
                      "is exact, p50/p95 are the histogram buckets they fall in.", ""]
    metrics = metrics_md(s)
    lines += [metrics] if metrics else []
    pd = pd_md(s)
    lines += [pd] if pd else []
    tel = telemetry_md(s)
    lines += [tel] if tel else []
    lines += [*pooled_lines(s),
              f"Benchmark window: {s.window[0] or '?'} .. {s.window[1] or '?'}"
              + (" (all samples counted)" if s.all_samples else ""),
              f"Latency source: {s.bench.latency_source or '-'}", ""]
    if s.findings:
        lines += ["## Diagnosis", ""]
        lines += [f"- `{f.file}:{f.line}` {f.kind}: {f.excerpt}" for f in s.findings]
        lines.append("")
    if s.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in s.notes] + [""]
    return "\n".join(lines)


def _server_latency(s: PassSummary) -> dict:
    """replica -> 'mean / p50 / p95' of its server-side TPOT ({} when no replica has one)."""
    sm = s.server_metrics
    by = {m.replica: m.tpot for m in (sm.replicas if sm is not None else ()) if m.tpot}
    if not by:
        return {}
    return {r.replica: tpot_cell(by.get(r.replica)) for r in s.replicas}


def run_text(summary: PassSummary, width: int | None = None, answer=None, paint=None) -> str:
    """What the CLI prints after collecting: the answer line (given), the run's row, the percentile
    table per metric, its verdict and reasons, acceptance; `width`: fitted to a terminal."""
    lines = [answer.text(width, paint)] if answer is not None else []
    from .percentiles import dist_table, summary_rows

    pct = dist_table(summary_rows(summary.mode or summary.run_id, summary.bench)
                     if summary.verdict not in NUMBERLESS else [], width)
    lines += [runs_table([summary]).text(width), metrics_report_md([summary], width).strip("\n"),
              pct.strip("\n"), f"verdict: {summary.verdict}"]
    lines = [x for x in lines if x]
    lines += [wrap(f"  - {r}", width, "    ") for r in summary.reasons]
    if summary.job.note:
        lines.append(wrap(f"note: {summary.job.note}", width))
    if summary.accept and summary.accept.samples:
        who = "the decode instances" if summary.pd is not None else "both replicas"
        lines.append(wrap(f"accept length {summary.accept.accept_len:.2f}, rate "
                          f"{summary.accept.accept_rate or 0:.3f} over {summary.accept.samples} decode "
                          f"samples of {who} "
                          f"({'whole logs' if summary.all_samples else 'benchmark window only'})", width))
    return "\n".join(lines + [wrap(x, width) for x in pd_lines(summary) + telemetry_lines(summary)])
