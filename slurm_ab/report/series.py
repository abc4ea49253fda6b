"""The data behind each plot, as plain numbers (pure functions; tests check these, not pixels).

Request timeline and replica attribution (bench_serving 0.5.2 records no per-request start time):

1. Client side: with `--max-concurrency C` and an infinite request rate, bench_serving starts
   every request as a task behind an asyncio.Semaphore(C), which wakes waiters in FIFO order. So
   requests 0..C-1 start at once, and each later request starts when the earliest running one
   ends. Replaying that with each request's E2E (TTFT + sum of ITLs, from --output-details) gives
   every request's start relative to the benchmark's start.
2. Server side: node rank 0 of each replica logs one uvicorn access line per generation POST
   when the response starts, i.e. when the request arrives (millisecond stamps). The router's
   round_robin sends consecutive requests to alternating replicas.
3. Requests are paired with access lines in start order (replayed start, ties by index) only to
   align the two clocks: the median offset of the pairs. A request's replica is then taken from
   evidence alone: the access lines within +-TOL of its aligned start (TOL: twice the 90th
   percentile misalignment of requests that started alone, at least TIE_S, at most 1 s; 0.25 s
   when none did). When they all come from one replica, that is its replica; when lines of two
   replicas fall in that window (requests that started together, e.g. the first C), bench_serving
   and the router log nothing that says which went where (no request id reaches the client's
   output, the router logs no per-request line), so the request stays unattributed and the page
   says how many. Never from arrival order or TTFT ranks alone: on a run with one slow replica
   those swapped a slow and a fast request between the replicas, the very case the page is for.
4. Times: start = replayed start + the median offset (the client's clock, so in-flight requests
   never exceed C), first token = start + TTFT, end = start + E2E; the attributed request's access
   line is drawn as its arrival tick. The largest |replayed start - access line| after alignment
   is reported with the plot.
5. Without the client's details (it died or wrote nothing) only arrivals are known: no ends, so
   the requests in flight are unknown from the client; the servers' HTTP in-flight gauge (their
   /metrics scrapes) is drawn instead when there is one (server_in_flight).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import datetime

from ..collect.records import Goodput
from ..collect.rows import PassRow, load_label
from ..parse.bench import replay_starts  # the client's FIFO semaphore, replayed (see module doc)
from .rundata import RunFiles


# ---- latency CDFs -------------------------------------------------------------------------------

def request_latencies(record: dict | None) -> dict[str, list[float]]:
    """Per successful request: 'ttft' and 'e2e' in ms, by request index (the collector's rules:
    an empty error and at least one output token; E2E = TTFT + sum of ITLs)."""
    out = {"ttft": [], "e2e": [], "index": []}
    if not record or not isinstance(record.get("ttfts"), list):
        return out
    itls = record.get("itls") or []
    outs = record.get("output_lens")
    errs = record.get("errors")
    for i, ttft in enumerate(record["ttfts"]):
        if errs is not None and i < len(errs) and errs[i]:
            continue
        if outs is not None and i < len(outs) and not outs[i]:
            continue
        if not isinstance(ttft, (int, float)):
            continue
        req = itls[i] if i < len(itls) and isinstance(itls[i], list) else []
        e2e = ttft + math.fsum(x for x in req if isinstance(x, (int, float)))
        out["ttft"].append(ttft * 1000.0)
        out["e2e"].append(e2e * 1000.0)
        out["index"].append(i)
    return out


def cdf_points(values) -> tuple[list[float], list[float]]:
    """The CDF that matches the tables' percentiles: sorted values at heights k/(n-1), joined by
    straight lines (numpy's 'linear' percentile is exactly its inverse), so it crosses 0.95 at
    the reported p95."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return [], []
    if n == 1:
        return xs, [1.0]
    return xs, [k / (n - 1) for k in range(n)]


# ---- request timeline ---------------------------------------------------------------------------

TIE_S = 0.05


@dataclass(frozen=True)
class Request:
    index: int                        # position in bench_serving's request list
    start: float                      # s since the benchmark started (client clock, aligned)
    first_token: float | None
    end: float | None
    replica: int | None               # None: could not be attributed
    arrival: float | None = None      # the server's access line (s since the benchmark started)


@dataclass(frozen=True)
class Timeline:
    requests: tuple = ()              # Request, by start
    concurrency: tuple = ()           # (t, in-flight requests) steps
    method: str = ""                  # how starts and replicas were found
    residual_ms: float | None = None  # largest |replayed start - access line| after alignment
    failure: float | None = None      # s since origin of the job's first 'fail' event
    bench_end: float | None = None


def _bench_access(run: RunFiles) -> list[tuple[datetime, int]]:
    start = run.event_time("bench_start", last=True)
    if start is None:
        return []                   # no benchmark ran: access lines are warm-ups and health checks
    ends = [e.local for e in run.events.named("bench_end") if e.local and e.local >= start]
    end = ends[-1] if ends else None
    out = []
    for g, times in run.access.items():
        for ts in times:
            if ts >= start and (end is None or ts <= end):
                out.append((ts, g))
    out.sort()
    return out


def concurrency_steps(intervals) -> list[tuple[float, int]]:
    """(t, requests in flight from t on) for intervals (start, end|None); None = still open."""
    edges = []
    for s, e in intervals:
        edges.append((s, 1))
        if e is not None:
            edges.append((e, -1))
    edges.sort(key=lambda x: (x[0], x[1]))      # an end and a start at one instant: end first
    out, n = [(0.0, 0)] if edges and edges[0][0] > 0 else [], 0
    for t, d in edges:
        n += d
        if out and out[-1][0] == t:
            out[-1] = (t, n)
        else:
            out.append((t, n))
    return out


def _groups(order: list[int], rel: list[float]) -> list[list[int]]:
    groups: list[list[int]] = []
    for k in order:
        if groups and rel[k] - rel[groups[-1][-1]] <= TIE_S:
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups


def _tolerance(offsets: dict, singles: list[int], base: float) -> float:
    """How far a request's aligned start may lie from its own access line (see module doc, 3)."""
    dev = sorted(abs(offsets[k] - base) for k in singles if k in offsets)
    if not dev:
        return 0.25
    return min(1.0, max(TIE_S, 2.0 * dev[int(0.9 * (len(dev) - 1))]))


def _matching(cands: dict, forced: tuple | None = None) -> dict | None:
    """A one-to-one matching of every request to one of its candidate lines (request -> line), or
    None when there is none; `forced` (request, lines) restricts one request to those lines.
    Augmenting paths (Kuhn), candidates tried nearest first."""
    match: dict = {}                     # line -> request

    def place(k, seen) -> bool:
        js = forced[1] if forced and forced[0] == k else cands[k]
        free = next((j for j in js if j not in match and j not in seen), None)
        if free is not None:                # a free line first: earlier requests keep theirs
            match[free] = k
            return True
        for j in js:
            if j in seen:
                continue
            seen.add(j)
            if place(match[j], seen):
                match[j] = k
                return True
        return False
    for k in cands:
        if not place(k, set()):
            return None
    return {k: j for j, k in match.items()}


def attribute(starts: list[float], access: list[tuple[float, int]], tol: float) -> list[tuple[int, float] | None]:
    """Per request start (aligned): (replica, arrival) or None. Each access line is one request's,
    so requests and the lines within tol of their starts are matched one to one; a request is a
    replica's only when every such matching of its group (requests linked through shared lines)
    gives it a line of that replica, and its arrival tick is its line in one matching (no line is
    cited twice). A group with fewer lines than requests (some requests' own lines lie outside
    the window) or lines of several replicas that could have gone either way stays grey."""
    near = {k: sorted((j for j, (t, _) in enumerate(access) if abs(t - s) <= tol), key=lambda j: abs(access[j][0] - s))
            for k, s in enumerate(starts)}
    parent = list(range(len(starts)))

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k
    owner: dict = {}
    for k, js in near.items():
        for j in js:
            if j in owner:
                parent[root(k)] = root(owner[j])
            else:
                owner[j] = k
    groups: dict = {}
    for k in near:
        groups.setdefault(root(k), []).append(k)
    out: list = [None] * len(starts)
    for members in groups.values():
        cands = {k: near[k] for k in members}
        if any(not js for js in cands.values()):
            continue
        one = _matching(cands)
        if one is None:
            continue
        for k in members:
            reps = {access[j][1] for j in cands[k]}
            possible = [g for g in reps if _matching(cands, (k, [j for j in cands[k] if access[j][1] == g]))]
            if possible == [access[one[k]][1]]:
                out[k] = (possible[0], access[one[k]][0])
    return out


def timeline(run: RunFiles) -> Timeline:
    access = [(run.seconds(ts), g) for ts, g in _bench_access(run)]
    fails = run.events.named("fail")
    failure = run.seconds(fails[0].local) if fails else None
    end_ev = run.events.named("bench_end")
    bench_end = run.seconds(end_ev[-1].local) if end_ev else None
    rec = run.record
    lat = request_latencies(rec)
    if not lat["index"]:
        # no client details (the client died or never ran): arrivals from the access lines only;
        # no request's end is known, so neither is the number in flight (module doc, 5)
        reqs = tuple(Request(k, t, None, None, g, t) for k, (t, g) in enumerate(access))
        return Timeline(reqs, (), "arrivals from the servers' access lines (no client details: "
                        "ends and requests in flight unknown from the client)", None, failure, bench_end)
    e2e_s = [x / 1000.0 for x in lat["e2e"]]
    ttft_s = [x / 1000.0 for x in lat["ttft"]]
    conc = rec.get("max_concurrency") if isinstance(rec.get("max_concurrency"), int) else None
    rel = replay_starts(e2e_s, conc)          # failed requests are left out (duration unknown)
    order = sorted(range(len(rel)), key=lambda k: (rel[k], lat["index"][k]))
    groups = _groups(order, rel)
    offsets = {k: t - rel[k] for k, (t, _) in zip(order, access)}      # rank pairs: clock offset only
    if offsets:
        base = statistics.median(offsets.values())
        residual = max(abs(o - base) for o in offsets.values()) * 1000.0
    else:
        base, residual = (access[0][0] if access else 0.0), None
    tol = _tolerance(offsets, [g[0] for g in groups if len(g) == 1], base)
    found = attribute([base + rel[k] for k in order], access, tol)
    reqs = []
    for k, ev in zip(order, found):
        s = base + rel[k]
        g, arrival = ev or (None, None)
        # base + (rel + e2e) is bit-identical to the start of the request that takes the freed slot
        reqs.append(Request(lat["index"][k], s, s + ttft_s[k], base + (rel[k] + e2e_s[k]), g, arrival))
    unknown = sum(1 for r in reqs if r.replica is None)
    method = ("starts replayed from the client's per-request latencies under its concurrency limit; "
              f"requests matched one to one with the access lines within {tol * 1000:.0f} ms of their starts, "
              "a replica where every such matching agrees" + (
                  f"; {unknown} request(s) could have been served by either replica or their lines fall "
                  "outside the window: which replica served them is not in the logs (grey)" if unknown else ""))
    if len(access) != len(order):
        method += (f"; {len(access)} access lines for {len(order)} successful requests: "
                   f"{abs(len(access) - len(order))} left unpaired")
    return Timeline(tuple(reqs), tuple(concurrency_steps([(r.start, r.end) for r in reqs])),
                    method, residual, failure, bench_end)


# ---- decode samples and windows -----------------------------------------------------------------

def decode_series(run: RunFiles) -> dict[int, dict[str, list]]:
    """replica -> {'t': s since origin, 'gen': tok/s, 'accept': accept len (None without spec)}."""
    out = {}
    for g, pts in sorted(run.decode.items()):
        out[g] = {"t": [run.seconds(p.ts) for p in pts], "gen": [p.gen_throughput for p in pts],
                  "accept": [p.accept_len for p in pts]}
    return out


@dataclass(frozen=True)
class ReplicaTpot:
    replica: int
    mean_ms: float
    p50_ms: float | None
    p95_ms: float | None
    count: float
    metric: str
    p50_bucket: tuple | None = None     # (lower, upper) ms of the histogram bucket holding p50
    p95_bucket: tuple | None = None


def replica_tpot(run: RunFiles) -> list[ReplicaTpot]:
    """Each replica's server-side TPOT over the benchmark window, as the collector put it in
    summary.json (from the replica's own /metrics histogram); [] when no replica has one."""
    sm = run.summary.server_metrics if run.summary is not None else None
    out = []
    for r in sm.replicas if sm is not None else ():
        t = r.tpot
        if t is not None and t.mean_ms is not None:
            out.append(ReplicaTpot(r.replica, float(t.mean_ms), t.p50_ms, t.p95_ms, float(t.count or 0),
                                   t.metric, _bucket(t.p50_bucket), _bucket(t.p95_bucket)))
    return sorted(out, key=lambda x: x.replica)


def _bucket(b) -> tuple | None:
    """A bucket (lower, upper) in ms; the +Inf bound may read back as the string 'inf'."""
    try:
        return (float(b[0]), float(b[1])) if b else None
    except (TypeError, ValueError, IndexError):
        return None


def windows(run: RunFiles) -> dict[str, list[tuple[float, float | None]]]:
    """'warmup': each replica's direct warm-up; 'benchmark': bench_start..bench_end of every pass
    (the client step's window); 'failed': those passes that failed (the client exited non-zero,
    or a 'fail' event fell inside; an unfinished one ends at the failure). Seconds since origin."""
    out = {"warmup": [], "benchmark": [], "failed": []}
    for w in run.events.warmups().values():
        if w.start is not None:
            out["warmup"].append((run.seconds(w.start), run.seconds(w.done) if w.done else None))
    ends = run.events.named("bench_end")
    fails = [f for f in run.events.named("fail") if f.local is not None]
    starts = [s for s in run.events.named("bench_start") if s.local is not None]
    for k, s in enumerate(starts):                      # one window per pass
        nxt = starts[k + 1].line if k + 1 < len(starts) else None
        e = next((x for x in ends if x.line > s.line and (nxt is None or x.line < nxt)
                  and x.local is not None), None)
        win = (run.seconds(s.local), run.seconds(e.local) if e else None)
        out["benchmark"].append(win)
        failed = [f for f in fails if f.line > s.line and (e is None or f.line < e.line)]
        if (e is not None and e.get_int("rc") not in (0, None)) or failed:
            out["failed"].append((win[0], win[1] if win[1] is not None else
                                  (run.seconds(failed[0].local) if failed else None)))
    return out


def pass_labels(run: RunFiles) -> list[str]:
    """Each pass's name ('C=1 r1'), in the order of windows()'s benchmark windows (bench_start)."""
    out = []
    for e in run.events.named("bench_start"):
        if e.local is None:
            continue
        c, r = e.fields.get("concurrency"), e.fields.get("repeat")
        out.append(f"C={c} r{r}" if c and r else e.fields.get("pass", "?"))
    return out


def phases(run: RunFiles) -> list[tuple[str, list[tuple[str, float, float | None]]]]:
    """Lanes of the job-phase plot: per replica loading and warm-up; the router and benchmark."""
    ev = run.events
    lanes: dict[str, list] = {}

    def span(lane, phase, start_ev, end_ev):
        if start_ev is not None and start_ev.local is not None:
            end = run.seconds(end_ev.local) if end_ev is not None and end_ev.local else None
            lanes.setdefault(lane, []).append((phase, run.seconds(start_ev.local), end))

    f = ev.first
    span("job", "preflight", f.get("preflight_start"), f.get("preflight_done"))
    for g in sorted(ev.replicas()):
        def first(name, g=g):
            return next((e for e in ev.events if e.name == name and e.get_int("replica") == g), None)
        span(f"replica {g}", "loading", first("server_launch"), first("ready"))
        span(f"replica {g}", "warm-up", first("warmup_start"), first("warmup_done"))
    span("router", "router", f.get("router_launch"), f.get("router_ready"))
    starts, ends = ev.named("bench_start"), ev.named("bench_end")
    for k, s in enumerate(starts):
        e = next((x for x in ends if x.line > s.line), None)
        span("client", "benchmark", s, e)
    return list(lanes.items())


def job_end(run: RunFiles) -> float | None:
    for name in ("job_end", "teardown"):
        t = run.event_time(name, last=True)
        if t is not None:
            return run.seconds(t)
    return None


# ---- time axes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clock:
    """Time zero of a run's plots: the first request's start (the client step starts seconds
    earlier: srun, imports, its own warm-up), in seconds since the run's origin (bench_start)."""
    t0: float = 0.0
    label: str = "seconds since the benchmark started"

    def at(self, x: float | None) -> float | None:
        return None if x is None else x - self.t0

    def span(self, w: tuple) -> tuple:
        return tuple(self.at(x) for x in w)


def clock(run: RunFiles, tl: Timeline | None = None) -> Clock:
    """Zero at the first request's start: the timeline's earliest start, else the first access
    line of the benchmark window; the origin's own label when the run sent no request."""
    tl = tl if tl is not None else timeline(run)
    starts = [r.start for r in tl.requests if r.start is not None]
    if starts:
        return Clock(min(starts), "seconds since the first request")
    return Clock(0.0, run.origin_label)


def shift_timeline(tl: Timeline, c: Clock) -> Timeline:
    """The timeline on the clock's axis."""
    from dataclasses import replace
    reqs = tuple(replace(r, start=c.at(r.start), first_token=c.at(r.first_token), end=c.at(r.end),
                         arrival=c.at(r.arrival)) for r in tl.requests)
    return replace(tl, requests=reqs, concurrency=tuple((c.at(t), n) for t, n in tl.concurrency),
                   failure=c.at(tl.failure), bench_end=c.at(tl.bench_end))


def shift_windows(win: dict, c: Clock) -> dict:
    return {k: [c.span(w) for w in v] for k, v in win.items()}


def bench_span(run: RunFiles, c: Clock) -> tuple[float, float] | None:
    """The benchmark as the client measured it: from the first request, its 'duration' long."""
    rec = run.record or {}
    d = rec.get("duration")
    return (0.0, float(d)) if isinstance(d, (int, float)) and c.label.endswith("first request") else None


def split_gaps(ts: list, vs: list, *, factor: float = 3.0, breaks: tuple = ()) -> tuple[list, list]:
    """Points with a None between two samples further apart than `factor` times the median
    interval, or on both sides of a break (a pass boundary), so a line is never drawn across a
    pause (prefill, between passes) as if the value had ramped through it."""
    pts = [(t, v) for t, v in zip(ts, vs) if t is not None and v is not None]
    if len(pts) < 2:
        return [t for t, _ in pts], [v for _, v in pts]
    gaps = sorted(b[0] - a[0] for a, b in zip(pts, pts[1:]))
    limit = factor * gaps[len(gaps) // 2] if gaps[len(gaps) // 2] > 0 else float("inf")
    xs, ys = [pts[0][0]], [pts[0][1]]
    for (t0, _), (t1, v1) in zip(pts, pts[1:]):
        if t1 - t0 > limit or any(t0 < b <= t1 for b in breaks):
            xs.append(None)
            ys.append(None)
        xs.append(t1)
        ys.append(v1)
    return xs, ys


# ---- run context --------------------------------------------------------------------------------

def run_context(run: RunFiles) -> str:
    """'tp32 · 16384 -> 512 tokens · C=8 · 40 prompts · Kimi-K3 · run <id>' for a figure's
    header, from the launch manifest's resolved experiment and the pass's own concurrency and
    prompts (a sweep's pass, not the mode's default)."""
    exp = run.manifest.config if run.manifest is not None else None
    ref = run.summary.ref if run.summary is not None else None
    bench = exp.benchmark if exp is not None else None
    parts = [run.mode]
    if bench is not None and bench.input_len and bench.output_len:
        parts.append(f"{bench.input_len} -> {bench.output_len} tokens")
    c = (ref.concurrency if ref is not None else None) or (bench.concurrency if bench is not None else None)
    if c:
        parts.append(f"C={c}")
    n = (ref.prompts if ref is not None else None) or (bench.num_prompts if bench is not None else None)
    if n:
        parts.append(f"{n} prompts")
    model = getattr(exp.paths, "model", None) if exp is not None else None
    if model:
        parts.append(str(model).rstrip("/").rsplit("/", 1)[-1])
    parts.append(f"run {run.run_id}")
    return " · ".join(str(p) for p in parts)


# ---- TPOT / ITL distributions -------------------------------------------------------------------

def tpot_itl(record: dict | None) -> dict[str, list[float]]:
    """Per successful request its TPOT ((E2E - TTFT) / (output tokens - 1), ms, bench_serving's
    definition), and every inter-token latency of every successful request (ms). A request whose
    gaps were folded into one (stored details that keep only their sum: more than 2 output tokens,
    one gap) has a TPOT but no inter-token latencies: its one 'gap' is not one."""
    out = {"tpot": [], "itl": []}
    if not record or not isinstance(record.get("itls"), list):
        return out
    outs, errs = record.get("output_lens") or [], record.get("errors") or []
    for i, req in enumerate(record["itls"]):
        if (i < len(errs) and errs[i]) or not isinstance(req, list):
            continue
        gaps = [x for x in req if isinstance(x, (int, float))]
        n = outs[i] if i < len(outs) and isinstance(outs[i], int) else len(gaps) + 1
        if n > 1 and gaps:
            out["tpot"].append(math.fsum(gaps) / (n - 1) * 1000.0)
        if not (len(gaps) == 1 and n > 2):
            out["itl"] += [x * 1000.0 for x in gaps]
    return out


# ---- server metrics over time -------------------------------------------------------------------

def metrics_over_time(run: RunFiles, c: Clock | None = None) -> dict[int, dict[str, list]]:
    """replica -> {'t', 'in_flight', 'running', 'queued', 'kv_usage'} per scrape round, from the
    collector's server_metrics.replicas[].series (docs/metrics.md), on the clock's axis."""
    c = c or Clock()
    sm = run.summary.server_metrics if run.summary is not None else None
    out = {}
    for r in sm.replicas if sm is not None else ():
        if not r.series:
            continue
        d = {k: [] for k in ("t", "in_flight", "running", "queued", "kv_usage")}
        for p in r.series:
            ts = _parse_local(p.local)
            d["t"].append(c.at(run.seconds(ts)) if ts is not None else None)
            for k in ("in_flight", "running", "queued", "kv_usage"):
                d[k].append(getattr(p, k))
        out[r.replica] = d
    return out


def _parse_local(text):
    from ..parse.text import parse_ts
    return parse_ts(text) if isinstance(text, str) else None


# ---- throughput per GPU against interactivity -----------------------------------------------------

@dataclass(frozen=True)
class Interactivity:
    label: str                  # mode (or run)
    concurrency: int | None
    tok_s_user: float           # 1000 / TPOT mean (ms): one user's decode speed
    tok_s_gpu: float            # the primary output tok/s (steady state when there) over every GPU of the run
    verdict: str = "ok"
    makespan_gpu: float | None = None   # the makespan output tok/s per GPU, when the primary is another
    ttft_s: float | None = None         # TTFT mean
    e2e_s: float | None = None          # E2E mean
    line: str | None = None             # points of one line (a mode's concurrencies); None: a point alone
    primary: str = "output tok/s"       # what tok_s_gpu is


def interactivity_points(rows: list[dict]) -> list[Interactivity]:
    """rows: {label, concurrency, output_tps, tpot_ms, gpus[, verdict, steady_tps, ttft_s, e2e_s,
    line]} -> the points of the throughput-per-GPU charts (InferenceX, srt-slurm, AIPerf): x = tok/s
    per user = 1000 / TPOT (or TTFT, E2E), y = the primary output tok/s (the steady state when the
    row has it, the makespan figure beside it) / GPUs. Rows without TPOT or GPU count are left out
    (left_out says which). `line` (default: the label) joins a mode's concurrencies; a row with
    line None (a run of a history) is a point alone."""
    out = []
    placed = [r for r in rows if r.get("tpot_ms") and r.get("output_tps") is not None and r.get("gpus")]
    every = all(r.get("steady_tps") is not None for r in placed)     # one y quantity for every point
    for r in placed:
        tpot, tps, gpus = r.get("tpot_ms"), r.get("output_tps"), r.get("gpus")
        steady = r.get("steady_tps") if every else None
        y = float(steady if steady is not None else tps) / float(gpus)
        out.append(Interactivity(str(r.get("label")), r.get("concurrency"), 1000.0 / float(tpot), y,
                                 str(r.get("verdict") or "ok"),
                                 float(tps) / float(gpus) if steady is not None else None,
                                 r.get("ttft_s"), r.get("e2e_s"), r.get("line", str(r.get("label"))),
                                 "steady-state output tok/s" if steady is not None else "output tok/s"))
    return out


def left_out(rows: list[dict]) -> list[str]:
    """'<label> C=<c> (no TPOT)' of each row the throughput-per-GPU charts cannot place."""
    out = []
    for r in rows:
        why = "no TPOT" if not r.get("tpot_ms") else "no output tok/s" if r.get("output_tps") is None \
            else "GPU count unknown" if not r.get("gpus") else None
        if why:
            out.append(f"{r.get('label')}{'' if r.get('concurrency') is None else ' C=' + str(r['concurrency'])} ({why})")
    return out


def upper_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both x and y (higher is better on both), by x."""
    front = [i for i, (x, y) in enumerate(points)
             if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i)]
    return sorted(front, key=lambda i: points[i][0])


def gpus_of(run: RunFiles) -> int | None:
    """GPUs the run held: every role instance's nodes x GPUs per node (the resolved experiment)."""
    exp = run.manifest.config if run.manifest is not None else None
    return exp.gpus if exp is not None else None


# ---- passes of a campaign -------------------------------------------------------------------------

PASS_METRICS = (("output_tps", "output tok/s"), ("tpot_mean_ms", "TPOT mean (ms)"),
                ("ttft_mean_s", "TTFT mean (s)"))
# With the steady-state throughput as the primary metric: it first, the makespan figure beside it.
STEADY_PASS_METRICS = (("steady_output_tps", "output tok/s, steady state\n(primary)"),
                       ("output_tps", "output tok/s,\nmakespan")) + PASS_METRICS[1:]


def pass_strips(passes: list[PassRow], metrics=PASS_METRICS) -> dict[str, list[dict]]:
    """metric -> per (mode, load) group {label, values: [(repeat, value, ok)], mean}: every timed
    pass of a campaign as a dot, the failed ones marked, the mean of the ok ones (a load: a
    concurrency or an open-loop request rate, each its own group)."""
    out = {}
    groups: dict = {}
    for p in passes:
        groups.setdefault((p.mode, p.rate is not None, p.rate or 0.0, p.concurrency), []).append(p)
    multi_c = len({k[1:] for k in groups}) > 1
    for key, _ in metrics:
        rows = []
        for (mode, open_, q, c), ps in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), *kv[0][1:3],
                                                                              kv[0][3] or 0)):
            vals = [(p.repeat, p.value(key), p.ok) for p in ps]
            ok = [v for _, v, good in vals if good and isinstance(v, (int, float))]
            rows.append({"label": f"{mode} {load_label(c, q if open_ else None)}" if multi_c else str(mode),
                         "values": vals,
                         "mean": sum(ok) / len(ok) if ok else None})
        out[key] = rows
    return out


