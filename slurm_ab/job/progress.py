"""Live progress of a running job, from the files it writes (never from its servers).

Each poll opens a file, reads what was appended since the last poll, and closes it again, so the
job's files are never held open; only whole lines are consumed (a half-written last line is read
next time). Sources:

- phase: events.log (job_start, server_launch/ready per replica, warmup_*, router_*,
  bench_start/bench_end, fail, job_end); before job_start the job is queued;
- requests: bench_serving 0.5.2 prints nothing while it runs (--disable-tqdm) and writes
  bench.jsonl only at the end, so the live source is node rank 0's uvicorn access lines: one per
  generation POST, logged on arrival. While requests remain to be sent the client keeps exactly C
  in flight (its semaphore refills at once), so done = arrived - C; once all have arrived, done =
  total - (running + queued) of each replica's latest Decode/Prefill sample, or the HTTP requests
  in flight of its latest /metrics scrape (the file the job wrote) when that is newer, and always
  under PP, where a sample's #running-req is one micro-batch; bench_end = all done.
- output tok/s: the sum over replicas of the latest decode sample's gen throughput (if it is
  recent); req/s = done / time since bench_start; ETA = remaining / req/s.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, TextIO

from ..parse.events import Event, parse_event_line
from ..parse.server_log import BatchSample, parse_access_line, parse_batch_line
from ..model.rundir import Layout, read_manifest
from ..model.slurm import PENDING_STATES, base_state

_HEAD_SCRAPE = re.compile(r"^r(\d+)(?:n0)?$")       # node rank 0 of a replica (older jobs: r<G>)
RECENT_S = 10.0


class _Tail:
    """Whole lines appended to a file since the last read (open-read-close each time)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return data[:end].decode("utf-8", "replace").splitlines()


@dataclass
class _Replica:
    arrivals: list = field(default_factory=list)    # times of generation POSTs (all)
    last_sample: BatchSample | None = None          # latest Decode/Prefill sample
    last_decode: BatchSample | None = None
    last_scrape: Event | None = None                # latest usable metrics_scrape event of node rank 0


@dataclass(frozen=True)
class Snapshot:
    phase: str
    state: str | None = None
    total: int | None = None
    done: int | None = None
    arrived: int | None = None
    elapsed_s: float | None = None          # since job_start (else since watching began)
    bench_s: float | None = None            # since bench_start
    req_per_s: float | None = None
    out_tok_per_s: float | None = None
    eta_s: float | None = None
    source: str = "server access logs"
    finished: bool = False


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def describe(s: Snapshot) -> str:
    """One plain line: '[01:23] benchmark pass 1 of 1: 24/40 requests, 2.90 req/s, ...'."""
    parts = [f"[{_fmt_s(s.elapsed_s)}] {s.phase}"]
    if s.total is not None and s.done is not None:
        parts.append(f": {s.done}/{s.total} requests")
        if s.req_per_s is not None:
            parts.append(f", {s.req_per_s:.2f} req/s")
        if s.out_tok_per_s is not None:
            parts.append(f", {s.out_tok_per_s:.0f} out tok/s")
        if s.eta_s is not None and not s.finished:
            parts.append(f", ETA {_fmt_s(s.eta_s)}")
    return "".join(parts)


