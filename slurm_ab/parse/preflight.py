"""The preflight's findings: what each node ran (versions, GPUs, driver) and why a job stopped early.

The job's first step writes a report per node (rundir.Layout.preflight_report; see
sbatch_templates' ``preflight_node``); the batch script records the first problem as ``fail kind=preflight node=..
replica=.. node_rank=.. check=.. cause=..`` in events.log. Nothing here raises on a missing or
broken file: a run without a preflight (older runs, disabled) has no findings.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .events import EventLog

__all__ = ["NodeReport", "read_reports", "ran_on", "describe", "ran_on_note", "preflight_reasons", "server_info_note"]


@dataclass(frozen=True)
class NodeReport:
    node: str
    replica: int | None
    node_rank: int | None
    ok: bool
    modules: dict = field(default_factory=dict)      # module -> version
    gpu_count: int | None = None
    gpus: tuple = ()
    driver: str = ""
    address: str = ""
    problems: tuple = ()                             # ({"check": .., "cause": ..}, ...)


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read_reports(paths: Iterable[Path]) -> list[NodeReport]:
    """Every readable node report of `paths` (Layout.preflight_reports), in (replica, node rank,
    node) order."""
    out = []
    for path in sorted(Path(p) for p in paths):
        try:
            d = json.loads(path.read_text(errors="replace"))
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict):
            continue
        out.append(NodeReport(
            node=str(d.get("node") or path.stem), replica=_int(d.get("replica")),
            node_rank=_int(d.get("node_rank")), ok=d.get("ok") is True,
            modules={str(k): str(v) for k, v in (d.get("modules") or {}).items()}
            if isinstance(d.get("modules"), dict) else {},
            gpu_count=_int(d.get("gpu_count")),
            gpus=tuple(str(g) for g in d.get("gpus") or () if isinstance(g, str)),
            driver=str(d.get("driver") or ""), address=str(d.get("address") or ""),
            problems=tuple(p for p in d.get("problems") or () if isinstance(p, dict))))
    return sorted(out, key=lambda r: (r.replica if r.replica is not None else 1 << 30,
                                      r.node_rank if r.node_rank is not None else 1 << 30, r.node))


def _one_or_all(values) -> str | None:
    vals = [v for v in values if v]
    if not vals:
        return None
    c = Counter(vals)
    if len(c) == 1:
        return vals[0]
    return ", ".join(f"{v} ({n} nodes)" for v, n in c.most_common())


def ran_on(reports: list[NodeReport]) -> dict:
    """What the run ran on, for the manifest and the report: one value where all nodes agree,
    'value (n nodes), ...' where they differ."""
    if not reports:
        return {}
    modules = sorted({m for r in reports for m in r.modules})
    gpus = _one_or_all(f"{r.gpu_count} x {_one_or_all(r.gpus)}" if r.gpus else
                       (f"{r.gpu_count}" if r.gpu_count is not None else None) for r in reports)
    return {
        "nodes": len(reports),
        "modules": {m: _one_or_all(r.modules.get(m) for r in reports) for m in modules},
        "gpus_per_node": gpus,
        "driver": _one_or_all(r.driver for r in reports),
        "problems": sum(len(r.problems) for r in reports),
    }


def describe(info: dict) -> str | None:
    """One line: 'sglang 0.5.23, sglang_router 0.3.2 on 8 nodes, 8 x NVIDIA H200 per node, driver 570.86.15'."""
    if not info:
        return None
    mods = ", ".join(f"{m} {v}" for m, v in info.get("modules", {}).items() if v)
    text = (mods or "unknown software") + f" on {info['nodes']} node{'s' if info['nodes'] != 1 else ''}"
    if info.get("gpus_per_node"):
        text += f", {info['gpus_per_node']} GPUs per node"
    if info.get("driver"):
        text += f", driver {info['driver']}"
    return text


def ran_on_note(paths: Iterable[Path]) -> str | None:
    """'ran on: ...' for the summary, from the run's preflight reports (None without any)."""
    text = describe(ran_on(read_reports(paths)))
    return f"ran on: {text}" if text else None


def preflight_reasons(events: EventLog) -> list[str]:
    """The job's own preflight verdict: 'preflight: NODE (replica G node rank R): CAUSE'."""
    out = []
    for e in events.failures():
        f = e.fields
        if f.get("kind") != "preflight":
            continue
        where = f.get("node") or "?"
        if f.get("replica") is not None and f.get("node_rank") is not None:
            where += f" (replica {f['replica']} node rank {f['node_rank']})"
        cause = f.get("cause") or f.get("check") or "failed"
        out.append(f"preflight: {where}: {cause}" if f.get("node") else f"preflight: {cause}")
    return out


def server_info_note(events: EventLog) -> str | None:
    """bench_serving asks the router for /server_info; both router profiles answer 404 (not an error)."""
    e = events.last.get("router_server_info") if hasattr(events, "last") else None
    code = e.fields.get("http") if e else None
    if not code or code == "200":
        return None
    return (f"router answered HTTP {code} for /server_info: the client could not read the servers' "
            "accept length through it (expected with sglang-router 0.3.x and smg 1.x; the server logs have it)")
