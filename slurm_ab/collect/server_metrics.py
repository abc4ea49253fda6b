"""Server-side figures of the benchmark window from the raw /metrics scrapes the job took.

The job scrapes every node of every replica (``r<G>n<R>``) and the router at bench_start, every
metrics.interval_s during the benchmark and at bench_end (scrapes.py; docs/metrics.md). From those:

- counters (tokenizer side, node rank 0, the whole replica): delta over the window of
  ``sglang:generation_tokens_total``, ``sglang:spec_verify_calls_total``,
  ``sglang:num_requests_total``; a counter that goes down between two scrapes was reset (server
  restarted): the increase is counted from zero after it (Prometheus' ``increase()``), and the
  reset is reported, never turned into a negative delta;
- exact acceptance length = delta generated tokens / delta verify calls (token-weighted), and
  rate = (length - 1) / (num_draft_tokens - 1), as SGLang's own per-interval formula;
- gauges (schedulers, on the node each runs on), per scrape round (gauges.py for SGLang's
  semantics): requests in flight (HTTP), running and queued requests, each pipeline stage's
  KV-cache usage; peaks and means per replica, and pooled peaks summed over replicas round by
  round. With PP, sglang:num_running_reqs is the micro-batch a stage just processed, so the
  replica's running requests are its in-flight requests minus its queue;
- the router's per-worker request counters, cross-checked against per-replica counts;
- per-replica decode speed: the window's delta of the server's TPOT histogram, one histogram name
  for every replica (histograms.py), and of its end-to-end latency histogram. The client cannot
  tell which replica served a request; these can, so a slow replica is named (verdict rules).
A run without scrapes collects as before, with a note.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from ..parse.events import EventLog
from ..parse.prometheus import Scrape
from ..model.experiment import Experiment, kind_of
from ..model.rundir import RELATIVE, Layout
from .gauges import (DRAFT_TOKENS, QUEUED, RETRACTED, RUNNING, by_stage, first_stage, gauge,
                     gauge_max, in_flight, kv_by_stage, label_set)
from .histograms import (E2E_HISTOGRAM, TPOT_HISTOGRAMS, HistogramWindow, histogram_quantile,
                         histogram_window, latency_windows)
from .scrapes import ScrapeRef, by_replica, load, round_order, window_scrapes

GEN = "sglang:generation_tokens_total"
VERIFY = "sglang:spec_verify_calls_total"
REQUESTS = "sglang:num_requests_total"
COUNTERS = (GEN, VERIFY, REQUESTS)
# Per-worker request counters of the router, newest first: smg >= 1.x; sglang-router 0.3.x
# (one increment per routed request's outcome); sglang-router <= 0.2.x.
ROUTER_COUNTERS = ("smg_worker_requests_total", "smg_worker_cb_outcomes_total",
                   "sgl_router_processed_requests_total")
AGREEMENT_PCT = 5.0


@dataclass(frozen=True)
class GaugePoint:
    """One scrape round of one replica (all its nodes' scrapes of that round)."""
    round: str
    epoch: float
    local: str | None
    in_flight: float | None = None      # HTTP requests in flight on node rank 0
    running: float | None = None        # the replica's running requests (see running_source)
    queued: float | None = None
    micro_batch: float | None = None    # PP: the largest stage's num_running_reqs (one micro-batch)
    kv_usage: float | None = None       # the fullest stage's pool
    kv_stages: tuple = ()               # ((pp_rank, usage), ...)
    nodes: tuple = ()                   # node ranks with a usable scrape in this round


@dataclass(frozen=True)
class ReplicaMetrics:
    replica: int
    exposed: bool = False               # usable start and end scrapes of node rank 0
    scrapes: int = 0                    # usable scrapes in the window (every node)
    failed_scrapes: int = 0
    first: str | None = None            # node rank 0's first / last scrape file of the window
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
    kv_usage_peak: float | None = None  # the fullest stage
    retracted_peak: float | None = None
    router_requests: float | None = None
    access_requests: int | None = None
    ranks: str = ""                     # what the scrapes covered (nodes, stages, DP ranks)
    resets: tuple = ()
    tpot: HistogramWindow | None = None     # server-side TPOT over the window (run's one metric)
    e2e: HistogramWindow | None = None      # server-side end-to-end latency over the window
    in_flight_peak: float | None = None
    in_flight_mean: float | None = None
    running_source: str = ""            # how running was read (scheduler gauge / in flight - queued)
    micro_batch_peak: float | None = None   # PP only
    kv_stage_peaks: tuple = ()          # ((pp_rank, peak usage), ...)
    nodes_scraped: tuple = ()           # node ranks with at least one usable scrape
    nodes_missing: tuple = ()           # node ranks of the replica with none
    series: tuple[GaugePoint, ...] = ()     # per round, in round order


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
    in_flight_peak: float | None = None
    rounds: int = 0                     # rounds every exposed replica has (the pooled peaks' base)
    rounds_skipped: tuple = ()          # rounds some replica lacks (not summed)


@dataclass(frozen=True)
class ServerMetrics:
    available: bool = False             # at least one replica exposed usable scrapes
    replicas: tuple[ReplicaMetrics, ...] = ()
    pooled: PooledMetrics = PooledMetrics()
    router_metric: str | None = None    # the router counter the cross-check used
    router_scrapes: int = 0
    checks: tuple = ()                  # disagreements worth a look (acceptance, request counts)
    notes: tuple = ()                   # coverage, failures, resets, absence
    tpot_metric: str | None = None      # the one TPOT histogram every replica's figure comes from


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


# ---- the run's configuration ------------------------------------------------------------------

def _config(exp):
    """The run's Experiment (an older manifest's config dict reads as one: Experiment.from_dict)."""
    return Experiment.from_dict(dict(exp)) if isinstance(exp, Mapping) else exp


def _role(exp, role: str | None = None):
    """One role of the run's mode (its first when unnamed or unknown); None without a config."""
    roles = getattr(getattr(exp, "mode", None), "roles", None) or ()
    return next((r for r in roles if r.name == role), roles[0] if roles else None)


def role_of(exp, g: int) -> str | None:
    """The role of het group g of the run's mode."""
    return next((c.role for c in getattr(exp, "components", ()) or () if c.group == g), None)


def _flags(exp, role: str | None = None) -> dict:
    """One role's merged server flags (Experiment.role_flags; the first role's when unnamed)."""
    exp = _config(exp)
    r = _role(exp, role)
    return dict(exp.role_flags(r.name)) if r is not None else {}


def _pp_of(exp, role: str | None = None) -> int | None:
    r = _role(_config(exp), role)
    pp = getattr(r, "pp", None)
    return pp if isinstance(pp, int) else None


def draft_tokens_of(exp, role: str | None = None) -> int | None:
    """--speculative-num-draft-tokens (or DFlash's block size) of a role's merged flags."""
    flags = _flags(exp, role)
    for k in ("speculative-dflash-block-size", "speculative-num-draft-tokens"):
        try:
            return int(flags[k])
        except (KeyError, TypeError, ValueError):
            continue
    return None


def _dp_of(exp, role: str | None = None) -> int | None:
    """DP ranks whose schedulers report separately (DP attention), when a role's flags say so
    (per role: a decode's --dp-size 2 is its own)."""
    flags = _flags(exp, role)
    for k in ("attn-dp-size", "dp-size"):
        try:
            n = int(flags[k])
        except (KeyError, TypeError, ValueError):
            continue
        if k == "attn-dp-size" or flags.get("enable-dp-attention"):
            return n
    return None


# ---- per replica -------------------------------------------------------------------------------

def _point(rnd: str, items: list[tuple[ScrapeRef, Scrape]], pp: int) -> GaugePoint:
    scr = [sc for _, sc in items]
    head = next((sc for r, sc in items if r.rank == 0), None)
    ref = next((r for r, _ in items if r.rank == 0), items[0][0])
    flight = in_flight(head) if head is not None else None
    queued = first_stage(scr, QUEUED)
    stages = by_stage(scr, RUNNING)
    kv = kv_by_stage(scr)
    if pp > 1:
        micro = max(stages.values()) if stages else None
        running = max(flight - (queued or 0.0), 0.0) if flight is not None else None
    else:
        micro, running = None, (stages[min(stages)] if stages else None)
    return GaugePoint(rnd, ref.epoch, ref.local, flight, running, queued, micro,
                      max(kv.values()) if kv else None, tuple(sorted(kv.items())),
                      tuple(sorted({r.rank for r, _ in items})))


def _peak_mean(points: Sequence[GaugePoint], attr: str):
    vals = [getattr(p, attr) for p in points if getattr(p, attr) is not None]
    mid = [getattr(p, attr) for p in points if p.round not in ("start", "end")
           and getattr(p, attr) is not None] or vals
    return (max(vals) if vals else None), (sum(mid) / len(mid) if mid else None)


def _fmt(vals) -> str:
    return ",".join(str(v) for v in sorted(vals))


def coverage(series: Sequence[GaugePoint], scrapes: Sequence[Scrape], *, pp: int, dp: int | None,
             nodes: Sequence[str], scraped: Sequence[int], running_source: str) -> tuple[str, tuple]:
    """(what the scrapes covered, node ranks never scraped)."""
    expected = list(range(len(nodes))) if nodes else sorted(scraped)
    missing = tuple(r for r in expected if r not in scraped)
    parts = [f"nodes scraped: node rank {_fmt(scraped) or '-'} of {len(expected) or '?'}"]
    if missing:
        parts.append("not scraped: " + ", ".join(
            f"node rank {r}" + (f" ({nodes[r]})" if r < len(nodes) else "") for r in missing))
    pps, tps, dps = (label_set(scrapes, k) for k in ("pp_rank", "tp_rank", "dp_rank"))
    if pps or tps:
        parts.append(f"scheduler gauges from tp_rank {_fmt(tps)}, pp_rank {_fmt(pps)}"
                     + (f", dp_rank {_fmt(dps)}" if dps else ""))
    else:
        parts.append("no scheduler gauges in the scrapes")
    if pp > 1 and pps:
        gone = sorted(set(range(pp)) - pps)
        if gone:
            parts.append(f"pp stages {_fmt(gone)} of {pp} not seen (their node's /metrics was not "
                         "read): their KV usage is unknown")
    if dp and dp > 1:
        gone = sorted(set(range(dp)) - dps)
        if gone:
            parts.append(f"dp ranks {_fmt(gone)} of {dp} not seen: running/queued summed over "
                         "the others only (too low)")
    parts.append(f"running requests: {running_source}")
    parts.append("token/verify/request counters and latency histograms: node rank 0 (the "
                 "tokenizer: the whole replica)")
    return "; ".join(parts), missing


def replica_metrics(run_dir: Path, g: int, nodes_refs: Mapping[int, Sequence[ScrapeRef]], *,
                    pp: int | None, dp: int | None = None, node_names: Sequence[str] = (),
                    draft_tokens: int | None, log_accept: float | None, log_samples: int,
                    problems: list[str]) -> tuple[ReplicaMetrics, dict]:
    """One replica's figures, and its latency windows by histogram name."""
    who = f"replica {g} /metrics"
    refs = [r for rank in sorted(nodes_refs) for r in nodes_refs[rank]]
    failed = [r for r in refs if not r.ok]
    loaded = [(r, sc) for r, sc in load(run_dir, refs, problems, who) if sc.prefixed("sglang:")]
    if failed:
        multi = len(nodes_refs) > 1
        problems.append(f"{who}: {len(failed)} of {len(refs)} scrapes failed (" + "; ".join(
            (f"node rank {r.rank} " if multi else "") + f"{r.phase} at {r.local}: "
            f"{r.detail or 'no answer'}" for r in failed[:3]) + ("; ..." if len(failed) > 3 else "") + ")")
    head = [(r, sc) for r, sc in loaded if r.rank == 0]
    has_start = bool(head) and head[0][0].phase == "start"
    has_end = bool(head) and head[-1][0].phase == "end"
    base = ReplicaMetrics(g, scrapes=len(loaded), failed_scrapes=len(failed),
                          log_accept_len=log_accept, log_samples=log_samples)
    if not loaded:
        return base, {}
    deltas, resets = {}, []
    for name in COUNTERS:
        d, rs = increase([(r.when, _counter(sc, name)) for r, sc in head])
        deltas[name] = d
        resets += [f"{name} {x}" for x in rs]
    exposed = has_start and has_end
    if not exposed:
        problems.append(f"{who}: no usable {'start' if not has_start else 'end'} scrape of node rank "
                        "0; counter deltas do not cover the whole benchmark and are not reported")
        deltas = dict.fromkeys(COUNTERS)
    scr = [sc for _, sc in loaded]
    ndt = draft_tokens
    v = gauge_max(scr, [DRAFT_TOKENS])
    if v and v > 1:
        ndt = int(v)
    gen, ver = deltas[GEN], deltas[VERIFY]
    accept = gen / ver if gen is not None and ver else None
    rate = (accept - 1) / (ndt - 1) if accept is not None and ndt and ndt > 1 else None
    stages = label_set(scr, "pp_rank")
    pp_eff = pp if pp else (max(stages) + 1 if stages else 1)
    rounds: dict[str, list] = {}
    for r, sc in loaded:
        rounds.setdefault(r.round, []).append((r, sc))
    series = tuple(_point(k, rounds[k], pp_eff) for k in round_order(rounds))
    source = ("scheduler num_running_reqs (DP ranks summed)" if pp_eff <= 1 else
              "in flight (HTTP, node rank 0) minus queued: with PP each stage's num_running_reqs "
              "is the micro-batch it just processed, not the replica's running requests")
    if pp_eff > 1 and all(p.in_flight is None for p in series):
        source = ("unknown: with PP num_running_reqs is one micro-batch, and the server exports no "
                  "sglang:http_requests_active to derive them from")
    scraped = sorted({r.rank for r, _ in loaded})
    ranks, missing = coverage(series, scr, pp=pp_eff, dp=dp, nodes=node_names, scraped=scraped,
                              running_source=source)
    kv_peaks: dict[int, float] = {}
    for p in series:
        for st, u in p.kv_stages:
            kv_peaks[st] = max(kv_peaks.get(st, u), u)
    run_pk, run_mean = _peak_mean(series, "running")
    q_pk, q_mean = _peak_mean(series, "queued")
    f_pk, f_mean = _peak_mean(series, "in_flight")
    diff = (accept / log_accept - 1) * 100 if accept is not None and log_accept else None
    windows = latency_windows(head[0][1], head[-1][1]) if exposed and not resets else {}
    return ReplicaMetrics(
        g, exposed=exposed, scrapes=len(loaded), failed_scrapes=len(failed),
        first=head[0][0].file if head else None, last=head[-1][0].file if head else None,
        gen_tokens=gen, verify_calls=ver, requests=deltas[REQUESTS], accept_len=accept,
        accept_rate=rate, num_draft_tokens=ndt if accept is not None else None,
        log_accept_len=log_accept, log_samples=log_samples, diff_pct=diff,
        running_peak=run_pk, running_mean=run_mean, queued_peak=q_pk, queued_mean=q_mean,
        kv_usage_peak=max(kv_peaks.values()) if kv_peaks else None,
        retracted_peak=gauge_max(scr, [RETRACTED]), ranks=ranks, resets=tuple(resets),
        e2e=windows.get(E2E_HISTOGRAM), in_flight_peak=f_pk, in_flight_mean=f_mean,
        running_source=source, micro_batch_peak=_peak_mean(series, "micro_batch")[0],
        kv_stage_peaks=tuple(sorted(kv_peaks.items())), nodes_scraped=tuple(scraped),
        nodes_missing=missing, series=series), windows


def choose_tpot(windows: Mapping[int, Mapping]) -> tuple[str | None, str | None]:
    """(the TPOT histogram every replica with one exports, a note when there is none)."""
    have = {g: w for g, w in windows.items() if any(n in w for n in TPOT_HISTOGRAMS)}
    if not have:
        return None, None
    for name in TPOT_HISTOGRAMS:
        if all(name in w for w in have.values()):
            return name, None
    per = ", ".join(f"replica {g}: {next(n for n in TPOT_HISTOGRAMS if n in w)}"
                    for g, w in sorted(have.items()))
    return None, (f"server TPOT: the replicas export different TPOT histograms ({per}); their "
                  "figures measure different things and are not compared")


# ---- router ------------------------------------------------------------------------------------

def router_counts(run_dir: Path, refs: Sequence[ScrapeRef], worker_replica: Mapping[str, int],
                  problems: list[str]) -> tuple[str | None, dict[int, float], int]:
    """(counter name, replica -> routed requests over the window, usable scrapes)."""
    loaded = load(run_dir, refs, problems, "router /metrics")
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


def node_names(events: EventLog) -> dict[int, list[str]]:
    """replica -> its hosts by node rank (the job's 'hosts ... nodes=a,b,c' events)."""
    out = {}
    for e in events.named("hosts"):
        g, nodes = e.get_int("replica"), e.fields.get("nodes")
        if g is not None and nodes:
            out[g] = nodes.split(",")
    return out


# ---- the run -----------------------------------------------------------------------------------

def collect_server_metrics(run_dir: str | Path, events: EventLog, replicas: Sequence,
                           pooled_log, exp=None) -> ServerMetrics:
    """replicas: ReplicaSummary (decode-log acceptance, access-log counts); pooled_log: Pooled;
    exp: the run's Experiment (or an older manifest's config dict)."""
    run_dir = Path(run_dir)
    refs = window_scrapes(events)
    exp = _config(exp)
    per_rep = by_replica(refs)
    if not per_rep:
        why = ("the job took no /metrics scrapes (older job script, or metrics scraping off)"
               if not Layout(run_dir).scrapes() else
               f"{RELATIVE.metrics}/ holds files but {RELATIVE.events} records no scrape of this benchmark")
        return ServerMetrics(notes=(f"server metrics: none; {why}; figures from the logs only",))
    problems: list[str] = []
    checks: list[str] = []
    names = node_names(events)
    reps, windows = [], {}
    for r in replicas:
        role = r.role or role_of(exp, r.replica)          # each role's own PP, DP and drafts
        rm, w = replica_metrics(run_dir, r.replica, per_rep.get(r.replica, {}), pp=_pp_of(exp, role),
                                dp=_dp_of(exp, role), node_names=names.get(r.replica, ()),
                                draft_tokens=draft_tokens_of(exp, role),
                                log_accept=r.accept_len, log_samples=r.accept_samples,
                                problems=problems)
        reps.append(rm)
        windows[r.replica] = w
    tpot_name, tpot_note = choose_tpot(windows)
    if tpot_note:
        problems.append(tpot_note)
    name, routed, n_router = router_counts(run_dir, refs.get("router", []), worker_urls(events),
                                           problems)
    by_rep = {r.replica: r for r in replicas}
    final = []
    for rm in reps:
        rs = by_rep[rm.replica]
        access = rs.requests_served if rs.requests_source == "access_log" else None
        rm = replace(rm, router_requests=routed.get(rm.replica) if name else None,
                     access_requests=access, tpot=windows[rm.replica].get(tpot_name))
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
    # PD: the prefills generate each request's first token and decode nothing; what the client
    # receives (tokens, acceptance, running requests) is the decodes'
    prefills = {c.group for c in getattr(exp, "components", ()) or () if not kind_of(c.role).answers}
    pooled = _pooled([r for r in final if r.replica not in prefills], pooled_log)
    if pooled.rounds_skipped:
        problems.append(f"pooled running/queued/in-flight peaks over the {pooled.rounds} scrape "
                        "rounds every replica answered; rounds left out (a replica's scrape "
                        f"failed): {', '.join(pooled.rounds_skipped)}")
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
                         tuple(problems), tpot_name)


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


