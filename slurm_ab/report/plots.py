"""matplotlib figures of one run (Agg backend; this module is imported lazily).

Each fig_* function takes plain data (slurm_ab.report.series) and returns a Figure, so tests can
inspect the artists; png() turns one into deterministic PNG bytes (no timestamp metadata). Figures
are drawn for slides: 150 dpi, 10-12 pt text at 11 in wide, the run's context (mode, ISL -> OSL,
C, prompts, model) as a header line, legends beside the axes (never over the curves), panels that
are compared sharing their y scale, lines broken at gaps. Comparison charts: charts.py.
"""
from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..model.rundir import RELATIVE
from .figstyle import (DPI, FAILED, PHASE_COLORS, fig_axes as _fig, left_out_note, legend_beside,  # noqa: F401
                       nan_gaps as _nan, png, replica_color, series_color, shade as _shade, styled,
                       window_handles as _window_handles)

# ---- latency distributions --------------------------------------------------------------------

LATENCY_PANELS = (("ttft", "TTFT (per request)", "s"), ("e2e", "E2E latency (per request)", "s"))
DECODE_PANELS = (("tpot", "TPOT (per request)", "ms"), ("itl", "Inter-token latency (every gap)", "ms"))
LOG_TAIL = 20.0     # a panel whose largest value exceeds its median that many times: log x axis
SLO_OF = {"e2e": "e2el"}   # a panel's key -> its benchmark.slo key (sglang's --goodput names)


@styled
def fig_cdfs(curves: list[dict], panels=LATENCY_PANELS) -> Figure:
    """curves: {label, <key>: (xs_ms, ys), <key>_p: {p50, p95}} for each panel key.

    One panel per metric, one line per run; p50 and p95 marked on each line (the tables'
    figures). Panels in s or ms (values come in ms). Legend below the panels."""
    fig, axes = _fig(4.6, 1, len(panels))
    handles = []
    for ax, (key, title, unit) in zip(axes, panels):
        k = 1000.0 if unit == "s" else 1.0
        for i, c in enumerate(curves):
            xs, ys = c.get(key) or ([], [])
            if not xs:
                continue
            col = series_color(i)
            ps = c.get(f"{key}_p") or {}
            line, = ax.plot([x / k for x in xs], ys, color=col, lw=1.8)
            for q, marker in (("p50", "o"), ("p95", "D")):
                v = ps.get(q)
                if v is not None:
                    ax.plot([v / k], [0.5 if q == "p50" else 0.95], marker=marker, color=col,
                            ms=7, mec="black", mew=0.6, ls="none", gid=f"{key}-{q}-{i}")
            if ax is axes[0]:
                handles.append(Line2D([], [], color=col, lw=1.8, label=c["label"]))
        for y in (0.5, 0.95):
            ax.axhline(y, color="#bbbbbb", lw=0.8, ls=":")
        slo = next((c["slo"][SLO_OF.get(key, key)] for c in curves
                    if (c.get("slo") or {}).get(SLO_OF.get(key, key)) is not None), None)
        if slo is not None:
            ax.axvline(slo / k, color="#2e7d32", lw=1.4, ls="--", gid=f"slo-{key}")
            if not any(h.get_label() == "SLO" for h in handles):
                handles.append(Line2D([], [], color="#2e7d32", ls="--", label="SLO"))
        ax.set_title(title)
        tails = [c.get(key)[0] for c in curves if c.get(key) and c.get(key)[0]]
        if not tails:
            ax.text(0.5, 0.5, "no data: not in the client's stored per-request details", ha="center",
                    va="center", transform=ax.transAxes, color="#555555", wrap=True)
        else:                               # a curve without this panel's data is named, not dropped
            left_out_note(ax, [c["label"] for c in curves if not (c.get(key) and c.get(key)[0])],
                          "no data (not in the stored per-request details) for", top=True)
        if tails and all(x[0] > 0 for x in tails) and \
                max(x[-1] / x[len(x) // 2] for x in tails if x[len(x) // 2] > 0) > LOG_TAIL:
            ax.set_xscale("log")
            unit += ", log scale"
        ax.set_xlabel(unit)
        ax.set_ylabel("fraction")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    handles += [Line2D([], [], marker="o", color="#555555", mec="black", ls="none", label="p50"),
                Line2D([], [], marker="D", color="#555555", mec="black", ls="none", label="p95")]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), frameon=False)
    return fig


# ---- per-request latency over time --------------------------------------------------------------

