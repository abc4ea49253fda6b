"""One self-contained HTML page per run, per set of runs, per comparison.

No script, no external resource: CSS inline, plots as PNG data URIs, links to the run's raw
files as relative paths (from where the page is written). Tables are the collector's markdown
(summary.md, or the text `report`/`compare` print), converted cell by cell, so every value is
the same text as in the markdown.
"""
from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from ..collect.records import JobInfo, PassSummary
from ..collect.rows import PassRow, columns
from ..model.experiment import Experiment
from ..model.rundir import RELATIVE, Layout, Manifest
from . import markdown, series
from .rundata import RunFiles, load

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1180px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}
h3{font-size:15px} table{border-collapse:collapse;margin:8px 0 14px;font-size:12.5px;display:block;overflow-x:auto}
th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top} th{background:#f3f3f3;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap} code,pre{font:12px ui-monospace,Menlo,Consolas,monospace}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:600;color:#fff;background:#757575}
section.answers{margin:0 0 14px} .answer{border-left:6px solid #757575;background:#fafafa;padding:6px 10px;margin:4px 0;font-size:15px}
.answer .word{display:inline-block;padding:1px 8px;border-radius:4px;font-weight:600;color:#fff;margin-right:4px}
.answer .basis{color:#555;font-size:13px}
img.plot{max-width:100%;border:1px solid #e5e5e5;margin:6px 0} .muted{color:#666;font-size:12.5px} p.warn{color:#8a4b00}
dl.prov{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px} dl.prov dt{color:#555} dl.prov dd{margin:0}
ul.files{columns:3;font-size:12.5px} .hl{background:#ffebee}
"""


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def data_uri(png_bytes: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")


def img(png_bytes: bytes, alt: str, name: str = "") -> str:
    return (f'<figure><img class="plot" alt="{esc(alt)}" data-plot="{esc(name)}" '
            f'src="{data_uri(png_bytes)}"><figcaption class="muted">{esc(alt)}</figcaption></figure>\n')


def _run_css() -> str:
    """The verdict badges' colours: a job's verdict, as the answer lines have them."""
    from ..tables.answer import RUN_COLOURS
    return "".join(f".v-{v}{{background:{c}}} " for v, c in RUN_COLOURS.items()) + "\n"


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{esc(title)}</title>"
            f"<style>{CSS}{_run_css()}</style></head>\n<body>\n{body}</body></html>\n")


def answer_html(answers) -> str:
    """The answer lines (tables.answer.Answer) as the first thing of a page: the verdict coloured by
    its kind (a comparison's: better, worse, equivalent, ...; a job's: ok, failed, ...), the
    statement, what it rests on."""
    if not answers:
        return ""
    items = "".join(
        f'<div class="answer" data-kind="{esc(a.kind)}" style="border-left-color:{esc(a.colour)}">'
        f'<span class="word" style="background:{esc(a.colour)}">{esc(a.verdict)}</span> '
        f"<strong>{esc(a.subject)}</strong>: {esc(a.statement)}; "
        f'<span class="basis">rests on {esc(a.basis)}</span></div>\n' for a in answers)
    return f'<section class="answers">\n{items}</section>\n'


def job_note(note: str | None) -> str:
    """The collector's note on the job's Slurm record (sacct answered for another job: ignored)."""
    return f'<p class="warn">note: {esc(note)}</p>\n' if note else ""


def verdict_badge(v: str) -> str:
    return f'<span class="verdict v-{esc(v)}">{esc(v)}</span>'


def _rel(target: Path, base_dir: Path) -> str:
    return os.path.relpath(target.resolve(), base_dir.resolve()).replace(os.sep, "/")


# ---- pieces of a run's page ---------------------------------------------------------------------

def links_of(files: list[Path], run_dir: Path, base_dir: Path) -> str:
    """Links to files of a run directory (named relative to it) from a page in base_dir."""
    items = "".join(f'<li><a href="{esc(_rel(p, base_dir))}">{esc(p.relative_to(run_dir))}</a></li>'
                    for p in files)
    return f'<ul class="files">{items}</ul>\n' if items else "<p class=\"muted\">no files</p>\n"


def links(run: RunFiles, base_dir: Path) -> str:
    """The pass's files worth a link: the job's, then its launch's (raw logs, summaries)."""
    files = Layout(run.run_dir).raw_files()
    if run.launch_dir is not None:
        files += [p for p in Layout(run.launch_dir).raw_files() if p not in files]
    return links_of(files, run.run_dir, base_dir)


def flag_rows(exp: Experiment | None) -> list[tuple[str, str]]:
    """One (role, flags) row per role of the run's mode: its SGLang flags exactly as the job
    script's srun line of that role has them (the one merge per role: Experiment.role_flags)."""
    if exp is None:
        return []
    from ..job.plan import server_flags_text
    return [(r.name, server_flags_text(exp, r.name)) for r in exp.mode.roles]


def provenance(run: RunFiles) -> str:
    m, s = run.manifest or Manifest(), run.summary
    exp = m.config
    bench = exp.benchmark if exp is not None else None
    job = s.job if s is not None else JobInfo()
    nodes = job.node_lists or m.nodes or {}
    state = job.state_raw or job.state or "-"
    rows = [
        ("run", run.run_id), ("mode", f"{run.mode}  {m.mode_description or (s.label if s else None) or ''}"),
        ("job id", m.job_id or job.job_id or "-"),
        ("Slurm state", state + (f", elapsed {job.elapsed_s:.0f} s" if job.elapsed_s is not None else "")),
        ("nodes", "; ".join(f"replica {k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in sorted(nodes.items())) or "-"),
        *([(f"flags ({role})", text) for role, text in flag_rows(exp)] or [("flags", "-")]),
        ("benchmark", ", ".join(f"{k}={getattr(bench, k)}" for k in ("dataset", "input_len", "output_len",
                                                                     "concurrency", "num_prompts", "backend")
                                if bench is not None and getattr(bench, k) is not None) or "-"),
        ("prompts", _prompts(s, bench)),
        ("client", _client(exp, run)),
        ("model", (getattr(exp.paths, "model", None) if exp is not None else None) or "-"),
        ("versions", ", ".join(f"{k} {v}" for k, v in m.versions.items() if k != "git_commit" and v) or "-"),
        ("git commit", m.versions.get("git_commit") or m.extra.get("git_commit") or "-"),
        ("submitted", f"{m.submitted_at or '-'} by {m.submitted_by or '?'} on {m.submit_host or '?'}"),
    ]
    return '<dl class="prov">' + "".join(f"<dt>{esc(k)}</dt><dd><code>{esc(v)}</code></dd>" for k, v in rows) + "</dl>\n"


def _prompts(summary: PassSummary | None, bench) -> str:
    """The prompts' lengths as the servers counted them (per-request details)."""
    p = summary.bench.prompt_tokens if summary is not None else None
    if p is None or not p.n:
        return "-"
    return (f"{(bench.dataset if bench is not None else None) or '?'}: {p.n} prompts, {p.mean:,.0f} tokens "
            f"on average ({p.min:,}-{p.max:,})")


def _client(exp: Experiment | None, run: RunFiles) -> str:
    """The client profile and the version of its module that the preflight found on ROUTER_HOST."""
    from ..parse.preflight import ran_on, read_reports

    client = exp.client if exp is not None else None
    modules = ran_on(read_reports(Layout(run.run_dir).preflight_reports())).get("modules", {})
    module = (client.module if client else "") or next((m for m in modules if m.startswith("sglang.bench")), "")
    version = modules.get(module)
    text = f"{module} {version}" if version else (f"{module} (version not recorded)" if module else "-")
    return f"{client.profile}: {text}" if client and client.profile else text


def _context(run_dir: Path, rel: str, line: int, around: int = 3) -> str:
    """Lines line-around .. line+around of a raw file (the finding's line highlighted)."""
    path = run_dir / rel
    out, lo, hi = [], max(1, line - around), line + around
    try:
        with open(path, "rb") as f:
            for no, raw in enumerate(f, 1):
                if no > hi:
                    break
                if no >= lo:
                    text = raw.decode("utf-8", "replace").rstrip("\r\n")[:400]
                    cls = ' class="hl"' if no == line else ""
                    out.append(f"<span{cls}>{no:>6}  {esc(text)}</span>")
    except OSError:
        return ""
    return "<pre>" + "\n".join(out) + "</pre>\n"


WITH_CONTEXT = 3


# Kinds that healthy runs log too: evidence when a reason cites them, never a cause by themselves
# (NCCL's "NET/IB : No device found" on a site without InfiniBand, the steps Slurm cancels when
# the job tears down, a start-up retry, a capped or full KV pool).
ROUTINE_KINDS = ("nccl_net", "slurm_cancelled", "srun_error", "connection_refused", "kv_capped", "kv_pressure")


def rank_findings(findings, reasons, verdict: str) -> tuple[list, list]:
    """(abnormal, routine): the findings the verdict's reasons cite first (in the reasons'
    order), then root causes (parse.diagnose.ROOT_CAUSE_KINDS' order), then the other signatures,
    by time; routine lines (ROUTINE_KINDS: also in healthy runs) apart, unless a reason cites
    them or the verdict is Slurm's cancellation they explain."""
    from ..parse.diagnose import ROOT_CAUSE_KINDS

    def cited(f):
        tag = f"[{f.file}:{f.line}]"
        return next((i for i, r in enumerate(reasons) if tag in r), None)

    def routine(f):
        if cited(f) is not None:
            return False
        if f.kind == "slurm_cancelled":
            return verdict != "cancelled"
        return f.kind in ROUTINE_KINDS

    def key(f):
        c = cited(f)
        root = ROOT_CAUSE_KINDS.index(f.kind) if f.kind in ROOT_CAUSE_KINDS else len(ROOT_CAUSE_KINDS)
        return (c if c is not None else len(reasons), root, f.ts.timestamp() if f.ts else float("inf"))
    abnormal = sorted((f for f in findings if not routine(f)), key=key)
    return abnormal, sorted((f for f in findings if routine(f)), key=key)


def diagnosis(run: RunFiles, base_dir: Path) -> str:
    """The findings of a run's logs, what is abnormal for this run first (rank_findings): the first
    ones with their log lines, the others listed; the routine lines last, said to be routine."""
    findings = run.summary.findings if run.summary is not None else ()
    if not findings:
        return ""
    abnormal, routine = rank_findings(findings, run.reasons, run.verdict)
    parts = ["<h2>Diagnosis</h2>\n"]
    if not abnormal:
        parts.append('<p class="muted">No line of the logs explains the verdict; the lines below are '
                     "routine (healthy runs log them too).</p>\n")
    rest = []

    def where(f):
        rel, line = str(f.file or ""), f.line or 0
        href = _rel(run.run_dir / rel, base_dir) if rel else ""
        return f'<a href="{esc(href)}">{esc(rel)}</a>:{esc(line)}'
    for k, f in enumerate(abnormal):
        if k >= WITH_CONTEXT:     # the first findings with their log lines, the others listed
            rest.append(f"<li>{esc(f.kind)}: {where(f)} {esc(f.excerpt or '')}</li>")
            continue
        parts.append(f"<h3>{esc(f.kind)}: {where(f)}</h3>\n<p>{esc(f.excerpt or '')}</p>\n")
        if f.file and (f.line or 0) > 0:
            parts.append(_context(run.run_dir, str(f.file), f.line))
    if rest:
        parts.append("<h3>Other findings</h3>\n<ul>" + "".join(rest) + "</ul>\n")
    if routine:
        parts.append('<h3 class="routine">Routine lines (healthy runs log them too: not a cause here)</h3>\n'
                     '<ul class="routine">' + "".join(f"<li>{esc(f.kind)}: {where(f)} {esc(f.excerpt or '')}</li>"
                                                       for f in routine) + "</ul>\n")
    return "".join(parts)


# ---- plots of one run -----------------------------------------------------------------------------

def cdf_curve(run: RunFiles, label: str | None = None) -> dict:
    from .sides import run_curve
    return run_curve(run, label)


def run_plots(run: RunFiles) -> list[tuple[str, str, bytes]]:
    """(file name, caption, PNG) of every plot of one run. Time axes start at the first request
    (series.clock); the client's measured benchmark is the dark band, its step's window light."""
    from . import plots

    out = []
    ctx = series.run_context(run)
    curve = cdf_curve(run)
    if curve["ttft"][0]:
        out.append(("latency-cdf.png", "Per-request TTFT and E2E CDFs; markers at the table's p50 "
                    "(circle) and p95 (diamond)", plots.png(plots.fig_cdfs([curve], context=ctx))))
    if curve["tpot"][0]:
        out.append(("decode-cdf.png", "TPOT per request and every inter-token latency (ms), CDFs; "
                    "markers at p50 (circle) and p95 (diamond)",
                    plots.png(plots.fig_cdfs([curve], plots.DECODE_PANELS, context=ctx))))
    good = series.goodput_rows([(run.mode, run.summary.bench.goodput if run.summary else None)])
    if good:
        target = run.summary.spec.slo_target_pct if run.summary else None
        out.append(("goodput.png", "Requests meeting benchmark.slo (all SLOs, and each alone) and good "
                    "requests per second (sglang's --goodput definitions, from the per-request details)"
                    + (f"; dotted: benchmark.slo_target_pct = {target:g}%" if target else ""),
                    plots.png(plots.fig_goodput(good, target_pct=target, context=ctx))))
    tl = series.timeline(run)
    clk = series.clock(run, tl)
    win = series.shift_windows(series.windows(run), clk)
    span = series.bench_span(run, clk)
    stl = series.shift_timeline(tl, clk)
    if tl.requests:
        lat = series.timeline_latencies(stl, run.record) if tl.concurrency else None
        cap = (f"Request timeline ({len(tl.requests)} requests; {tl.method}"
               + (f"; largest start residual {tl.residual_ms:.0f} ms" if tl.residual_ms is not None else "")
               + "). Black ticks: arrival at the server (each request's own access line). Below: requests "
               "in flight" + ("; then each request's TTFT, E2E and TPOT at its start (drift, throttling)" if lat
                              else "") + ".")
        out.append(("request-timeline.png", cap,
                    plots.png(plots.fig_timeline(stl, title=f"Request timeline: {run.run_id}",
                                                 windows={"benchmark": win["benchmark"], "failed": win["failed"]},
                                                 bench=span, xlabel=clk.label, context=ctx,
                                                 server_flight=series.server_in_flight(run, clk)
                                                 if not tl.concurrency else None, latency=lat))))
    mt = series.metrics_over_time(run, clk)
    if mt:
        out.append(("server-metrics.png", "Per replica over the benchmark, from its /metrics scrapes: "
                    "requests in flight (HTTP), running and queued, and the fullest stage's KV-cache "
                    "usage (docs/metrics.md); each value drawn as a step held until the next scrape (markers: "
                    "the scrapes)",
                    plots.png(plots.fig_metrics_time(mt, windows={"benchmark": win["benchmark"],
                                                                  "failed": win["failed"]},
                                                     bench=span, failure=stl.failure, xlabel=clk.label,
                                                     context=ctx))))
    rt = series.replica_tpot(run)
    if rt:
        out.append(("replica-tpot.png", "Per replica: TPOT over the benchmark window from each "
                    f"replica's own /metrics ({rt[0].metric}): the mean (exact) and the buckets its "
                    "p50 and p95 fall in; dashed/dotted: the client's pooled TPOT mean/p95, which "
                    "mixes the replicas",
                    plots.png(plots.fig_replica_tpot(rt, run.summary.bench.tpot if run.summary else None,
                                                     context=ctx))))
    dec = series.decode_series(run)
    if any(d["t"] for d in dec.values()):
        dec = {g: dict(d, t=[clk.at(t) for t in d["t"]]) for g, d in dec.items()}
        out.append(("decode.png", "Per replica: decode throughput" +
                    (" and accept length" if any(v is not None for d in dec.values() for v in d["accept"]) else "")
                    + " over time from the Decode batch samples of node rank 0, one y scale for all "
                    "replicas; lines break where samples pause",
                    plots.png(plots.fig_decode(dec, win, failure=stl.failure, bench=span,
                                               xlabel=clk.label, context=ctx))))
    lanes = series.phases(run)
    if lanes:
        lanes = [(n, [(ph, clk.at(s), clk.at(e)) for ph, s, e in spans]) for n, spans in lanes]
        cap = f"Job phases from {RELATIVE.events}" + (" up to the failure (red)" if tl.failure is not None else "")
        end = series.job_end(run)
        out.append(("phases.png", cap, plots.png(plots.fig_phases(
            lanes, failure=stl.failure, end=clk.at(end), failed=tuple(win["failed"]),
            xlabel=clk.label + (" (negative: before it)" if clk.t0 else ""), context=ctx))))
    return out


def render_run(run_dir: str | Path, *, base_dir: str | Path | None = None,
               plots_out: list | None = None) -> str:
    """The page of one run; base_dir is where the page will live (for relative links).
    plots_out, if given, receives the (name, caption, png) list for writing PNG files."""
    from ..collect.write import read_summary
    from .telemetry import profiles_html, telemetry_plots

    run = load(run_dir)
    base = Path(base_dir) if base_dir is not None else run.run_dir
    job = read_summary(run.run_dir)
    pl = run_plots(run) + telemetry_plots(run.run_dir, job)
    if plots_out is not None:
        plots_out.extend(pl)
    body = [f"<h1>{esc(run.run_id)} <span class=\"muted\">({esc(run.mode)})</span></h1>\n",
            f"<p>Verdict: {verdict_badge(run.verdict)}</p>\n"]
    if run.reasons:
        body.append("<ul class=\"reasons\">" + "".join(f"<li>{esc(r)}</li>" for r in run.reasons) + "</ul>\n")
    body.append(job_note(run.summary.job.note if run.summary else None))
    body.append("<h2>Results</h2>\n")
    body.append(markdown.to_html(_without_reasons(run.summary_md)) if run.summary_md
                else f"<p class=\"muted\">not collected yet (no {RELATIVE.summary('md')})</p>\n")
    body.append(percentiles_html([cdf_curve(run)]))
    body.append("<h2>Provenance</h2>\n" + provenance(run))
    body.append(diagnosis(run, base))
    body.append("<h2>Plots</h2>\n")
    body.extend(img(b, cap, name) for name, cap, b in pl)
    if not pl:
        body.append("<p class=\"muted\">nothing to plot (no client details, access lines or events)</p>\n")
    body.append(profiles_html(run.run_dir, job, base, links_of))
    body.append("<h2>Raw files</h2>\n" + links(run, base))
    return page(f"slurm-ab: {run.run_id}", "".join(body))


def _without_reasons(md: str) -> str:
    """summary.md minus its title, verdict line, reasons and diagnosis (the page shows those itself,
    with context); its tables and notes stay as written."""
    out, skip = [], False
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## "):
            skip = line.strip() == "## Diagnosis"
        if skip:
            continue
        if line.startswith("# ") or line.startswith("Verdict: "):
            continue
        if line.startswith("- ") and not any(l.startswith("|") for l in lines[:i]):
            continue                                  # the reasons list before the first table
        out.append(line)
    return "\n".join(out)


# ---- several runs, comparisons ------------------------------------------------------------------

def render_runs(run_dirs, table_md: str, *, base_dir: str | Path = ".", title: str = "slurm-ab report",
                campaigns=()) -> str:
    """The history page: the runs' table, the campaigns (each linked to its page), latency CDFs
    over the runs, throughput per GPU against interactivity over runs and campaigns, then each
    run's verdict, reasons and files."""
    from . import plots
    from .sides import gpus_of, load_side

    runs = [load(d) for d in run_dirs]
    camps = [load_side(d) for d in campaigns]
    base = Path(base_dir)
    body = [f"<h1>{esc(title)}</h1>\n<h2>Runs</h2>\n", markdown.to_html(table_md)]
    if camps:
        body.append("<h2>Campaigns</h2>\n" + campaigns_table(camps, base))
    curves = [cdf_curve(r, r.run_id) for r in runs]
    curves = [c for c in curves if c["ttft"][0]]
    if curves:
        body.append("<h2>Latency distributions</h2>\n")
        body.append(img(plots.png(plots.fig_cdfs(curves)), "Per-request TTFT and E2E CDFs, one line per run; "
                        "markers at each run's p50 (circle) and p95 (diamond)", "latency-cdf"))
    rows = [dict(row, label=r.mode, line=None) for r in runs if r.verdict == "ok"     # runs: points alone
            for row in load_side(r.run_dir).interactivity_rows(gpus_of(r.run_dir))]
    rows += [dict(row, label=f"{row['label']} ({c.run_id})") for c in camps      # a line per campaign
             for row in c.interactivity_rows(gpus_of(c.run_dir))]
    pts = series.interactivity_points(rows)
    if pts:
        body.append("<h2>Throughput per GPU vs interactivity, TTFT and E2E</h2>\n")
        body.append(img(plots.png(plots.fig_interactivity(pts, left_out=tuple(series.left_out(rows)))),
                        f"{pts[0].primary.capitalize()} per GPU against output tok/s per user (1000 / TPOT "
                        "mean), TTFT and E2E means: every ok run (by mode; separate runs are points, never "
                        "joined) and every campaign's (mode, concurrency) means (a line per campaign and "
                        "mode); Pareto fronts dashed" + makespan_note(pts), "interactivity"))
    for r in runs:
        body.append(f"<h2>{esc(r.run_id)} ({esc(r.mode)}) {verdict_badge(r.verdict)}</h2>\n")
        if r.reasons:
            body.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in r.reasons[:3]) + "</ul>\n")
        rep = Layout(Path(r.run_dir)).report_html
        if rep.exists():
            body.append(f'<p><a href="{esc(_rel(rep, base))}">full report of this run</a></p>\n')
        body.append(links(r, base))
    return page(title, "".join(body))


def campaigns_table(camps, base: Path) -> str:
    """One row per campaign: its page, modes, concurrencies, ok passes, verdict."""
    rows = []
    for c in camps:
        passes = c.job.passes if c.job else ()
        rep = Layout(c.run_dir).report_html
        name = (f'<a href="{esc(_rel(rep, base))}">{esc(c.run_id)}</a>' if rep.exists() else esc(c.run_id))
        rows.append(f"<tr><td>{name}</td><td>{esc(', '.join(c.modes) or '-')}</td>"
                    f"<td class=\"n\">{esc(','.join(map(str, c.concurrencies)) or '-')}</td>"
                    f"<td class=\"n\">{sum(1 for p in passes if p.verdict == 'ok')}/{len(passes)}</td>"
                    f"<td>{verdict_badge(c.verdict)}</td><td>{esc((c.job.job_id if c.job else None) or '-')}</td></tr>\n")
    return ('<table class="campaigns"><thead><tr><th>Campaign</th><th>Modes</th><th>C</th>'
            "<th>Passes ok</th><th>Verdict</th><th>Job</th></tr></thead>\n<tbody>\n"
            + "".join(rows) + "</tbody></table>\n")


def forest_rows(a_rows: list[PassRow], b_rows: list[PassRow], primary: str | None = None) -> list[dict]:
    """The comparison's rows of two jobs (ab_stats.family: the primary first, the secondaries
    Holm-adjusted, verdicts '(separate jobs)'), with intervals when both sides have repeats."""
    from ..ab_stats.metrics import PRIMARY_DEFAULT
    from ..ab_stats.verdicts import ACROSS_JOBS
    from ..collect.rows import family
    (rows,) = family([(a_rows, b_rows)], primary or PRIMARY_DEFAULT, confound=ACROSS_JOBS)
    return [dict(r.to_dict(), label=r.label) for r in rows if r.delta.change_pct is not None]


def percentiles_html(curves: list[dict], at: str = "") -> str:
    """The percentile table per metric (tables.percentiles) of per-request CDF curves (sides.run_curve,
    pooled_curves): n, mean, p50/p90/p95/p99, min, max, std of TTFT, TPOT, ITL and E2E."""
    from ..tables.percentiles import percentile_table

    md = percentile_table([(c["label"], {k: (c.get(k) or ([], []))[0] for k in ("ttft", "tpot", "itl", "e2e")})
                           for c in curves])
    return f"<h2>Latency percentiles{esc(at)}</h2>\n" + markdown.to_html(md) if md else ""


def makespan_note(pts) -> str:
    """The throughput charts' words on the primary and the makespan figure beside it."""
    if any(p.makespan_gpu is not None for p in pts):
        return ("; y: the steady-state output tok/s, the comparison's primary metric; hollow markers: the "
                "makespan output tok/s (ramp-up and drain included) of the same points")
    return ""


def verdict_legend() -> str:
    """'green: B is better, red: B is worse, ...': the forest plot's colours (ab_stats.verdicts)."""
    from ..ab_stats.verdicts import KINDS
    names = {"#2e7d32": "green", "#c62828": "red", "#1565c0": "blue", "#616161": "dark grey", "#9e9e9e": "grey"}
    return "; ".join(f"{names.get(c, c)}: {what}" for what, c in KINDS.values())


def _passes(n: int) -> str:
    return f"{n} pass{'es' if n != 1 else ''}"


def render_compare(run_a, run_b, compare_md: str, *, base_dir: str | Path = ".",
                   forest: list[dict] | None = None, sweep: list[dict] | None = None,
                   forests: dict | None = None, answers: list | None = None) -> str:
    """Paired comparison of two runs or one-mode campaigns: the compare table, the settings side
    by side, latency and TPOT/ITL CDFs of both at each concurrency both ran (a campaign side: its
    ok passes at that C pooled), throughput per GPU against interactivity, the forest plot of %
    changes (with intervals when the sides have repeats: `forest` rows {metric, change_pct,
    ci_low_pct, ci_high_pct, verdict}, or `forests` per concurrency), sweep curves when given."""
    from . import plots
    from .sides import gpus_of, load_side, mode_settings, settings_table

    from ..tables.answer import pair_answers

    sa, sb = load_side(run_a), load_side(run_b)
    base = Path(base_dir)
    title = f"slurm-ab compare: {sa.run_id} vs {sb.run_id}"
    primary = sa.job.campaign.primary_metric if sa.job else None
    if answers is None:                 # `compare A B --html` gives the ones it printed
        answers = pair_answers(sa.run_id, sa.rows(), sb.run_id, sb.rows(), primary,
                               sa.job.campaign.margin_pct if sa.job else None)
    body = [answer_html(answers),
            f"<h1>{esc(title)}</h1>\n",
            f"<p>A: <code>{esc(sa.run_id)}</code> ({esc(', '.join(sa.modes))}, {_passes(sa.passes)}) "
            f"{verdict_badge(sa.verdict)} &nbsp; B: <code>{esc(sb.run_id)}</code> "
            f"({esc(', '.join(sb.modes))}, {_passes(sb.passes)}) {verdict_badge(sb.verdict)}</p>\n",
            "<h2>Paired comparison</h2>\n", markdown.to_html(compare_md)]
    ma, mb = mode_settings(sa.run_dir), mode_settings(sb.run_dir)
    if ma and mb:
        body.append("<h2>Settings side by side</h2>\n" + settings_table(
            {f"A: {next(iter(ma))}": next(iter(ma.values())), f"B: {next(iter(mb))}": next(iter(mb.values()))}))
    common = sorted(set(sa.concurrencies) & set(sb.concurrencies)) or [None]
    for c in common:
        curves = [x for x in (sa.curve(c, f"A {sa.run_id}"), sb.curve(c, f"B {sb.run_id}"))
                  if x and x.get("ttft") and x["ttft"][0]]
        if not curves:
            continue
        at = f" at concurrency {c}" if c is not None else ""
        body.append(percentiles_html(curves, at))
        body.append(img(plots.png(plots.fig_cdfs(curves)), f"Per-request TTFT and E2E CDFs of A and B{at}; "
                        "markers at p50 (circle) and p95 (diamond)", f"latency-cdf{'' if len(common) == 1 else f'-c{c}'}"))
        if all(x.get("tpot") and x["tpot"][0] for x in curves):
            body.append(img(plots.png(plots.fig_cdfs(curves, plots.DECODE_PANELS)), "TPOT per request and "
                            f"every inter-token latency of A and B{at}", f"decode-cdf{'' if len(common) == 1 else f'-c{c}'}"))
    good = series.goodput_rows([(f"{n}: {x.run_id}", series.goodput_of_rows(x.ok_rows(), x.slo_ms))
                                for n, x in (("A", sa), ("B", sb))])
    if good:
        body.append(img(plots.png(plots.fig_goodput(good)), "Requests meeting benchmark.slo and good "
                        "requests per second, A and B", "goodput"))
    rows = ([dict(r, label=f"A {r['label']}") for r in sa.interactivity_rows(gpus_of(sa.run_dir))]
            + [dict(r, label=f"B {r['label']}") for r in sb.interactivity_rows(gpus_of(sb.run_dir))])
    pts = series.interactivity_points(rows)
    if pts:
        body.append(img(plots.png(plots.fig_interactivity(pts, left_out=tuple(series.left_out(rows)))),
                        f"{pts[0].primary.capitalize()} per GPU against interactivity (1000 / TPOT mean), "
                        "TTFT and E2E of A and B, per concurrency (A's markers larger: a point under B's "
                        "stays visible); Pareto fronts dashed" + makespan_note(pts), "interactivity"))
    if forests is None:
        rows = forest if forest is not None else forest_rows(sa.ok_rows(), sb.ok_rows(), primary)
        forests = {None: rows} if rows else {}
    for c, rows in forests.items():
        if not rows:
            continue
        has_ci = any(r.get("ci_low_pct") is not None for r in rows)
        at = f", concurrency {c}" if c is not None else ""
        body.append(f"<h2>Change per metric{esc(at)}</h2>\n")
        body.append(img(plots.png(plots.fig_forest(rows, title=f"B against A{at}")),
                        "% change of B against A" + (" with 95% intervals (Welch, log scale)" if has_ci
                                                      else "; one pass per side, so no interval (inconclusive)")
                        + f"; the primary metric first; {verdict_legend()}",
                        "forest" if c is None else f"forest-c{c}"))
        body.append(markdown.table_html(["metric", "change", "95% interval", "verdict"], [
            [str(r.get("label") or r["metric"]), f"{r['change_pct']:+.2f}%",
             "-" if r.get("ci_low_pct") is None else f"{r['ci_low_pct']:+.2f}% .. {r['ci_high_pct']:+.2f}%",
             str(r.get("verdict") or "-")] for r in rows]))
    if sweep:
        body.append("<h2>Concurrency sweep</h2>\n")
        body.append(img(plots.png(plots.fig_sweep(sweep)), "Output throughput against TPOT and TTFT per "
                        "mode and concurrency, intervals as bars, Pareto front dashed", "sweep"))
    a, b = load(sa.run_dir), load(sb.run_dir)
    for r, name in ((a, "A"), (b, "B")):
        body.append(f"<h2>Raw files of {name}: {esc(r.run_id)}</h2>\n" + links(r, base))
    return page(title, "".join(body))
