"""Filters of `slurm-ab report`: results/ as a history of runs (--since, --mode, --verdict).

A run's time is when it was submitted (manifest), else its job's start (events.log), else the
directory's modification time. Dates are machine-local unless they carry a zone.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..model.errors import UsageError
from ..model.rundir import identify, job_start, read_manifest

_REL = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'2026-11-30', '2026-11-30 14:00', '2026-11-30T14:00:00+00:00', or an age: '90m', '12h',
    '7d', '2w'. Returns an aware datetime."""
    now = now or datetime.now(timezone.utc)
    t = text.strip()
    m = _REL.match(t)
    if m:
        return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: not a date; use YYYY-mm-dd, 'YYYY-mm-dd HH:MM[:SS]' "
                         f"(local time unless a zone is given) or an age such as 90m, 12h, 7d, 2w") from None
    return dt if dt.tzinfo else dt.astimezone()


def run_time(run_dir: Path) -> datetime:
    m = read_manifest(run_dir)
    if m is not None and m.submitted_at:
        for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"):
            try:
                dt = datetime.strptime(m.submitted_at, fmt)
                return dt if dt.tzinfo else dt.astimezone()
            except ValueError:
                pass
    ev = job_start(run_dir)
    if ev is not None:
        return datetime.fromtimestamp(ev.epoch, timezone.utc)
    return datetime.fromtimestamp(run_dir.stat().st_mtime, timezone.utc)


def submitted(run_dir: Path) -> str:
    """When a run was submitted, local time to the minute (run_time)."""
    return run_time(run_dir).astimezone().strftime("%Y-%m-%d %H:%M")


def run_mode(run_dir: Path) -> str | None:
    return identify(run_dir).mode


def select(run_dirs, *, since: datetime | None = None, modes=()) -> list[Path]:
    """The runs submitted at or after `since` whose mode is one of `modes` (any when empty), by time."""
    out = []
    for d in run_dirs:
        d = Path(d)
        if modes and run_mode(d) not in modes:
            continue
        t = run_time(d)
        if since is not None and t < since:
            continue
        out.append((t, d))
    return [d for _, d in sorted(out, key=lambda x: (x[0], str(x[1])))]


def by_verdict(summaries, verdicts=()) -> list:
    return [s for s in summaries if not verdicts or s.verdict in verdicts]
