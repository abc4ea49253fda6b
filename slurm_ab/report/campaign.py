"""The page of a campaign (several modes, repeats, a concurrency sweep in one job).

Reads the campaign collector's summary.json (passes, aggregates, comparisons) and summary.md
(its tables, shown cell by cell), and each launch directory's raw files: per-request latencies
of every ok pass (bench-<pass>.jsonl), events and decode samples for the per-launch plots.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..parse.bench import read_last_record
from ..parse.stats import percentile
from ..rundir import Layout
from . import markdown, series
from .html import esc, img, page, raw_files, verdict_badge, _rel
from .rundata import load


def _summary(run_dir: Path) -> dict:
    try:
        d = json.loads(Layout(run_dir).summary("summary.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def pass_key(row: dict) -> str:
    return f"c{row['concurrency']}-r{row['repeat']}"


def launch_dir(run_dir: Path, summary: dict, launch: int) -> Path | None:
    for la in summary.get("launches") or []:
        if la.get("launch") == launch:
            return run_dir / la["dir"]
    return None


def pooled_curves(run_dir: Path, summary: dict) -> list[dict]:
    """Per (mode, concurrency): the per-request latencies of its ok passes pooled, with pooled
    p50/p95 (the same linear percentile as the tables) for the CDF markers."""
    groups: dict = {}
    for row in summary.get("passes") or []:
        if row.get("verdict") != "ok":
            continue
        d = launch_dir(run_dir, summary, row.get("launch"))
        if d is None:
            continue
        lat = series.request_latencies(read_last_record(d / f"bench-{pass_key(row)}.jsonl").record)
        g = groups.setdefault((row["mode"], int(row["concurrency"])), {"ttft": [], "e2e": [], "n": 0})
        g["ttft"] += lat["ttft"]
        g["e2e"] += lat["e2e"]
        g["n"] += 1
    out = []
    for (mode, c), g in groups.items():
        if not g["ttft"]:
            continue
        curve = {"label": f"{mode} C={c} ({g['n']} passes)"}
        for key in ("ttft", "e2e"):
            xs = sorted(g[key])
            curve[key] = series.cdf_points(xs)
            curve[f"{key}_p"] = {"p50": percentile(xs, 50), "p95": percentile(xs, 95)}
        out.append(curve)
    return out


def sweep_points(summary: dict) -> list[dict]:
    """Per (mode, concurrency) aggregate: throughput, TPOT and TTFT means with 95% intervals."""
    pts = []
    for a in summary.get("aggregates") or []:
        m = a.get("metrics") or {}
        tps, tpot, ttft = m.get("output_tps") or {}, m.get("tpot_mean_ms") or {}, m.get("ttft_mean_s") or {}
        if tps.get("mean") is None:
            continue
        p = {"mode": a["mode"], "concurrency": a["concurrency"], "output_tps": tps["mean"],
             "tpot_ms": tpot.get("mean"), "ttft_s": ttft.get("mean")}
        for key, agg in (("output_tps", tps), ("tpot_ms", tpot), ("ttft_s", ttft)):
            if agg.get("ci_low") is not None:
                p[f"{key}_lo"], p[f"{key}_hi"] = agg["ci_low"], agg["ci_high"]
        pts.append(p)
    return pts


def campaign_plots(run_dir: Path, summary: dict) -> list[tuple[str, str, bytes]]:
    from ..ab_stats import METRIC_BY_NAME
    from . import plots

    out = []
    curves = pooled_curves(run_dir, summary)
    if curves:
        out.append(("latency-cdf.png", "Per-request TTFT and E2E CDFs per mode and concurrency, the "
                    "ok passes pooled; markers at the pooled p50 (circle) and p95 (diamond)",
                    plots.png(plots.fig_cdfs(curves))))
    for cmp in summary.get("comparisons") or []:
        rows = [dict(r, label=METRIC_BY_NAME[r["metric"]].label if r["metric"] in METRIC_BY_NAME else r["metric"])
                for r in cmp.get("metrics") or [] if r.get("change_pct") is not None]
        if rows:
            name = f"forest-{cmp['b']}-vs-{cmp['a']}-c{cmp['concurrency']}.png"
            n = max((max(r.get("n_a") or 0, r.get("n_b") or 0) for r in rows), default=0)
            out.append((name, f"{cmp['b']} against {cmp['a']} at concurrency {cmp['concurrency']}: % change "
                        f"of each metric with its 95% interval (Welch on log values; passes per side up "
                        f"to {n}); green better, red worse, grey no significant difference",
                        plots.png(plots.fig_forest(rows, title=f"{cmp['b']} vs {cmp['a']}, C={cmp['concurrency']}"))))
    pts = sweep_points(summary)
    if len({p["concurrency"] for p in pts}) > 1:
        out.append(("sweep.png", "Concurrency sweep: mean output throughput against mean TPOT and TTFT "
                    "per mode, 95% intervals as bars, Pareto front dashed", plots.png(plots.fig_sweep(pts))))
    for la in summary.get("launches") or []:
        d = run_dir / la["dir"]
        if not Layout(d).events.exists():
            continue
        run = load(d)
        tl = series.timeline(run)
        win = series.windows(run)
        lanes = series.phases(run)
        tag = f"launch{la['launch']}"
        if lanes:
            out.append((f"{tag}-phases.png", f"Launch {la['launch']} ({la['mode']}, {la['status']}): job phases"
                        + (" up to the failure (red)" if tl.failure is not None else "")
                        + "; each benchmark bar is one pass",
                        plots.png(plots.fig_phases(lanes, failure=tl.failure, end=series.job_end(run),
                                                   xlabel=run.origin_label))))
        dec = series.decode_series(run)
        if any(x["t"] for x in dec.values()):
            out.append((f"{tag}-decode.png", f"Launch {la['launch']} ({la['mode']}): decode throughput"
                        + (" and accept length" if any(v is not None for x in dec.values() for v in x["accept"]) else "")
                        + " per replica; every pass's benchmark window shaded",
                        plots.png(plots.fig_decode(dec, win, failure=tl.failure, xlabel=run.origin_label))))
    return out


def render_campaign(run_dir: str | Path, *, base_dir: str | Path | None = None,
                    plots_out: list | None = None) -> str:
    run_dir = Path(run_dir)
    base = Path(base_dir) if base_dir is not None else run_dir
    summary = _summary(run_dir)
    try:
        md = Layout(run_dir).summary("summary.md").read_text(errors="replace")
    except OSError:
        md = ""
    pl = campaign_plots(run_dir, summary) if summary else []
    if plots_out is not None:
        plots_out.extend(pl)
    rid = summary.get("run_id") or run_dir.name
    rows = summary.get("passes") or []
    ok = sum(1 for r in rows if r.get("verdict") == "ok")
    verdict = "ok" if rows and ok == len(rows) else ("failed" if not ok else "invalid")
    body = [f"<h1>Campaign {esc(rid)}</h1>\n",
            f"<p>{verdict_badge(verdict)} {ok} of {len(rows)} timed passes ok; "
            f"job {esc(summary.get('job_id') or '?')} ({esc(summary.get('job_state') or 'state unknown')})</p>\n",
            f"<p class=\"muted\">Intervals: {esc(summary.get('variance') or '-')}</p>\n",
            "<h2>Results</h2>\n", markdown.to_html(md) if md else "<p class=\"muted\">not collected yet</p>\n"]
    bad = [r for r in rows if r.get("verdict") != "ok"]
    if bad:
        body.append("<h2>Passes not ok</h2>\n<ul>" + "".join(
            f"<li>{esc(r['mode'])} {esc(pass_key(r))} (launch {esc(r.get('launch'))}): {esc(r.get('verdict'))}"
            f"{': ' + esc(r['reason']) if r.get('reason') else ''}</li>" for r in bad) + "</ul>\n")
    body.append("<h2>Plots</h2>\n")
    body.extend(img(b, cap, name) for name, cap, b in pl)
    body.append("<h2>Raw files</h2>\n")
    for d in [run_dir] + [run_dir / la["dir"] for la in summary.get("launches") or []]:
        files = raw_files(d) if d.is_dir() else []
        files += [p for p in sorted(d.glob("bench-*.jsonl")) + sorted(d.glob("logs/client-*.log")) if p not in files]
        items = "".join(f'<li><a href="{esc(_rel(p, base))}">{esc(p.relative_to(run_dir))}</a></li>' for p in files)
        body.append(f"<h3>{esc(d.relative_to(run_dir) if d != run_dir else 'campaign')}</h3>\n<ul class=\"files\">{items}</ul>\n")
    return page(f"slurm-ab campaign: {rid}", "".join(body))
