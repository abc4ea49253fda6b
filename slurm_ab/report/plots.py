"""matplotlib figures of runs and comparisons (Agg backend; this module is imported lazily).

Each fig_* function takes plain data (slurm_ab.report.series) and returns a Figure, so tests can
inspect the artists; png() turns one into deterministic PNG bytes (no timestamp metadata).
"""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

DPI = 100
UNATTRIBUTED = "#9e9e9e"
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def replica_color(g: int | None) -> str:
    return UNATTRIBUTED if g is None else _PALETTE[g % len(_PALETTE)]


def series_color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _fig(w: float, h: float, rows: int = 1, **kw):
    fig, axes = plt.subplots(rows, 1, figsize=(w, h), squeeze=False, **kw)
    fig.set_layout_engine("constrained")
    return fig, [a[0] for a in axes]


# ---- latency CDFs --------------------------------------------------------------------------------

def fig_cdfs(curves: list[dict]) -> Figure:
    """curves: {label, ttft: (xs_ms, ys), e2e: (xs_ms, ys), ttft_p: {p50, p95}, e2e_p: {...}}.

    One panel per metric, one line per run; the tables' p50 and p95 are marked on each line.
    """
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), squeeze=True)
    fig.set_layout_engine("constrained")
    for ax, key, title in ((axes[0], "ttft", "TTFT"), (axes[1], "e2e", "E2E latency")):
        for i, c in enumerate(curves):
            xs, ys = c[key]
            if not xs:
                continue
            col = series_color(i)
            ps = c.get(f"{key}_p") or {}
            marks = ", ".join(f"{q} {ps[q] / 1000:.2f}s" for q in ("p50", "p95") if ps.get(q) is not None)
            ax.plot([x / 1000 for x in xs], ys, color=col, lw=1.6,
                    label=f"{c['label']} ({marks})" if marks else c["label"])
            for q, marker in (("p50", "o"), ("p95", "D")):
                v = ps.get(q)
                if v is not None:
                    ax.plot([v / 1000], [0.5 if q == "p50" else 0.95], marker=marker, color=col,
                            ms=7, mec="black", mew=0.6, ls="none", gid=f"{key}-{q}-{i}")
        for y in (0.5, 0.95):
            ax.axhline(y, color="#bbbbbb", lw=0.8, ls=":")
        ax.set_title(f"{title} CDF (per request)")
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    return fig


# ---- request timeline ---------------------------------------------------------------------------

def fig_timeline(tl, *, title: str = "", windows: dict | None = None,
                 xlabel: str = "seconds since the benchmark started") -> Figure:
    """One bar per request (start -> first token light, first token -> end solid), coloured by
    replica, arrival ticks from the access lines; concurrency over time below."""
    n = len(tl.requests)
    fig, (ax, axc) = plt.subplots(2, 1, figsize=(10, 3.2 + min(n, 200) * 0.06), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1]})
    fig.set_layout_engine("constrained")
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
    reps = sorted({r.replica for r in tl.requests}, key=lambda g: (g is None, g))
    handles = [Patch(color=replica_color(g), label=f"replica {g}" if g is not None else "unattributed")
               for g in reps]
    handles.append(Patch(facecolor="#888888", alpha=0.35, label="waiting + prefill (to first token)"))
    _shade(ax, windows, with_labels=False)
    for a in (ax, axc):
        if tl.failure is not None:
            a.axvline(tl.failure, color="red", lw=1.5, ls="--")
        if tl.bench_end is not None:
            a.axvline(tl.bench_end, color="#555555", lw=0.8, ls=":")
    if tl.failure is not None:
        handles.append(Patch(color="red", label="job failure"))
    ax.legend(handles=handles, loc="upper left", fontsize=7, ncol=4)
    ax.set_ylabel("request (by start)")
    ax.set_ylim(-1, max(n, 1) + 2 + n * 0.12)
    ax.set_title(title or "Request timeline")
    ax.grid(axis="x", alpha=0.3)
    if tl.concurrency:
        xs = [t for t, _ in tl.concurrency]
        ys = [c for _, c in tl.concurrency]
        axc.step(xs, ys, where="post", color="black", lw=1.2, gid="concurrency")
    axc.set_ylabel("in flight")
    axc.set_xlabel(xlabel)
    axc.grid(alpha=0.3)
    return fig


