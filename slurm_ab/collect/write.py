"""Write summary.json / .csv / .md into the run directory: atomic and idempotent.

Each file is written to a temporary name in the same directory and renamed over the old one, so
a reader never sees half a file; a file whose content would not change is not rewritten. No
collection timestamp is written, so the same inputs give byte-identical outputs. Raw files are
never opened for writing. A running job gets nothing (its numbers are not final).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..rundir import SUMMARY_FILES, Layout, write_atomic
from .metrics_tables import metrics_md
from .records import CampaignSummary, PassSummary, RunSummary
from .tables import main_row, pooled_lines, report


def render_json(s: RunSummary) -> str:
    return json.dumps(s.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"


def render_md(s: RunSummary) -> str:
    from tabulate import tabulate
    lines = [f"# {s.run_id}", "", f"Verdict: **{s.verdict}**", ""]
    lines += [f"- {r}" for r in s.reasons] + ([""] if s.reasons else [])
    lines += [report([s], "md").rstrip("\n"), ""]
    speed = _server_latency(s)
    rep = [[r.replica, r.decode_samples, _f(r.accept_len, ".2f"), _f(r.accept_rate, ".3f"),
            _f(r.gen_throughput, ".2f"), *([speed[r.replica]] if speed else []),
            "-" if r.requests_served is None else f"{r.requests_served} ({r.requests_source})",
            "yes" if r.warmup_seen else "no", r.warmup] for r in s.replicas]
    if rep:
        lines += ["## Replicas", "", tabulate(
            rep, headers=["replica", "decode samples", "accept len", "accept rate", "gen tok/s",
                          *(["TPOT mean / p50 / p95 (server)"] if speed else []),
                          "requests", "warm-up", "warm-up evidence"],
            tablefmt="github", disable_numparse=True), ""]
        if speed:
            metric = next(m.tpot.metric for m in s.server_metrics.replicas if m.tpot)
            lines += [f"TPOT (server) per replica: {metric} over the benchmark window, in ms; "
                      "p50/p95 interpolated inside the histogram's buckets.", ""]
    metrics = metrics_md(s)
    lines += [metrics] if metrics else []
    lines += [*pooled_lines(s),
              f"Benchmark window: {s.window[0] or '?'} .. {s.window[1] or '?'}"
              + (" (all samples counted)" if s.all_samples else ""),
              f"Latency source: {s.bench.latency_source or '-'}", ""]
    if s.findings:
        lines += ["## Diagnosis", ""]
        lines += [f"- `{f['file']}:{f['line']}` {f['kind']}: {f['excerpt']}" for f in s.findings]
        lines.append("")
    if s.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in s.notes] + [""]
    return "\n".join(lines)


def _f(x, fmt):
    return "-" if x is None else f"{x:{fmt}}"


def _server_latency(s: RunSummary) -> dict:
    """replica -> 'mean / p50 / p95' of its server-side TPOT ({} when no replica has one)."""
    sm = s.server_metrics
    by = {m.replica: m.tpot for m in (sm.replicas if sm is not None else ()) if m.tpot}
    if not by:
        return {}
    return {r.replica: "-" if by.get(r.replica) is None else
            " / ".join(_f(x, ".1f") for x in (by[r.replica].mean_ms, by[r.replica].p50_ms,
                                               by[r.replica].p95_ms))
            for r in s.replicas}


def write_summary(cs: CampaignSummary | PassSummary, run_dir: str | Path) -> list[Path]:
    """Write the three summary files of a run (its one pass) or a campaign (every pass, the
    aggregates and comparisons); return those that changed ([] for a running job)."""
    if cs.verdict == "running":
        return []
    if isinstance(cs, CampaignSummary) and not cs.single:
        from .campaign import result_dict, write_campaign
        return write_campaign(result_dict(cs), run_dir)
    s = cs.only if isinstance(cs, CampaignSummary) else cs
    lay = Layout(Path(run_dir))
    texts = {"summary.json": render_json(s), "summary.csv": report([s], "csv"),
             "summary.md": render_md(s)}
    return [lay.summary(n) for n, t in texts.items() if write_atomic(lay.summary(n), t)]


__all__ = ["write_summary", "render_json", "render_md", "SUMMARY_FILES", "main_row"]