class Tracker:
    """Follows one run directory; poll() returns a Snapshot."""

    def __init__(self, run_dir: str | Path, *, total: int | None = None, passes: int | None = None,
                 concurrency: int | None = None, clock: Callable[[], float] = time.time):
        self.run_dir = Path(run_dir)
        self.clock = clock
        self.started_watching = clock()
        cfg = _manifest_benchmark(self.run_dir)
        self.total = total if total is not None else _int(cfg.get("num_prompts"))
        self.passes = passes if passes is not None else (_int(cfg.get("passes")) or _int(cfg.get("repeats")) or 1)
        self.concurrency = concurrency if concurrency is not None else _int(cfg.get("concurrency"))
        self.events: list[Event] = []
        self._ev_tail = _Tail(Layout(self.run_dir).events)
        self._tails: dict[int, _Tail] = {}
        self.replicas: dict[int, _Replica] = {}
        self._floor = (None, 0)                   # (bench_start line, highest done so far)
        self._launches: dict[int, Tracker] = {}   # a campaign's launches, by launch_start line
        m = read_manifest(self.run_dir)
        self.campaign = m.campaign if m is not None else None
        mode = getattr(getattr(m, "config", None), "mode", None)
        self.pp = getattr(mode, "pp", None) or 1      # PP > 1: '#running-req' is one micro-batch

    # -- reading ----------------------------------------------------------------------------------
    def _read(self) -> None:
        for no, text in enumerate(self._ev_tail.read(), len(self.events) + 1):
            ev = parse_event_line(text, no)
            if ev is not None:
                self.events.append(ev)
                m = _HEAD_SCRAPE.match(ev.fields.get("target", "")) if ev.name == "metrics_scrape" else None
                if m and ev.fields.get("ok") == "1" and ev.fields.get("file"):
                    self.replicas.setdefault(int(m.group(1)), _Replica()).last_scrape = ev
        for g, p in Layout(self.run_dir).head_logs().items():
            if g not in self._tails:
                self._tails[g] = _Tail(p)
        for g, tail in self._tails.items():
            rep = self.replicas.setdefault(g, _Replica())
            for line in tail.read():
                if '"POST ' in line:
                    a = parse_access_line(line)
                    if a is not None and a.is_generation and a.status == 200 and a.ts is not None:
                        rep.arrivals.append(a.ts)
                elif " batch" in line:
                    s = parse_batch_line(line)
                    if s is not None and s.ts is not None:
                        rep.last_sample = s
                        if s.kind == "Decode":
                            rep.last_decode = s

    # -- deriving ---------------------------------------------------------------------------------
    def _named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]

    def _phase(self, state: str | None) -> tuple[str, Event | None, bool]:
        """(phase text, the running pass's bench_start or None, benchmark finished)."""
        names = {e.name for e in self.events}
        starts, ends = self._named("bench_start"), self._named("bench_end")
        fails = self._named("fail")
        if "job_end" in names or "teardown" in names:
            if fails:
                return f"failed ({fails[0].fields.get('kind', '?')}), collecting", None, False
            return "collecting", None, bool(ends)
        if fails:
            return f"failing ({fails[0].fields.get('kind', '?')}): tearing down", None, False
        if starts:
            k = len(starts)
            if len(ends) < k:
                return f"benchmark pass {k} of {max(self.passes, k)}", starts[-1], False
            return (f"benchmark pass {k} of {max(self.passes, k)} done", None, True)
        if "router_launch" in names:
            return "router", None, False
        warm = {e.get_int("replica") for e in self._named("warmup_start")}
        warm_done = {e.get_int("replica") for e in self._named("warmup_done")}
        if warm - warm_done:
            return "warm-up replica " + ",".join(str(g) for g in sorted(warm - warm_done)), None, False
        launched = {e.get_int("replica") for e in self._named("server_launch")}
        ready = {e.get_int("replica") for e in self._named("ready")}
        if launched - ready:
            return "loading replica " + ",".join(str(g) for g in sorted(launched - ready)), None, False
        if launched:
            return "warm-up", None, False
        if "prologue_start" in names and "prologue_end" not in names:
            return "prologue", None, False
        if "job_start" in names:
            return "preflight", None, False
        if base_state(state) in PENDING_STATES | {"CONFIGURING"}:
            why = state.split("(", 1)[1].rstrip(")") if "(" in (state or "") else ""
            return "queued" + (f" ({why})" if why else ""), None, False
        return ("queued" if not state or state.startswith(("UNKNOWN", "PENDING")) else state.lower()), None, False

    def poll(self, state: str | None = None) -> Snapshot:
        self._read()
        launches = self._named("launch_start")
        if launches:
            return self._poll_launch(launches, state)
        now = self.clock()
        js, je = self._named("job_start"), self._named("job_end")
        elapsed = (je[-1].epoch if je else now) - (js[0].epoch if js else self.started_watching)
        phase, bstart, bench_done = self._phase(state)
        if bstart is None:
            last = self._named("bench_start")[-1] if self._named("bench_start") else None
            total = (_int(last.fields.get("prompts")) if last else None) or self.total
            if bench_done and total:
                end = next((e for e in self._named("bench_end") if e.line > last.line), None)
                dur = (end.epoch - last.epoch) if end else None
                return Snapshot(phase, state, total, total, None, elapsed, dur,
                                total / dur if dur else None, None, 0.0, finished=True)
            return Snapshot(phase, state, self.total, 0 if self.total and not bench_done else None,
                            None, elapsed)
        total = _int(bstart.fields.get("prompts")) or self.total      # a campaign's pass says its own
        conc = _int(bstart.fields.get("concurrency")) or self.concurrency
        bench_s = now - bstart.epoch
        arrived = sum(1 for r in self.replicas.values() for t in r.arrivals
                      if bstart.local is None or t >= bstart.local)
        # estimates only rise within a pass (a stale decode sample must not take requests back)
        done = self._done(arrived, bstart.local, total, conc)
        if self._floor[0] == bstart.line:
            done = max(done, self._floor[1])
        self._floor = (bstart.line, done)
        rate = done / bench_s if bench_s > 0 and done else None
        tok = None
        recent = [r.last_decode for r in self.replicas.values() if r.last_decode is not None
                  and bstart.local is not None and r.last_decode.ts >= bstart.local]
        if recent:
            newest = max(s.ts for s in recent)
            tok = sum(s.gen_throughput or 0.0 for s in recent
                      if (newest - s.ts).total_seconds() <= RECENT_S)
        eta = (total - done) / rate if rate and total is not None else None
        return Snapshot(phase, state, total, done, arrived, elapsed, bench_s, rate, tok, eta)

    def _poll_launch(self, launches: list[Event], state: str | None) -> Snapshot:
        """A campaign: the launch running now, followed in its own directory (its events, its
        servers' logs); the phase says which launch of how many."""
        cur = launches[-1]
        sub_dir = self.run_dir / cur.fields.get("dir", "")
        sub = self._launches.get(cur.line)
        if sub is None:
            passes = self._launch_pass_list(cur.get_int("launch"))
            sub = self._launches[cur.line] = Tracker(
                sub_dir, clock=self.clock, passes=len(passes) or None,
                total=passes[0].prompts if passes else None,
                concurrency=passes[0].concurrency if passes else None)
        snap = sub.poll(state)
        n = len(self.campaign.launches) if self.campaign and self.campaign.launches else "?"
        ended = [e for e in self._named("launch_end") if e.line > cur.line]
        # a job of one launch reads as that launch's phases alone
        which = f"launch {cur.get_int('launch')} of {n} ({cur.fields.get('mode', '?')})" if n != 1 else "launch"
        phase = f"{which}: {snap.phase}" if n != 1 else snap.phase
        if ended or self._named("job_end"):
            phase = "collecting" if self._named("job_end") else \
                f"{which} ended: {ended[0].fields.get('status', '?')}"
        stop = self._named("time_stop")
        if stop:                        # the job did not start a block it could not finish
            phase = (f"stopped before block {stop[-1].fields.get('block', '?')} of {stop[-1].fields.get('blocks', '?')} "
                     "(time)" + (", collecting" if self._named("job_end") else ""))
        js, je = self._named("job_start"), self._named("job_end")
        now = self.clock()
        start = js[0].epoch if js else (launches[0].epoch if launches else self.started_watching)
        elapsed = (je[-1].epoch if je else now) - start
        return Snapshot(phase, state, snap.total, snap.done, snap.arrived, elapsed, snap.bench_s,
                        snap.req_per_s, snap.out_tok_per_s, snap.eta_s, snap.source, snap.finished)

    def _launch_pass_list(self, index: int | None) -> list:
        """The passes the manifest's campaign schedules in launch `index` (burn-in included)."""
        launch = next((la for la in self.campaign.launches if la.index == index), None) \
            if self.campaign else None
        return list(launch.passes) if launch else []

    def _done(self, arrived: int, since: datetime | None, total: int | None, conc: int | None) -> int:
        c = conc or 1
        if total is None or arrived < total:
            d = max(arrived - c, 0)
            return d if total is None else min(d, total)
        # every request has arrived: in flight = running + queued of each replica's latest sample,
        # plus its arrivals after that sample (the sample does not know them yet); or, when newer
        # (and always under PP, where a sample's #running-req is one micro-batch), the HTTP
        # requests in flight of the replica's latest /metrics scrape (docs/metrics.md)
        in_flight = 0
        for r in self.replicas.values():
            mine = [t for t in r.arrivals if since is None or t >= since]
            s, scraped = r.last_sample, self._scraped_in_flight(r, since)
            if scraped is not None and (self.pp > 1 or s is None or scraped[0] >= s.ts):
                in_flight += scraped[1] + sum(1 for t in mine if t > scraped[0])
            elif s is None or self.pp > 1:
                in_flight += len(mine) if s is None else c
            else:
                in_flight += int(s.running_req or 0) + int(s.queue_req or 0) + sum(1 for t in mine if t > s.ts)
        return max(total - min(in_flight, c), 0)

    def _scraped_in_flight(self, r: _Replica, since: datetime | None) -> tuple[datetime, int] | None:
        """(time, HTTP requests in flight) of the replica's latest head scrape in this pass (polls
        come faster than scrapes: a file read again is parsed once, parse_scrape keeps it)."""
        ev = r.last_scrape
        if ev is None or ev.local is None or (since is not None and ev.local < since):
            return None
        from ..collect.gauges import in_flight
        from ..parse.prometheus import ScrapeError, read_scrape
        try:
            n = in_flight(read_scrape(self.run_dir / ev.fields["file"]))
        except (OSError, ScrapeError):
            return None
        return (ev.local, int(n)) if n is not None else None


