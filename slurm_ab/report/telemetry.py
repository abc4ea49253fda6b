"""Telemetry and profiles on the pages (issue 34): per node, power per GPU and SM clock over each
launch with its passes' measured windows shaded, and the profiled passes' traces as links.
matplotlib is imported lazily (figstyle)."""
from __future__ import annotations

from pathlib import Path

from ..collect.records import CampaignSummary
from ..model.rundir import Layout, open_run
from ..parse.telemetry import read_gpu_file


def esc(x) -> str:
    import html
    return html.escape(str(x))


def node_series(lay: Layout, fields: tuple[str, ...]) -> dict[str, dict]:
    """node label -> {"t": [...], "power": [...], "sm": [...]}: per sample time, the mean over the
    node's GPUs (epoch seconds)."""
    out = {}
    for (g, rank), path in sorted(lay.gpu_sample_map().items()):
        f = read_gpu_file(path, fields)
        by_t: dict[float, list] = {}
        for s in f.samples:
            by_t.setdefault(s.t, []).append(s)
        ts = sorted(by_t)
        mean = (lambda xs: sum(xs) / len(xs) if xs else None)
        d = {"t": ts, "power": [mean([s.power_w for s in by_t[t] if s.power_w is not None]) for t in ts],
             "sm": [mean([s.sm_mhz for s in by_t[t] if s.sm_mhz is not None]) for t in ts]}
        out[f"{f.node or '?'} (r{g} n{rank})"] = broken_at_gaps(d)
    return out


def broken_at_gaps(d: dict) -> dict:
    """The series with a None (a break in the drawn line) inside every gap over 3 x the median
    sample interval: no line is drawn across time the sampler did not see (a stalled sampler)."""
    ts = d["t"]
    steps = sorted(b - a for a, b in zip(ts, ts[1:]))
    if not steps:
        return d
    limit = 3 * steps[len(steps) // 2]
    out = {k: [] for k in d}
    for i, t in enumerate(ts):
        if i and t - ts[i - 1] > limit:
            out["t"].append((t + ts[i - 1]) / 2)
            for k in d:
                if k != "t":
                    out[k].append(None)
        for k in d:
            out[k].append(d[k][i])
    return out


def fig_node_telemetry(series: dict[str, dict], windows: list[tuple[str, float, float]], t0: float, title: str):
    from .figstyle import fig_axes, legend_beside, series_color
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, axes = fig_axes(5.2, 2, sharex=True)
    for i, (name, d) in enumerate(series.items()):
        xs = [t - t0 for t in d["t"]]
        axes[0].plot(xs, d["power"], color=series_color(i), lw=1.2, gid=f"power-{name}")
        axes[1].plot(xs, d["sm"], color=series_color(i), lw=1.2, gid=f"sm-{name}")
    for ax in axes:
        for k, (label, a, b) in enumerate(windows):
            ax.axvspan(a - t0, b - t0, color="#a5d6a7", alpha=0.35, lw=0)
        ax.grid(alpha=0.3)
    for label, a, b in windows:
        axes[0].annotate(label, (a - t0, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="bottom")
    axes[0].set_ylabel("power per GPU (W)")
    axes[1].set_ylabel("SM clock (MHz)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    axes[1].set_xlabel("seconds since the first pass's benchmark began")
    axes[0].set_title(title)
    handles = [Line2D([], [], color=series_color(i), label=n) for i, n in enumerate(series)]
    handles.append(Patch(color="#a5d6a7", alpha=0.35, label="each pass's telemetry window"))
    legend_beside(fig, handles)
    return fig


def telemetry_plots(run_dir: Path, job: CampaignSummary | None) -> list[tuple[str, str, bytes]]:
    """One figure per launch with GPU samples: each node's power per GPU and SM clock."""
    from .figstyle import png

    if job is None:
        return []
    run = open_run(run_dir)
    out = []
    for la in job.launches:
        launch = run.launch(la.launch)
        if launch is None:
            continue
        lay = run.launch_layout(launch)
        if not lay.gpu_sample_map():
            continue
        cfg = run.manifest.config
        fields = tuple(cfg.telemetry.nvidia_smi.fields) if cfg is not None else ()
        passes = [p for p in job.passes if p.ref.launch == la.launch and p.telemetry and p.telemetry.window]
        windows = [(p.ref.key or "", *p.telemetry.window) for p in passes]
        series = node_series(lay, fields)
        if not series or not windows:
            continue
        t0 = min(a for _, a, _ in windows)
        name = f"telemetry-{la.dir}.png"
        cap = (f"{la.dir}: power per GPU and SM clock of every node (mean over its GPUs at each sample, "
               f"{lay.rel(lay.telemetry)}/), the passes' measured benchmarks shaded; J/token and the flags "
               "are in the tables")
        out.append((name, cap, png(fig_node_telemetry(series, windows, t0, f"GPU telemetry per node: {la.dir}"))))
    return out


def profiles_html(run_dir: Path, job: CampaignSummary | None, base: Path, links_of) -> str:
    """Links to every trace of the job's profiled passes, per role instance (links_of: the page's
    link list, report.html's)."""
    if job is None or not job.profiles:
        return ""
    parts = ["<h2>Profiles</h2>\n"]
    for pr in job.profiles:
        parts.append(f"<h3>{esc(pr.mode)} {esc(pr.key)} (launch {pr.launch}, {esc(pr.verdict)}; left out of "
                     f"the statistics): {pr.traces} traces</h3>\n")
        if pr.problems:
            parts.append("<ul class=\"reasons\">" + "".join(f"<li>{esc(x)}</li>" for x in pr.problems) + "</ul>\n")
        for c in pr.components:
            parts.append(f"<p>{esc(c.component)}: {len(c.traces)}"
                         + (f" of {c.expected}" if c.expected else "") + " traces</p>\n")
            parts.append(links_of([run_dir / t for t in c.traces], run_dir, base))
    return "".join(parts)


__all__ = ["profiles_html", "telemetry_plots"]