# ---- configuration side by side -----------------------------------------------------------------

def config_diff(sides: dict[str, dict]) -> list[tuple[str, list, bool]]:
    """sides: name -> {setting: value} (server flags, topology, benchmark). Rows (setting, values
    per side, differs), differing settings first, then the shared ones, each group by name."""
    keys = sorted({k for d in sides.values() for k in d})
    rows = []
    for k in keys:
        vals = [d.get(k) for d in sides.values()]
        rows.append((k, vals, len({repr(v) for v in vals}) > 1))
    return sorted(rows, key=lambda r: (not r[2], r[0]))


# ---- goodput against SLOs -------------------------------------------------------------------------

SLO_KEYS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"))


def goodput_rows(items: list[tuple[str, Goodput | None]]) -> list[dict]:
    """items: (label, the collector's goodput record: a pass's bench.goodput, or goodput_of_rows
    of several) -> {label, attainment, by_metric, goodput_rps, slo_ms, good, requests}; items
    without one are left out (no SLO configured)."""
    out = []
    for label, g in items:
        if g is None or g.attainment is None:
            continue
        out.append({"label": label, "attainment": float(g.attainment),
                    "by_metric": {k: float(v) for k, v in (g.attainment_by_metric or {}).items()
                                  if isinstance(v, (int, float))},
                    "goodput_rps": g.goodput_rps, "slo_ms": dict(g.slo_ms or {}),
                    "good": g.good, "requests": g.requests})
    return out


