"""The page of a campaign (several modes, repeats, a concurrency sweep in one job).

Reads the campaign collector's summary.json (passes, aggregates, comparisons) and summary.md
(its tables, shown cell by cell), and each launch directory's raw files: per-request latencies
of every ok pass (bench-<pass>.jsonl), events and decode samples for the per-launch plots.
"""
from __future__ import annotations

from pathlib import Path

from ..model.rundir import Layout
from . import markdown, series
from .html import esc, img, page, raw_files, verdict_badge, _rel
from .rundata import load
from .sides import launch_dir, pass_key, pooled_curves, read_summary  # noqa: F401  (this page's data)


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


def campaign_context(run_dir: Path, summary: dict) -> str:
    """'tp32, tp32-dflash · 16384 -> 512 tokens · C=1,8 · 2 prompts per pass · Kimi-K3 · campaign <id>'."""
    from ..model.rundir import read_manifest
    m = read_manifest(run_dir)
    e = m.config if m is not None else None
    camp = summary.get("campaign") or {}
    parts = [", ".join(camp.get("modes") or []) or "?"]
    if e is not None:
        parts.append(f"{e.benchmark.input_len} -> {e.benchmark.output_len} tokens")
    cs = sorted({int(r["concurrency"]) for r in summary.get("passes") or []})
    if cs:
        parts.append("C=" + ",".join(map(str, cs)))
    prompts = sorted({r.get("prompts") for r in summary.get("passes") or [] if r.get("prompts")})
    if prompts:
        parts.append(f"{'/'.join(map(str, prompts))} prompts per pass")
    if e is not None and getattr(e.paths, "model", None):
        parts.append(str(e.paths.model).rstrip("/").rsplit("/", 1)[-1])
    parts.append(f"campaign {summary.get('run_id') or run_dir.name}")
    return " · ".join(parts)


def goodput_rows(run_dir: Path, summary: dict) -> list[dict]:
    """Per (mode, concurrency) the goodput of its ok passes (benchmark.slo), for fig_goodput."""
    from ..model.rundir import read_manifest
    m = read_manifest(run_dir)
    slo = dict(getattr(getattr(m.config, "benchmark", None), "slo", ()) or ()) if m and m.config else {}
    groups: dict = {}
    for r in summary.get("passes") or []:
        if r.get("verdict") == "ok":
            groups.setdefault((r["mode"], int(r["concurrency"])), []).append(r)
    return series.goodput_rows([(f"{mo} C={c}", series.goodput_of_rows(rows, slo))
                                for (mo, c), rows in sorted(groups.items())])


def campaign_plots(run_dir: Path, summary: dict) -> list[tuple[str, str, bytes]]:
    from ..ab_stats import METRIC_BY_NAME
    from . import plots
    from .sides import gpus_of

    out = []
    ctx = campaign_context(run_dir, summary)
    curves = pooled_curves(run_dir, summary)
    if curves:
        out.append(("latency-cdf.png", "Per-request TTFT and E2E CDFs per mode and concurrency, the "
                    "ok passes pooled; markers at the pooled p50 (circle) and p95 (diamond)",
                    plots.png(plots.fig_cdfs(curves, context=ctx))))
        out.append(("decode-cdf.png", "TPOT per request and every inter-token latency per mode and "
                    "concurrency, the ok passes pooled; markers at p50 (circle) and p95 (diamond)",
                    plots.png(plots.fig_cdfs(curves, plots.DECODE_PANELS, context=ctx))))
    strips = series.pass_strips(summary.get("passes") or [])
    if any(strips.values()):
        out.append(("passes.png", "Every timed pass per mode (and concurrency): a dot per pass, the "
                    "mean of the ok passes as a bar, failed passes as red crosses",
                    plots.png(plots.fig_pass_strips(strips, dict(series.PASS_METRICS), context=ctx))))
    pts = series.interactivity_points([
        {"label": a["mode"], "concurrency": a["concurrency"], "gpus": gpus_of(run_dir),
         "output_tps": ((a.get("metrics") or {}).get("output_tps") or {}).get("mean"),
         "tpot_ms": ((a.get("metrics") or {}).get("tpot_mean_ms") or {}).get("mean"),
         "verdict": "ok" if a.get("passes_ok") == a.get("passes") else "invalid"}
        for a in summary.get("aggregates") or []])
    if pts:
        out.append(("interactivity.png", "Throughput per GPU against interactivity (output tok/s per "
                    "user = 1000 / TPOT mean) per mode and concurrency, the ok passes' means; the "
                    "Pareto front dashed", plots.png(plots.fig_interactivity(pts, context=ctx))))
    good = goodput_rows(run_dir, summary)
    if good:
        out.append(("goodput.png", "SLO attainment (benchmark.slo) and goodput per mode and "
                    "concurrency, the ok passes' means", plots.png(plots.fig_goodput(good, context=ctx))))
    for cmp in summary.get("comparisons") or []:
        rows = [dict(r, label=METRIC_BY_NAME[r["metric"]].label if r["metric"] in METRIC_BY_NAME else r["metric"])
                for r in cmp.get("metrics") or [] if r.get("change_pct") is not None]
        if rows:
            name = f"forest-{cmp['b']}-vs-{cmp['a']}-c{cmp['concurrency']}.png"
            n = max((max(r.get("n_a") or 0, r.get("n_b") or 0) for r in rows), default=0)
            out.append((name, f"{cmp['b']} against {cmp['a']} at concurrency {cmp['concurrency']}: % change "
                        f"of each metric with its 95% interval (Welch on log values; passes per side up "
                        f"to {n}); green better, red worse, blue equivalent within the margin, grey no significant "
                        "difference or descriptive",
                        plots.png(plots.fig_forest(rows, title=f"{cmp['b']} vs {cmp['a']}, C={cmp['concurrency']}",
                                                   context=ctx))))
    sw = sweep_points(summary)
    if len({p["concurrency"] for p in sw}) > 1:
        out.append(("sweep.png", "Concurrency sweep: mean output throughput against mean TPOT and TTFT "
                    "per mode, 95% intervals as bars, Pareto front dashed",
                    plots.png(plots.fig_sweep(sw, context=ctx))))
    for la in summary.get("launches") or []:
        out += launch_plots(run_dir, la, ctx)
    return out


