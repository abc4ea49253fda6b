"""Server-side figures of the benchmark window from the raw /metrics scrapes the job took.

The job scrapes each replica head's /metrics (and the router's) at bench_start, every
metrics.interval_s during the benchmark and at bench_end, writing metrics/<target>-<stamp>.prom
and one ``metrics_scrape target=.. phase=start|during|end ok=1|0 file=..`` line in events.log.
From those (docs/metrics.md):

- counters (tokenizer side, whole replica): delta over the window of
  ``sglang:generation_tokens_total``, ``sglang:spec_verify_calls_total``,
  ``sglang:num_requests_total``; a counter that goes down between two scrapes was reset (server
  restarted): the increase is counted from zero after it (Prometheus' ``increase()``), and the
  reset is reported, never turned into a negative delta;
- exact acceptance length = delta generated tokens / delta verify calls (token-weighted), and
  rate = (length - 1) / (num_draft_tokens - 1), as SGLang's own per-interval formula;
- gauges (scheduler side): peak and mean running / queued requests, peak KV-cache usage, peak
  retracted requests, over the scrapes;
- the router's per-worker request counters, cross-checked against per-replica counts;
- per-replica decode speed: the window's delta of the server's TPOT histogram (0.5.23: per
  request, (finished - first token) / (completion tokens - 1), bench_serving's own TPOT
  definition) and of its end-to-end latency histogram; mean = delta sum / delta count, p50/p95
  interpolated inside the buckets as Prometheus' histogram_quantile() does. The client cannot
  tell which replica served a request; these can, so a slow replica is named (verdict rules).
A run without scrapes collects as before, with a note.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..parse.events import Event, EventLog
from ..rundir import Layout
from ..parse.prometheus import Scrape, ScrapeError, read_scrape

GEN = "sglang:generation_tokens_total"
VERIFY = "sglang:spec_verify_calls_total"
REQUESTS = "sglang:num_requests_total"
COUNTERS = (GEN, VERIFY, REQUESTS)
RUNNING, QUEUED = "sglang:num_running_reqs", "sglang:num_queue_reqs"
KV_USAGE = ("sglang:token_usage", "sglang:full_token_usage")
RETRACTED = "sglang:num_retracted_reqs"
DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
# Per-worker request counters of the router, newest first: smg >= 1.x; sglang-router 0.3.x
# (one increment per routed request's outcome); sglang-router <= 0.2.x.
ROUTER_COUNTERS = ("smg_worker_requests_total", "smg_worker_cb_outcomes_total",
                   "sgl_router_processed_requests_total")
AGREEMENT_PCT = 5.0
# Server-side TPOT histograms, newest first: SGLang 0.5.23's per-request TPOT; older releases'
# per-output-token histogram; the per-chunk inter-token latency. The first one present is used.
TPOT_HISTOGRAMS = ("sglang:request_time_per_output_token_seconds",
                   "sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds")
E2E_HISTOGRAM = "sglang:e2e_request_latency_seconds"


@dataclass(frozen=True)
class HistogramWindow:
    """One latency histogram's observations inside the benchmark window (milliseconds)."""
    metric: str
    count: float
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None


@dataclass(frozen=True)
class ScrapeRef:
    target: str                 # r<G> | router
    phase: str                  # start | during | end
    epoch: float
    local: str | None
    ok: bool
    file: str | None            # run-dir relative
    detail: str = ""            # http status / curl status of a failed scrape