def goodput_of_rows(rows: list[PassRow], slo_ms: dict | None = None) -> Goodput | None:
    """A goodput record from pass rows (a campaign's passes): the mean over the rows that have
    one; None when none does."""
    have = [r for r in rows if r.value("slo_attainment") is not None]
    if not have:
        return None

    def mean(key):
        vals = [v for v in (r.value(key) for r in have) if v is not None]
        return sum(vals) / len(vals) if vals else None
    by = {k: mean(f"slo_attainment_{c}") for k, c in (("ttft", "ttft"), ("tpot", "tpot"), ("e2el", "e2e"))}
    requests = [int(r.value("requests_total") or 0) for r in have]
    good = sum(round(r.value("slo_attainment") * n) for r, n in zip(have, requests))
    return Goodput(slo_ms=dict(slo_ms or {}), requests=sum(requests), good=good,
                   goodput_rps=mean("goodput_rps"), attainment=mean("slo_attainment"),
                   attainment_by_metric={k: v for k, v in by.items() if v is not None})


def server_in_flight(run: RunFiles, c: Clock | None = None) -> list[tuple[float, float]]:
    """(t, HTTP requests in flight summed over replicas) at each scrape round every replica
    answered: what the servers held, for a run without the client's details."""
    per = metrics_over_time(run, c)
    if not per:
        return []
    rounds = [dict(zip(d["t"], d["in_flight"])) for d in per.values()]
    ts = sorted(set.intersection(*(set(r) for r in rounds)) - {None})
    return [(t, sum(r[t] for r in rounds)) for t in ts if all(r[t] is not None for r in rounds)]


