"""The page of a job of several passes (modes, repeats, a concurrency sweep in one job).

Reads the job's summary.json back into the collector's records (passes, launches; aggregates and
comparisons recomputed from them, the same pure functions the collector uses), its summary.md
(its tables, shown cell by cell), and each launch's raw files through rundir.open_run:
per-request latencies of every ok pass, events and decode samples for the per-launch plots.
"""
from __future__ import annotations

from pathlib import Path

from ..collect.records import CampaignSummary, LaunchSummary
from ..collect.rows import aggregates, comparisons, load_label, ok_rows, pass_rows
from ..collect.write import read_summary
from ..model.campaign import rate_text
from ..model.rundir import Layout, open_run, read_manifest
from . import markdown, series
from .html import makespan_note, answer_html, percentiles_html, esc, img, job_note, page, verdict_badge, verdict_legend
from .rundata import load
from .sides import pooled_curves


def sweep_points(job: CampaignSummary) -> list[dict]:
    """Per (mode, concurrency) aggregate: the primary throughput (steady state when the comparisons
    use it: `primary` says which), TPOT and TTFT means with 95% intervals, and the makespan
    throughput beside a steady-state one."""
    from .sides import steady_primary

    rows = pass_rows(job)
    steady = steady_primary(job, rows)
    pts = []
    for a in aggregates(rows):
        m = a.metrics
        tps, tpot, ttft = m["steady_output_tps" if steady else "output_tps"], m["tpot_mean_ms"], m["ttft_mean_s"]
        if tps.mean is None:
            continue
        p = {"mode": a.mode, "concurrency": a.concurrency, "output_tps": tps.mean,
             "tpot_ms": tpot.mean, "ttft_s": ttft.mean,
             "primary": "output tok/s, steady state" if steady else "output tok/s",
             **({"makespan_tps": m["output_tps"].mean} if steady else {})}
        for key, agg in (("output_tps", tps), ("tpot_ms", tpot), ("ttft_s", ttft)):
            if agg.ci_low is not None:
                p[f"{key}_lo"], p[f"{key}_hi"] = agg.ci_low, agg.ci_high
        pts.append(p)
    return pts


def campaign_context(run_dir: Path, job: CampaignSummary) -> str:
    """'tp32, tp32-dflash · 16384 -> 512 tokens · C=1,8 · 2 prompts per pass · Kimi-K3 · campaign <id>'."""
    m = read_manifest(run_dir)
    e = m.config if m is not None else None
    parts = [", ".join(job.campaign.modes) or "?"]
    if e is not None:
        parts.append(f"{e.benchmark.input_len} -> {e.benchmark.output_len} tokens")
    cs = sorted({p.ref.concurrency for p in job.passes})
    if cs:
        parts.append("C=" + ",".join(map(str, cs)))
    prompts = sorted({p.ref.prompts for p in job.passes if p.ref.prompts})
    if prompts:
        parts.append(f"{'/'.join(map(str, prompts))} prompts per pass")
    if e is not None and getattr(e.paths, "model", None):
        parts.append(str(e.paths.model).rstrip("/").rsplit("/", 1)[-1])
    parts.append(f"campaign {job.run_id}")
    return " · ".join(parts)


def goodput_rows(run_dir: Path, job: CampaignSummary) -> list[dict]:
    """Per (mode, load: concurrency or open-loop rate) the goodput of its ok passes (benchmark.slo),
    for fig_goodput."""
    m = read_manifest(run_dir)
    slo = dict(getattr(getattr(m.config, "benchmark", None), "slo", ()) or ()) if m and m.config else {}
    groups: dict = {}
    for r in ok_rows(pass_rows(job)):
        groups.setdefault((r.mode, r.rate is not None, r.rate or 0.0, r.concurrency), []).append(r)
    return series.goodput_rows([(f"{mo} {load_label(c, q if open_ else None)}", series.goodput_of_rows(rows, slo))
                                for (mo, open_, q, c), rows in sorted(groups.items())])


