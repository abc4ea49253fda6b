"""One streaming pass over a server log that aggregates what the collector needs.

This is the hot path of `collect` (logs can reach GiBs). Design:
- read 4 MiB blocks and jump between candidate lines with bytes.find (C speed), so lines that
  are neither batch samples, POST access lines nor retractions cost nothing in Python;
- compare timestamps as bytes ('YYYY-mm-dd HH:MM:SS' sorts lexicographically) and parse only the
  lines inside the benchmark window or a warm-up interval;
- extract the few needed numbers by key ('accept len', 'gen throughput ...'), so field order
  does not matter; any line that does not have SGLang's '[ts ranks] Kind batch' shape goes to the
  general parser `parse_batch_line` (same results, slower);
- sum whole blocks at once (bytes.split/count, no per-line Python) when their first and last
  batch lines lie at least MARGIN inside or outside every time range, all samples belong to
  one stream (no DP/PP tags) and every count agrees (each decode line has one 'gen throughput',
  ...); otherwise the block is halved at a line end and the halves are tried again, down to
  SPLIT_MIN bytes, and only what is left is parsed line by line. This relies on batch lines
  being written in time order (one scheduler process, line-buffered stderr), give or take
  MARGIN. A whole block adds the sum of its values; the parts of a split block add theirs one
  by one, in line order, as the per-line path does, so where a block is split (which depends
  on every range's bounds) does not change a float sum.
Memory is O(1) in the log size: only per-stream sums are kept.

Several benchmark windows (the timed passes of one server launch) are served by one read. They
are in time order and do not overlap, so the windows holding a stamp are found by bisecting
their starts, and a block inside one window holds no line of another: the blocks holding a
window's lines are taken the same way whatever the other windows, and each window gets what a
scan for it alone gives, to the last digit. A whole-second stamp ('HH:MM:SS', no SGLANG_LOG_MS)
stands for that whole second (text.in_window): when one pass ends and the next starts within
the same second, a line stamped with that second may belong to either and counts in both, as
two single-window scans count it; `shared_lines` says how many lines did. Millisecond stamps
are exact.

Streams: SGLang tags scheduler lines with ' DP<k>' when attention-DP is on and ' PP<k>' when
pipeline parallelism is; each DP group leader logs its own batches (distinct samples, they pool),
while every PP stage logs the same batch again (only one stage may count). Decode samples and
prefill counts are therefore kept per (DP, PP) stream and pooled with `lowest_stage`.
"""
from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from operator import add, mul, truediv
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence, TypeVar

from .server_log import GENERATE_PATHS, parse_batch_line, parse_head, parse_ranks
from .text import BLOCK, decode, in_window, iter_blocks, line_stamp, line_timestamp, parse_ts

__all__ = ["Interval", "DecodeAgg", "Prefill", "Counts", "Retractions", "WindowScan",
           "ServerLogScan", "scan_server_log", "counting_scans", "lowest_stage"]

_FOREVER = (None, None)
MARGIN = timedelta(seconds=5)

# ---- the bytes SGLang's own line layout is recognised by --------------------------------------
# '[2026-07-21 15:00:13 TP0 EP0] Decode batch, ...' or, with SGLANG_LOG_MS, '[... 15:00:13.123 ...'
OPEN = ord("[")
CLOSE = ord("]")
SPACE = ord(" ")
DOT = ord(".")                    # before the milliseconds of a SGLANG_LOG_MS stamp
DASH = ord("-")
STAMP = 19                        # len('YYYY-mm-dd HH:MM:SS')
STAMP_MS = STAMP + 4              # ... + '.fff'
DATE_DASH = 5                     # offset of the first '-' of the date, counted from '['
AFTER_STAMP = 1 + STAMP           # offset of the byte after the whole-second stamp
KIND_GAP = b"] "                  # between the stamp group and the kind
BATCH = b" batch"                 # every batch line: 'Decode batch' / 'Prefill batch'
DECODE = b"Decode"
PREFILL = b"Prefill"
LAST_OF_DECODE = DECODE[-1]       # 'e': tells the kinds apart from the byte before ' batch'
LAST_OF_PREFILL = PREFILL[-1]     # 'l'
# fields read from a decode line
ACCEPT_LEN = b", accept len: "
ACCEPT_RATE = b" accept rate: "   # right after the accept len's ','
GEN_TPUT = b"gen throughput (token/s): "
RUNNING = b"#running-req: "       # the first field of every decode line
# fields read from a prefill line
NEW_SEQ = b"#new-seq: "
NEW_TOKEN = b"#new-token: "
CACHED_TOKEN = b"#cached-token: "
# uvicorn access line: '[ts] INFO:     10.0.0.9:51234 - "POST /generate HTTP/1.1" 200 OK'
POST = b'"POST '
GEN_PATHS = tuple(p.encode() for p in GENERATE_PATHS)
# A retraction (the scheduler freed KV cache by sending running requests back to the queue; the
# run goes on). Every SGLang version puts '#retracted_reqs: N' in it: 'decode out of memory
# happened, #retracted_reqs: ...' (0.1-0.3), 'Decode out of memory happened. #retracted_reqs:
# ...' (0.4-0.5.x), 'KV cache pool is full. Retract requests. #retracted_reqs: ...' (later).
# PD-decode batch lines carry '#retracted-req: ' (hyphen), which this does not match.
RETRACTED = b"#retracted_reqs: "
# their lengths, spelled out for the per-line loops (len() is a call each time)
BATCH_LEN, DECODE_LEN, PREFILL_LEN = len(BATCH), len(DECODE), len(PREFILL)
ACCEPT_LEN_LEN, ACCEPT_RATE_LEN, POST_LEN = len(ACCEPT_LEN), len(ACCEPT_RATE), len(POST)