# ---- load: errors and goodput against concurrency --------------------------------------------------

@dataclass(frozen=True)
class LoadPoint:
    mode: str
    concurrency: int
    requests: int               # requests sent by the passes that report a count
    failed: int                 # of them, not successful
    passes: int
    passes_ok: int
    attainment: float | None    # mean share of requests meeting every SLO, over the ok passes
    goodput_rps: float | None   # mean good requests per second, over the ok passes

    @property
    def error_pct(self) -> float | None:
        return 100.0 * self.failed / self.requests if self.requests else None


def load_points(rows: list[PassRow]) -> list[LoadPoint]:
    """Per (mode, concurrency) of a job's pass rows: the failed requests over every pass that
    counted its requests (a pass that failed outright counts as a failed pass, not as requests),
    and goodput over the ok passes. Closed-loop passes only: the chart is against concurrency (an
    open-loop pass's load is its rate: tables.load's section)."""
    groups: dict = {}
    for r in rows:
        if r.rate is None:
            groups.setdefault((r.mode, r.concurrency), []).append(r)
    out = []
    for (mode, c), rs in sorted(groups.items()):
        counted = [r for r in rs if (r.value("requests_total") or 0) > 0]
        total = sum(int(r.value("requests_total")) for r in counted)
        ok_req = sum(int(r.value("requests_ok") or 0) for r in counted)
        ok = [r for r in rs if r.ok]

        def mean(key):
            vals = [r.value(key) for r in ok if r.value(key) is not None]
            return sum(vals) / len(vals) if vals else None
        out.append(LoadPoint(mode, c, total, total - ok_req, len(rs), len(ok), mean("slo_attainment"),
                             mean("goodput_rps")))
    return out


