"""Slurm job facts from an injected sacct dict (collect.slurm_facts runs sacct; this stays pure).

The dict (keys case-insensitive, all optional), as collect.slurm_facts builds it:
    {"job_id": "123", "state": "COMPLETED", "elapsed": "00:05:12" | 312, "exit_code": "0:0",
     "node_lists": {"0": "node[01-04]", "1": ["node05", ...]}}
het component N gives replica N.
"""
from __future__ import annotations

import re
from typing import Mapping

from ..parse.events import EventLog
from ..slurm import base_state
from .records import JobInfo


def parse_elapsed(value) -> float | None:
    """Slurm '[D-]HH:MM:SS' / 'MM:SS' / seconds -> seconds."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)\s*", str(value))
    if not m:
        try:
            return float(value)
        except ValueError:
            return None
    d, h, mi, s = m.groups()
    return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist 'n[01-03,7],gpu5' -> ['n01', 'n02', 'n03', 'n7', 'gpu5']."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr or ""):
        m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", part)
        if not m:
            out.append(part.strip())
            continue
        head, ranges, tail = m.groups()
        for rng in ranges.split(","):
            if "-" in rng:
                a, b = rng.split("-", 1)
                width = len(a)
                out.extend(f"{head}{i:0{width}d}{tail}" for i in range(int(a), int(b) + 1))
            else:
                out.append(f"{head}{rng}{tail}")
    return [h for h in out if h]


def _get(d: Mapping, *names):
    lower = {str(k).lower(): v for k, v in d.items()}
    for n in names:
        if n.lower() in lower and lower[n.lower()] not in (None, ""):
            return lower[n.lower()]
    return None


def _hosts(value) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return expand_hostlist(str(value)) if value else []


def job_info(sacct: Mapping | None, events: EventLog, job_id: str | None = None) -> JobInfo:
    """Merge sacct facts with what the run recorded: its job id (rundir.identify) and the hosts
    of each replica (events.log)."""
    state_raw = exit_code = elapsed = None
    nodes: dict[str, list[str]] = {}
    source = "none"
    if sacct:
        source = "sacct"
        job_id = str(_get(sacct, "job_id", "jobid") or job_id or "") or None
        state_raw = _get(sacct, "state")
        elapsed = parse_elapsed(_get(sacct, "elapsed", "elapsed_s"))
        exit_code = _get(sacct, "exit_code", "exitcode")
        lists = _get(sacct, "node_lists", "nodes", "nodelist")
        if isinstance(lists, Mapping):
            nodes.update({str(k): _hosts(v) for k, v in lists.items()})
    for g, hosts in events.hosts().items():
        nodes.setdefault(str(g), hosts)
    return JobInfo(job_id or None, base_state(state_raw), str(state_raw) if state_raw else None,
                   elapsed, str(exit_code) if exit_code is not None else None,
                   {k: nodes[k] for k in sorted(nodes, key=lambda x: (len(x), x))}, source)
