"""`slurm-ab history` as text: per series its points over dates and the changes the detector marks
(docs/history.md)."""
from __future__ import annotations

import json
from typing import Sequence

from ..ab_stats import METRIC_BY_NAME
from ..ab_stats.changepoints import REGRESSION
from ..collect.history import Series
from .table import Table, num, numeric_frame


def change_line(s: Series, c) -> str:
    p = s.points[c.index]
    label = METRIC_BY_NAME[s.metric].label
    return (f"{'REGRESSION' if c.kind == REGRESSION else 'improvement'} from run {p.run_id} ({p.when[:16]}): "
            f"{label} {c.before:.4g} -> {c.after:.4g} ({c.change_pct:+.1f} %, 95 % interval "
            f"{c.ci_pct[0]:+.1f} .. {c.ci_pct[1]:+.1f} %; permutation p = {c.p_value:.3f})")


def series_md(s: Series, settings) -> str:
    marks = {c.index: ("v " if c.kind == REGRESSION else "^ ") + c.kind for c in s.changes}
    label = METRIC_BY_NAME[s.metric].label
    rows = [[p.when[:16].replace("T", " "), p.run_id, f"{p.n}/{p.passes}",
             num(p.value, ".2f") + (f" ± {p.half_width:.2f}" if p.half_width is not None else ""),
             num(p.energy_j_per_token, ".3f"), marks.get(i, "")] for i, p in enumerate(s.points)]
    table = Table.of(["submitted", "run", "passes ok", label, "J/token", "change"], rows,
                     ("left", "left", "right", "right", "right", "left")).md()
    head = [f"## {s.label}", "", table, ""]
    if s.changes:
        head += [f"- {change_line(s, c)}" for c in s.changes]
    else:
        head.append(f"no change point ({len(s.points)} runs; e-divisive, alpha {settings.alpha:g}, "
                    f"{settings.permutations} permutations, segments of >= {settings.min_segment} runs, "
                    f"changes >= {settings.min_change_pct:g} %)")
    return "\n".join(head) + "\n"


def history_text(series: Sequence[Series], settings, fmt: str = "md", index: str = "") -> str:
    if fmt == "json":
        return json.dumps({"index": index, "series": [s.to_dict() for s in series]}, indent=2) + "\n"
    if fmt == "csv":
        return numeric_frame([{"mode": s.mode, "fingerprint": s.fingerprint, "workload": s.workload,
                               "metric": s.metric, **p.to_dict(),
                               "change": next((c.kind for c in s.changes if c.index == i), "")}
                              for s in series for i, p in enumerate(s.points)], "csv")
    if not series:
        return "no collected runs match\n"
    return "\n".join(series_md(s, settings) for s in series)


__all__ = ["change_line", "history_text"]