def highest_meeting(points: list[LoadPoint], target_pct: float) -> dict[str, int | None]:
    """mode -> the highest concurrency whose ok passes' mean attainment reaches target_pct."""
    out: dict = {}
    for p in points:
        out.setdefault(p.mode, None)
        if p.attainment is not None and 100.0 * p.attainment >= target_pct:
            out[p.mode] = max(out[p.mode] or 0, p.concurrency)
    return out


# ---- per-request latency over time -------------------------------------------------------------------

@dataclass(frozen=True)
class LatencyPoint:
    t: float                    # the request's start, on the figure's time axis (s)
    ttft_ms: float
    e2e_ms: float
    tpot_ms: float | None       # None: one output token
    label: str = ""             # its pass (a launch's figure)


def timeline_latencies(tl: Timeline, record: dict | None) -> list[LatencyPoint]:
    """Each request of a run's timeline at its start: TTFT, E2E (its bars' lengths) and TPOT
    (bench_serving's definition), so drift and throttling over the benchmark show."""
    tpot = dict(zip(request_latencies(record)["index"], _tpots(record)))
    return [LatencyPoint(r.start, (r.first_token - r.start) * 1000.0, (r.end - r.start) * 1000.0, tpot.get(r.index))
            for r in tl.requests if r.first_token is not None and r.end is not None]