def draw_latencies(ax, points) -> list:
    """series.LatencyPoint on one panel: TTFT and E2E (s, left axis) and TPOT (ms, right axis) of
    each request at its start, E2E's running median over 9 requests of its pass as a line (broken
    between passes); returns the legend handles."""
    pts = sorted(points, key=lambda p: p.t)
    ax.plot([p.t for p in pts], [p.e2e_ms / 1000 for p in pts], ls="none", marker="o", ms=3.5, color="#1f77b4",
            alpha=0.75, gid="latency-e2e")
    ax.plot([p.t for p in pts], [p.ttft_ms / 1000 for p in pts], ls="none", marker="^", ms=3.5, color="#ff7f0e",
            alpha=0.75, gid="latency-ttft")
    if len(pts) >= 9:                  # per pass: a line never joins two passes
        import statistics
        xs: list = []
        ys: list = []
        for lab in dict.fromkeys(p.label for p in pts):
            mine = [p for p in pts if p.label == lab]
            xs += [p.t for p in mine] + [float("nan")]
            ys += [statistics.median(p.e2e_ms for p in mine[max(0, k - 4):k + 5]) / 1000
                   for k in range(len(mine))] + [float("nan")]
        ax.plot(xs, ys, color="#1f77b4", lw=1.2, gid="latency-e2e-median")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("latency (s)")
    tp = [p for p in pts if p.tpot_ms is not None]
    handles = [Line2D([], [], ls="none", marker="o", color="#1f77b4", label="E2E per request"),
               Line2D([], [], ls="none", marker="^", color="#ff7f0e", label="TTFT per request")]
    if tp:
        tw = ax.twinx()
        tw.plot([p.t for p in tp], [p.tpot_ms for p in tp], ls="none", marker="s", ms=3, color="#2ca02c", alpha=0.75,
                gid="latency-tpot")
        tw.set_ylim(bottom=0)
        tw.set_ylabel("TPOT (ms)", color="#2ca02c")
        tw.spines["right"].set_visible(True)
        handles.append(Line2D([], [], ls="none", marker="s", color="#2ca02c", label="TPOT per request (ms)"))
    if len(pts) >= 9:
        handles.append(Line2D([], [], color="#1f77b4", lw=1.2, label="E2E running median (9)"))
    if not pts:
        ax.text(0.5, 0.5, "no per-request details from the client", ha="center", va="center", transform=ax.transAxes,
                color="#555555")
    ax.grid(alpha=0.3)
    return handles


# ---- request timeline ---------------------------------------------------------------------------

@styled
def fig_timeline(tl, *, title: str = "", windows: dict | None = None, bench: tuple | None = None,
                 xlabel: str = "seconds since the first request", server_flight: list | None = None,
                 latency: list | None = None) -> Figure:
    """One bar per request (start -> first token light, first token -> end solid), coloured by
    replica (grey: not known), arrival ticks from the access lines; requests in flight below (the
    client's; without its details the servers' HTTP in-flight gauge, else a note); each request's
    latency at its start at the bottom (`latency`: series.LatencyPoint; drift and throttling)."""
    n = len(tl.requests)
    fig, axes = _fig(3.6 + min(n, 160) * 0.055 + (1.6 if latency else 0), 3 if latency else 2, sharex=True,
                     gridspec_kw={"height_ratios": [3, 1, 1.5] if latency else [3, 1]})
    ax, axc = axes[0], axes[1]
    for a in axes:
        _shade(a, windows, bench)
    for y, r in enumerate(tl.requests):
        col = replica_color(r.replica)
        if r.first_token is not None:
            ax.barh(y, r.first_token - r.start, left=r.start, height=0.8, color=col, alpha=0.35,
                    gid=f"wait-{r.index}")
        if r.end is not None and r.first_token is not None:
            ax.barh(y, r.end - r.first_token, left=r.first_token, height=0.8, color=col,
                    gid=f"req-{r.index}")
        else:
            ax.plot([r.start], [y], marker=">", color=col, ls="none", gid=f"req-{r.index}")
        if r.arrival is not None:
            ax.plot([r.arrival, r.arrival], [y - 0.45, y + 0.45], color="black", lw=0.8)
    for a in (ax, axc):
        if tl.failure is not None:
            a.axvline(tl.failure, color=FAILED, lw=1.5, ls="--")
    reps = sorted({r.replica for r in tl.requests}, key=lambda g: (g is None, g))
    handles = [Patch(color=replica_color(g), label=f"replica {g}" if g is not None else "replica unknown")
               for g in reps]
    handles.append(Patch(facecolor="#888888", alpha=0.35, label="to first token"))
    handles.append(Line2D([], [], color="black", lw=0.8, label="arrival (server)"))
    ax.set_ylabel("request (by start)")
    ax.set_ylim(-1, max(n, 1))
    ax.set_title(title or "Request timeline")
    ax.grid(axis="x", alpha=0.3)
    if tl.concurrency:
        axc.step([t for t, _ in tl.concurrency], [c for _, c in tl.concurrency], where="post",
                 color="black", lw=1.4, gid="concurrency")
    elif server_flight:
        axc.plot([t for t, _ in server_flight], [n for _, n in server_flight], color="#9e9e9e", lw=2,
                 marker="s", ms=4, drawstyle="steps-post", gid="server-in-flight")
        handles.append(Line2D([], [], color="#9e9e9e", lw=2, marker="s", label="in flight (servers' /metrics)"))
    else:
        axc.text(0.5, 0.5, "requests in flight unknown: no client output (no request's end)",
                 ha="center", va="center", transform=axc.transAxes, color="#555555")
    if latency:
        handles += draw_latencies(axes[2], latency)
    legend_beside(fig, handles + _window_handles(windows, bench, tl.failure))
    axc.set_ylabel("in flight")
    axc.set_ylim(bottom=0)
    axc.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    axes[-1].set_xlabel(xlabel)
    axc.grid(alpha=0.3)
    return fig


