"""Open-loop passes (issue 33 item 2): the arrival rate the servers saw against the one offered,
and whether they kept up.

bench_serving 0.5.23 sends an open-loop pass's requests at Poisson times (``--request-rate``) and
writes no start times in its details, and its "Request throughput" divides by a duration that
includes the drain after the last arrival (it reads low for a pass that did keep up). So the
arrivals are read where they happened: each answering server's uvicorn access line of the
request ('[stamp] INFO: ... "POST /generate HTTP/1.1" 200', logged when the response starts,
before the first token; node rank 0 of every server, a PD launch's decodes), inside the pass's
window. Achieved arrival rate = (n - 1) / (last - first); it is below the offered one beyond a
Poisson sample's noise when it is less than offered x (1 - 3 / sqrt(n - 1)) (the client could not
send as fast: a CPU-bound client, a cap on concurrency).

Saturation: the i-th arrival is the client's i-th request (the router forwards at once, so the
order of arrivals is the order of sending within milliseconds), which completes at its arrival +
its E2E from the details. The requests in flight at each arrival are the arrivals so far less the
completions so far; a server that keeps up holds them level (Little: rate x latency), one that does
not lets them grow at (arrival rate - service rate). A pass is saturated when, over the second half
of its arrivals, they grew at more than benchmark.saturation_growth of the arrival rate, and the
requests that arrived then outnumber those completed then by more than twice the noise of two
Poisson counts (2 sqrt(arrived + completed + 1)). A second half shorter than a request's own time
(the first quarter's median E2E) cannot tell from the client's side alone: then the servers' own
waiting queue decides (SGLang's sglang:num_queue_reqs in the /metrics scrapes the job took during
the arrivals, summed over replicas, from the last scrape before the first arrival to the last one
inside the arrivals, in their second half): the pass is saturated when that queue grew at more
than benchmark.saturation_growth of the arrival rate and by more than twice the noise of two
Poisson counts (2 sqrt(before + last + 1)), and the client's side
points the same way (backlog growth and arrivals over completions as above); otherwise still too
short to tell. (A prefill-first server that cannot keep up leaves the newest requests waiting, so
its queue grows with the overload, while one that keeps up admits them: its queue stays level.)
A short pass shows only a gross overload: at 40 prompts, twice the capacity; more prompts, finer.
Pure: reads the logs it is given, line by line.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from ..parse.server_log import GENERATE_PATHS
from ..parse.text import in_window, line_stamp

if TYPE_CHECKING:
    from .server_metrics import GaugePoint

_POSTS = tuple(f'"POST {p} '.encode() for p in GENERATE_PATHS)


@dataclass(frozen=True)
class LoadCheck:
    """An open-loop pass's load: offered vs achieved arrival rate, and whether the servers kept up."""

    offered_rps: float
    arrivals: int = 0                   # requests the servers saw arrive in the pass's window
    achieved_rps: float | None = None   # (arrivals - 1) / their span
    span_s: float | None = None         # first to last arrival
    served_rps: float | None = None     # completions per second over the second half of the arrivals
    backlog_mid: int | None = None      # requests in flight at the middle arrival
    backlog_end: int | None = None      # ... and at the last
    growth: float | None = None         # their growth per second / the achieved arrival rate
    saturated: bool = False
    under_offered: bool = False         # arrivals slower than offered beyond a Poisson sample's noise
    notes: tuple[str, ...] = ()
    told: bool = True                   # long enough to tell whether the servers kept up
    # the servers' waiting queue (/metrics sglang:num_queue_reqs summed over replicas) at the last
    # scrape before the first arrival and at the last one inside the arrivals (in their second half),
    # how many scrapes fell inside and the time from the first arrival to that last one
    queue_first: float | None = None
    queue_last: float | None = None
    queue_scrapes: int = 0
    queue_span_s: float | None = None
    queue_growth: float | None = None   # its growth per second / the achieved arrival rate

    @property
    def state(self) -> str:
        """saturated | kept up | too short to tell | unknown (no pairing), then under-offered."""
        what = ("saturated" if self.saturated else "kept up" if self.told and self.backlog_end is not None
                else "too short to tell" if not self.told else "unknown")
        return what + (", under-offered" if self.under_offered else "")

    @property
    def evidence(self) -> str:
        """One line: the rates and the backlog (summary.md, the pass's note)."""
        def f(x, spec=".2f"):
            return "-" if x is None else format(x, spec)
        text = (f"offered {f(self.offered_rps, 'g')} req/s, achieved {f(self.achieved_rps)} req/s "
                f"({self.arrivals} arrivals over {f(self.span_s, '.1f')} s)")
        if self.backlog_end is not None:
            text += (f"; served {f(self.served_rps)} req/s over the second half, in flight {self.backlog_mid} -> "
                     f"{self.backlog_end} (growth {f(self.growth, '.0%')} of the arrival rate)")
        if self.queue_last is not None:
            text += (f"; waiting queue (/metrics) {self.queue_first:g} before the arrivals -> {self.queue_last:g} "
                     f"at {f(self.queue_span_s, '.1f')} s into them ({self.queue_scrapes} scrapes during them; growth "
                     f"{f(self.queue_growth, '.0%')} of the arrival rate)")
        return text

    @property
    def queue(self) -> str:
        """The waiting queue before -> during the arrivals (summary.md's table), "-" without."""
        return "-" if self.queue_last is None else f"{self.queue_first:g} -> {self.queue_last:g}"