@dataclass(frozen=True)
class ReplicaMetrics:
    replica: int
    exposed: bool = False               # usable start and end scrapes of SGLang metrics
    scrapes: int = 0                    # usable scrapes in the window
    failed_scrapes: int = 0
    first: str | None = None            # window's first / last scrape file
    last: str | None = None
    gen_tokens: float | None = None     # counter deltas over the window
    verify_calls: float | None = None
    requests: float | None = None
    accept_len: float | None = None     # delta gen / delta verify; None without verify calls
    accept_rate: float | None = None
    num_draft_tokens: int | None = None
    log_accept_len: float | None = None     # decode-log mean, for the agreement check
    log_samples: int = 0
    diff_pct: float | None = None       # (counters - log) / log * 100
    running_peak: float | None = None
    running_mean: float | None = None
    queued_peak: float | None = None
    queued_mean: float | None = None
    kv_usage_peak: float | None = None
    retracted_peak: float | None = None
    router_requests: float | None = None
    access_requests: int | None = None
    ranks: str = ""                     # which scheduler ranks the gauges cover
    resets: tuple = ()
    tpot: HistogramWindow | None = None     # server-side TPOT over the window
    e2e: HistogramWindow | None = None      # server-side end-to-end latency over the window


@dataclass(frozen=True)
class PooledMetrics:
    gen_tokens: float | None = None
    verify_calls: float | None = None
    requests: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    log_accept_len: float | None = None
    log_samples: int = 0
    diff_pct: float | None = None
    running_peak: float | None = None   # over scrape rounds, summed over replicas
    queued_peak: float | None = None
    kv_usage_peak: float | None = None
    retracted_peak: float | None = None


@dataclass(frozen=True)
class ServerMetrics:
    available: bool = False             # at least one replica exposed usable scrapes
    replicas: tuple = ()                # ReplicaMetrics
    pooled: PooledMetrics = PooledMetrics()
    router_metric: str | None = None    # the router counter the cross-check used
    router_scrapes: int = 0
    checks: tuple = ()                  # disagreements worth a look (acceptance, request counts)
    notes: tuple = ()                   # coverage, failures, resets, absence


# ---- scrape selection --------------------------------------------------------------------------

def window_scrapes(events: EventLog) -> dict[str, list[ScrapeRef]]:
    """target -> scrapes of the last benchmark pass (after the last bench_start, up to and
    including the target's first phase=end scrape), in order."""
    starts = [e for e in events.events if e.name == "bench_start"]
    if not starts:
        return {}
    line0 = starts[-1].line
    out: dict[str, list[ScrapeRef]] = {}
    ended: set[str] = set()
    for e in events.events:
        if e.line <= line0 or e.name != "metrics_scrape":
            continue
        ref = _ref(e)
        if ref.target in ended:
            continue
        out.setdefault(ref.target, []).append(ref)
        if ref.phase == "end":
            ended.add(ref.target)
    return out


def _ref(e: Event) -> ScrapeRef:
    f = e.fields
    detail = ", ".join(f"{k} {f[k]}" for k in ("http", "curl_rc") if f.get(k))
    return ScrapeRef(f.get("target", "?"), f.get("phase", "during"), e.epoch,
                     e.local.isoformat(sep=" ", timespec="milliseconds") if e.local else None,
                     f.get("ok") == "1", f.get("file") or None, detail)


def _load(run_dir: Path, refs: Sequence[ScrapeRef], problems: list[str], who: str
          ) -> list[tuple[ScrapeRef, Scrape]]:
    out = []
    for ref in refs:
        if not ref.ok or not ref.file:
            continue
        try:
            out.append((ref, read_scrape(run_dir / ref.file)))
        except (OSError, ScrapeError) as e:
            problems.append(f"{who}: scrape {ref.file} unreadable ({e})")
    return out


# ---- counters ----------------------------------------------------------------------------------

def increase(values: Sequence[tuple[str, float]]) -> tuple[float | None, list[str]]:
    """Prometheus increase() over (when, value) points: a drop is a reset, after which the new
    value counts from zero. Returns (increase, descriptions of resets)."""
    if len(values) < 2:
        return None, []
    total, resets = 0.0, []
    for (t0, v0), (t1, v1) in zip(values, values[1:]):
        if v1 >= v0:
            total += v1 - v0
        else:
            total += v1
            resets.append(f"between {t0} and {t1}: {v0:g} -> {v1:g}")
    return total, resets