# ---- decode samples -----------------------------------------------------------------------------

@styled
def fig_decode(series: dict, windows: dict, *, failure: float | None = None, bench: tuple | None = None,
               xlabel: str = "seconds since the first request", labels: tuple = (),
               latency: list | None = None) -> Figure:
    """Per replica: decode throughput (and accept length for speculative modes) over time, on one
    shared y scale per quantity (a slower replica shows as lower, not as an alike curve), lines
    broken where samples pause (prefill, between passes)."""
    from .series import split_gaps

    spec = any(v is not None for s in series.values() for v in s["accept"])
    panels = [("gen", "decode tok/s")] + ([("accept", "accept len")] if spec else [])
    rows = max(len(series), 1) * len(panels)
    fig, axes = _fig(1.75 * rows + 1.2 + (2.0 if latency else 0), rows + (1 if latency else 0), sharex=True,
                     gridspec_kw={"height_ratios": [1] * rows + ([1.25] if latency else [])})
    breaks = tuple(s for s, _ in (windows or {}).get("benchmark", ()) if s is not None)
    first: dict = {}
    i = 0
    for g, s in sorted(series.items()):
        for key, label in panels:
            ax = axes[i]
            i += 1
            if key in first:
                ax.sharey(first[key])
            else:
                first[key] = ax
            _shade(ax, windows, bench)
            xs, ys = split_gaps(s["t"], s[key], breaks=breaks)
            ax.plot(_nan(xs), _nan(ys), color=replica_color(g), lw=1.4, marker=".", ms=4,
                    gid=f"{key}-{g}")
            if failure is not None:
                ax.axvline(failure, color=FAILED, lw=1.5, ls="--")
            ax.set_ylabel(f"replica {g}\n{label}")
            ax.grid(alpha=0.3)
    for key, ax in first.items():
        lo, hi = ax.get_ylim()
        ax.set_ylim(0 if key == "gen" else min(lo, 1.0), hi)
    if not series:
        axes[0].text(0.5, 0.5, "no decode samples in the server logs", ha="center", va="center",
                     transform=axes[0].transAxes)
    handles = [Line2D([], [], color=replica_color(g), lw=1.4, marker=".", label=f"replica {g}")
               for g in sorted(series)]
    if latency is not None:
        _shade(axes[-1], windows, bench)
        handles += draw_latencies(axes[-1], latency)
    legend_beside(fig, handles + _window_handles(windows, bench, failure))
    axes[0].set_title("Decode samples of node rank 0 (same y scale for every replica)"
                      + ("\n" if labels else ""))
    for k, (lab, (s, e)) in enumerate(zip(labels, (windows or {}).get("benchmark", ()))):
        if s is not None:                       # which pass each client-step band is
            axes[0].annotate(lab, ((s + (e if e is not None else s)) / 2, 1.0), xycoords=("data", "axes fraction"),
                             ha="center", va="bottom", fontsize=8.5, xytext=(0, 1 + 9 * (k % 2)),
                             textcoords="offset points", gid=f"pass-label-{k}")
    axes[-1].set_xlabel(xlabel)
    return fig


