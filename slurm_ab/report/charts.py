"""Figures that compare serving configurations: change per metric (forest), throughput against
latency over a concurrency sweep, throughput per GPU against interactivity with its Pareto front
(the chart InferenceX, srt-slurm's dashboard, AIPerf and vLLM's sweep plots lead with), and every
pass of a campaign per mode. Same conventions as plots.py (pure data in, Figure out, slide style).
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..ab_stats.verdicts import colour as verdict_colour
from .figstyle import FAILED, fig_axes as _fig, legend_beside, series_color, styled


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
        for i, m in enumerate(modes):
            pts = sorted((p for p in points if p["mode"] == m and p.get(key) is not None),
                         key=lambda p: p.get("concurrency") or 0)
            ax.errorbar([p[key] for p in pts], [p["output_tps"] for p in pts], xerr=_errs(pts, key),
                        yerr=_errs(pts, "output_tps"), color=series_color(i), marker="o", ms=5,
                        lw=1.4, capsize=3)
            for p in pts:
                if p.get("concurrency") is not None:
                    ax.annotate(f"C={p['concurrency']}", (p[key], p["output_tps"]), fontsize=9,
                                textcoords="offset points", xytext=(4, 4))
            if ax is axes[0]:
                handles.append(Line2D([], [], color=series_color(i), marker="o", label=m))
        allp = [(p[key], p["output_tps"]) for p in points if p.get(key) is not None]
        front = pareto_front(allp)
        if front:
            ax.plot([allp[i][0] for i in front], [allp[i][1] for i in front], color="black",
                    ls="--", lw=1, marker="o", ms=12, mfc="none", zorder=5, gid=f"pareto-{key}")
        ax.set_xlabel(label)
        ax.set_ylabel("output tok/s")
        ax.grid(alpha=0.3)
    handles.append(Line2D([], [], color="black", ls="--", marker="o", mfc="none", label="Pareto front"))
    legend_beside(fig, handles)
    axes[0].set_title("Throughput vs TPOT")
    axes[1].set_title("Throughput vs TTFT")
    return fig


@styled
def fig_interactivity(points) -> Figure:
    """points: series.Interactivity. Output tok/s per GPU against tok/s per user (1000 / TPOT),
    one line per mode through its concurrencies, each point labelled with its C, the Pareto front
    (no other point is faster per user and per GPU at once) dashed; failed points hollow red."""
    from .series import upper_front

    fig, (ax,) = _fig(5.2, w=10.0)
    labels = sorted({p.label for p in points})
    handles = []
    for i, lab in enumerate(labels):
        pts = sorted((p for p in points if p.label == lab), key=lambda p: p.concurrency or 0)
        col = series_color(i)
        ax.plot([p.tok_s_user for p in pts], [p.tok_s_gpu for p in pts], color=col, lw=1.4,
                marker="o", ms=6, gid=f"mode-{lab}")
        for p in pts:
            if p.verdict != "ok":
                ax.plot([p.tok_s_user], [p.tok_s_gpu], marker="o", ms=11, mfc="none", mec=FAILED, ls="none")
            if p.concurrency is not None:
                ax.annotate(f"C={p.concurrency}", (p.tok_s_user, p.tok_s_gpu), fontsize=9,
                            textcoords="offset points", xytext=(5, 4))
        handles.append(Line2D([], [], color=col, marker="o", label=lab))
    xy = [(p.tok_s_user, p.tok_s_gpu) for p in points]
    front = upper_front(xy)
    if len(front) > 1 or (front and len(points) > 1):
        ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], color="black", ls="--", lw=1.1,
                marker="o", ms=13, mfc="none", zorder=5, gid="pareto")
        handles.append(Line2D([], [], color="black", ls="--", marker="o", mfc="none", label="Pareto front"))
    if any(p.verdict != "ok" for p in points):
        handles.append(Line2D([], [], marker="o", mfc="none", mec=FAILED, ls="none", label="not ok"))
    ax.set_xlabel("interactivity: output tok/s per user (1000 / TPOT mean)")
    ax.set_ylabel("output tok/s per GPU")
    if xy:
        ax.set_xlim(0, max(x for x, _ in xy) * 1.15)
        ax.set_ylim(0, max(y for _, y in xy) * 1.15)
    ax.set_title("Throughput per GPU vs interactivity")
    ax.grid(alpha=0.3)
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
        for x, grp in enumerate(groups):
            ok = [(r, v) for r, v, good in grp["values"] if good and isinstance(v, (int, float))]
            bad = [(r, v) for r, v, good in grp["values"] if not good]
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
    axes[0].set_title("Every timed pass per mode (dot: a pass; bar: mean of the ok passes)")
    legend_beside(fig, [Line2D([], [], marker="o", ls="none", color="#555555", label="pass (ok)"),
                        Line2D([], [], color="black", lw=2, label="mean of ok passes"),
                        Line2D([], [], marker="x", ls="none", mew=2, color=FAILED, label="failed pass")])
    return fig


@styled
def fig_goodput(rows: list[dict]) -> Figure:
    """rows: series.goodput_rows. Left: the share of requests meeting every SLO (bar) and each SLO
    alone (markers); right: good requests per second. One row per run or (mode, C)."""
    from .series import SLO_KEYS

    fig, axes = _fig(1.5 + 0.55 * max(len(rows), 1), 1, 2)
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
        ax.text(100 * r["attainment"] + 1, y, f"{100 * r['attainment']:.0f}% ({r['good']}/{r['requests']})",
                va="center", fontsize=9.5)
    ax.set_xlim(0, 118)
    ax.set_xlabel("% of requests meeting the SLOs")
    ax.set_yticks(ys, [r["label"] for r in rows])
    ax.invert_yaxis()
    axr.barh(ys, [r["goodput_rps"] or 0.0 for r in rows], height=0.55, color="#1565c0", alpha=0.8, gid="goodput")
    axr.set_yticks(ys, [""] * len(rows))
    axr.invert_yaxis()
    axr.set_xlabel("goodput (good requests / s)")
    for a in axes:
        a.grid(axis="x", alpha=0.3)
    slo = rows[0]["slo_ms"] if rows else {}
    ax.set_title("SLO attainment: " + ", ".join(f"{n} <= {slo[k]:g} ms" for k, n in SLO_KEYS if k in slo))
    axr.set_title("Goodput")
    handles = [Line2D([], [], color="#2e7d32", lw=8, alpha=0.8, label="all SLOs")]
    handles += [Line2D([], [], ls="none", marker=markers[k], mfc="white", mec="black", label=f"{n} only")
                for k, n in SLO_KEYS if any(k in r["by_metric"] for r in rows)]
    legend_beside(fig, handles)
    return fig


__all__ = ["fig_forest", "fig_sweep", "fig_interactivity", "fig_pass_strips", "fig_goodput",
           "pareto_front"]