def _shade(ax, windows: dict | None, with_labels: bool = True) -> None:
    if not windows:
        return
    for i, (s, e) in enumerate(windows.get("warmup", ())):
        if s is not None:
            ax.axvspan(s, e if e is not None else s, color="#ffcc80", alpha=0.35,
                       label="warm-up" if with_labels and i == 0 else None)
    for i, (s, e) in enumerate(windows.get("benchmark", ())):
        if s is not None:
            ax.axvspan(s, e if e is not None else ax.get_xlim()[1], color="#a5d6a7", alpha=0.25,
                       label="benchmark" if with_labels and i == 0 else None)


# ---- decode samples -----------------------------------------------------------------------------

def fig_decode(series: dict, windows: dict, *, failure: float | None = None,
               xlabel: str = "seconds since the benchmark started") -> Figure:
    """Per replica: decode throughput (and accept length for speculative modes) over time."""
    spec = any(v is not None for s in series.values() for v in s["accept"])
    rows = max(len(series), 1) * (2 if spec else 1)
    fig, axes = _fig(10, 1.9 * rows + 0.6, rows, sharex=True)
    i = 0
    for g, s in sorted(series.items()):
        panels = [("gen", "decode tok/s")] + ([("accept", "accept len")] if spec else [])
        for key, label in panels:
            ax = axes[i]
            i += 1
            pts = [(t, v) for t, v in zip(s["t"], s[key]) if t is not None and v is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=replica_color(g), lw=1.2,
                    marker=".", ms=3, label=f"replica {g}", gid=f"{key}-{g}")
            _shade(ax, windows, with_labels=(i == 1))
            if failure is not None:
                ax.axvline(failure, color="red", lw=1.5, ls="--", label="job failure" if i == 1 else None)
            ax.set_ylabel(f"r{g} {label}", fontsize=8)
            ax.grid(alpha=0.3)
    if not series:
        axes[0].text(0.5, 0.5, "no decode samples in the server logs", ha="center", va="center",
                     transform=axes[0].transAxes)
    axes[0].legend(loc="upper left", fontsize=7, ncol=3)
    axes[0].set_title("Decode samples of node rank 0 (warm-up and benchmark windows shaded)")
    axes[-1].set_xlabel(xlabel)
    return fig


# ---- per-replica TPOT ---------------------------------------------------------------------------

def fig_replica_tpot(rows, client: dict | None = None) -> Figure:
    """rows: series.ReplicaTpot. One bar per replica (its server-side TPOT mean) with a line from
    its p50 to its p95; the client's pooled TPOT mean (and p95) as vertical lines, for scale."""
    fig, (ax,) = _fig(10, 0.9 + 0.55 * max(len(rows), 1))
    for y, r in enumerate(rows):
        ax.barh(y, r.mean_ms, height=0.55, color=replica_color(r.replica), alpha=0.85,
                gid=f"tpot-{r.replica}")
        if r.p50_ms is not None and r.p95_ms is not None:
            ax.plot([r.p50_ms, r.p95_ms], [y, y], color="black", lw=1.4, marker="|", ms=12)
        ax.text(r.mean_ms, y + 0.33, f" mean {r.mean_ms:.1f} ms ({r.count:g} requests)",
                va="center", fontsize=8)
    client = client or {}
    if client.get("mean") is not None:
        ax.axvline(client["mean"], color="#555555", ls="--", lw=1.2,
                   label=f"client pooled mean {client['mean']:.1f} ms")
    if client.get("p95") is not None:
        ax.axvline(client["p95"], color="#555555", ls=":", lw=1.2,
                   label=f"client pooled p95 {client['p95']:.1f} ms")
    ax.set_yticks(range(len(rows)), [f"replica {r.replica}" for r in rows])
    ax.invert_yaxis()
    ax.set_ylim(len(rows) - 0.3, -0.7)
    right = max([r.p95_ms or r.mean_ms for r in rows] + [client.get("p95") or 0.0, 1e-9])
    ax.set_xlim(0, right * 1.35)
    ax.set_xlabel("TPOT (ms)")
    ax.set_title("TPOT per replica (server /metrics; bar: mean, line: p50 to p95)")
    ax.grid(axis="x", alpha=0.3)
    if client:
        ax.legend(loc="lower right", fontsize=7)
    return fig


# ---- job phases ---------------------------------------------------------------------------------

