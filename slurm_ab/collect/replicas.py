"""Per-replica facts from the server logs: decode samples, requests served, warm-up.

Requests served are counted from uvicorn access lines ('POST /generate' etc.) inside the window:
one line per request, printed by node rank 0 only. '#new-seq' of 'Prefill batch' lines is the
fallback when a log has no access lines: it over-counts, because a chunked prompt (16K with
--chunked-prefill-size 8192) is a new sequence in each of its chunks — fine for "served > 0",
not for exact counts. Both include bench_serving's own warm-up request, which is sent through
the router after bench_start.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Iterable, Sequence

from ..parse.events import EventLog, Warmup
from ..parse.server_scan import (Counts, DecodeAgg, Interval, Prefill, Retractions,
                                 ServerLogScan, lowest_stage, pooled_retractions, scan_server_log)
from ..model.rundir import RELATIVE, Layout, server_log_identity
from .pd import component_name
from .records import Pooled, ReplicaSummary

DEFAULT_WARMUP_TOKENS = 16384
PARALLEL_MIN_BYTES = 64 << 20        # below this, process start-up costs more than it saves


@dataclass(frozen=True)
class ReplicaScan:
    """Raw scans of one replica's files plus what the summary needs from them."""

    summary: ReplicaSummary
    primary: DecodeAgg
    scans: tuple[ServerLogScan, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()          # worth saying, not invalidating


def pooled_acceptance(reps: Sequence[ReplicaScan]) -> Pooled:
    """Decode samples of every replica (its lowest PP stage) and the acceptance over those of
    them that carry accept figures (speculative decoding only)."""
    n_acc = sum(r.primary.accept_samples for r in reps)
    n_rate = sum(r.primary.rate_samples for r in reps)
    return Pooled(
        samples=n_acc,
        accept_len=sum(r.primary.accept_len_sum for r in reps) / n_acc if n_acc else None,
        accept_rate=sum(r.primary.accept_rate_sum for r in reps) / n_rate if n_rate else None,
        decode_samples=sum(r.primary.samples for r in reps))


def _merged(scans: Sequence[ServerLogScan], counts) -> dict:
    """Per-stream prefill of one time range over a replica's files (a PP stage may sit on
    another node than stage 0)."""
    out: dict = {}
    for s in scans:
        c = counts(s)
        if c is None:
            continue
        for key, p in c.prefill.items():
            out[key] = out.get(key, Prefill()) + p
    return out


def _prefill(scans: Sequence[ServerLogScan], counts) -> Prefill:
    """Prefill of the logging PP stage: every stage logs the same batch, count one."""
    return lowest_stage(_merged(scans, counts), Prefill())


@dataclass(frozen=True)
class LaunchLogs:
    """A launch's server logs, each scanned once for every pass window of the launch."""

    root: Path                                   # the run directory (names in notes are under it)
    launch: Layout                               # the launch's directory
    files: dict                                  # replica -> node rank -> path
    scans: dict                                  # path -> ServerLogScan (with .windows per pass)
    warmups: dict                                # replica -> events.Warmup


def _scan_job(args):
    path, windows, intervals, all_samples = args
    ident = server_log_identity(path.name)
    # Only node rank 0 runs the HTTP server, so only its log can hold generation requests.
    return scan_server_log(path, windows=windows, intervals=intervals, all_samples=all_samples,
                           access_log=ident is None or ident[1] == 0)


def scan_files(paths: Sequence[Path], windows: Sequence[Interval], intervals: Sequence[Interval],
               all_samples: bool, workers: int | None = None) -> list[ServerLogScan]:
    """Scan files, in parallel processes when they are big enough to be worth it."""
    if not paths:
        return []
    jobs = [(p, tuple(windows), tuple(intervals), all_samples) for p in paths]
    total = sum(p.stat().st_size for p in paths)
    if workers is None:
        workers = min(len(paths), os.cpu_count() or 1) if total >= PARALLEL_MIN_BYTES else 1
    if workers <= 1 or len(paths) <= 1:
        return [_scan_job(j) for j in jobs]
    import multiprocessing
    # Largest first so one big node-0 log does not start last.
    order = sorted(range(len(jobs)), key=lambda i: -paths[i].stat().st_size)
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        results = dict(zip(order, pool.map(_scan_job, [jobs[i] for i in order])))
    return [results[i] for i in range(len(jobs))]


def warmup_intervals(warmups: dict[int, Warmup], bench_start: datetime | None
                     ) -> list[Interval]:
    out = []
    for g, w in sorted(warmups.items()):
        if w.start is not None:
            out.append(Interval(f"warmup-r{g}", w.start, w.done or bench_start))
    return out


def scan_launch(root: Path, launch: Layout, events: EventLog, windows: Sequence[Interval],
                replica_ids: Iterable[int], *, all_samples: bool, workers: int | None = None
                ) -> LaunchLogs:
    """Read every server log of a launch once: decode samples, prefill lines and POSTs of each
    pass window (windows in time order), the warm-ups, and before the first pass."""
    files = launch.server_log_map()
    warmups = events.warmups()
    first = windows[0].start if windows else None
    # Without a recorded warm-up, look for one in everything before the first benchmark.
    ivs = warmup_intervals(warmups, first) + [
        Interval(f"pre-r{g}", None, first) for g in sorted(set(replica_ids))
        if g not in warmups and first is not None]
    # Node rank 0 first: it holds every batch line unless the servers run with DP attention or
    # PP (then every line carries a DP/PP tag and other nodes hold stage/group leaders), and
    # it is the only node with an HTTP server. Other nodes are read only when needed.
    heads = [files[g][0] for g in sorted(files) if 0 in files[g]]
    scans = dict(zip(heads, scan_files(heads, windows, ivs, all_samples, workers)))
    rest = [p for g in sorted(files) for r, p in sorted(files[g].items())
            if r != 0 and (0 not in files[g] or scans[files[g][0]].tagged
                           or not scans[files[g][0]].decode_lines)]
    scans.update(zip(rest, scan_files(rest, windows, ivs, all_samples, workers)))
    return LaunchLogs(root, launch, files, scans, warmups)


def _through(scan: ServerLogScan, window: str) -> ServerLogScan:
    """A launch-wide scan as one pass window sees it (its decode, counts and retractions)."""
    w = scan.windows.get(window)
    if w is None:
        return replace(scan, decode={}, window=Counts(), retractions={})
    return replace(scan, decode=w.decode, window=w.counts, retractions=w.retractions)


@dataclass(frozen=True)
class PassWindow:
    """What the replicas of one pass are summarised over."""

    name: str                        # the scan window's name
    bounds: tuple | None             # (start, end) of the benchmark; None: none was recorded
    all_samples: bool = False
    warmup_tokens: int | None = None
    node_lists: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)   # het group -> (role, instance)