def arrival_times(logs: Iterable[Path], window: tuple[datetime | None, datetime | None]) -> list[float]:
    """Epoch-free seconds (POSIX of the naive local stamps) of every generation POST in the window,
    over the given head logs, sorted."""
    start, end = window
    out: list[float] = []
    for path in logs:
        try:
            f = open(path, "rb")
        except OSError:
            continue
        with f:
            for raw in f:
                if b'"POST ' not in raw or not any(p in raw for p in _POSTS):
                    continue
                ts, ms = line_stamp(raw.decode(errors="replace"))
                if ts is not None and in_window(ts, start, end, whole_seconds=not ms):
                    out.append(ts.timestamp())
    return sorted(out)


def waiting_queue(series: "Sequence[Sequence[GaugePoint]]") -> list[tuple[float, float]]:
    """(seconds as arrival_times reads them, requests waiting summed over the replicas) per scrape
    round of the window in which every replica with the gauge reported it, in time order. series:
    each replica's gauge points (server_metrics.ReplicaMetrics.series)."""
    rounds: dict[str, list] = {}
    replicas = 0
    for points in series:
        usable = [p for p in points if p.queued is not None and p.local]
        replicas += bool(usable)
        for p in usable:
            rounds.setdefault(p.round, []).append(p)
    return sorted((min(datetime.fromisoformat(p.local).timestamp() for p in ps), sum(p.queued for p in ps))
                  for ps in rounds.values() if len(ps) == replicas)


