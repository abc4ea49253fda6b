"""The figures' common style and helpers (Agg backend; imported lazily with plots/charts): slide
quality (150 dpi, 10-12 pt at 11 in wide), the run's context as a header, one legend beside the
axes, the shaded windows of a run (warm-ups, client step, the client's benchmark, failed passes).
"""
from __future__ import annotations

import functools
import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

DPI = 150
WIDTH = 11.0
RC = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
      "ytick.labelsize": 10, "legend.fontsize": 9.5, "figure.titlesize": 10,
      "axes.spines.top": False, "axes.spines.right": False}
UNATTRIBUTED = "#9e9e9e"
FAILED = "#c62828"
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PHASE_COLORS = {"preflight": "#bdbdbd", "loading": "#90caf9", "warm-up": "#ffcc80",
                "router": "#ce93d8", "benchmark": "#a5d6a7"}


def replica_color(g: int | None) -> str:
    return UNATTRIBUTED if g is None else _PALETTE[g % len(_PALETTE)]


def series_color(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    # zlib level 1: a sixth of the page's drawing time less than the default 6, files ~20 % larger
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, pil_kwargs={"compress_level": 1})
    plt.close(fig)
    return buf.getvalue()


def styled(fn):
    """Draw inside the slide style; `context=` adds the run's context as the figure's header."""
    @functools.wraps(fn)
    def wrap(*args, context: str = "", **kw):
        with plt.rc_context(RC):
            fig = fn(*args, **kw)
            if context:
                fig.suptitle(context, x=0.01, ha="left", fontsize=9.5, color="#444444")
            return fig
    return wrap


def fig_axes(h: float, rows: int = 1, cols: int = 1, w: float = WIDTH, **kw):
    fig, axes = plt.subplots(rows, cols, figsize=(w, h), squeeze=False, **kw)
    fig.set_layout_engine("constrained")
    return fig, [a for row in axes for a in row]


def nan_gaps(xs):
    return [math.nan if x is None else x for x in xs]


def legend_beside(fig: Figure, handles, **kw) -> None:
    """One legend for the figure, right of the axes (constrained layout makes room for it)."""
    if handles:
        fig.legend(handles=handles, loc="outside right upper", frameon=False, **kw)


def shade(ax, windows: dict | None, bench: tuple | None = None) -> None:
    """Warm-ups, each pass's client step (bench_start..bench_end), the benchmark as the client
    measured it, failed passes (red hatch)."""
    if not windows:
        windows = {}
    for s, e in windows.get("warmup", ()):
        if s is not None:
            ax.axvspan(s, e if e is not None else s, color=PHASE_COLORS["warm-up"], alpha=0.35, lw=0)
    for s, e in windows.get("benchmark", ()):
        if s is not None:
            ax.axvspan(s, e if e is not None else ax.get_xlim()[1], color="#e8f5e9", alpha=0.8, lw=0)
    if bench is not None:
        ax.axvspan(bench[0], bench[1], color=PHASE_COLORS["benchmark"], alpha=0.45, lw=0)
    for s, e in windows.get("failed", ()):
        if s is not None:
            ax.axvspan(s, e if e is not None else ax.get_xlim()[1], facecolor="none", edgecolor=FAILED,
                       hatch="///", lw=0.0, alpha=0.6, gid="failed-pass")


def window_handles(windows: dict | None, bench: tuple | None, failure: float | None) -> list:
    windows = windows or {}
    out = []
    if windows.get("warmup"):
        out.append(Patch(color=PHASE_COLORS["warm-up"], alpha=0.35, label="warm-up"))
    if windows.get("benchmark"):
        out.append(Patch(color="#e8f5e9", label="client step"))
    if bench is not None:
        out.append(Patch(color=PHASE_COLORS["benchmark"], alpha=0.45,
                         label=f"benchmark ({bench[1] - bench[0]:.2f} s, client)"))
    if windows.get("failed"):
        out.append(Patch(facecolor="none", edgecolor=FAILED, hatch="///", label="failed pass"))
    if failure is not None:
        out.append(Line2D([], [], color=FAILED, lw=1.5, ls="--", label="job failure"))
    return out




def place_labels(ax, items, fontsize: float = 9.0) -> list:
    """Annotate points (x, y, text, colour) so that labels of points that fall together do not
    pile up: a label whose spot (5 pt right, 4 pt up of its point, in the axes' current limits) is
    within a label's height and width of one already placed, or over another point's marker,
    moves up a line (at most 20 lines). Call after the limits are set; returns the annotations,
    drawn above every marker (another series' marker next to a point hid its label on run-vs-sweep
    pages)."""
    fig = ax.figure
    w_in, h_in = fig.get_size_inches()
    box = ax.get_position()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    logx = ax.get_xscale() == "log"

    def pts(x, y):
        fx = (math.log(x / x0) / math.log(x1 / x0)) if logx and x > 0 else (x - x0) / ((x1 - x0) or 1.0)
        return fx * w_in * 72 * box.width, (y - y0) / ((y1 - y0) or 1.0) * h_in * 72 * box.height
    placed, out = [], []
    points = [pts(x, y) for x, y, _, _ in items]

    def on_marker(lx, ly, width, own):
        """A label's box (lx, ly: its lower left) over another point's marker (~7 pt round)."""
        return any(lx - 7 < mx < lx + width + 7 and ly - 7 < my < ly + fontsize + 7
                   for mx, my in points if (mx, my) != own)
    for (x, y, text, colour), (px, py) in zip(items, points):
        width, dy = 0.6 * fontsize * len(text), 4.0
        while dy < 20 * fontsize and (
                any(abs((px + 5) - qx) < max(width, qw) and abs((py + dy) - qy) < fontsize * 1.2
                    for qx, qy, qw in placed) or on_marker(px + 5, py + dy, width, (px, py))):
            dy += fontsize * 1.25
        placed.append((px + 5, py + dy, width))
        out.append(ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy), fontsize=fontsize,
                               color=colour, zorder=10))
    return out


def left_out_note(ax, items, what: str = "not shown", top: bool = False) -> None:
    """A panel says what it leaves out: '<what>: a, b' in small grey text at its bottom (or top)
    left."""
    if items:
        import textwrap
        text = textwrap.fill(f"{what}: " + "; ".join(items), 52)        # a narrow block in a corner
        ax.text(0.01, 0.97 if top else 0.01, text, transform=ax.transAxes,
                fontsize=8.5, color="#555555", va="top" if top else "bottom", ha="left",
                gid="left-out", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5})


MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def series_marker(i: int) -> tuple[str, float]:
    """(marker, size) of the i-th series: shapes differ and earlier series are drawn larger, so a
    point under another stays visible."""
    return MARKERS[i % len(MARKERS)], 10.0 - 1.5 * (i % 3)
