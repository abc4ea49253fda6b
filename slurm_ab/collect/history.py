"""The history's series (issue 34 item 3): the index's points grouped by mode, configuration
fingerprint and workload, oldest first, one metric each, with its change points
(ab_stats.changepoints). Pure: the index's rows in, typed series out."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, Sequence

from ..ab_stats import METRIC_BY_NAME
from ..ab_stats.changepoints import ChangePoint, Point, detect
from ..model.experiment import History

STEADY, MAKESPAN, ENERGY = "steady_output_tps", "output_tps", "energy_j_per_token"


@dataclass(frozen=True)
class HistoryPoint:
    run_id: str
    dir: str
    when: str                        # submitted_at (ISO, the submitter's local time and offset)
    n: int                           # ok passes
    passes: int
    value: float
    half_width: float | None         # 95 %, a campaign's (None: one pass)
    energy_j_per_token: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Series:
    mode: str
    fingerprint: str
    workload: str
    metric: str
    config: Mapping
    points: tuple[HistoryPoint, ...]
    changes: tuple[ChangePoint, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.mode} at {self.workload} (config {self.fingerprint})"

    def to_dict(self) -> dict:
        return {"mode": self.mode, "fingerprint": self.fingerprint, "workload": self.workload, "metric": self.metric,
                "config": dict(self.config), "points": [p.to_dict() for p in self.points],
                "changes": [dict(c.to_dict(), run_id=self.points[c.index].run_id) for c in self.changes]}


def _se(hw: float | None, n: int) -> float | None:
    if hw is None or n < 2:
        return None
    from scipy import stats
    return hw / float(stats.t.ppf(0.975, n - 1))


def _since_ok(when: str, since: datetime | None) -> bool:
    if since is None:
        return True
    try:
        t = datetime.fromisoformat(when)
    except ValueError:
        return False
    return (t.replace(tzinfo=None) if since.tzinfo is None else t) >= since


def build(rows: Sequence[Mapping], settings: History, metric: str = "", modes: Sequence[str] = (),
          workload: str = "", since: datetime | None = None) -> list[Series]:
    """Series of the index's rows (collect.index.points) matching the filters; metric "" is the
    steady-state output TPS where every point of a series has it, else the makespan's."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        if modes and r["mode"] not in modes or workload and workload not in r["workload"]:
            continue
        if not _since_ok(r["submitted_at"], since):
            continue
        g = groups.setdefault((r["mode"], r["fingerprint"], r["workload"]), {"config": r["description"], "runs": {}})
        g["runs"].setdefault((r["submitted_at"], r["run_id"], r["dir"]), {})[r["metric"]] = r
    out = []
    for (mode, fp, wl), g in sorted(groups.items()):
        runs = sorted(g["runs"].items())
        name = metric or (STEADY if all(STEADY in m for _, m in runs) else MAKESPAN)
        pts = []
        for (when, run_id, d), m in runs:
            r = m.get(name)
            if r is None:
                continue
            e = m.get(ENERGY)
            pts.append(HistoryPoint(run_id, d, when, r["n"], r["passes"], r["mean"], r["half_width"],
                                    e["mean"] if e else None))
        if not pts:
            continue
        better = METRIC_BY_NAME[name].better
        changes = detect([Point(p.value, _se(p.half_width, p.n)) for p in pts], better, settings.alpha,
                         settings.permutations, settings.min_segment, settings.min_change_pct)
        out.append(Series(mode, fp, wl, name, json.loads(g["config"]), tuple(pts), tuple(changes)))
    return out


__all__ = ["HistoryPoint", "Series", "build"]