def fig_phases(lanes: list[tuple[str, list[tuple[str, float, float | None]]]], *,
               failure: float | None = None, end: float | None = None,
               xlabel: str = "seconds since the benchmark started (negative: before it)") -> Figure:
    """lanes: (name, [(phase, start, end|None)]); None = never finished (drawn to the job's end)."""
    colors = {"preflight": "#bdbdbd", "loading": "#90caf9", "warm-up": "#ffcc80", "router": "#ce93d8",
              "benchmark": "#a5d6a7"}
    fig, (ax,) = _fig(10, 0.6 + 0.45 * max(len(lanes), 1))
    stop = end if end is not None else max([e or s for _, ph in lanes for _, s, e in ph] + [0.0])
    for y, (name, phases) in enumerate(lanes):
        for phase, s, e in phases:
            ax.barh(y, (e if e is not None else stop) - s, left=s, height=0.6,
                    color=colors.get(phase, "#cccccc"), hatch=None if e is not None else "//",
                    edgecolor="#555555", lw=0.5)
    ax.set_yticks(range(len(lanes)), [n for n, _ in lanes], fontsize=8)
    ax.invert_yaxis()
    if failure is not None:
        ax.axvline(failure, color="red", lw=1.5, ls="--")
    handles = [Patch(color=c, label=p) for p, c in colors.items()]
    handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="//", label="unfinished"))
    if failure is not None:
        handles.append(Patch(color="red", label="failure"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    ax.set_xlabel(xlabel)
    ax.set_title("Job phases (events.log)")
    ax.grid(axis="x", alpha=0.3)
    return fig


# ---- comparisons --------------------------------------------------------------------------------

def fig_forest(rows: list[dict], *, title: str = "") -> Figure:
    """rows: {metric, change_pct, ci_low_pct, ci_high_pct, verdict}; one line per metric."""
    fig, (ax,) = _fig(8, 0.8 + 0.42 * max(len(rows), 1))
    for y, r in enumerate(rows):
        c = r.get("change_pct")
        lo, hi = r.get("ci_low_pct"), r.get("ci_high_pct")
        v = str(r.get("verdict") or "")
        col = {"better": "#2e7d32", "worse": "#c62828"}.get(v, "#424242")
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y, y], color=col, lw=2.2, solid_capstyle="butt", gid=f"ci-{y}")
        if c is not None:
            ax.plot([c], [y], marker="s", color=col, ms=7, gid=f"pt-{y}")
        ax.annotate(v, (1.01, y), xycoords=("axes fraction", "data"), fontsize=8, va="center", color=col)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [str(r.get("label") or r.get("metric")) for r in rows], fontsize=8)
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


def fig_sweep(points: list[dict]) -> Figure:
    """points: {mode, concurrency, output_tps, output_tps_lo/hi?, tpot_ms, tpot_ms_lo/hi?, ttft_s,
    ttft_s_lo/hi?}: throughput against TPOT and TTFT per mode, intervals as bars, Pareto front."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    fig.set_layout_engine("constrained")
    modes = sorted({p["mode"] for p in points})
    for ax, key, label in ((axes[0], "tpot_ms", "TPOT mean (ms)"), (axes[1], "ttft_s", "TTFT mean (s)")):
        for i, m in enumerate(modes):
            pts = sorted((p for p in points if p["mode"] == m and p.get(key) is not None),
                         key=lambda p: p.get("concurrency") or 0)
            xs = [p[key] for p in pts]
            ys = [p["output_tps"] for p in pts]
            xerr = [[max(p[key] - p.get(f"{key}_lo", p[key]), 0) for p in pts],
                    [max(p.get(f"{key}_hi", p[key]) - p[key], 0) for p in pts]]
            yerr = [[max(p["output_tps"] - p.get("output_tps_lo", p["output_tps"]), 0) for p in pts],
                    [max(p.get("output_tps_hi", p["output_tps"]) - p["output_tps"], 0) for p in pts]]
            ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, color=series_color(i), marker="o", ms=4,
                        lw=1.2, capsize=2, label=m)
            for p in pts:
                if p.get("concurrency") is not None:
                    ax.annotate(f"C={p['concurrency']}", (p[key], p["output_tps"]), fontsize=6,
                                textcoords="offset points", xytext=(3, 3))
        allp = [(p[key], p["output_tps"]) for p in points if p.get(key) is not None]
        front = pareto_front(allp)
        if front:
            ax.plot([allp[i][0] for i in front], [allp[i][1] for i in front], color="black",
                    ls="--", lw=1, marker="o", ms=11, mfc="none", zorder=5, label="Pareto front",
                    gid=f"pareto-{key}")
        ax.set_xlabel(label)
        ax.set_ylabel("output tok/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title("Throughput vs TPOT")
    axes[1].set_title("Throughput vs TTFT")
    return fig