@dataclass(frozen=True)
class Interval:
    name: str
    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class DecodeAgg:
    """Sums over the decode samples of one (DP, PP) stream.

    speed: each line's tokens per second per running request (gen throughput / #running-req),
    with its sum of squares: the decode speed of the interval since the previous decode line,
    whose spread says whether two replicas' speeds differ beyond their own variation."""

    samples: int = 0
    accept_samples: int = 0
    accept_len_sum: float = 0.0
    rate_samples: int = 0
    accept_rate_sum: float = 0.0
    gen_samples: int = 0
    gen_sum: float = 0.0
    speed_samples: int = 0
    speed_sum: float = 0.0
    speed_sq: float = 0.0

    def __add__(self, other: "DecodeAgg") -> "DecodeAgg":
        return DecodeAgg(*(a + b for a, b in zip(self._tuple(), other._tuple())))

    def _tuple(self) -> tuple:
        return (self.samples, self.accept_samples, self.accept_len_sum, self.rate_samples,
                self.accept_rate_sum, self.gen_samples, self.gen_sum, self.speed_samples,
                self.speed_sum, self.speed_sq)

    @property
    def accept_len(self) -> float | None:
        return self.accept_len_sum / self.accept_samples if self.accept_samples else None

    @property
    def accept_rate(self) -> float | None:
        return self.accept_rate_sum / self.rate_samples if self.rate_samples else None

    @property
    def gen_throughput(self) -> float | None:
        return self.gen_sum / self.gen_samples if self.gen_samples else None

    @property
    def speed_mean(self) -> float | None:
        return self.speed_sum / self.speed_samples if self.speed_samples else None

    @property
    def speed_sd(self) -> float | None:
        """Sample standard deviation (n - 1)."""
        n = self.speed_samples
        if n < 2:
            return None
        return math.sqrt(max(0.0, (self.speed_sq - self.speed_sum ** 2 / n) / (n - 1)))


# The scan accumulates each stream's DecodeAgg as a list of its fields (in place, per line); the
# float ones are the sums that exact mode adds value by value in line order.
_NO_DECODE = DecodeAgg()._tuple()
_FLOAT_SUMS = tuple(i for i, v in enumerate(_NO_DECODE) if isinstance(v, float))


def _decode_sums() -> list:
    return list(_NO_DECODE)


@dataclass(frozen=True)
class Prefill:
    """Prefill lines of one (DP, PP) stream in one time range."""

    lines: int = 0
    tokens: int = 0                # new + cached tokens (warm-up intervals only, not the window)
    new_seq: int = 0               # sum of '#new-seq' (a chunked prompt counts once per chunk)

    def __add__(self, other: "Prefill") -> "Prefill":
        return Prefill(self.lines + other.lines, self.tokens + other.tokens,
                       self.new_seq + other.new_seq)


@dataclass(frozen=True)
class Counts:
    """Traffic seen in one time range."""

    prefill: Mapping = field(default_factory=dict)   # (dp, pp) -> Prefill
    posts: int = 0                 # POST access lines to generation endpoints

    def primary(self) -> Prefill:
        """Prefill of the lowest PP stage of this file, pooled over DP ranks."""
        return lowest_stage(self.prefill, Prefill())


@dataclass(frozen=True)
class Retractions:
    """Retraction lines of one scheduler rank."""

    events: int = 0
    requests: int = 0              # sum of '#retracted_reqs'


@dataclass(frozen=True)
class WindowScan:
    """One benchmark window of a multi-window scan: what a single-window scan puts in
    ServerLogScan's decode, window and retractions."""

    decode: dict = field(default_factory=dict)      # (dp, pp) -> DecodeAgg (window or all)
    counts: Counts = Counts()                       # prefill lines and POSTs in the window
    retractions: dict = field(default_factory=dict)  # as ServerLogScan.retractions

    def primary_stream(self) -> DecodeAgg:
        """Samples of the lowest PP stage, pooled over DP ranks (see the module docstring)."""
        return lowest_stage(self.decode, DecodeAgg())


@dataclass(frozen=True)
class ServerLogScan:
    path: str
    size: int
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    decode: dict = field(default_factory=dict)      # (dp, pp) -> DecodeAgg (window or all)
    decode_lines: int = 0                           # every decode line in the file
    prefill_lines: int = 0
    first_prefill_ts: datetime | None = None
    first_decode_ts: datetime | None = None
    window: Counts = Counts()
    intervals: dict = field(default_factory=dict)   # name -> Counts
    posts: int = 0                                  # generation POSTs in the whole file
    posts_untimed: int = 0                          # ... without a timestamp (not windowable)
    slow_lines: int = 0                             # lines that needed the general parser
    #                                                 (work: blocks summed at once skip it)
    tagged: bool = False                            # batch lines carry DP/PP rank tags
    untimed_batch_lines: int = 0                    # batch lines whose time could not be read
    # retractions in the decode range (window, or all), by the rank tags of the logging
    # scheduler: {(dp, pp, other rank items): Retractions}; every TP rank logs each one
    retractions: dict = field(default_factory=dict)
    # scan_server_log(windows=...): name -> WindowScan; decode, window and retractions above
    # stay empty then
    windows: dict = field(default_factory=dict)
    shared_lines: int = 0                           # lines counted in two windows (see above)

    def primary_stream(self) -> DecodeAgg:
        """Samples of the lowest PP stage, pooled over DP ranks (see the module docstring)."""
        return lowest_stage(self.decode, DecodeAgg())


T = TypeVar("T")


def lowest_stage(streams: Mapping[tuple, T], zero: T) -> T:
    """Pool the values of the lowest PP stage over DP ranks; keys are (dp, pp, ...)."""
    if not streams:
        return zero
    pp = min(k[1] for k in streams)
    total = zero
    for key in sorted(streams):
        if key[1] == pp:
            total = total + streams[key]
    return total


def pooled_retractions(by_rank: Mapping[tuple, Retractions]) -> Retractions:
    """Retraction events of a replica: each TP rank of a scheduler group logs the same events,
    so take the rank with the most per DP group (lowest PP stage) and add up the DP groups."""
    if not by_rank:
        return Retractions()
    pp = min(k[1] for k in by_rank)
    best: dict[int, Retractions] = {}
    for (dp, stage, _), r in by_rank.items():
        if stage == pp and (dp not in best or r.events > best[dp].events):
            best[dp] = r
    return Retractions(sum(r.events for r in best.values()),
                       sum(r.requests for r in best.values()))


