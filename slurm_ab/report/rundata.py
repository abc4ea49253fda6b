"""Everything a report draws, read from one run directory's files (read-only, one pass each).

Inputs are files the job and the collector write (docs/design.md): summary.json, summary.md,
manifest.json, events.log, bench.jsonl and node rank 0's server logs. Parsing goes through the
pure parsers of slurm_ab.parse; nothing here depends on how the collector computes its summary.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..parse.bench import read_last_record
from ..model.rundir import Layout, read_manifest
from ..parse.events import EventLog, read_events
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
    run_dir: Path
    summary: dict = field(default_factory=dict)      # summary.json ({} before collection)
    summary_md: str = ""
    manifest: dict = field(default_factory=dict)
    events: EventLog = EventLog()
    record: dict | None = None                        # last bench.jsonl record (with details)
    access: dict = field(default_factory=dict)        # replica -> [time of each generation POST]
    decode: dict = field(default_factory=dict)        # replica -> [DecodePoint]

    @property
    def run_id(self) -> str:
        return self.summary.get("run_id") or self.manifest.get("run_id") or self.run_dir.name

    @property
    def mode(self) -> str:
        return self.summary.get("mode") or self.manifest.get("mode") or "?"

    @property
    def verdict(self) -> str:
        return self.summary.get("verdict") or "not collected"

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


def _manifest(run_dir: Path) -> dict:
    m = read_manifest(run_dir)
    return m.to_dict() if m is not None else {}


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def server_logs(run_dir: Path) -> dict[int, Path]:
    """replica -> node rank 0's log (the one with the HTTP server and the scheduler's samples)."""
    return Layout(run_dir).head_logs()


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


def load(run_dir: str | Path) -> RunFiles:
    run_dir = Path(run_dir)
    lay = Layout(run_dir)
    logs = server_logs(run_dir)
    try:
        summary_md = lay.summary("summary.md").read_text(errors="replace")
    except OSError:
        summary_md = ""
    return RunFiles(
        run_dir=run_dir,
        summary=_json(lay.summary("summary.json")),
        summary_md=summary_md,
        manifest=_manifest(run_dir),
        events=read_events(lay.events),
        record=read_last_record(lay.bench_jsonl).record,
        access={g: read_access_times(p) for g, p in logs.items()},
        decode={g: read_decode(p) for g, p in logs.items()},
    )
