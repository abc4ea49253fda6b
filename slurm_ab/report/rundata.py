"""Everything a report draws of one pass of a job, read from its run directory (read-only).

Inputs are files the job and the collector write (docs/design.md): summary.json (read back into
the collector's records), summary.md, the launch's manifest, the job's and the launch's events,
the pass's client output and node rank 0's server logs, each path from rundir.open_run. Parsing
goes through the pure parsers of slurm_ab.parse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..collect.records import CampaignSummary, PassSummary
from ..collect.write import read_summary
from ..parse.bench import read_last_record
from ..model.rundir import Manifest, open_run, read_manifest
from ..parse.events import EventLog, launch_view, read_events
from ..parse.server_log import iter_batch_samples, parse_access_line
from ..parse.text import iter_lines



@dataclass(frozen=True)
class DecodePoint:
    """One 'Decode batch' sample of a replica's first pipeline stream."""

    ts: datetime
    gen_throughput: float | None
    accept_len: float | None
    running: int | None


@dataclass(frozen=True)
class RunFiles:
    run_dir: Path                                     # the job's (files in reasons are relative to it)
    launch_dir: Path | None = None                    # the pass's launch (its logs, scrapes)
    job: CampaignSummary | None = None                # summary.json read back (None before collection)
    summary: PassSummary | None = None                # the pass's collected record (None before collection)
    summary_md: str = ""
    manifest: Manifest | None = None                  # the launch's (its mode's resolved experiment)
    events: EventLog = EventLog()                     # the launch's with the job's (launch_view)
    record: dict | None = None                        # the pass's last client record (with details)
    access: dict = field(default_factory=dict)        # replica -> [time of each generation POST]
    decode: dict = field(default_factory=dict)        # replica -> [DecodePoint]

    @property
    def run_id(self) -> str:
        return (self.summary.run_id if self.summary else None) or \
            (self.manifest.run_id if self.manifest else None) or self.run_dir.name

    @property
    def mode(self) -> str:
        return (self.summary.mode if self.summary else None) or \
            (self.manifest.mode if self.manifest else None) or "?"

    @property
    def verdict(self) -> str:
        return self.summary.verdict if self.summary else "not collected"

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.summary.reasons if self.summary else ()

    def event_time(self, name: str, last: bool = False) -> datetime | None:
        evs = self.events.named(name)
        return (evs[-1] if last else evs[0]).local if evs else None

    @property
    def origin(self) -> datetime | None:
        """Time zero of every time axis: the (first) benchmark's start, else the job's start."""
        return self.event_time("bench_start") or self.event_time("job_start")

    @property
    def origin_label(self) -> str:
        """The time axes' label."""
        if self.event_time("bench_start", last=True) is not None:
            return "seconds since the benchmark started"
        return "seconds since the job started"

    def seconds(self, ts: datetime | None) -> float | None:
        o = self.origin
        return None if ts is None or o is None else (ts - o).total_seconds()


def read_access_times(path: Path) -> list[datetime]:
    """Times of generation POSTs answered 200 (uvicorn logs a streamed request when its response
    starts, i.e. on arrival; SGLang's log config stamps it with milliseconds under SGLANG_LOG_MS)."""
    out = []
    for _, text in iter_lines(path):
        if '"POST ' not in text:
            continue
        a = parse_access_line(text)
        if a is not None and a.is_generation and a.status == 200 and a.ts is not None:
            out.append(a.ts)
    return out


def read_decode(path: Path) -> list[DecodePoint]:
    """Decode samples of the first (DP, PP) stream: pipeline stages repeat the same batch."""
    out, stream = [], None
    for s in iter_batch_samples(path, ("Decode",)):
        if s.ts is None:
            continue
        if stream is None:
            stream = s.stream
        if s.stream != stream:
            continue
        out.append(DecodePoint(s.ts, s.gen_throughput, s.accept_len, s.running_req))
    return out


def the_record(job: CampaignSummary | None, launch: int, key: str) -> PassSummary | None:
    """The collected record of one pass of a job."""
    return next((p for p in job.passes if p.ref.launch == launch and p.ref.key == key), None) if job else None


def load(run_dir: str | Path, launch: int | None = None, key: str | None = None) -> RunFiles:
    """One pass of a job (its first launch's first timed pass unless said): its launch's events,
    server logs and manifest, its client output, its collected record."""
    run = open_run(run_dir)
    la = run.launch(launch) if launch is not None else run.campaign.launches[0]
    lay = run.launch_layout(la)
    key = key or next((p.key for p in la.passes if not p.burn_in), la.passes[0].key if la.passes else "")
    logs = lay.head_logs()
    job = read_summary(run.layout.root)
    mine = the_record(job, la.index, key)
    try:
        summary_md = run.layout.summary("md").read_text(errors="replace")
    except OSError:
        summary_md = ""
    return RunFiles(
        run_dir=run.layout.root,
        launch_dir=lay.root,
        job=job,
        summary=mine,
        summary_md=summary_md,
        manifest=read_manifest(lay.root),
        events=launch_view(read_events(run.layout.events), read_events(lay.events), la.index),
        record=read_last_record(lay.bench(key)).record,
        access={g: read_access_times(p) for g, p in logs.items()},
        decode={g: read_decode(p) for g, p in logs.items()},
    )