def _counter(scrape: Scrape, name: str) -> float:
    """A counter's value; 0 when the series has no sample yet (multiprocess collector)."""
    return scrape.total(name) or 0.0


# ---- histograms --------------------------------------------------------------------------------

def _buckets(scrape: Scrape, name: str) -> dict[float, float]:
    """upper bound -> cumulative count, summed over every series of the histogram."""
    out: dict[float, float] = {}
    for s in scrape.get(name + "_bucket"):
        try:
            le = float(s.label("le", "nan"))
        except ValueError:
            continue
        if math.isfinite(s.value) and le == le:
            out[le] = out.get(le, 0.0) + s.value
    return out


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile(): the q-quantile from (upper bound, cumulative count)
    pairs sorted by bound, interpolated linearly inside its bucket (the first bucket from 0);
    in the +Inf bucket, the largest finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lo_bound, lo_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lo_bound
            if count == lo_count:
                return bound
            return lo_bound + (bound - lo_bound) * (rank - lo_count) / (count - lo_count)
        lo_bound, lo_count = bound, count
    return lo_bound


def histogram_window(a: Scrape, b: Scrape, name: str) -> HistogramWindow | None:
    """The observations between two scrapes (None when absent, empty or reset in between)."""
    if name + "_count" not in b:
        return None
    count = (b.total(name + "_count") or 0.0) - (a.total(name + "_count") or 0.0)
    total = (b.total(name + "_sum") or 0.0) - (a.total(name + "_sum") or 0.0)
    if count <= 0 or total < 0:
        return None
    start, end = _buckets(a, name), _buckets(b, name)
    deltas = sorted((le, c - start.get(le, 0.0)) for le, c in end.items())
    if any(d < 0 for _, d in deltas):
        return None
    ms = [None if v is None else v * 1000.0 for v in
          (histogram_quantile(0.5, deltas), histogram_quantile(0.95, deltas))]
    return HistogramWindow(name, count, total / count * 1000.0, ms[0], ms[1])


def latency_windows(a: Scrape, b: Scrape) -> tuple[HistogramWindow | None, HistogramWindow | None]:
    """(TPOT, E2E) of the window from the first TPOT histogram the server exports."""
    tpot = next((w for w in (histogram_window(a, b, n) for n in TPOT_HISTOGRAMS) if w is not None), None)
    return tpot, histogram_window(a, b, E2E_HISTOGRAM)


# ---- gauges ------------------------------------------------------------------------------------

def _rank(s) -> tuple[int, int]:
    def num(key):
        try:
            return int(s.label(key, "0"))
        except ValueError:
            return 0
    return num("pp_rank"), num("tp_rank")


def gauge(scrape: Scrape, name: str) -> float | None:
    """A scheduler gauge for the whole replica: summed over DP ranks, each DP group read at its
    lowest (pp_rank, tp_rank) so pipeline stages reporting the same batch are not double-counted."""
    series = [s for s in scrape.get(name) if math.isfinite(s.value)]
    if not series:
        return None
    groups: dict[str, object] = {}
    for s in series:
        dp = s.label("dp_rank", "0")
        if dp not in groups or _rank(s) < _rank(groups[dp]):
            groups[dp] = s
    return sum(s.value for s in groups.values())


def gauge_max(scrape: Scrape, names: Sequence[str]) -> float | None:
    vals = [s.value for n in names for s in scrape.get(n) if math.isfinite(s.value)]
    return max(vals) if vals else None


def _peak_mean(points: Sequence[float | None], inner: Sequence[float | None]):
    vals = [v for v in points if v is not None]
    mid = [v for v in inner if v is not None] or vals
    return (max(vals) if vals else None), (sum(mid) / len(mid) if mid else None)