def _pooled(reps: Sequence[ReplicaMetrics], pooled_log) -> PooledMetrics:
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
    # Sum over replicas round by round (paired by the round each scrape belongs to); a round some
    # replica lacks is left out rather than summed short.
    per = [{p.round: p for p in r.series} for r in ok]
    every = round_order(set.intersection(*(set(x) for x in per))) if per else []
    skipped = tuple(k for k in round_order(set().union(*(set(x) for x in per))) if k not in every) \
        if per else ()

    def round_peak(attr):
        sums = []
        for k in every:
            vals = [x[k] for x in per]
            if all(getattr(p, attr) is not None for p in vals):
                sums.append(sum(getattr(p, attr) for p in vals))
        return max(sums) if sums else None

    def peak(attr):
        vals = [getattr(r, attr) for r in reps if getattr(r, attr) is not None]
        return max(vals) if vals else None
    return PooledMetrics(
        gen_tokens=gen, verify_calls=ver, requests=tot("requests"), accept_len=accept,
        accept_rate=rate, log_accept_len=log, log_samples=n_log,
        diff_pct=(accept / log - 1) * 100 if accept is not None and log else None,
        running_peak=round_peak("running"), queued_peak=round_peak("queued"),
        kv_usage_peak=peak("kv_usage_peak"), retracted_peak=peak("retracted_peak"),
        in_flight_peak=round_peak("in_flight"), rounds=len(every), rounds_skipped=skipped)


__all__ = ["ServerMetrics", "ReplicaMetrics", "PooledMetrics", "HistogramWindow", "GaugePoint",
           "collect_server_metrics", "histogram_quantile", "histogram_window", "increase", "gauge",
           "window_scrapes", "draft_tokens_of", "agreement_check", "E2E_HISTOGRAM",
           "TPOT_HISTOGRAMS", "choose_tpot"]