def launch_plots(run_dir: Path, la: dict, ctx: str) -> list[tuple[str, str, bytes]]:
    """A launch's job phases and decode samples, its failed passes marked."""
    from . import plots

    d = run_dir / la["dir"]
    if not Layout(d).events.exists():
        return []
    run = load(d)
    tl = series.timeline(run)
    win = series.windows(run)
    lanes = series.phases(run)
    tag = f"launch{la['launch']}"
    out = []
    failed = f"; {len(win['failed'])} failed pass(es) red" if win["failed"] else ""
    if lanes:
        out.append((f"{tag}-phases.png", f"Launch {la['launch']} ({la['mode']}, {la['status']}): job phases"
                    + (" up to the failure (red)" if tl.failure is not None else "")
                    + "; each benchmark bar is one pass" + failed,
                    plots.png(plots.fig_phases(lanes, failure=tl.failure, end=series.job_end(run),
                                               failed=tuple(win["failed"]), xlabel=run.origin_label,
                                               context=ctx))))
    dec = series.decode_series(run)
    if any(x["t"] for x in dec.values()):
        out.append((f"{tag}-decode.png", f"Launch {la['launch']} ({la['mode']}): decode throughput"
                    + (" and accept length" if any(v is not None for x in dec.values() for v in x["accept"]) else "")
                    + " per replica on one y scale; every pass's client step shaded" + failed,
                    plots.png(plots.fig_decode(dec, win, failure=tl.failure, xlabel=run.origin_label,
                                               context=ctx))))
    return out


def render_campaign(run_dir: str | Path, *, base_dir: str | Path | None = None,
                    plots_out: list | None = None) -> str:
    run_dir = Path(run_dir)
    base = Path(base_dir) if base_dir is not None else run_dir
    summary = read_summary(run_dir)
    try:
        md = Layout(run_dir).summary("summary.md").read_text(errors="replace")
    except OSError:
        md = ""
    pl = campaign_plots(run_dir, summary) if summary else []
    if plots_out is not None:
        plots_out.extend(pl)
    from .sides import campaign_verdict, mode_settings, settings_table

    rid = summary.get("run_id") or run_dir.name
    rows = summary.get("passes") or []
    ok = sum(1 for r in rows if r.get("verdict") == "ok")
    verdict = campaign_verdict(rows)
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
    modes = mode_settings(run_dir)
    if len(modes) > 1:
        body.append("<h2>Settings of each mode</h2>\n" + settings_table(modes))
    body.append("<h2>Plots</h2>\n")
    body.extend(img(b, cap, name) for name, cap, b in pl)
    body.append("<h2>Raw files</h2>\n")
    for d in [run_dir] + [run_dir / la["dir"] for la in summary.get("launches") or []]:
        files = raw_files(d) if d.is_dir() else []
        files += [p for p in sorted(d.glob("bench-*.jsonl")) + sorted(d.glob("logs/client-*.log")) if p not in files]
        items = "".join(f'<li><a href="{esc(_rel(p, base))}">{esc(p.relative_to(run_dir))}</a></li>' for p in files)
        body.append(f"<h3>{esc(d.relative_to(run_dir) if d != run_dir else 'campaign')}</h3>\n<ul class=\"files\">{items}</ul>\n")
    return page(f"slurm-ab campaign: {rid}", "".join(body))