def coverage(scrapes: Sequence[Scrape], pp: int | None) -> str:
    """Which scheduler ranks the gauges come from, and what the tokenizer counters cover."""
    pps, tps, dps = set(), set(), set()
    for sc in scrapes:
        pps |= sc.label_values("pp_rank", [RUNNING])
        tps |= sc.label_values("tp_rank", [RUNNING])
        dps |= sc.label_values("dp_rank", [RUNNING])
    if not pps and not tps:
        return "no scheduler gauges in the scrapes"

    def fmt(vals):
        return ",".join(sorted(vals, key=lambda v: (len(v), v)))
    text = f"scheduler gauges from tp_rank {fmt(tps)}, pp_rank {fmt(pps)}" + \
        (f", dp_rank {fmt(dps)}" if dps else "")
    if pp and pp > 1:
        missing = sorted(set(range(pp)) - {int(p) for p in pps if p.isdigit()})
        if missing:
            text += (f"; pp stages {','.join(map(str, missing))} of {pp} run on other nodes and are "
                     "not covered (node rank 0's /metrics serves only its own schedulers)")
    return text + "; token/verify/request counters: the whole replica (tokenizer on node rank 0)"


# ---- per replica -------------------------------------------------------------------------------

def replica_metrics(run_dir: Path, g: int, refs: Sequence[ScrapeRef], *, pp: int | None,
                    draft_tokens: int | None, log_accept: float | None, log_samples: int,
                    problems: list[str]) -> tuple[ReplicaMetrics, list[Scrape]]:
    who = f"replica {g} /metrics"
    failed = [r for r in refs if not r.ok]
    loaded = [(r, sc) for r, sc in _load(run_dir, refs, problems, who) if sc.prefixed("sglang:")]
    if failed:
        problems.append(f"{who}: {len(failed)} of {len(refs)} scrapes failed ("
                        + "; ".join(f"{r.phase} at {r.local}: {r.detail or 'no answer'}"
                                    for r in failed[:3]) + ("; ..." if len(failed) > 3 else "") + ")")
    has_start = bool(loaded) and loaded[0][0].phase == "start"
    has_end = bool(loaded) and loaded[-1][0].phase == "end"
    base = ReplicaMetrics(g, scrapes=len(loaded), failed_scrapes=len(failed),
                          log_accept_len=log_accept, log_samples=log_samples)
    if not loaded:
        return base, []
    scr = [sc for _, sc in loaded]
    when = [r.local or f"{r.epoch:.3f}" for r, _ in loaded]
    deltas, resets = {}, []
    for name in COUNTERS:
        d, rs = increase(list(zip(when, (_counter(sc, name) for sc in scr))))
        deltas[name] = d
        resets += [f"{name} {x}" for x in rs]
    exposed = has_start and has_end
    if not exposed:
        problems.append(f"{who}: no usable {'start' if not has_start else 'end'} scrape; counter "
                        "deltas do not cover the whole benchmark and are not reported")
        deltas = dict.fromkeys(COUNTERS)
    ndt = draft_tokens
    for sc in scr:
        v = gauge_max(sc, [DRAFT_TOKENS])
        if v and v > 1:
            ndt = int(v)
    gen, ver = deltas[GEN], deltas[VERIFY]
    accept = gen / ver if gen is not None and ver else None
    rate = (accept - 1) / (ndt - 1) if accept is not None and ndt and ndt > 1 else None
    inner = [sc for (r, sc) in loaded if r.phase == "during"]
    run_pk, run_mean = _peak_mean([gauge(sc, RUNNING) for sc in scr], [gauge(sc, RUNNING) for sc in inner])
    q_pk, q_mean = _peak_mean([gauge(sc, QUEUED) for sc in scr], [gauge(sc, QUEUED) for sc in inner])
    kv = [gauge_max(sc, KV_USAGE) for sc in scr]
    retr = [gauge_max(sc, [RETRACTED]) for sc in scr]
    diff = (accept / log_accept - 1) * 100 if accept is not None and log_accept else None
    tpot, e2e = latency_windows(scr[0], scr[-1]) if exposed and not resets else (None, None)
    return ReplicaMetrics(
        g, exposed=exposed, scrapes=len(loaded), failed_scrapes=len(failed),
        first=loaded[0][0].file, last=loaded[-1][0].file,
        gen_tokens=gen, verify_calls=ver, requests=deltas[REQUESTS], accept_len=accept,
        accept_rate=rate, num_draft_tokens=ndt if accept is not None else None,
        log_accept_len=log_accept, log_samples=log_samples, diff_pct=diff,
        running_peak=run_pk, running_mean=run_mean, queued_peak=q_pk, queued_mean=q_mean,
        kv_usage_peak=max([v for v in kv if v is not None], default=None),
        retracted_peak=max([v for v in retr if v is not None], default=None),
        ranks=coverage(scr, pp), resets=tuple(resets), tpot=tpot, e2e=e2e), scr