def check_load(offered: float, arrivals: Sequence[float], e2e: Sequence[float | None],
               growth_limit: float, queue: Sequence[tuple[float, float]] = ()) -> LoadCheck:
    """arrivals: sorted seconds; e2e: each request's end-to-end seconds in the client's order (None:
    failed); queue: the servers' waiting queue (waiting_queue). The checks above."""
    n = len(arrivals)
    if n < 2:
        return LoadCheck(offered, n, notes=(f"{n} arrival(s) in the servers' access logs: no achieved rate",))
    span = arrivals[-1] - arrivals[0]
    achieved = (n - 1) / span if span > 0 else None
    notes = []
    under = achieved is not None and achieved < offered * (1 - 3 / math.sqrt(n - 1))
    if under:
        notes.append(f"the servers saw {achieved:.2f} req/s arrive, below the offered {offered:g} beyond a "
                     f"Poisson sample's noise (3 / sqrt({n - 1})): the client did not send at the offered rate")
    if len(e2e) != n:
        notes.append(f"{n} arrivals in the access logs, {len(e2e)} requests in the client's details: arrivals "
                     "and requests cannot be paired, so the backlog is not known")
        return LoadCheck(offered, n, achieved, span, under_offered=under, notes=tuple(notes))
    done = sorted(a + (d if d is not None else 0.0) for a, d in zip(arrivals, e2e))
    mid = n // 2
    t_mid, t_end = arrivals[mid], arrivals[-1]

    def in_flight(i: int, t: float) -> int:
        return (i + 1) - _count_le(done, t)
    b_mid, b_end = in_flight(mid, t_mid), in_flight(n - 1, t_end)
    half = t_end - t_mid
    served = (_count_le(done, t_end) - _count_le(done, t_mid)) / half if half > 0 else None
    growth = (b_end - b_mid) / half / achieved if half > 0 and achieved else None
    # the second half's arrivals against its completions: a server that keeps up completes about as
    # many (Poisson counts: their difference within 2 sqrt(arrived + completed))
    arrived, completed = (n - 1) - mid, _count_le(done, t_end) - _count_le(done, t_mid)
    # a second half shorter than a request's own time (the first quarter's median E2E) completes
    # nothing whatever the servers' capacity: too short to tell
    early = sorted(d for d in e2e[: max(1, n // 4)] if d is not None)
    l0 = early[len(early) // 2] if early else 0.0
    behind = (growth is not None and growth > growth_limit
              and arrived - completed > 2 * math.sqrt(arrived + completed + 1))
    q = _queue(queue, arrivals[0], t_end, achieved)
    if half < l0:
        # the client's side cannot tell: the servers' waiting queue decides
        q_grew = (q.get("queue_growth") is not None and q["queue_growth"] > growth_limit
                  and q["queue_last"] - q["queue_first"] > 2 * math.sqrt(q["queue_first"] + q["queue_last"] + 1))
        if behind and q_grew:
            notes.append(f"the second half of the arrivals lasted {half:.1f} s, less than a request's own time "
                         f"({l0:.1f} s, the first quarter's median E2E): the servers' waiting queue tells instead, "
                         f"{q['queue_first']:g} -> {q['queue_last']:g} over the arrivals")
            return LoadCheck(offered, n, achieved, span, served, b_mid, b_end, growth, True, under, tuple(notes),
                             **q)
        seen = ("no scrape of the servers' waiting queue in the second half of the arrivals (metrics.interval_s)"
                if "queue_last" not in q else
                f"the servers' waiting queue {q['queue_first']:g} -> {q['queue_last']:g} over the arrivals, "
                "not growing beyond its noise")
        notes.append(f"the second half of the arrivals lasted {half:.1f} s, less than a request's own time "
                     f"({l0:.1f} s, the first quarter's median E2E), and {seen}: too short to tell whether the "
                     "servers kept up (more prompts per pass)")
        return LoadCheck(offered, n, achieved, span, served, b_mid, b_end, growth, False, under, tuple(notes), False,
                         **q)
    return LoadCheck(offered, n, achieved, span, served, b_mid, b_end, growth, behind, under, tuple(notes), **q)


def _queue(points: Sequence[tuple[float, float]], first: float, last: float, achieved: float | None) -> dict:
    """LoadCheck's queue fields: the waiting queue at the last scrape before the first arrival and at
    the last scrape inside the arrivals, when that one falls in their second half."""
    before = [v for t, v in points if t <= first]
    inside = [(t, v) for t, v in points if first < t <= last]
    if not before or not inside or inside[-1][0] < (first + last) / 2:
        return {"queue_scrapes": len(inside)}
    (t1, q1), q0 = inside[-1], before[-1]
    return {"queue_first": q0, "queue_last": q1, "queue_scrapes": len(inside), "queue_span_s": t1 - first,
            "queue_growth": (q1 - q0) / (t1 - first) / achieved if achieved else None}


def _count_le(sorted_values: Sequence[float], t: float) -> int:
    return bisect_right(sorted_values, t)


__all__ = ["LoadCheck", "arrival_times", "check_load", "waiting_queue"]
