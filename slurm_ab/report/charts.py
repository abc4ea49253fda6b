"""Figures that compare serving configurations: change per metric (forest), throughput against
latency over a concurrency sweep, throughput per GPU against interactivity with its Pareto front
(the chart InferenceX, srt-slurm's dashboard, AIPerf and vLLM's sweep plots lead with), and every
pass of a campaign per mode. Same conventions as plots.py (pure data in, Figure out, slide style).
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..ab_stats.verdicts import colour as verdict_colour
from .figstyle import (FAILED, WIDTH, fig_axes as _fig, left_out_note, legend_beside, place_labels, series_color,
                       series_marker, styled)


@styled
def fig_forest(rows: list[dict], *, title: str = "") -> Figure:
    """rows: {metric, change_pct, ci_low_pct, ci_high_pct, verdict[, role]}; one line per metric,
    coloured by its verdict's kind (ab_stats.verdicts: any qualifier or margin), the primary first
    and marked."""
    fig, (ax,) = _fig(1.3 + 0.5 * max(len(rows), 1), w=10.0)
    for y, r in enumerate(rows):
        c = r.get("change_pct")
        lo, hi = r.get("ci_low_pct"), r.get("ci_high_pct")
        v = str(r.get("verdict") or "")
        col = verdict_colour(v)
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=col, lw=2.6, solid_capstyle="butt", gid=f"ci-{y}")
        if c is not None:
            ax.plot([c], [y], marker="s", color=col, ms=8, gid=f"pt-{y}")
        ax.annotate(v, (1.01, y), xycoords=("axes fraction", "data"), fontsize=10, va="center", color=col)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [str(r.get("label") or r.get("metric")) + (" (primary)" if r.get("role") == "primary"
                                                                               else "") for r in rows])
    for t, r in zip(ax.get_yticklabels(), rows):
        if r.get("role") == "primary":
            t.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlabel("% change of B against A (confidence interval)")
    ax.set_title(title or "Change per metric")
    ax.grid(axis="x", alpha=0.3)
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated by another (lower latency x, higher throughput y)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def _errs(pts, key):
    return [[max(p[key] - p.get(f"{key}_lo", p[key]), 0) for p in pts],
            [max(p.get(f"{key}_hi", p[key]) - p[key], 0) for p in pts]]


@styled
def fig_sweep(points: list[dict]) -> Figure:
    """points: {mode, concurrency, output_tps, output_tps_lo/hi?, tpot_ms, tpot_ms_lo/hi?, ttft_s,
    ttft_s_lo/hi?}: throughput against TPOT and TTFT per mode, intervals as bars, Pareto front."""
    fig, axes = _fig(4.8, 1, 2)
    modes = sorted({p["mode"] for p in points})
    handles = []
    for ax, key, label in ((axes[0], "tpot_ms", "TPOT mean (ms)"), (axes[1], "ttft_s", "TTFT mean (s)")):
        marks: list = []
        for i, m in enumerate(modes):
            pts = sorted((p for p in points if p["mode"] == m and p.get(key) is not None),
                         key=lambda p: p.get("concurrency") or 0)
            ax.errorbar([p[key] for p in pts], [p["output_tps"] for p in pts], xerr=_errs(pts, key),
                        yerr=_errs(pts, "output_tps"), color=series_color(i), marker="o", ms=5,
                        lw=1.4, capsize=3)
            both = [p for p in pts if p.get("makespan_tps") is not None]
            if both:
                ax.plot([p[key] for p in both], [p["makespan_tps"] for p in both], ls="none", marker="o", ms=5,
                        mfc="none", mec=series_color(i), gid=f"makespan-{key}-{m}")
            marks += [(p[key], p["output_tps"], f"C={p['concurrency']}", series_color(i)) for p in pts
                      if p.get("concurrency") is not None]
            if ax is axes[0]:
                handles.append(Line2D([], [], color=series_color(i), marker="o", label=m))
        allp = [(p[key], p["output_tps"]) for p in points if p.get(key) is not None]
        front = pareto_front(allp)
        if front:
            ax.plot([allp[i][0] for i in front], [allp[i][1] for i in front], color="black",
                    ls="--", lw=1, marker="o", ms=12, mfc="none", zorder=5, gid=f"pareto-{key}")
        ax.set_xlabel(label)
        ax.set_ylabel(points[0].get("primary", "output tok/s") if points else "output tok/s")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
        place_labels(ax, marks)
    if any(p.get("makespan_tps") is not None for p in points):
        handles.append(Line2D([], [], ls="none", marker="o", mfc="none", mec="#555555", label="makespan tok/s"))
    handles.append(Line2D([], [], color="black", ls="--", marker="o", mfc="none", label="Pareto front"))
    legend_beside(fig, handles)
    axes[0].set_title("Throughput vs TPOT")
    axes[1].set_title("Throughput vs TTFT")
    return fig


INTERACTIVITY_PANELS = (
    ("tok_s_user", "output tok/s per user (1000 / TPOT mean)", "Throughput per GPU vs interactivity", True),
    ("ttft_s", "TTFT mean (s)", "... vs TTFT", False),
    ("e2e_s", "E2E latency mean (s)", "... vs E2E latency", False),
)


@styled
def fig_interactivity(points, *, left_out: tuple = ()) -> Figure:
    """points: series.Interactivity. The primary output tok/s per GPU (the steady state when the
    runs have it; the makespan figure as a hollow marker beside it) against tok/s per user
    (1000 / TPOT), TTFT and E2E: one line per mode through its concurrencies (a history's runs
    are points alone), each point labelled with its C (labels that fall together stacked, never
    piled), the Pareto front of each panel dashed (higher tok/s per user, or lower latency, and
    higher tok/s per GPU); failed points ringed red; what could not be placed said below."""
    from .series import upper_front

    panels = [pn for pn in INTERACTIVITY_PANELS if pn[0] == "tok_s_user"
              or any(getattr(p, pn[0]) is not None for p in points)]
    fig, axes = _fig(5.0, 1, len(panels), w=WIDTH if len(panels) > 1 else 10.0, sharey=True)
    labels = sorted({p.label for p in points})
    handles = []
    ymax = max([p.tok_s_gpu for p in points] + [p.makespan_gpu or 0.0 for p in points] + [1e-9])
    for ax, (key, xlabel, title, higher) in zip(axes, panels):
        mine = [p for p in points if getattr(p, key) is not None]
        marks = []
        for i, lab in enumerate(labels):
            pts = sorted((p for p in mine if p.label == lab), key=lambda p: p.concurrency or 0)
            col = series_color(i)
            mk, ms = series_marker(i)
            joined = [p for p in pts if p.line is not None]
            ax.plot([getattr(p, key) for p in joined], [p.tok_s_gpu for p in joined], color=col, lw=1.4,
                    marker=mk, ms=ms, gid=f"mode-{lab}" if key == "tok_s_user" else f"{key}-{lab}")
            alone = [p for p in pts if p.line is None]
            if alone:
                ax.plot([getattr(p, key) for p in alone], [p.tok_s_gpu for p in alone], color=col, ls="none",
                        marker=mk, ms=ms, gid=f"points-{lab}" if key == "tok_s_user" else f"{key}-points-{lab}")
            both = [p for p in pts if p.makespan_gpu is not None]
            if both:
                ax.plot([getattr(p, key) for p in both], [p.makespan_gpu for p in both], ls="none", marker=mk,
                        ms=ms - 2, mfc="none", mec=col, alpha=0.8, gid=f"makespan-{lab}" if key == "tok_s_user"
                        else f"{key}-makespan-{lab}")
            for p in pts:
                if p.verdict != "ok":
                    ax.plot([getattr(p, key)], [p.tok_s_gpu], marker="o", ms=ms + 5, mfc="none", mec=FAILED, ls="none")
                if p.concurrency is not None:
                    marks.append((getattr(p, key), p.tok_s_gpu, f"C={p.concurrency}", col))
            if ax is axes[0]:
                handles.append(Line2D([], [], color=col, marker=mk, ls="-" if joined else "none", label=lab))
        xy = [(getattr(p, key), p.tok_s_gpu) for p in mine]
        front = upper_front(xy) if higher else pareto_front(xy)
        if len(front) > 1 or (front and len(mine) > 1):
            ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], color="black", ls="--", lw=1.1,
                    marker="o", ms=15, mfc="none", zorder=5, gid="pareto" if key == "tok_s_user" else f"pareto-{key}")
        if xy:
            ax.set_xlim(0, max(x for x, _ in xy) * 1.18)
        ax.set_ylim(0, ymax * 1.18)
        place_labels(ax, marks)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    primary = points[0].primary if points else "output tok/s"
    axes[0].set_ylabel(f"{primary} per GPU")
    if any(p.makespan_gpu is not None for p in points):
        handles.append(Line2D([], [], ls="none", marker="o", mfc="none", mec="#555555", label="makespan tok/s"))
    handles.append(Line2D([], [], color="black", ls="--", marker="o", mfc="none", label="Pareto front"))
    if any(p.verdict != "ok" for p in points):
        handles.append(Line2D([], [], marker="o", mfc="none", mec=FAILED, ls="none", label="not ok"))
    left_out_note(axes[0], list(left_out))
    legend_beside(fig, handles)
    return fig


@styled
def fig_pass_strips(strips: dict, titles: dict) -> Figure:
    """strips: series.pass_strips (metric -> groups with every pass's value); one panel per
    metric, one column per mode (and C): every pass a dot (failed passes a red cross at the
    bottom), the mean of the ok passes a bar."""
    keys = [k for k in strips if strips[k]]
    fig, axes = _fig(3.6 * max(len(keys), 1) / 1.6 + 1.0, max(len(keys), 1), 1)
    for ax, key in zip(axes, keys):
        groups = strips[key]
        missing: list = []
        for x, grp in enumerate(groups):
            ok = [(r, v) for r, v, good in grp["values"] if good and isinstance(v, (int, float))]
            bad = [(r, v) for r, v, good in grp["values"] if not good]
            missing += [f"{grp['label']} r{r}" for r, v, good in grp["values"] if good and not isinstance(v, (int, float))]
            jit = [(k - (len(ok) - 1) / 2) * 0.06 for k in range(len(ok))]
            ax.plot([x + j for j in jit], [v for _, v in ok], ls="none", marker="o", ms=7,
                    color=series_color(x), alpha=0.85, gid=f"{key}-passes-{x}")
            if grp["mean"] is not None:
                ax.plot([x - 0.25, x + 0.25], [grp["mean"]] * 2, color="black", lw=2, gid=f"{key}-mean-{x}")
            if bad:
                ax.plot([x] * len(bad), [0] * len(bad), ls="none", marker="x", ms=9, mew=2, color=FAILED,
                        clip_on=False, gid=f"{key}-failed-{x}")
        ax.set_xticks(range(len(groups)), [g["label"] for g in groups])
        ax.set_xlim(-0.6, len(groups) - 0.4)
        top = max([v for g in groups for _, v, _ in g["values"] if isinstance(v, (int, float))], default=1.0)
        ax.set_ylim(0, top * 1.15 or 1.0)
        ax.set_ylabel(titles.get(key, key))
        ax.grid(axis="y", alpha=0.3)
        left_out_note(ax, missing, "ok passes without this value")
    axes[0].set_title("Every timed pass per mode (dot: a pass; bar: mean of the ok passes)")
    legend_beside(fig, [Line2D([], [], marker="o", ls="none", color="#555555", label="pass (ok)"),
                        Line2D([], [], color="black", lw=2, label="mean of ok passes"),
                        Line2D([], [], marker="x", ls="none", mew=2, color=FAILED, label="failed pass")])
    return fig


@styled
def fig_goodput(rows: list[dict], *, target_pct: float | None = None, left_out: tuple = ()) -> Figure:
    """rows: series.goodput_rows. Left: the share of requests meeting every SLO (bar, its value
    and count right of every marker) and each SLO alone (markers), benchmark.slo_target_pct as a
    dotted line; right: good requests per second, its value at the bar. One row per run or (mode, C).
    Short titles (the SLOs in the axis label): nothing is clipped."""
    from .series import SLO_KEYS

    fig, axes = _fig(1.7 + 0.55 * max(len(rows), 1), 1, 2, gridspec_kw={"width_ratios": [3, 2]})
    ax, axr = axes
    ys = list(range(len(rows)))
    ax.barh(ys, [100 * r["attainment"] for r in rows], height=0.55, color="#2e7d32", alpha=0.8, gid="attainment")
    markers = {"ttft": "o", "tpot": "s", "e2el": "D"}
    for key, name in SLO_KEYS:
        pts = [(100 * r["by_metric"][key], y) for y, r in zip(ys, rows) if key in r["by_metric"]]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], ls="none", marker=markers[key], ms=7,
                    mfc="white", mec="black", gid=f"slo-{key}")
    for y, r in zip(ys, rows):
        right = max([100 * r["attainment"]] + [100 * v for v in r["by_metric"].values()])
        ax.text(right + 3, y, f"{100 * r['attainment']:.0f}% ({r['good']}/{r['requests']})", va="center",
                fontsize=9.5, gid=f"attainment-label-{y}")
    if target_pct:
        ax.axvline(target_pct, color="#555555", ls=":", lw=1.3, gid="slo-target")
    ax.set_xlim(0, 140)
    ax.set_xticks([0, 20, 40, 60, 80, 100])
    slo = rows[0]["slo_ms"] if rows else {}
    ax.set_xlabel("% of requests meeting every SLO\n(" + ", ".join(f"{n} <= {slo[k]:g} ms" for k, n in SLO_KEYS
                                                                 if k in slo) + ")")
    ax.set_yticks(ys, [r["label"] for r in rows])
    ax.invert_yaxis()
    rps = [r["goodput_rps"] or 0.0 for r in rows]
    axr.barh(ys, rps, height=0.55, color="#1565c0", alpha=0.8, gid="goodput")
    for y, r, v in zip(ys, rows, rps):
        axr.text(v, y, f" {v:.2f}/s" if r["goodput_rps"] is not None else " -", va="center", fontsize=9.5,
                 gid=f"goodput-label-{y}")
    axr.set_xlim(0, max(rps + [1e-9]) * 1.35)
    axr.set_yticks(ys, [""] * len(rows))
    axr.invert_yaxis()
    axr.set_xlabel("good requests / s")
    for a in axes:
        a.grid(axis="x", alpha=0.3)
    ax.set_title("SLO attainment")
    axr.set_title("Goodput")
    handles = [Line2D([], [], color="#2e7d32", lw=8, alpha=0.8, label="all SLOs")]
    handles += [Line2D([], [], ls="none", marker=markers[k], mfc="white", mec="black", label=f"{n} only")
                for k, n in SLO_KEYS if any(k in r["by_metric"] for r in rows)]
    if target_pct:
        handles.append(Line2D([], [], color="#555555", ls=":", label=f"target {target_pct:g}%"))
    left_out_note(ax, list(left_out))
    legend_beside(fig, handles)
    return fig


@styled
def fig_load(points, *, target_pct: float | None = None) -> Figure:
    """points: series.LoadPoint. Against concurrency, per mode: the failed requests (%, every
    pass that counted them; failed passes ringed red) and, with SLOs, the share of requests meeting
    them (the target dotted, the highest concurrency meeting it starred) and the goodput."""
    from .series import highest_meeting

    slo = any(p.attainment is not None for p in points)
    fig, axes = _fig(4.2 if slo else 3.0, 1, 3, w=WIDTH) if slo else _fig(3.0, 1, 2, w=WIDTH)
    if not slo:                         # one panel at the page's scale; the other half says why
        axes[1].set_axis_off()
        axes[1].text(0.02, 0.5, "no SLOs set (benchmark.slo):\nno SLO attainment or goodput to draw", va="center",
                     color="#555555", transform=axes[1].transAxes, gid="no-slo")
    modes = sorted({p.mode for p in points})
    cs = sorted({p.concurrency for p in points})
    best = highest_meeting(points, target_pct or 100.0) if slo else {}
    panels = [("error_pct", "failed requests (%)", "Errors against load")]
    if slo:
        panels += [("attainment", "% of requests meeting every SLO", "SLO attainment against load"),
                   ("goodput_rps", "good requests / s", "Goodput against load")]
    handles = []
    for ax, (key, ylabel, title) in zip(axes, panels):
        for i, m in enumerate(modes):
            pts = [p for p in points if p.mode == m]
            val = [(p.concurrency, getattr(p, key) * (100.0 if key == "attainment" else 1.0))
                   for p in pts if getattr(p, key) is not None]
            mk, ms = series_marker(i)
            ax.plot([c for c, _ in val], [v for _, v in val], color=series_color(i), marker=mk, ms=ms - 2, lw=1.4,
                    gid=f"{key}-{m}", clip_on=False)        # a 0 % point sits on the axis, whole
            if key == "error_pct":
                bad = [p for p in pts if p.passes_ok < p.passes and p.error_pct is not None]
                ax.plot([p.concurrency for p in bad], [p.error_pct for p in bad], ls="none", marker="o",
                        ms=ms + 4, mfc="none", mec=FAILED, gid=f"failed-passes-{m}")
                handles.append(Line2D([], [], color=series_color(i), marker=mk, label=m))
            if key == "attainment" and best.get(m) is not None:
                top = next(p for p in pts if p.concurrency == best[m])
                ax.plot([top.concurrency], [100.0 * top.attainment], marker="*", ms=16, color=series_color(i),
                        mec="black", ls="none", zorder=6, gid=f"meets-{m}")
        if key == "attainment":
            if target_pct:
                ax.axhline(target_pct, color="#555555", ls=":", lw=1.3, gid="slo-target")
            ax.set_ylim(0, 105)
        else:
            ax.set_ylim(bottom=0, top=max([ax.get_ylim()[1], 1.0]))
        if cs and cs[-1] / max(cs[0], 1) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(cs, [str(c) for c in cs])
        ax.set_xlabel("concurrency (C)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    if any(p.passes_ok < p.passes for p in points):
        handles.append(Line2D([], [], ls="none", marker="o", mfc="none", mec=FAILED, label="a pass not ok"))
    if slo:
        handles.append(Line2D([], [], ls="none", marker="*", ms=12, color="#777777", mec="black",
                              label=f"highest C meeting {target_pct or 100:g}%"))
    legend_beside(fig, handles)
    return fig


__all__ = ["fig_forest", "fig_sweep", "fig_interactivity", "fig_pass_strips", "fig_goodput", "fig_load",
           "pareto_front"]