# ---- router ------------------------------------------------------------------------------------

def router_counts(run_dir: Path, refs: Sequence[ScrapeRef], worker_replica: Mapping[str, int],
                  problems: list[str]) -> tuple[str | None, dict[int, float], int]:
    """(counter name, replica -> routed requests over the window, usable scrapes)."""
    loaded = _load(run_dir, refs, problems, "router /metrics")
    if len(loaded) < 2 or loaded[0][0].phase != "start" or loaded[-1][0].phase != "end":
        return None, {}, len(loaded)
    a, b = loaded[0][1], loaded[-1][1]
    name = next((n for n in ROUTER_COUNTERS if n in a or n in b), None)
    if name is None:
        return None, {}, len(loaded)
    out: dict[int, float] = {}
    for w in a.label_values("worker", [name]) | b.label_values("worker", [name]):
        g = worker_replica.get(w.rstrip("/"))
        d, rs = increase([("start", a.total(name, lambda s: s.label("worker") == w) or 0.0),
                          ("end", b.total(name, lambda s: s.label("worker") == w) or 0.0)])
        if rs:
            problems.append(f"router /metrics: {name} of {w} went down ({rs[0]}): router restarted?")
        if g is None:
            problems.append(f"router /metrics: worker {w} is not a replica head of this job")
        elif d is not None:
            out[g] = out.get(g, 0.0) + d
    return name, out, len(loaded)


def worker_urls(events: EventLog) -> dict[str, int]:
    """'http://<head or address>:<port>' -> replica, from the job's 'hosts' events and the
    'addresses' event (the router's worker URLs use the head's address, cluster.address)."""
    out, ports = {}, {}
    for e in events.named("hosts"):
        g, head, port = e.get_int("replica"), e.fields.get("head"), e.fields.get("port")
        if g is not None and head and port:
            out[f"http://{head}:{port}"] = g
            ports[g] = port
    for e in events.named("addresses"):
        for key, addr in e.fields.items():
            if key.startswith("replica") and key[7:].isdigit() and int(key[7:]) in ports:
                out[f"http://{addr}:{ports[int(key[7:])]}"] = int(key[7:])
    return out


# ---- the run -----------------------------------------------------------------------------------