def summarise_replicas(logs: LaunchLogs, replica_ids: Iterable[int], pw: PassWindow
                       ) -> list[ReplicaScan]:
    """Per replica of the launch: its facts over the pass window `pw`."""
    out = []
    for g in sorted(set(replica_ids) | set(logs.files)):
        ranks = logs.files.get(g, {})
        scans = [_through(logs.scans[p], pw.name) for _, p in sorted(ranks.items())
                 if p in logs.scans]
        out.append(_one(logs, g, ranks, scans, pw))
    return out


def _one(logs: LaunchLogs, g: int, ranks: dict[int, Path], scans: list[ServerLogScan],
         pw: PassWindow) -> ReplicaScan:
    run_dir, window, all_samples = logs.root, pw.bounds, pw.all_samples
    who = component_name(g, pw.names)
    sizes = [p.stat().st_size for _, p in sorted(ranks.items())]
    problems: list[str] = []
    rel = tuple(_shown(str(p), run_dir) for _, p in sorted(ranks.items()))
    if not ranks:
        problems.append(f"{who}: no server log ({_shown(str(logs.launch.server_log(g, '*')), run_dir)} missing)")
    elif 0 not in ranks:
        problems.append(f"{who}: no node-rank-0 log ({_shown(str(logs.launch.server_log(g, 0)), run_dir)} missing)")
    elif not any(sizes):
        problems.append(f"{who}: server logs are empty")

    # Decode samples: by stream over all files, then the lowest PP stage (see ServerLogScan).
    streams: dict = {}
    for s in scans:
        for key, agg in s.decode.items():
            streams[key] = streams.get(key, DecodeAgg()) + agg
    if window is None and not all_samples:
        streams = {}              # no benchmark happened (or it was not recorded): no samples
        problems.append(f"{who}: no benchmark window in {RELATIVE.events}; decode samples not "
                        "counted (all_samples counts the whole log)")
    primary = lowest_stage(streams, DecodeAgg())

    posts_timed = sum(s.posts - s.posts_untimed for s in scans)
    if posts_timed > 0:
        served, source = sum(s.window.posts for s in scans), "access_log"
    elif any(s.prefill_lines for s in scans):
        served, source = _prefill(scans, lambda s: s.window).new_seq, "prefill_new_seq"
    elif any(sizes):
        served, source = 0, "access_log"
    else:
        served, source = None, None
    if window is None and served is not None:
        problems.append(f"{who}: no benchmark window in {RELATIVE.events}; requests counted "
                        "over the whole log")

    notes: list[str] = []
    untimed = sum(s.untimed_batch_lines for s in scans)
    if untimed:
        where = ", ".join(_shown(s.path, run_dir) for s in scans if s.untimed_batch_lines)
        notes.append(f"{who}: {untimed} batch line(s) without a readable timestamp in "
                     f"{where}; " + ("decode samples among them counted (all samples), none "
                                     "in the warm-up check" if all_samples else
                                     "left out of the benchmark window and the warm-up check"))
    retracted = pooled_retractions(_merged_retractions(scans))
    if retracted.events:
        notes.append(f"{who}: {retracted.events} KV-cache retraction(s) "
                     f"({retracted.requests} request(s) sent back to the queue and recomputed)"
                     + (" in the benchmark window" if window and not all_samples else ""))

    seen, how = _warmup(g, logs.warmups.get(g), scans, window, pw.warmup_tokens)
    head = next((s for s in scans if s.path == str(ranks.get(0))), None)
    summary = ReplicaSummary(
        replica=g, logs=rel, nodes=tuple(pw.node_lists.get(str(g), [])),
        decode_samples=primary.samples, accept_samples=primary.accept_samples,
        accept_len=primary.accept_len, accept_rate=primary.accept_rate,
        gen_throughput=primary.gen_throughput, speed_samples=primary.speed_samples,
        speed_mean=primary.speed_mean, speed_sd=primary.speed_sd, requests_served=served,
        requests_source=source, warmup_seen=seen, warmup=how,
        log_end=head.last_ts.isoformat(sep=" ") if head and head.last_ts else None,
        untimed_batch_lines=untimed, retractions=retracted.events,
        retracted_requests=retracted.requests)
    return ReplicaScan(summary, primary, tuple(scans), tuple(problems), tuple(notes))


