"""events.log written by the job script (docs/design.md).

Line format: '<epoch_s.ms> <YYYY-mm-dd HH:MM:SS.mmm> <event> [key=value ...]'. Values normally
have no spaces; a quoted value ("a b") or an unquoted one running up to the next ' key=' is
accepted too, so a free-text reason survives. Unparseable lines are reported, not fatal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from .text import iter_lines, parse_ts

__all__ = ["Event", "EventLog", "Warmup", "launch_view", "parse_event_line", "read_events"]

# Events that belong to one benchmark pass (a campaign launch runs several).
PASS_EVENTS = ("bench_start", "bench_end", "metrics_scrape")

_HEAD = re.compile(r"^\s*(?P<epoch>\d+(?:\.\d+)?)\s+(?P<date>\d{4}-\d\d-\d\d)\s+"
                   r"(?P<time>\d\d:\d\d:\d\d(?:[.,]\d+)?)\s+"
                   r"(?P<name>[A-Za-z_][\w.-]*)(?P<rest>.*)$")
# key=value, where value is quoted or runs up to the next ' key=' (free text survives)
_KV = re.compile(r'(?:^|\s)([A-Za-z_][\w.-]*)='
                 r'("(?:[^"\\]|\\.)*"|\'[^\']*\'|.*?)(?=\s+[A-Za-z_][\w.-]*=|\s*$)')


@dataclass(frozen=True)
class Event:
    line: int
    epoch: float
    local: datetime | None          # the job's local clock, comparable with SGLang log stamps
    name: str
    fields: dict = field(default_factory=dict)

    def get_int(self, key: str) -> int | None:
        try:
            return int(self.fields[key])
        except (KeyError, ValueError):
            return None


def parse_event_line(text: str, line: int = 0) -> Event | None:
    m = _HEAD.match(text)
    if not m:
        return None
    fields = {}
    for km in _KV.finditer(m.group("rest")):
        value = km.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[km.group(1)] = value
    return Event(line, float(m.group("epoch")), parse_ts(f"{m.group('date')} {m.group('time')}"),
                 m.group("name"), fields)


@dataclass(frozen=True)
class Warmup:
    """The job's direct warm-up of one replica."""

    replica: int
    start: datetime | None
    done: datetime | None
    ok: bool | None                 # None: no warmup_done line
    prompt_tokens: int | None


@dataclass(frozen=True)
class EventLog:
    events: tuple[Event, ...] = ()
    bad_lines: tuple[int, ...] = ()
    exists: bool = False

    def named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]

    @property
    def first(self) -> dict[str, Event]:
        out: dict[str, Event] = {}
        for e in self.events:
            out.setdefault(e.name, e)
        return out

    @property
    def last(self) -> dict[str, Event]:
        return {e.name: e for e in self.events}

    def bench_window(self) -> tuple[datetime | None, datetime | None] | None:
        """(bench_start, bench_end) of the last benchmark; end is None if it never ended."""
        starts = [e for e in self.events if e.name == "bench_start"]
        if not starts:
            return None
        start = starts[-1]
        end = next((e for e in self.events if e.name == "bench_end" and e.epoch >= start.epoch
                    and e.line > start.line), None)
        return start.local, end.local if end else None

    def bench_rc(self) -> int | None:
        ends = self.named("bench_end")
        return ends[-1].get_int("rc") if ends else None

    def job_rc(self) -> int | None:
        ends = self.named("job_end")
        return ends[-1].get_int("rc") if ends else None

    def warmups(self) -> dict[int, Warmup]:
        """Per replica: the last warm-up start and the done line that follows it."""
        out: dict[int, Warmup] = {}
        for e in self.events:
            g = e.get_int("replica")
            if g is None:
                continue
            if e.name == "warmup_start":
                out[g] = Warmup(g, e.local, None, None, None)
            elif e.name == "warmup_done":
                prev = out.get(g, Warmup(g, None, None, None, None))
                ok = e.fields.get("ok")
                out[g] = Warmup(g, prev.start, e.local, ok == "1" if ok is not None else None,
                                e.get_int("prompt_tokens"))
        return out

    def replicas(self) -> set[int]:
        return {g for e in self.events if (g := e.get_int("replica")) is not None}

    def hosts(self) -> dict[int, list[str]]:
        """replica -> node hosts in node-rank order (from 'hosts replica=G nodes=a,b,...')."""
        out: dict[int, list[str]] = {}
        for e in self.named("hosts"):
            g = e.get_int("replica")
            if g is None:
                continue
            nodes = [n for n in e.fields.get("nodes", "").split(",") if n]
            if not nodes and e.fields.get("head"):
                nodes = [e.fields["head"]]
            out[g] = nodes
        return out

    def failures(self) -> list[Event]:
        return self.named("fail")

    def pass_view(self, key: str) -> tuple["EventLog | None", int | None]:
        """A launch's events as one of its passes sees them, and that pass's client exit status
        (None: it never ended). Left out: the other passes' benchmark windows and scrapes before
        it and, once it completed (rc 0), everything after its bench_end (later passes, the
        launch's end) but its own phase=end /metrics scrapes, which the job takes right after the
        client exits, and the job's end (job_end: without Slurm's word, what tells an ended job
        from a running one). A pass that did not complete keeps what followed it: why it failed.
        (None, None) when the pass never started. A bench line that names no pass (jobs of one
        pass before launch directories) is the launch's one pass."""
        start = next((e for e in self.events if e.name == "bench_start" and _of_pass(e, key)), None)
        if start is None:
            return None, None
        end = next((e for e in self.events if e.name == "bench_end" and _of_pass(e, key)
                    and e.line > start.line), None)
        rc = end.get_int("rc") if end is not None else None
        cut = end if rc == 0 else None
        keep = []
        for e in self.events:
            if cut is not None and e.line > cut.line:
                if e.name == "bench_start":
                    break
                if e.name == "metrics_scrape" and e.fields.get("phase") == "end":
                    keep.append(e)
                continue
            if e.name in PASS_EVENTS and e.line < start.line:
                continue
            keep.append(e)
        keep += [e for e in self.named("job_end") if e not in keep]
        view = EventLog(tuple(keep), self.bad_lines, self.exists)
        return view, rc


def _of_pass(e: Event, key: str) -> bool:
    return e.fields.get("pass", key) == key


def launch_view(job: EventLog, launch: EventLog, index: int) -> EventLog:
    """One launch's events as its passes are judged: its own events merged, in time order, with
    the job's up to the launch's launch_end (the preflight, a signal or the time limit that hit
    it; not what befell later launches) and the job's end. Lines are numbered in the merged
    order. A launch whose events are the job's own (a run directory from before launch
    directories) sees the job's log as it is."""
    if launch.events == job.events:
        return job
    end = next((e for e in job.named("launch_end") if e.get_int("launch") == index), None)
    mine = [e for e in job.events if end is None or e.line <= end.line or e.name == "job_end"]
    merged = sorted(mine + list(launch.events), key=lambda e: e.epoch)
    return EventLog(tuple(replace(e, line=i) for i, e in enumerate(merged, 1)),
                    launch.bad_lines + job.bad_lines, launch.exists or job.exists)


def read_events(path: str | Path) -> EventLog:
    events, bad = [], []
    try:
        for no, text in iter_lines(path):
            if not text.strip():
                continue
            ev = parse_event_line(text, no)
            if ev is None:
                bad.append(no)
            else:
                events.append(ev)
    except FileNotFoundError:
        return EventLog()
    return EventLog(tuple(events), tuple(bad), True)