# ---- server metrics over time ---------------------------------------------------------------------

@styled
def fig_metrics_time(per_replica: dict, *, windows: dict | None = None, bench: tuple | None = None,
                     failure: float | None = None, xlabel: str = "seconds since the first request") -> Figure:
    """Per replica, from its /metrics scrapes: requests in flight, running and queued (left axis,
    one scale for all replicas) and KV-cache usage of the fullest stage (right axis), each held
    from one scrape to the next (steps: what is known between two scrapes is the last value,
    not a ramp)."""
    rows = max(len(per_replica), 1)
    fig, axes = _fig(1.9 * rows + 1.2, rows, sharex=True, sharey=True)
    kv_axes = []
    styles = (("in_flight", "in flight (HTTP)", "#9e9e9e", 4.0, "s"), ("running", "running", "#1f77b4", 1.6, "o"),
              ("queued", "queued", "#ff7f0e", 1.6, "^"))
    for ax, (g, d) in zip(axes, sorted(per_replica.items())):
        _shade(ax, windows, bench)
        for key, _, col, lw, mk in styles:       # a gauge holds its value until the next scrape: steps
            pts = [(t, v) for t, v in zip(d["t"], d[key]) if t is not None and v is not None]
            ax.plot([t for t, _ in pts], [v for _, v in pts], color=col, lw=lw, marker=mk, ms=5,
                    drawstyle="steps-post", alpha=0.8 if key == "in_flight" else 1.0, gid=f"{key}-{g}")
        kv = ax.twinx()
        kv_axes.append(kv)
        pts = [(t, v) for t, v in zip(d["t"], d["kv_usage"]) if t is not None and v is not None]
        kv.plot([t for t, _ in pts], [v for _, v in pts], color="#9467bd", ls="--", lw=1.3,
                marker=".", ms=4, drawstyle="steps-post", gid=f"kv-{g}")
        kv.set_ylabel("KV usage", color="#9467bd")
        kv.spines["right"].set_visible(True)
        if failure is not None:
            ax.axvline(failure, color=FAILED, lw=1.5, ls="--")
        ax.set_ylabel(f"replica {g}\nrequests")
        ax.grid(alpha=0.3)
    if kv_axes:
        top = max(max(a.get_ylim()[1] for a in kv_axes), 1e-3)
        for a in kv_axes:
            a.set_ylim(0, top * 1.1)
    axes[0].set_ylim(bottom=0)
    if not per_replica:
        axes[0].text(0.5, 0.5, "no /metrics scrapes", ha="center", va="center", transform=axes[0].transAxes)
    handles = [Line2D([], [], color=c, lw=lw, marker=mk, label=lab) for _, lab, c, lw, mk in styles]
    handles.append(Line2D([], [], color="#9467bd", ls="--", marker=".", label="KV usage (fullest stage)"))
    legend_beside(fig, handles + _window_handles(windows, bench, failure))
    axes[0].set_title("Server metrics at each /metrics scrape, per replica")
    axes[-1].set_xlabel(xlabel)
    return fig


# ---- per-replica TPOT ---------------------------------------------------------------------------