# ---- time bounds as bytes ----------------------------------------------------------------------

def _bounds(start: datetime | None, end: datetime | None) -> tuple[bytes, bytes, bytes, bytes]:
    """Byte bounds for whole-second stamps (19 chars) and millisecond stamps (23 chars)."""
    lo19 = start.strftime("%Y-%m-%d %H:%M:%S").encode() if start else b""
    hi19 = end.strftime("%Y-%m-%d %H:%M:%S").encode() if end else b"\xff"
    lo23 = (start.strftime("%Y-%m-%d %H:%M:%S.") + f"{start.microsecond // 1000:03d}").encode() \
        if start else b""
    hi23 = (end.strftime("%Y-%m-%d %H:%M:%S.") + f"{end.microsecond // 1000:03d}").encode() \
        if end else b"\xff"
    return lo19, hi19, lo23, hi23


def _num(buf: bytes, key: bytes, lo: int, hi: int):
    """The number after `key` in buf[lo:hi] (up to the next ','), or None."""
    i = buf.find(key, lo, hi)
    if i < 0:
        return None
    i += len(key)
    j = buf.find(b",", i, hi)
    try:
        return float(buf[i: hi if j < 0 else j])
    except ValueError:
        return None


def _is_gen_path(buf: bytes, i: int) -> bool:
    """buf[i:] starts with a generation path followed by ' ', '?' or end."""
    for p in GEN_PATHS:
        if buf.startswith(p, i) and buf[i + len(p): i + len(p) + 1] in (b" ", b"?", b""):
            return True
    return False


# ---- the scan ----------------------------------------------------------------------------------

class _Ranges:
    """What the caller asked to count, as byte bounds, plus the running sums.

    Windows are time-ordered and do not overlap, so their starts and ends both ascend and the
    windows holding a stamp are a run ending at the last one that starts at or before it
    (`_in_windows`). Intervals (warm-ups) are few and tried one by one.
    """

    __slots__ = ("windows", "intervals", "counts", "ivs", "iv_ranges", "w19", "w23",
                 "dec_spans", "dec_sums", "retractions", "d19", "d23", "dec", "hull", "disjoint")

    def __init__(self, windows: tuple, all_samples: bool, intervals: tuple):
        self.windows, self.intervals = windows, intervals
        # per range: [{stream: [lines, tokens, new_seq]}, posts]
        self.counts = [[{}, 0] for _ in windows]
        self.ivs = {iv.name: [{}, 0] for iv in intervals}
        self.iv_ranges = [(self.ivs[iv.name], _bounds(iv.start, iv.end)) for iv in intervals]
        wb = [_bounds(w.start, w.end) for w in windows]
        self.w19, self.w23 = _columns(wb)
        # decode samples and retractions: per window, or one set for the whole file
        self.dec_spans = [_FOREVER] if all_samples else [(w.start, w.end) for w in windows]
        self.dec_sums = [{} for _ in self.dec_spans]      # (dp, pp) -> DecodeAgg's sums (a list)
        self.retractions = [{} for _ in self.dec_spans]   # (dp, pp, rest) -> [events, requests]
        db = [_bounds(*span) for span in self.dec_spans]
        self.d19, self.d23 = _columns(db)
        # hulls: most lines fall outside them or in one window
        self.dec = _hull(db)
        self.hull = _hull(wb + [b for _, b in self.iv_ranges])
        spans = sorted((r.start or datetime.min, r.end or datetime.max)
                       for r in (*windows, *intervals))
        # a whole-second stamp may fall in two ranges less than a second apart
        self.disjoint = all((b2[0] - a[1]).total_seconds() > 1 for a, b2 in zip(spans, spans[1:]))


def _columns(bounds: list) -> tuple[tuple[list, list], tuple[list, list]]:
    """((starts, ends) of whole-second bounds, (starts, ends) of millisecond bounds)."""
    return ([b[0] for b in bounds], [b[1] for b in bounds]), \
        ([b[2] for b in bounds], [b[3] for b in bounds])


def _hull(bounds: list) -> tuple[bytes, bytes, bytes, bytes]:
    return (min(x[0] for x in bounds), max(x[1] for x in bounds),
            min(x[2] for x in bounds), max(x[3] for x in bounds))


def _in_windows(cols: tuple[list, list], tsk: bytes) -> range:
    """Indices of the windows whose (starts, ends) bounds hold the stamp tsk; more than one
    only for a whole-second stamp of a second two windows share."""
    starts, ends = cols
    i = j = bisect_right(starts, tsk)
    while j and tsk <= ends[j - 1]:
        j -= 1
    return range(j, i)


def _ordered(windows: tuple) -> tuple:
    """The windows, checked: distinct names, each in time order after the one before (one may
    end where the next starts)."""
    names = Counter(w.name for w in windows)
    if max(names.values()) > 1:
        raise ValueError("scan windows need distinct names; repeated: "
                         + ", ".join(sorted(repr(n) for n, c in names.items() if c > 1)))
    for w in windows:
        if w.start is not None and w.end is not None and w.end < w.start:
            raise ValueError(f"scan window {w.name!r} ends ({w.end}) before it starts ({w.start})")
    for a, b in zip(windows, windows[1:]):
        if a.end is None or b.start is None or b.start < a.end:
            raise ValueError(f"scan windows must be in time order without overlap: {a.name!r} "
                             f"({a.start} .. {a.end}) then {b.name!r} ({b.start} .. {b.end})")
    return windows


