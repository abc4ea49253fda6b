"""Slurm job facts from an injected sacct dict (collect.slurm_facts runs sacct; this stays pure).

The dict (keys case-insensitive, all optional), as collect.slurm_facts builds it:
    {"job_id": "123", "state": "COMPLETED", "elapsed": "00:05:12" | 312, "exit_code": "0:0",
     "node_lists": {"0": "node[01-04]", "1": ["node05", ...]},
     "job_name": "ab-RUN", "submit": "2026-12-01T10:00:00", "start": ..., "end": ..., "cluster": "c",
     "expected": {"job_name": .., "submitted_at": .., "cluster": ..}}   # from the run's manifest
het component N gives replica N.

sacct is asked by bare job id, which names another job after the ids wrap or on another cluster:
its answer counts only when its name, cluster and times agree with what the run recorded
(manifest.json at submission, events.log's job_start); otherwise it is ignored, and JobInfo says so.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Mapping

from ..parse.events import EventLog
from ..model.rundir import RELATIVE
from ..model.slurm import base_state
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
    """Slurm hostlist 'n[01-03,7],gpu5' -> ['n01', 'n02', 'n03', 'n7', 'gpu5']; several brackets in
    one name expand as their product, the first outermost ('r[1-2]-n[1-2]' -> r1-n1, r1-n2, r2-n1,
    r2-n2), as Slurm's hostlist.c does."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr or ""):
        out.extend(_expand_name(part.strip()))
    return [h for h in out if h]


def _expand_name(name: str) -> list[str]:
    m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", name)
    if not m:
        return [name]
    head, ranges, tail = m.groups()
    tails = _expand_name(tail)
    out = []
    for rng in ranges.split(","):
        if "-" in rng:
            a, b = rng.split("-", 1)
            width = len(a)
            firsts = [f"{i:0{width}d}" for i in range(int(a), int(b) + 1)]
        else:
            firsts = [rng]
        out.extend(f"{head}{x}{t}" for x in firsts for t in tails)
    return out


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


SUBMIT_TOLERANCE_S = 600   # the manifest's submitted_at is taken just before sbatch runs
START_TOLERANCE_S = 120    # job_start (the script's first line) vs Slurm's Start/End


def _epoch(text) -> float | None:
    """sacct's local 'YYYY-mm-ddTHH:MM:SS' or the manifest's '...%z' -> epoch; None if unknown."""
    if not text or not isinstance(text, str) or text in ("Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        try:
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return None


def identity_problem(sacct: Mapping, events: EventLog) -> str | None:
    """Why sacct's record describes another job than this run's (None: it is this run's, or
    nothing recorded allows to tell): the job name (ab-<RUN_ID>), the cluster, the submit time
    (manifest.json) and the job's own start (events.log's job_start)."""
    exp = sacct.get("expected") or {}
    start = events.first.get("job_start")
    own = start.fields if start else {}
    problems = []
    name = _get(sacct, "job_name")
    want = exp.get("job_name") or (f"ab-{own['run_id']}" if own.get("run_id") else None)
    if name and want and name != want:
        problems.append(f"its name is {name}, this run's job was {want}")
    cluster, want_c = _get(sacct, "cluster"), exp.get("cluster") or own.get("cluster")
    if cluster and want_c and cluster != want_c:
        problems.append(f"it ran on cluster {cluster}, this run on {want_c}")
    submit, submitted = _epoch(_get(sacct, "submit")), _epoch(exp.get("submitted_at"))
    if submit is not None and submitted is not None and abs(submit - submitted) > SUBMIT_TOLERANCE_S:
        problems.append(f"it was submitted at {_get(sacct, 'submit')}, this run at {exp.get('submitted_at')}")
    began, ended = _epoch(_get(sacct, "start")), _epoch(_get(sacct, "end"))
    if start is not None and began is not None and start.epoch < began - START_TOLERANCE_S:
        problems.append(f"it started at {_get(sacct, 'start')}, after this run's job had started "
                        f"({RELATIVE.events} job_start {start.local})")
    elif start is not None and ended is not None and start.epoch > ended + START_TOLERANCE_S:
        problems.append(f"it ended at {_get(sacct, 'end')}, before this run's job started "
                        f"({RELATIVE.events} job_start {start.local})")
    return "; ".join(problems) or None


def job_info(sacct: Mapping | None, events: EventLog, job_id: str | None = None) -> JobInfo:
    """Merge sacct facts with what the run recorded: its job id (rundir.identify) and the hosts
    of each replica (events.log). sacct's facts about another job are ignored (identity_problem)."""
    state_raw = exit_code = elapsed = None
    nodes: dict[str, list[str]] = {}
    source = "none"
    note = None
    problem = identity_problem(sacct, events) if sacct else None
    if problem:
        note = (f"sacct ignored: Slurm's job {_get(sacct, 'job_id', 'jobid') or job_id} is another job "
                f"({problem}); the verdict comes from the run's own files")
        source, sacct = "ignored", None
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
                   {k: nodes[k] for k in sorted(nodes, key=lambda x: (len(x), x))}, source, note)
