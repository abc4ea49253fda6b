"""The history page (issue 34 item 3): per series a trend chart (each run's value with its
campaign interval, the segment means the detector found, its changes marked at the run where they
began) above the series' table. matplotlib is imported lazily."""
from __future__ import annotations

from typing import Sequence

from ..ab_stats import METRIC_BY_NAME
from ..ab_stats.changepoints import REGRESSION
from ..collect.history import Series
from . import markdown
from .html import esc, img, page


def fig_trend(s: Series):
    from .figstyle import fig_axes

    fig, (ax,) = fig_axes(3.6)
    xs = list(range(len(s.points)))
    ys = [p.value for p in s.points]
    err = [p.half_width or 0.0 for p in s.points]
    ax.errorbar(xs, ys, yerr=err, fmt="o", ms=4, color="#1f77b4", ecolor="#90caf9", capsize=2, gid="points")
    cuts = [0] + [c.index for c in s.changes] + [len(s.points)]
    for a, b in zip(cuts, cuts[1:]):
        seg = ys[a:b]
        if seg:
            ax.hlines(sum(seg) / len(seg), a - 0.4, b - 0.6, color="#555555", lw=1.5, gid="segment")
    for c in s.changes:
        col = "#c62828" if c.kind == REGRESSION else "#2e7d32"
        ax.axvline(c.index - 0.5, color=col, ls="--", lw=1.3, gid=f"change-{c.index}")
        ax.annotate(f"{c.kind} {c.change_pct:+.1f} %\nfrom {s.points[c.index].run_id}", (c.index - 0.5, 1.0),
                    xycoords=("data", "axes fraction"), fontsize=8, color=col, va="top", ha="left")
    ticks = xs if len(xs) <= 16 else xs[:: max(1, len(xs) // 12)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([s.points[i].when[:10] for i in ticks], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(METRIC_BY_NAME[s.metric].label)
    ax.set_title(s.label)
    ax.grid(alpha=0.3)
    return fig


def render_history(series: Sequence[Series], text_md: str, index: str) -> str:
    from .figstyle import png

    body = ["<h1>slurm-ab history</h1>\n",
            f"<p class=\"muted\">index {esc(index)} (rebuilt from the collected run directories at any "
            "time; docs/history.md)</p>\n"]
    if not series:
        body.append("<p>no collected runs match</p>\n")
    for k, s in enumerate(series):
        body.append(img(png(fig_trend(s)), f"{s.label}: {METRIC_BY_NAME[s.metric].label} per run", f"trend-{k}.png"))
    body.append(markdown.to_html(text_md))
    return page("slurm-ab history", "".join(body))


__all__ = ["render_history"]