class _Acc:
    """Running totals of one file."""

    __slots__ = ("decode_lines", "prefill_lines", "first_prefill", "first_decode", "posts",
                 "posts_untimed", "slow", "tagged", "untimed", "shared", "streams")

    def __init__(self):
        self.decode_lines = self.prefill_lines = self.posts = self.posts_untimed = 0
        self.slow = self.untimed = self.shared = 0
        self.first_prefill = self.first_decode = None
        self.tagged = False
        self.streams: dict = {}                # rank bytes -> (dp, pp)

    def stream(self, rk: bytes) -> tuple[int, int]:
        key = self.streams.get(rk)
        if key is None:
            r = parse_ranks(rk.decode("ascii", "replace"))
            key = self.streams[rk] = (r.get("DP", 0), r.get("PP", 0))
            self.tagged = self.tagged or "DP" in r or "PP" in r
        return key


_scan_counters: list[Counter] = []


@contextmanager
def counting_scans() -> Iterator[Counter]:
    """Count the scans of each file (by path as given) while the block runs, so that a test can
    assert that a collector reads each server log once. Scans in forked worker processes are
    not seen: collect with one worker (small test logs already scan in-process)."""
    counter: Counter = Counter()
    _scan_counters.append(counter)
    try:
        yield counter
    finally:
        _scan_counters.remove(counter)


def scan_server_log(path: str | Path, *, window: tuple | None = None,
                    windows: Sequence[Interval] = (), intervals: Iterable[Interval] = (),
                    all_samples: bool = False, access_log: bool = True, block: int = BLOCK,
                    bulk: bool = True) -> ServerLogScan:
    """Scan one server log.

    window: (start, end) of the benchmark (end None = open); decode samples, prefill lines,
    generation POSTs and retractions are counted inside it (decode samples and retractions
    everywhere with all_samples=True).
    windows: instead of window, several benchmark windows (the passes of one server launch) in
    time order and not overlapping (one may end where the next starts; ValueError otherwise):
    each gets in `windows[name]` a WindowScan with what `window` gets, from this one read; the
    single-window fields (decode, window, retractions) then stay empty.
    intervals: extra ranges (the warm-ups) whose prefill tokens and POSTs are counted.
    access_log: look for uvicorn access lines (only node rank 0 runs the HTTP server).
    bulk: allow block-at-once summing (see module docstring); False parses every line.
    """
    path = Path(path)
    for counter in _scan_counters:
        counter[str(path)] += 1
    if windows and window is not None:
        raise ValueError("scan_server_log takes window or windows, not both")
    spans = _ordered(tuple(windows)) if windows else \
        (Interval("window", *(window or _FOREVER)),)
    rg = _Ranges(spans, all_samples, tuple(intervals))
    acc = _Acc()
    # bulk needs every range strictly inside or outside a block, with MARGIN to spare
    plan = _BulkPlan(rg) if bulk else None
    first_ts = None
    size = 0
    tail = b""
    for buf, lo, hi in iter_blocks(path, block):
        size += hi - lo
        if first_ts is None:
            first_ts = _first_ts(buf, lo, hi)
        tail = buf[max(lo, hi - 4096):hi]
        if plan is None:
            _batch_lines(buf, lo, hi, rg, acc)
        else:
            _bulk_or_lines(buf, lo, hi, plan, acc, rg)
        if access_log:
            _post_lines(buf, lo, hi, rg, acc)
        _retraction_lines(buf, lo, hi, rg, acc)
    per_window = [_window_scan(rg, k) for k in range(len(spans))]
    own = per_window[0] if not windows else WindowScan()      # the scan's own window (none given)
    return ServerLogScan(
        str(path), size, first_ts, _last_ts(tail),
        decode=own.decode, decode_lines=acc.decode_lines, prefill_lines=acc.prefill_lines,
        first_prefill_ts=_to_dt(acc.first_prefill), first_decode_ts=_to_dt(acc.first_decode),
        window=own.counts, intervals={n: _counts(c) for n, c in rg.ivs.items()},
        posts=acc.posts, posts_untimed=acc.posts_untimed, slow_lines=acc.slow,
        tagged=acc.tagged or bool(plan and plan.tagged), untimed_batch_lines=acc.untimed,
        retractions=own.retractions,
        windows={w.name: ws for w, ws in zip(spans, per_window)} if windows else {},
        shared_lines=acc.shared)


def _window_scan(rg: _Ranges, k: int) -> WindowScan:
    """Window k's sums (decode and retractions are one set for all windows with all_samples)."""
    d = k if len(rg.dec_sums) > 1 else 0
    return WindowScan(
        decode={key: DecodeAgg(*v) for key, v in sorted(rg.dec_sums[d].items())},
        counts=_counts(rg.counts[k]),
        retractions={key: Retractions(*v) for key, v in sorted(rg.retractions[d].items())})


def _counts(c: list) -> Counts:
    return Counts({k: Prefill(*v) for k, v in sorted(c[0].items())}, c[1])


# ---- batch lines, one at a time ------------------------------------------------------------------