def campaign_plots(run_dir: Path, job: CampaignSummary) -> list[tuple[str, str, bytes]]:
    from ..ab_stats import METRIC_BY_NAME
    from . import plots
    from .sides import gpus_of, steady_primary, throughput_rows

    out = []
    ctx = campaign_context(run_dir, job)
    curves = pooled_curves(run_dir, job)
    if curves:
        out.append(("latency-cdf.png", "Per-request TTFT and E2E CDFs per mode and concurrency, the "
                    "ok passes pooled; markers at the pooled p50 (circle) and p95 (diamond)",
                    plots.png(plots.fig_cdfs(curves, context=ctx))))
        out.append(("decode-cdf.png", "TPOT per request and every inter-token latency per mode and "
                    "concurrency, the ok passes pooled; markers at p50 (circle) and p95 (diamond)",
                    plots.png(plots.fig_cdfs(curves, plots.DECODE_PANELS, context=ctx))))
    rows = pass_rows(job)
    metrics = series.STEADY_PASS_METRICS if steady_primary(job, rows) else series.PASS_METRICS
    strips = series.pass_strips(rows, metrics)
    if any(strips.values()):
        out.append(("passes.png", "Every timed pass per mode (and concurrency): a dot per pass, the "
                    "mean of the ok passes as a bar, failed passes as red crosses"
                    + ("; the steady-state output tok/s (the comparisons' primary metric) first, the makespan "
                       "figure beside it" if metrics is series.STEADY_PASS_METRICS else ""),
                    plots.png(plots.fig_pass_strips(strips, dict(metrics), context=ctx))))
    trows = throughput_rows(job, gpus_of(run_dir))
    pts = series.interactivity_points(trows)
    if pts:
        out.append(("interactivity.png", f"{pts[0].primary.capitalize()} per GPU against interactivity "
                    "(output tok/s per user = 1000 / TPOT mean), TTFT and E2E per mode and concurrency, the "
                    "ok passes' means; Pareto fronts dashed" + makespan_note(pts),
                    plots.png(plots.fig_interactivity(pts, left_out=tuple(series.left_out(trows)), context=ctx))))
    from ..tables.campaign import slo_target

    target = slo_target(job)
    load = series.load_points(rows)
    sweep = len({p.concurrency for p in load}) > 1
    good = goodput_rows(run_dir, job)
    if good and not sweep:
        out.append(("goodput.png", "SLO attainment (benchmark.slo) and goodput per mode and "
                    "concurrency, the ok passes' means"
                    + (f"; dotted: benchmark.slo_target_pct = {target:g}%" if target else ""),
                    plots.png(plots.fig_goodput(good, target_pct=target, context=ctx))))
    if sweep:
        best = series.highest_meeting(load, target or 100.0)
        out.append(("load.png", "Against concurrency, per mode: failed requests (% of the requests every "
                    "pass counted; a pass not ok ringed red)"
                    + (", the share of requests meeting every SLO of benchmark.slo (dotted: benchmark."
                       f"slo_target_pct = {target:g}%; starred: the highest C meeting it: "
                       + ", ".join(f"{m} {c if c is not None else 'none'}" for m, c in best.items())
                       + ") and the goodput, the ok passes' means" if good else
                       "; no SLOs set (benchmark.slo): no goodput"),
                    plots.png(plots.fig_load(load, target_pct=target, context=ctx))))
    for cmp in comparisons(job, rows):
        forest = [dict(r.to_dict(), label=METRIC_BY_NAME[r.metric].label if r.metric in METRIC_BY_NAME else r.metric)
                  for r in cmp.rows if r.delta.change_pct is not None]
        if forest:
            # one chart per load: open-loop passes all run at concurrency num_prompts, so a rate names it
            at = (f"c{cmp.concurrency}", f"concurrency {cmp.concurrency}") if cmp.rate is None else \
                (f"q{rate_text(cmp.rate)}", cmp.load)
            n = max((max(r.delta.n_a or 0, r.delta.n_b or 0) for r in cmp.rows), default=0)
            out.append((f"forest-{cmp.b}-vs-{cmp.a}-{at[0]}.png", f"{cmp.b} against {cmp.a} at {at[1]}: % change "
                        f"of each metric with its 95% interval (Welch on log values; passes per side up "
                        f"to {n}); the primary metric first; {verdict_legend()}",
                        plots.png(plots.fig_forest(forest, title=f"{cmp.b} vs {cmp.a}, {cmp.load}",
                                                   context=ctx))))
    sw = sweep_points(job)
    if len({p["concurrency"] for p in sw}) > 1:
        out.append(("sweep.png", f"Concurrency sweep: mean {sw[0]['primary']} against mean TPOT and TTFT "
                    "per mode, 95% intervals as bars, Pareto front dashed"
                    + ("; hollow markers: the makespan output tok/s" if "makespan_tps" in sw[0] else ""),
                    plots.png(plots.fig_sweep(sw, context=ctx))))
    for la in job.launches:
        out += launch_plots(run_dir, la, ctx)
    return out