def _int(v) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _manifest_benchmark(run_dir: Path) -> dict:
    m = read_manifest(run_dir)
    return m.benchmark if m is not None else {}


# ---- display ------------------------------------------------------------------------------------

class Display:
    """A tqdm bar on a terminal; plain periodic lines otherwise (a line per phase change and at
    most one per `every_s` seconds)."""

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.every_s = every_s
        self.clock = clock
        self._bar = None
        self._last_line = None
        self._last_t = None
        self._last_phase = None

    def write(self, line: str) -> None:
        """A message line (events, state changes) that stays above the bar."""
        if self._bar is not None:
            self._bar.write(line, file=self.out)
        else:
            print(line, file=self.out, flush=True)

    def update(self, s: Snapshot) -> None:
        if self.tty:
            self._update_bar(s)
            return
        now = self.clock()
        line = describe(s)
        if s.phase != self._last_phase or self._last_t is None or now - self._last_t >= self.every_s:
            if line != self._last_line:
                print(line, file=self.out, flush=True)
                self._last_line, self._last_t, self._last_phase = line, now, s.phase

    def _update_bar(self, s: Snapshot) -> None:
        from tqdm import tqdm

        if self._bar is None:
            self._bar = tqdm(total=s.total, file=self.out, dynamic_ncols=True, leave=True,
                             bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{postfix}")
        bar = self._bar
        if s.total is not None and bar.total != s.total:
            bar.total = s.total
        bar.set_description_str(f"[{_fmt_s(s.elapsed_s)}] {s.phase}", refresh=False)
        post = []
        if s.req_per_s is not None:
            post.append(f"{s.req_per_s:.2f} req/s")
        if s.out_tok_per_s is not None:
            post.append(f"{s.out_tok_per_s:.0f} out tok/s")
        if s.eta_s is not None and not s.finished:
            post.append(f"ETA {_fmt_s(s.eta_s)}")
        bar.set_postfix_str(", ".join(post), refresh=False)
        bar.n = s.done or 0
        bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def follow_live(job_id: str, run_dir: str | Path, *, out: TextIO | None = None,
                verbose: bool = False) -> str:
    """watch.follow with live progress: a bar on a terminal, plain phase lines otherwise; above it
    the job's failures (every event line with verbose). Returns the job's final Slurm state."""
    from .watch import follow

    display, trackers = Display(out), {}

    def on_poll(state, live_dir):
        if live_dir not in trackers:            # (setdefault would read the manifest every poll)
            trackers[live_dir] = Tracker(live_dir)
        tracker = trackers[live_dir]
        display.update(tracker.poll(state))
        trackers["last"] = tracker

    try:
        state = follow(job_id, Path(run_dir), echo=display.write, on_poll=on_poll, verbose=verbose)
        if "last" in trackers:                  # the job's last lines, after its teardown
            display.update(trackers["last"].poll(state))
    finally:
        display.close()
    return state