def _batch_lines(buf: bytes, lo: int, hi: int, rg: _Ranges, acc: _Acc) -> None:
    """Every 'Decode batch' / 'Prefill batch' line of buf[lo:hi].

    Per line ~10 C calls: the byte before ' batch' tells the kind, SGLang's own '[ts ranks] '
    prefix gives stamp and stream as bytes, compared with the ranges' byte bounds; only lines in
    a range are read further. Anything else (Ray prefix, Python-logging layout, colour codes,
    odd stamps, a cut last line) takes the general parser.
    """
    find, rfind = buf.find, buf.rfind
    complete_end = buf[hi - 1: hi] == b"\n"
    d_lo19, d_hi19, d_lo23, d_hi23 = rg.dec
    h_lo19, h_hi19, h_lo23, h_hi23 = rg.hull
    streams = acc.streams
    # one decode range (one window, or all samples): its hull is the range itself
    decode = rg.dec_sums[0] if len(rg.dec_sums) == 1 else None
    p = find(BATCH, lo, hi)
    while p >= 0:
        c = buf[p - 1]
        if c == LAST_OF_DECODE and buf[p - DECODE_LEN: p] == DECODE:
            is_dec, ks = True, p - DECODE_LEN
        elif c == LAST_OF_PREFILL and buf[p - PREFILL_LEN: p] == PREFILL:
            is_dec, ks = False, p - PREFILL_LEN
        else:
            p = find(BATCH, p + BATCH_LEN, hi)
            continue
        le = find(b"\n", p, hi)
        if le < 0:
            le = hi
        ls = rfind(b"\n", lo, ks) + 1
        if ls < lo:
            ls = lo
        sep = buf[ls + AFTER_STAMP] if ls + AFTER_STAMP < hi else 0
        if buf[ls] != OPEN or buf[ks - 2: ks] != KIND_GAP or buf[ls + DATE_DASH] != DASH \
                or sep not in (SPACE, CLOSE, DOT) or (le == hi and not complete_end):
            _slow_batch(buf[ls:le], le < hi or complete_end, rg, acc)
            p = find(BATCH, le, hi)
            continue
        if sep == DOT:
            tsk, rk, ms = buf[ls + 1: ls + 1 + STAMP_MS], buf[ls + 1 + STAMP_MS: ks - 2], True
            if rk[:1] not in (b" ", b""):                  # not a 3-digit fraction
                _slow_batch(buf[ls:le], True, rg, acc)
                p = find(BATCH, le, hi)
                continue
        else:
            tsk, rk, ms = buf[ls + 1: ls + AFTER_STAMP], buf[ls + AFTER_STAMP: ks - 2], False
        if not acc.tagged and rk not in streams:
            acc.stream(rk)             # the file's tags, whatever the ranges
        if is_dec:
            acc.decode_lines += 1
            if acc.first_decode is None:
                acc.first_decode = tsk
            if (d_lo23 <= tsk <= d_hi23) if ms else (d_lo19 <= tsk <= d_hi19):
                key = streams.get(rk) or acc.stream(rk)
                if decode is None:
                    _decode_in_windows(buf, p, le, tsk, ms, key, rg, acc)
                else:
                    a = decode.get(key)
                    if a is None:
                        a = decode[key] = _decode_sums()
                    _decode_fields(buf, p, le, a)
        else:
            acc.prefill_lines += 1
            if acc.first_prefill is None:
                acc.first_prefill = tsk
            if (h_lo23 <= tsk <= h_hi23) if ms else (h_lo19 <= tsk <= h_hi19):
                _prefill_in_ranges(buf, p, le, tsk, ms, streams.get(rk) or acc.stream(rk), rg,
                                   acc)
        p = find(BATCH, le, hi)


def _decode_in_windows(buf: bytes, p: int, le: int, tsk: bytes, ms: bool, key: tuple,
                       rg: _Ranges, acc: _Acc) -> None:
    """Add one decode line's sample to the window(s) its stamp falls in."""
    hits = _in_windows(rg.d23 if ms else rg.d19, tsk)
    for k in hits:
        sums = rg.dec_sums[k]
        a = sums.get(key)
        if a is None:
            a = sums[key] = _decode_sums()
        _decode_fields(buf, p, le, a)
    if len(hits) > 1:
        acc.shared += 1


def _decode_fields(buf: bytes, p: int, le: int, a: list) -> None:
    """Add one decode line's sample to its stream's sums: accept len (and the accept rate right
    after it), gen throughput, and gen throughput per running request."""
    a[0] += 1
    find = buf.find
    i = find(ACCEPT_LEN, p, le)
    if i >= 0:
        i += ACCEPT_LEN_LEN
        j = find(b",", i, le)
        try:
            a[2] += float(buf[i: le if j < 0 else j])
            a[1] += 1
            if j >= 0 and buf.startswith(ACCEPT_RATE, j + 1):
                i = j + 1 + ACCEPT_RATE_LEN
                k = find(b",", i, le)
                try:
                    a[4] += float(buf[i: le if k < 0 else k])
                    a[3] += 1
                except ValueError:
                    pass
        except ValueError:
            pass
    gen = _num(buf, GEN_TPUT, p, le)
    if gen is None:
        return
    _add_gen(a, gen, _num(buf, RUNNING, p, le))


def _add_gen(a: list, gen: float, running) -> None:
    """One decode line's gen throughput into the sums, and its tokens/s per running request (none
    for an idle line)."""
    a[5] += 1
    a[6] += gen
    if running:
        x = gen / running
        a[7] += 1
        a[8] += x
        a[9] += x * x


def _prefill_in_ranges(buf: bytes, p: int, le: int, tsk: bytes, ms: bool, key: tuple,
                       rg: _Ranges, acc: _Acc) -> None:
    """Add one prefill line to every range its stamp falls in (tokens for warm-ups only, so
    they are read only for those)."""
    seq = tokens = None
    hits = _in_windows(rg.w23 if ms else rg.w19, tsk)
    for k in hits:
        if seq is None:
            seq = int(_num(buf, NEW_SEQ, p, le) or 0)
        _add_prefill(rg.counts[k], key, seq, 0)
        if rg.disjoint:
            return
    if len(hits) > 1:
        acc.shared += 1
    for target, b in rg.iv_ranges:
        if not ((b[2] <= tsk <= b[3]) if ms else (b[0] <= tsk <= b[1])):
            continue
        if seq is None:
            seq = int(_num(buf, NEW_SEQ, p, le) or 0)
        if tokens is None:
            tokens = int((_num(buf, NEW_TOKEN, p, le) or 0) + (_num(buf, CACHED_TOKEN, p, le) or 0))
        _add_prefill(target, key, seq, tokens)
        if rg.disjoint:
            break


def _add_prefill(target: list, key: tuple, seq: int, tokens: int) -> None:
    c = target[0].get(key)
    if c is None:
        c = target[0][key] = [0, 0, 0]
    c[0] += 1
    c[1] += tokens
    c[2] += seq