@styled
def fig_replica_tpot(rows, client=None) -> Figure:
    """rows: series.ReplicaTpot. One bar per replica (its server-side TPOT mean, exact) and the
    histogram buckets its p50 and p95 fall in (the histogram knows nothing finer); the client's
    pooled TPOT mean (and p95) as vertical lines, for scale (client: the pass's bench.tpot Latency)."""
    fig, (ax,) = _fig(1.4 + 0.7 * max(len(rows), 1))
    for y, r in enumerate(rows):
        ax.barh(y, r.mean_ms, height=0.5, color=replica_color(r.replica), alpha=0.85,
                gid=f"tpot-{r.replica}")
        for q, bk, lw, col in (("p50", r.p50_bucket, 5, "#9e9e9e"), ("p95", r.p95_bucket, 9, "#424242")):
            if bk and math.isfinite(bk[1]):
                ax.plot([bk[0], bk[1]], [y - 0.36, y - 0.36] if q == "p50" else [y + 0.36, y + 0.36],
                        color=col, lw=lw, solid_capstyle="butt", gid=f"{q}-{r.replica}")
        txt = f" mean {r.mean_ms:.1f} ms ({r.count:g} requests)"
        if r.p95_bucket:
            from ..collect.histograms import bucket_text
            txt += f"; p50 {bucket_text(r.p50_bucket)}, p95 {bucket_text(r.p95_bucket)}"
        ax.text(r.mean_ms, y, txt, va="center", fontsize=9.5)
    mean, p95 = (client.mean, client.p95) if client is not None else (None, None)
    handles = [Line2D([], [], color="#9e9e9e", lw=5, label="p50 bucket"),
               Line2D([], [], color="#424242", lw=9, label="p95 bucket")]
    if mean is not None:
        ax.axvline(mean, color="#555555", ls="--", lw=1.2)
        handles.append(Line2D([], [], color="#555555", ls="--", label=f"client pooled mean {mean:.1f} ms"))
    if p95 is not None:
        ax.axvline(p95, color="#555555", ls=":", lw=1.2)
        handles.append(Line2D([], [], color="#555555", ls=":", label=f"client pooled p95 {p95:.1f} ms"))
    ax.set_yticks(range(len(rows)), [f"replica {r.replica}" for r in rows])
    ax.invert_yaxis()
    ax.set_ylim(len(rows) - 0.4, -0.6)
    right = max([b[1] for r in rows for b in (r.p95_bucket,) if b and math.isfinite(b[1])]
                + [r.mean_ms for r in rows] + [p95 or 0.0, 1e-9])
    ax.set_xlim(0, right * 1.9)
    ax.set_xlabel("TPOT (ms)")
    ax.set_title("TPOT per replica (server /metrics histogram; bar: mean)")
    ax.grid(axis="x", alpha=0.3)
    legend_beside(fig, handles)
    return fig


# ---- job phases ---------------------------------------------------------------------------------

@styled
def fig_phases(lanes: list[tuple[str, list[tuple[str, float, float | None]]]], *,
               failure: float | None = None, end: float | None = None, failed: tuple = (),
               xlabel: str = "seconds since the first request (negative: before it)",
               labels: tuple = ()) -> Figure:
    """lanes: (name, [(phase, start, end|None)]); None = never finished (drawn to the job's end);
    failed: (start, end) of failed passes, drawn red; labels: each benchmark bar's pass ('C=1 r1'),
    written on it (above it, alternating, when the bars are narrow)."""
    fig, (ax,) = _fig(0.9 + 0.5 * max(len(lanes), 1))
    stop = end if end is not None else max([e or s for _, ph in lanes for _, s, e in ph] + [0.0])
    bad = [(s, e) for s, e in failed if s is not None]
    span = max(stop - min([s for _, ph in lanes for _, s, _ in ph] + [stop]), 1e-9)
    for y, (name, phases) in enumerate(lanes):
        bench = 0
        for phase, s, e in phases:
            fails = phase == "benchmark" and any(abs(s - b[0]) < 1e-6 for b in bad)
            width = (e if e is not None else stop) - s
            ax.barh(y, width, left=s, height=0.6,
                    color=FAILED if fails else PHASE_COLORS.get(phase, "#cccccc"),
                    hatch=None if e is not None else "//", edgecolor="#555555", lw=0.5,
                    gid="failed-pass" if fails else None)
            if phase == "benchmark" and bench < len(labels):
                wide = width / span > 0.011 * len(labels[bench])
                ax.text(s + width / 2, y if wide else y - 0.42 - 0.28 * (bench % 2), labels[bench],
                        ha="center", va="center" if wide else "bottom", fontsize=8.5, gid=f"pass-label-{bench}")
                bench += 1
    ax.set_yticks(range(len(lanes)), [n for n, _ in lanes])
    ax.invert_yaxis()
    if failure is not None:
        ax.axvline(failure, color=FAILED, lw=1.5, ls="--")
    handles = [Patch(color=c, label=p) for p, c in PHASE_COLORS.items()]
    handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="//", label="unfinished"))
    if bad:
        handles.append(Patch(color=FAILED, label="failed pass"))
    if failure is not None:
        handles.append(Line2D([], [], color=FAILED, lw=1.5, ls="--", label="job failure"))
    legend_beside(fig, handles)
    ax.set_xlabel(xlabel)
    ax.set_title(f"Job phases ({RELATIVE.events})")
    ax.grid(axis="x", alpha=0.3)
    return fig


from .charts import (fig_forest, fig_goodput, fig_interactivity, fig_load, fig_pass_strips,  # noqa: E402,F401
                     fig_sweep, pareto_front)