def collect_server_metrics(run_dir: str | Path, events: EventLog, replicas: Sequence,
                           pooled_log, config: Mapping | None = None) -> ServerMetrics:
    """replicas: ReplicaSummary (decode-log acceptance, access-log counts); pooled_log: Pooled."""
    run_dir = Path(run_dir)
    refs = window_scrapes(events)
    config = config or {}
    mode = config.get("mode") if isinstance(config.get("mode"), Mapping) else {}
    pp = mode.get("pp") if isinstance(mode.get("pp"), int) else None
    draft = draft_tokens_of(config)
    if not any(t.startswith("r") for t in refs):
        why = ("the job took no /metrics scrapes (older job script, or metrics scraping off)"
               if not any(Layout(run_dir).metrics.glob("*.prom")) else
               "metrics/ holds files but events.log records no scrape of this benchmark")
        return ServerMetrics(notes=(f"server metrics: none; {why}; figures from the logs only",))
    problems: list[str] = []
    checks: list[str] = []
    reps, scr_by_rep = [], {}
    for r in replicas:
        rm, scr = replica_metrics(run_dir, r.replica, refs.get(f"r{r.replica}", []), pp=pp,
                                  draft_tokens=draft, log_accept=r.accept_len,
                                  log_samples=r.accept_samples, problems=problems)
        reps.append(rm)
        scr_by_rep[r.replica] = scr
    name, routed, n_router = router_counts(run_dir, refs.get("router", []), worker_urls(events),
                                           problems)
    by_rep = {r.replica: r for r in replicas}
    final = []
    for rm in reps:
        rs = by_rep[rm.replica]
        access = rs.requests_served if rs.requests_source == "access_log" else None
        rm = _with(rm, router_requests=routed.get(rm.replica) if name else None,
                   access_requests=access)
        final.append(rm)
        checks += _request_checks(rm, name)
        if rm.resets:
            problems.append(f"replica {rm.replica} /metrics: counter reset in the window (server "
                            f"restarted?): {rm.resets[0]}" + (f" (+{len(rm.resets) - 1} more)"
                                                              if len(rm.resets) > 1 else ""))
        if rm.exposed:
            problems.append(f"replica {rm.replica} /metrics coverage: {rm.ranks}")
        if rm.accept_len is not None:
            c = agreement_check(f"replica {rm.replica}", rm.accept_len, rm.log_accept_len,
                                rm.log_samples, rm)
            if c:
                checks.append(c)
    pooled = _pooled(final, scr_by_rep, pooled_log)
    if pooled.accept_len is not None:
        c = agreement_check("pooled", pooled.accept_len, pooled.log_accept_len,
                            pooled.log_samples, None, final)
        if c:
            checks.append(c)
    available = any(r.exposed for r in final)
    if not available:
        problems.insert(0, "server metrics: no replica exposed usable /metrics at both ends of "
                        "the benchmark (servers without --enable-metrics, or an SGLang without "
                        "/metrics); figures from the logs only")
    return ServerMetrics(available, tuple(final), pooled, name, n_router, tuple(checks),
                         tuple(problems))


def draft_tokens_of(config: Mapping) -> int | None:
    """--speculative-num-draft-tokens (or DFlash's block size) from the resolved config."""
    pairs: list = []
    for src in (config.get("server_args"), (config.get("mode") or {}).get("args")
                if isinstance(config.get("mode"), Mapping) else None):
        if isinstance(src, Mapping):
            pairs += list(src.items())
        elif isinstance(src, (list, tuple)):
            pairs += [tuple(p) for p in src if isinstance(p, (list, tuple)) and len(p) == 2]
    flags = dict(pairs)
    for k in ("speculative-dflash-block-size", "speculative-num-draft-tokens"):
        try:
            return int(flags[k])
        except (KeyError, TypeError, ValueError):
            continue
    return None


def _with(rm: ReplicaMetrics, **kw) -> ReplicaMetrics:
    from dataclasses import replace
    return replace(rm, **kw)


def _request_checks(rm: ReplicaMetrics, router_name: str | None) -> list[str]:
    counts = {"router": rm.router_requests, "server access log": rm.access_requests,
              "server counter": rm.requests if rm.exposed else None}
    known = {k: v for k, v in counts.items() if v is not None}
    if len(known) >= 2 and len({round(v) for v in known.values()}) > 1:
        return [f"replica {rm.replica}: requests in the window differ: " + ", ".join(
            f"{k} {v:g}" for k, v in known.items())
            + (f" ({router_name})" if router_name and rm.router_requests is not None else "")]
    return []