def _slow_batch(raw: bytes, complete: bool, rg: _Ranges, acc: _Acc) -> None:
    """General path for lines with Ray prefixes, Python-logging layouts, colour codes, odd
    stamps or a cut tail. A line whose time cannot be read is counted as untimed: it can join
    no time range (only all_samples / a missing window count its decode sample)."""
    acc.slow += 1
    s = parse_batch_line(raw, complete=complete)
    if s is None:
        return
    ts, whole = s.ts, not s.ts_has_ms
    if "DP" in s.ranks or "PP" in s.ranks:
        acc.tagged = True
    if ts is None:
        acc.untimed += 1
    if s.kind == "Decode":
        acc.decode_lines += 1
        if acc.first_decode is None and ts is not None:
            acc.first_decode = ts
        # a sample whose time is unknown counts only where the decode range is everything
        hits = [k for k, (start, end) in enumerate(rg.dec_spans)
                if (start is None and end is None if ts is None
                    else in_window(ts, start, end, whole_seconds=whole))]
        for k in hits:
            a = rg.dec_sums[k].setdefault(s.stream, _decode_sums())
            a[0] += 1
            if s.accept_len is not None:
                a[1] += 1
                a[2] += s.accept_len
                if s.accept_rate is not None:
                    a[3] += 1
                    a[4] += s.accept_rate
            if s.gen_throughput is not None:
                _add_gen(a, s.gen_throughput, s.running_req)
        acc.shared += len(hits) > 1
        return
    acc.prefill_lines += 1
    if acc.first_prefill is None and ts is not None:
        acc.first_prefill = ts
    if ts is None:
        return
    tokens = int((s.new_token or 0) + (s.cached_token or 0))
    seq = int(s.new_seq or 0)
    hits = _windows_at(ts, whole, rg)
    for k in hits:
        _add_prefill(rg.counts[k], s.stream, seq, 0)
    acc.shared += len(hits) > 1
    for iv in rg.intervals:
        if in_window(ts, iv.start, iv.end, whole_seconds=whole):
            _add_prefill(rg.ivs[iv.name], s.stream, seq, tokens)


def _windows_at(ts: datetime, whole: bool, rg: _Ranges) -> list[int]:
    """Indices of the windows holding a parsed stamp (the general path's `_in_windows`)."""
    return [k for k, w in enumerate(rg.windows)
            if in_window(ts, w.start, w.end, whole_seconds=whole)]


# ---- generation POSTs (uvicorn access lines) -----------------------------------------------------

def _post_lines(buf: bytes, lo: int, hi: int, rg: _Ranges, acc: _Acc) -> None:
    find = buf.find
    lo19, hi19, lo23, hi23 = rg.hull
    p = find(POST, lo, hi)
    while p >= 0:
        path_at = p + POST_LEN
        if not (buf.startswith(b"/generate ", path_at) or _is_gen_path(buf, path_at)):
            p = find(POST, path_at, hi)
            continue
        acc.posts += 1
        ls = buf.rfind(b"\n", lo, p) + 1
        if ls < lo:
            ls = lo
        # SGLang's uvicorn config: '[stamp] INFO: ...' ('[stamp.fff]' with SGLANG_LOG_MS)
        sep = buf[ls + AFTER_STAMP] if ls + AFTER_STAMP < hi else 0
        if buf[ls] == OPEN and buf[ls + DATE_DASH] == DASH and sep in (CLOSE, SPACE):
            tsk = buf[ls + 1: ls + AFTER_STAMP]
            if lo19 <= tsk <= hi19:
                _post_in_ranges(rg, acc, tsk, False)
        elif buf[ls] == OPEN and buf[ls + DATE_DASH] == DASH and sep == DOT:
            tsk = buf[ls + 1: ls + 1 + STAMP_MS]
            if lo23 <= tsk <= hi23:
                _post_in_ranges(rg, acc, tsk, True)
        else:
            acc.slow += 1
            le = find(b"\n", p, hi)
            ts, has_ms = line_stamp(decode(buf[ls: hi if le < 0 else le]))
            if ts is None:
                acc.posts_untimed += 1
            else:
                _count_post_dt(ts, not has_ms, rg, acc)
        p = find(POST, path_at, hi)


def _post_in_ranges(rg: _Ranges, acc: _Acc, tsk: bytes, ms: bool) -> None:
    hits = _in_windows(rg.w23 if ms else rg.w19, tsk)
    for k in hits:
        rg.counts[k][1] += 1
        if rg.disjoint:
            return
    if len(hits) > 1:
        acc.shared += 1
    for target, b in rg.iv_ranges:
        if (b[2] <= tsk <= b[3]) if ms else (b[0] <= tsk <= b[1]):
            target[1] += 1
            if rg.disjoint:
                break


def _count_post_dt(ts: datetime, whole: bool, rg: _Ranges, acc: _Acc) -> None:
    hits = _windows_at(ts, whole, rg)
    for k in hits:
        rg.counts[k][1] += 1
    acc.shared += len(hits) > 1
    for iv in rg.intervals:
        if in_window(ts, iv.start, iv.end, whole_seconds=whole):
            rg.ivs[iv.name][1] += 1


# ---- retractions -------------------------------------------------------------------------------

def _retraction_lines(buf: bytes, lo: int, hi: int, rg: _Ranges, acc: _Acc) -> None:
    """Retraction warnings in the decode range (rare lines: the general parsers are cheap)."""
    p = buf.find(RETRACTED, lo, hi)
    while p >= 0:
        ls = max(buf.rfind(b"\n", lo, p) + 1, lo)
        le = buf.find(b"\n", p, hi)
        le = hi if le < 0 else le
        ts, ranks, has_ms = parse_head(decode(buf[ls:p]))
        # one whose time is unknown counts in every decode range
        hits = [k for k, (start, end) in enumerate(rg.dec_spans)
                if ts is None or in_window(ts, start, end, whole_seconds=not has_ms)]
        if hits:
            key = (ranks.get("DP", 0), ranks.get("PP", 0),
                   tuple(sorted((k, v) for k, v in ranks.items() if k not in ("DP", "PP"))))
            n = _num(buf, RETRACTED, p, le)
            for k in hits:
                r = rg.retractions[k].setdefault(key, [0, 0])
                r[0] += 1
                r[1] += int(n) if n is not None else 0
            acc.shared += ts is not None and len(hits) > 1
        p = buf.find(RETRACTED, le, hi)