def _tpots(record: dict | None) -> list[float | None]:
    """Per successful request (request_latencies' order): its TPOT in ms, None for one token."""
    out = []
    if not record or not isinstance(record.get("ttfts"), list):
        return out
    itls, outs, errs = record.get("itls") or [], record.get("output_lens"), record.get("errors")
    for i, ttft in enumerate(record["ttfts"]):
        if (errs is not None and i < len(errs) and errs[i]) or (outs is not None and i < len(outs) and not outs[i]) \
                or not isinstance(ttft, (int, float)):
            continue
        gaps = [x for x in (itls[i] if i < len(itls) and isinstance(itls[i], list) else []) if isinstance(x, (int, float))]
        n = outs[i] if outs is not None and i < len(outs) and isinstance(outs[i], int) else len(gaps) + 1
        out.append(math.fsum(gaps) / (n - 1) * 1000.0 if n > 1 and gaps else None)
    return out


def pass_latencies(run: RunFiles, passes: list[tuple[str, dict | None]]) -> list[LatencyPoint]:
    """Every request of a launch's passes (key, client record) at its start on the launch's time
    axis (seconds since its first benchmark started): the client's replayed starts (its FIFO
    concurrency limit), each pass aligned on its first access line (else its bench_start)."""
    starts = {e.fields.get("pass"): e for e in run.events.named("bench_start") if e.local is not None}
    ends = {e.fields.get("pass"): e for e in run.events.named("bench_end") if e.local is not None}
    times = sorted(t for ts in run.access.values() for t in ts)
    out = []
    for key, rec in passes:
        s = starts.get(key)
        lat = request_latencies(rec)
        if s is None or not lat["index"]:
            continue
        e = ends.get(key)
        first = next((t for t in times if t >= s.local and (e is None or t <= e.local)), s.local)
        t0 = run.seconds(first)
        conc = rec.get("max_concurrency") if isinstance(rec.get("max_concurrency"), int) else None
        rel = replay_starts([x / 1000.0 for x in lat["e2e"]], conc)
        for r, ttft, e2e, tpot in zip(rel, lat["ttft"], lat["e2e"], _tpots(rec)):
            out.append(LatencyPoint(t0 + r, ttft, e2e, tpot, key or ""))
    return out