def agreement_check(who: str, counters: float, log: float | None, log_samples: int,
                    rm: ReplicaMetrics | None, all_reps: Sequence[ReplicaMetrics] = ()) -> str | None:
    """A message when the counter-based and the decode-log acceptance length differ > 5%."""
    if log is None:
        return None
    diff = (counters / log - 1) * 100
    if abs(diff) <= AGREEMENT_PCT:
        return None
    reasons = []
    reps = [rm] if rm else list(all_reps)
    if any(r.resets for r in reps):
        reasons.append("a counter reset (server restart) inside the window")
    if log_samples < 5:
        reasons.append(f"only {log_samples} decode-log samples")
    varied = [r for r in reps if r.running_peak and r.running_mean is not None
              and r.running_mean < 0.75 * r.running_peak]
    if varied:
        r = varied[0]
        reasons.append(f"batch sizes varied (running requests peak {r.running_peak:g}, mean "
                       f"{r.running_mean:.1f}): the decode-log figure is an unweighted mean of "
                       "interval samples, the counters weight every generated token")
    if not reasons:
        reasons.append("the log mean weights every decode-log interval equally, the counters "
                       "every token (and count each request's first, prefill-made token)")
    return (f"{who}: accept length from counters {counters:.3f} vs decode log {log:.3f} "
            f"({diff:+.1f}%, over {AGREEMENT_PCT:g}%); likely: " + "; ".join(reasons))


def _pooled(reps: Sequence[ReplicaMetrics], scr_by_rep: Mapping[int, list[Scrape]],
            pooled_log) -> PooledMetrics:
    ok = [r for r in reps if r.exposed]

    def tot(attr):
        vals = [getattr(r, attr) for r in ok if getattr(r, attr) is not None]
        return sum(vals) if vals else None
    gen, ver = tot("gen_tokens"), tot("verify_calls")
    accept = gen / ver if gen is not None and ver else None
    ndts = {r.num_draft_tokens for r in ok if r.num_draft_tokens}
    rate = (accept - 1) / (next(iter(ndts)) - 1) if accept is not None and len(ndts) == 1 \
        and next(iter(ndts)) > 1 else None
    log = getattr(pooled_log, "accept_len", None)
    n_log = getattr(pooled_log, "samples", 0) or 0

    def peak(attr):
        vals = [getattr(r, attr) for r in reps if getattr(r, attr) is not None]
        return max(vals) if vals else None
    # Scrape rounds line up across replicas (one loop scrapes every target): sum per round.
    rounds = [scr_by_rep[r.replica] for r in ok if scr_by_rep.get(r.replica)]
    n = min((len(x) for x in rounds), default=0)

    def round_peak(name):
        sums = []
        for i in range(n):
            vals = [gauge(x[i], name) for x in rounds]
            if any(v is not None for v in vals):
                sums.append(sum(v for v in vals if v is not None))
        return max(sums) if sums else None
    return PooledMetrics(
        gen_tokens=gen, verify_calls=ver, requests=tot("requests"), accept_len=accept,
        accept_rate=rate, log_accept_len=log, log_samples=n_log,
        diff_pct=(accept / log - 1) * 100 if accept is not None and log else None,
        running_peak=round_peak(RUNNING) if n and len({len(x) for x in rounds}) == 1
        else peak("running_peak"),
        queued_peak=round_peak(QUEUED) if n and len({len(x) for x in rounds}) == 1
        else peak("queued_peak"),
        kv_usage_peak=peak("kv_usage_peak"), retracted_peak=peak("retracted_peak"))


__all__ = ["ServerMetrics", "ReplicaMetrics", "PooledMetrics", "HistogramWindow",
           "collect_server_metrics", "histogram_quantile", "histogram_window",
           "increase", "gauge", "window_scrapes", "draft_tokens_of", "agreement_check"]