# ---- first and last stamps -----------------------------------------------------------------------

def _to_dt(value):
    if value is None or isinstance(value, datetime):
        return value
    return parse_ts(value.decode("ascii", "replace"))


def _first_ts(buf: bytes, lo: int, hi: int) -> datetime | None:
    pos = lo
    for _ in range(64):
        if pos >= hi:
            return None
        le = buf.find(b"\n", pos, hi)
        le = hi if le < 0 else le
        ts = line_timestamp(decode(buf[pos: min(le, pos + 400)]))
        if ts is not None:
            return ts
        pos = le + 1
    return None


def _last_ts(tail: bytes) -> datetime | None:
    for raw in reversed(tail.split(b"\n")[1:] or [tail]):
        ts = line_timestamp(decode(raw[:400]))
        if ts is not None:
            return ts
    return None


# ---- whole blocks at once ------------------------------------------------------------------------

def _b19(t: datetime | None, shift: timedelta, default: bytes) -> bytes:
    return (t + shift).strftime("%Y-%m-%d %H:%M:%S").encode() if t is not None else default


class _BulkPlan:
    """Byte bounds telling whether a block lies wholly inside/outside each range (+- MARGIN)."""

    __slots__ = ("wins", "decs", "ivs", "tagged")

    def __init__(self, rg: _Ranges):
        def rng(a, b):
            # (inside_lo, inside_hi, outside_before, outside_after): a block [f, l] is inside
            # if inside_lo <= f and l <= inside_hi; outside if l < outside_before or
            # f > outside_after.
            return (_b19(a, MARGIN, b""), _b19(b, -MARGIN, b"\xff"),
                    _b19(a, -MARGIN, b""), _b19(b, MARGIN, b"\xff"))
        self.wins = [rng(w.start, w.end) for w in rg.windows]
        self.decs = [rng(*span) for span in rg.dec_spans]
        self.ivs = [rng(iv.start, iv.end) for iv in rg.intervals]
        self.tagged: bool | None = None


def _where(r, first: bytes, last: bytes) -> int:
    """1 inside, 0 outside, -1 straddling (or too close to call)."""
    if r[0] <= first and last <= r[1]:
        return 1
    if last < r[2] or first > r[3]:
        return 0
    return -1


STRADDLES = -2


def _inside(rngs: list, first: bytes, last: bytes) -> int:
    """Index of the range (of non-overlapping ones) the block lies in, -1 if it lies outside
    all of them, else STRADDLES. A block inside one range holds no line of another, whatever
    its margins to them: so the blocks that hold a window's lines are summed the same way
    (at once or line by line) however many windows a scan has, and so are its sums."""
    straddles = False
    for k, r in enumerate(rngs):
        w = _where(r, first, last)
        if w > 0:
            return k
        straddles = straddles or w < 0
    return STRADDLES if straddles else -1


DECODE_TAGGED = b"] " + DECODE + BATCH
PREFILL_TAGGED = b"] " + PREFILL + BATCH
_ACC_RATE = re.compile(rb", accept len: ([0-9.]+), accept rate: ([0-9.]+),")
_ACC = re.compile(rb", accept len: ([0-9.]+),")
# a decode line's running requests and gen throughput (greedy to the line's end and back: a
# third of the time of a lazy match)
_RUN_GEN = re.compile(rb"Decode batch(?: \[\d+\])?[.,] #running-req: (\d+),[^\n]*"
                      rb"gen throughput \(token/s\): ([0-9.]+)[,\r\n]")
NEW_SEQ_ONE = NEW_SEQ + b"1, "


def _tag_before(buf: bytes, k: int, lo: int) -> tuple[bytes, bytes] | None:
    """(19-char stamp, rank bytes) of the '[ts ranks]' group ending right before buf[k] == ']'."""
    ob = buf.rfind(b"[", max(lo, k - 120), k)
    if ob < 0:
        return None
    ts = buf[ob + 1: ob + 1 + STAMP]
    if len(ts) != STAMP or ts[4:5] != b"-" or ts[13:14] != b":":
        return None
    rk = buf[ob + 1 + STAMP: k]
    if rk[:1] == b".":
        rk = rk[4:]
    return ts, rk


SPLIT_MIN = 1 << 16                  # halves of a block that straddles a range bound, down to
SUMMED, BY_LINE, HALVE = 1, 0, -1    # what _bulk_block made of a block