def launch_plots(run_dir: Path, la: LaunchSummary, ctx: str) -> list[tuple[str, str, bytes]]:
    """A launch's job phases and decode samples, its failed passes marked."""
    from . import plots

    run = open_run(run_dir)
    launch = run.launch(la.launch)
    if launch is None or not run.launch_layout(launch).events.exists():
        return []
    files = load(run_dir, la.launch)
    tl = series.timeline(files)
    win = series.windows(files)
    lanes = series.phases(files)
    out = []
    failed = f"; {len(win['failed'])} failed pass(es) red" if win["failed"] else ""
    if lanes:
        out.append((f"launch{la.launch}-phases.png", f"Launch {la.launch} ({la.mode}, {la.status}): job phases"
                    + (" up to the failure (red)" if tl.failure is not None else "")
                    + "; each benchmark bar is one pass, named by its concurrency and repeat (C=1 r1)" + failed,
                    plots.png(plots.fig_phases(lanes, failure=tl.failure, end=series.job_end(files),
                                               failed=tuple(win["failed"]), xlabel=files.origin_label,
                                               labels=tuple(series.pass_labels(files)), context=ctx))))
    dec = series.decode_series(files)
    from ..parse.bench import read_last_record
    lay = run.launch_layout(launch)
    lat = series.pass_latencies(files, [(p.key, read_last_record(lay.bench(p.key)).record) for p in launch.passes])
    if any(x["t"] for x in dec.values()):
        out.append((f"launch{la.launch}-decode.png", f"Launch {la.launch} ({la.mode}): decode throughput"
                    + (" and accept length" if any(v is not None for x in dec.values() for v in x["accept"]) else "")
                    + " per replica on one y scale; every pass's client step shaded and named by its concurrency "
                    "and repeat" + failed + "; at the bottom each request's TTFT, E2E and TPOT at its start (the "
                    "client's replayed starts, each pass aligned on its first access line): drift and throttling",
                    plots.png(plots.fig_decode(dec, win, failure=tl.failure, xlabel=files.origin_label,
                                               labels=tuple(series.pass_labels(files)), latency=lat, context=ctx))))
    return out


def _tables_of(md: str) -> str:
    """summary.md from its title on: its answer lines and job note are drawn above, coloured."""
    lines = md.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("# ")), 0)
    return "\n".join(line for line in lines[start:] if not line.startswith("note: sacct"))


def render_campaign(run_dir: str | Path, *, base_dir: str | Path | None = None,
                    plots_out: list | None = None) -> str:
    from .html import links_of
    from .sides import mode_settings, settings_table

    run_dir = Path(run_dir)
    base = Path(base_dir) if base_dir is not None else run_dir
    job = read_summary(run_dir)
    try:
        md = Layout(run_dir).summary("md").read_text(errors="replace")
    except OSError:
        md = ""
    from .telemetry import profiles_html, telemetry_plots
    pl = campaign_plots(run_dir, job) + telemetry_plots(run_dir, job) if job else []
    if plots_out is not None:
        plots_out.extend(pl)
    rid = job.run_id if job else run_dir.name
    passes = job.passes if job else ()
    ok = sum(1 for p in passes if p.verdict == "ok")
    from ..tables.campaign import answers

    body = [answer_html(answers(job) if job else []), f"<h1>Campaign {esc(rid)}</h1>\n",
            f"<p>{verdict_badge(job.verdict if job else 'not collected')} {ok} of {len(passes)} timed passes ok; "
            f"job {esc(job.job_id if job and job.job_id else '?')} "
            f"({esc(((job.job.state_raw or job.job.state) if job else None) or 'state unknown')})</p>\n",
            job_note(job.job.note if job else None),
            f"<p class=\"muted\">Intervals: {esc(job.campaign.variance if job else '-')}</p>\n",
            "<h2>Results</h2>\n", markdown.to_html(_tables_of(md)) if md else "<p class=\"muted\">not collected yet</p>\n"]
    if job:                             # per (mode, C), the ok passes' requests pooled
        body.append(percentiles_html(pooled_curves(run_dir, job), " (the ok passes' requests pooled)"))
    bad = [p for p in passes if p.verdict != "ok"]
    if bad:
        body.append("<h2>Passes not ok</h2>\n<ul>" + "".join(
            f"<li>{esc(p.ref.mode)} {esc(p.ref.key)} (launch {esc(p.ref.launch)}): {esc(p.verdict)}"
            f"{': ' + esc(p.reasons[0]) if p.reasons else ''}</li>" for p in bad) + "</ul>\n")
    modes = mode_settings(run_dir)
    if len(modes) > 1:
        body.append("<h2>Settings of each mode</h2>\n" + settings_table(modes))
    body.append("<h2>Plots</h2>\n")
    body.extend(img(b, cap, name) for name, cap, b in pl)
    body.append(profiles_html(run_dir, job, base, links_of))
    body.append("<h2>Raw files</h2>\n")
    run = open_run(run_dir)
    for name, lay in [("campaign", run.layout)] + [(la.dir, run.launch_layout(run.launch(la.launch)))
                                                  for la in (job.launches if job else ()) if run.launch(la.launch)]:
        body.append(f"<h3>{esc(name)}</h3>\n" + links_of(lay.raw_files(), run_dir, base))
    return page(f"slurm-ab campaign: {rid}", "".join(body))