def _shown(path: str, run_dir: Path) -> str:
    p = Path(path)
    return str(p.relative_to(run_dir)) if p.is_relative_to(run_dir) else path


def _merged_retractions(scans: Sequence[ServerLogScan]) -> dict:
    out: dict = {}
    for s in scans:
        for key, r in s.retractions.items():
            old = out.get(key, Retractions())
            out[key] = Retractions(old.events + r.events, old.requests + r.requests)
    return out


def _warmup(g: int, w: Warmup | None, scans: list[ServerLogScan], window,
            expected: int | None) -> tuple[bool, str]:
    """Was replica g sent its 16K warm-up before bench_start? (events.log + server log)"""
    expected = expected or (w.prompt_tokens if w and w.prompt_tokens else DEFAULT_WARMUP_TOKENS)
    has_batches = any(s.prefill_lines for s in scans)
    has_access = any(s.posts for s in scans)
    bench_start = window[0] if window else None
    if w is not None:
        name = f"warmup-r{g}"
        tokens = _prefill(scans, lambda s: s.intervals.get(name)).tokens
        posts = sum(s.intervals.get(name).posts for s in scans if name in s.intervals)
        if w.ok is not True:
            return False, (f"warm-up failed ({RELATIVE.events} warmup_done ok=0)" if w.ok is False
                           else "warm-up started but never finished (no warmup_done)")
        if w.prompt_tokens is not None and w.prompt_tokens < expected:
            return False, f"warm-up had {w.prompt_tokens} prompt tokens, expected {expected}"
        if bench_start and w.done and w.done > bench_start:
            return False, "warm-up finished after the benchmark started"
        if has_batches and tokens >= expected:
            return True, f"{RELATIVE.events} ok=1; server log prefilled {tokens} tokens in the warm-up"
        if has_batches and tokens:
            # every chunk of a prompt is logged: fewer tokens than sent means a missing chunk
            return False, (f"{RELATIVE.events} says ok=1 but the server log prefilled only {tokens} of "
                           f"{expected} tokens during the warm-up")
        if has_access and posts:
            return True, f"{RELATIVE.events} ok=1; server log shows the warm-up POST"
        if has_batches or has_access:
            return False, (f"{RELATIVE.events} says ok=1 but the server log shows no {expected}-token "
                           "prefill or POST during the warm-up")
        return True, f"{RELATIVE.events} ok=1 (server log has no batch or access lines to confirm)"
    name = f"pre-r{g}"
    tokens = _prefill(scans, lambda s: s.intervals.get(name)).tokens
    if has_batches and tokens >= expected:
        return True, (f"no warm-up in {RELATIVE.events}; server log prefilled {tokens} tokens before "
                      "the benchmark")
    return False, f"no warm-up recorded in {RELATIVE.events}" + (
        "" if not has_batches else f" and < {expected} tokens prefilled before the benchmark")