def _bulk_or_lines(buf: bytes, lo: int, hi: int, plan: _BulkPlan, acc: _Acc, rg: _Ranges,
                   part: bool = False) -> None:
    """Sum a block at once; one that straddles a range bound (a window's start or end, a pass
    boundary) in halves (split at a line end) down to SPLIT_MIN bytes; parse what is left line
    by line. Parts of a block add their values one by one, as the per-line path does, so the
    sums do not depend on where blocks were split."""
    done = _bulk_block(buf, lo, hi, plan, acc, rg, part)
    if done == SUMMED:
        return
    mid = buf.find(b"\n", (lo + hi) // 2, hi) + 1 \
        if done == HALVE and hi - lo >= 2 * SPLIT_MIN else 0
    if lo < mid < hi:
        _bulk_or_lines(buf, lo, mid, plan, acc, rg, True)
        _bulk_or_lines(buf, mid, hi, plan, acc, rg, True)
    else:
        _batch_lines(buf, lo, hi, rg, acc)


def _stamp_before(buf: bytes, k: int, lo: int) -> bytes | None:
    """The stamp of the '[ts ranks]' group ending right before buf[k], with its milliseconds
    when it has them (as the per-line path keeps it), or None."""
    tag = _tag_before(buf, k, lo)
    if tag is None:
        return None
    ob = buf.rfind(b"[", max(lo, k - 120), k)
    return buf[ob + 1: ob + 1 + STAMP_MS] if buf[ob + 1 + STAMP] == DOT else tag[0]


def _bulk_block(buf: bytes, lo: int, hi: int, plan: _BulkPlan, acc: _Acc, rg: _Ranges,
                exact: bool = False) -> int:
    """Account for every batch line of buf[lo:hi] at once (SUMMED), or say that the block
    needs lines (BY_LINE) or straddles a range bound (HALVE: its halves may not).
    exact: add the decode values one by one (in C), in line order, as the per-line path does;
    else add their block sum."""
    f_dec = buf.find(DECODE_TAGGED, lo, hi)
    f_pre = buf.find(PREFILL_TAGGED, lo, hi)
    if f_dec < 0 and f_pre < 0:
        # no SGLang batch lines, but ' batch' text may still form a parseable odd line
        return BY_LINE if buf.find(BATCH, lo, hi) >= 0 else SUMMED
    l_dec = buf.rfind(DECODE_TAGGED, lo, hi)
    l_pre = buf.rfind(PREFILL_TAGGED, lo, hi)
    first = _tag_before(buf, min(k for k in (f_dec, f_pre) if k >= 0), lo)
    last = _tag_before(buf, max(l_dec, l_pre), lo)
    if first is None or last is None or first[0] > last[0]:
        return BY_LINE
    if plan.tagged is None:
        # SGLang tags every scheduler line with DP/PP when dp/pp > 1 and never otherwise, so
        # the first batch line tells for the whole file whether several streams can occur.
        plan.tagged = b"DP" in first[1] or b"PP" in first[1]
    if plan.tagged:
        return BY_LINE
    f, l_ = first[0], last[0]
    win = _inside(plan.wins, f, l_)
    dec = _inside(plan.decs, f, l_)
    in_ivs = [_where(r, f, l_) for r in plan.ivs]
    if win == STRADDLES or dec == STRADDLES or -1 in in_ivs:
        return HALVE
    if 1 in in_ivs:
        return BY_LINE                                # warm-up token counts: per line
    n_dec = buf.count(DECODE_TAGGED, lo, hi)
    n_pre = buf.count(PREFILL_TAGGED, lo, hi)
    if n_dec + n_pre != buf.count(BATCH, lo, hi):
        return BY_LINE                                  # odd 'batch' lines: per line
    first_dec = first_pre = None             # the file's first stamps, as the per-line path
    if acc.first_decode is None and f_dec >= 0:
        first_dec = _stamp_before(buf, f_dec, lo)
        if first_dec is None:
            return BY_LINE
    if acc.first_prefill is None and f_pre >= 0:
        first_pre = _stamp_before(buf, f_pre, lo)
        if first_pre is None:
            return BY_LINE
    sums = None
    seq = 0
    try:
        if dec >= 0 and n_dec:
            sums = _bulk_decode(buf, lo, hi, n_dec, _floats if exact else _sum)
            if sums is None:
                return BY_LINE
        if win >= 0 and n_pre:
            seq = _bulk_new_seq(buf, lo, hi, n_pre)
            if seq is None:
                return BY_LINE
    except ValueError:
        return BY_LINE
    # commit
    if first_dec is not None:
        acc.first_decode = first_dec
    if first_pre is not None:
        acc.first_prefill = first_pre
    acc.decode_lines += n_dec
    acc.prefill_lines += n_pre
    if sums is not None:
        a = rg.dec_sums[dec].setdefault((0, 0), _decode_sums())
        for i, v in enumerate(sums):
            a[i] = reduce(add, v, a[i]) if exact and i in _FLOAT_SUMS else a[i] + v
    if win >= 0 and n_pre:
        c = rg.counts[win][0].setdefault((0, 0), [0, 0, 0])
        c[0] += n_pre
        c[2] += seq
    return SUMMED


def _sum(values: list) -> float:
    return sum(map(float, values))


def _floats(values: list) -> list[float]:
    return list(map(float, values))


def _bulk_decode(buf: bytes, lo: int, hi: int, n_dec: int, total) -> tuple | None:
    """The DecodeAgg fields of n_dec decode lines, each sum as total(its values) (the sum, or
    the values to add one by one), or None if a line is odd (go per line).

    findall + map(float) keep the per-value work in C; a rate only counts right after its
    accept len (the per-line rule), which is what _ACC_RATE matches. Speculative decoding puts
    'accept len' (and since 0.5.6 'accept rate') in every decode line or in none."""
    pairs = _RUN_GEN.findall(buf, lo, hi)
    if len(pairs) != n_dec:
        return None
    runs, gens = zip(*pairs) if pairs else ((), ())
    runs = list(map(int, runs))
    gens = list(map(float, gens))
    if 0 in runs:                             # an idle line has no speed
        speeds = [g / r for g, r in zip(gens, runs) if r]
    else:
        speeds = list(map(truediv, gens, runs))
    floats = sum if total is _sum else total  # these are floats already
    tail = (n_dec, floats(gens), len(speeds), floats(speeds), floats(list(map(mul, speeds, speeds))))
    if buf.find(ACCEPT_LEN, lo, hi) < 0:
        return (n_dec, 0, total(()), 0, total(())) + tail
    acc = _ACC_RATE.findall(buf, lo, hi)
    if len(acc) == n_dec:
        lens, rates = zip(*acc)
        return (n_dec, n_dec, total(lens), n_dec, total(rates)) + tail
    if acc:                                   # some lines with a rate, some without
        return None
    lens = _ACC.findall(buf, lo, hi)          # 0.4.x: accept len, no rate
    if len(lens) != n_dec or buf.count(ACCEPT_LEN, lo, hi) != n_dec:
        return None
    return (n_dec, n_dec, total(lens), 0, total(())) + tail


def _bulk_new_seq(buf: bytes, lo: int, hi: int, n_pre: int) -> int | None:
    """Sum of '#new-seq' over n_pre prefill lines (one C count when every line has 1)."""
    if buf.count(NEW_SEQ_ONE, lo, hi) == n_pre:
        return n_pre
    parts = buf[lo:hi].split(NEW_SEQ)
    if len(parts) - 1 != n_pre:
        return None
    seq = 0
    for x in parts[1:]:
        j = x.find(b",")
        if j < 0:
            return None
        seq += int(x[:j])
    return seq

