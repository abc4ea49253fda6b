"""One streaming pass over a server log that aggregates what the collector needs.

This is the hot path of `collect` (logs can reach GiBs). Design:
- read 4 MiB blocks and jump between candidate lines with bytes.find (C speed), so lines that
  are neither batch samples nor POST access lines cost nothing in Python;
- compare timestamps as bytes ('YYYY-mm-dd HH:MM:SS' sorts lexicographically) and parse only the
  lines inside the benchmark window or a warm-up interval;
- extract the few needed numbers by key ('accept len', 'gen throughput ...'), so field order
  does not matter; any line that does not have SGLang's '[ts ranks] Kind batch' shape goes to the
  general parser `parse_batch_line` (same results, slower);
- sum whole blocks at once (bytes.split/count, no per-line Python) when their first and last
  batch lines lie at least MARGIN inside or outside every time range, all samples belong to
  one stream (no DP/PP tags) and every count agrees (each decode line has one 'gen throughput',
  ...); otherwise the block is parsed line by line. This relies on batch lines being written in
  time order (one scheduler process, line-buffered stderr), give or take MARGIN.
Memory is O(1) in the log size: only per-stream sums are kept.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable

from .server_log import GENERATE_PATHS, parse_batch_line, parse_ranks
from .text import BLOCK, decode, in_window, iter_blocks, line_timestamp, parse_ts

__all__ = ["Interval", "DecodeAgg", "Counts", "ServerLogScan", "scan_server_log"]

_FOREVER = (None, None)
MARGIN = timedelta(seconds=5)


@dataclass(frozen=True)
class Interval:
    name: str
    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class DecodeAgg:
    """Sums over the decode samples of one (DP, PP) stream."""

    samples: int = 0
    accept_samples: int = 0
    accept_len_sum: float = 0.0
    rate_samples: int = 0
    accept_rate_sum: float = 0.0
    gen_samples: int = 0
    gen_sum: float = 0.0

    def __add__(self, other: "DecodeAgg") -> "DecodeAgg":
        return DecodeAgg(*(a + b for a, b in zip(self._tuple(), other._tuple())))

    def _tuple(self) -> tuple:
        return (self.samples, self.accept_samples, self.accept_len_sum, self.rate_samples,
                self.accept_rate_sum, self.gen_samples, self.gen_sum)

    @property
    def accept_len(self) -> float | None:
        return self.accept_len_sum / self.accept_samples if self.accept_samples else None

    @property
    def accept_rate(self) -> float | None:
        return self.accept_rate_sum / self.rate_samples if self.rate_samples else None

    @property
    def gen_throughput(self) -> float | None:
        return self.gen_sum / self.gen_samples if self.gen_samples else None


@dataclass(frozen=True)
class Counts:
    """Traffic seen in one time range."""

    prefill_lines: int = 0
    prefill_tokens: int = 0        # new + cached tokens (warm-up intervals only, not the window)
    new_seq: int = 0               # sum of '#new-seq' (a chunked prompt counts once per chunk)
    posts: int = 0                 # POST access lines to generation endpoints


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
    tagged: bool = False                            # batch lines carry DP/PP rank tags

    def primary_stream(self) -> DecodeAgg:
        """Samples of the lowest PP stage, pooled over DP ranks.

        Each DP group leader logs its own batch, so DP samples are distinct and pool; every PP
        stage logs the same batch again, so only one stage may count (collector-notes.md).
        """
        if not self.decode:
            return DecodeAgg()
        pp = min(k[1] for k in self.decode)
        total = DecodeAgg()
        for (dp, stage), agg in sorted(self.decode.items()):
            if stage == pp:
                total = total + agg
        return total


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


_GEN_PATHS = tuple(p.encode() for p in GENERATE_PATHS)


def _is_gen_path(buf: bytes, i: int) -> bool:
    """buf[i:] starts with a generation path followed by ' ', '?' or end."""
    for p in _GEN_PATHS:
        if buf.startswith(p, i) and buf[i + len(p): i + len(p) + 1] in (b" ", b"?", b""):
            return True
    return False


class _Acc:
    __slots__ = ("decode", "window", "intervals", "decode_lines", "prefill_lines",
                 "first_prefill", "first_decode", "posts", "posts_untimed", "slow", "tagged")

    def __init__(self, names: Iterable[str]):
        self.decode: dict = {}
        self.window = [0, 0, 0, 0]
        self.intervals = {n: [0, 0, 0, 0] for n in names}
        self.decode_lines = self.prefill_lines = self.posts = self.posts_untimed = self.slow = 0
        self.first_prefill = self.first_decode = None
        self.tagged = False


def scan_server_log(path: str | Path, *, window: tuple | None = None,
                    intervals: Iterable[Interval] = (), all_samples: bool = False,
                    access_log: bool = True, block: int = BLOCK, bulk: bool = True
                    ) -> ServerLogScan:
    """Scan one server log.

    window: (start, end) of the benchmark (end None = open); decode samples, prefill lines and
    generation POSTs are counted inside it (decode samples everywhere with all_samples=True).
    intervals: extra ranges (the warm-ups) whose prefill tokens and POSTs are counted.
    access_log: look for uvicorn access lines (only node rank 0 runs the HTTP server).
    bulk: allow block-at-once summing (see module docstring); False parses every line.
    """
    path = Path(path)
    start, end = window if window else _FOREVER
    dec_start, dec_end = (None, None) if all_samples else (start, end)
    intervals = tuple(intervals)
    acc = _Acc(i.name for i in intervals)
    w_b = _bounds(start, end)
    d_b = _bounds(dec_start, dec_end)
    i_b = [(iv.name, _bounds(iv.start, iv.end)) for iv in intervals]
    win_counts = acc.window
    ranges = [(acc.window, w_b)] + [(acc.intervals[n], b) for n, b in i_b]
    # hull of all ranges: most lines fall outside it or only in the window
    r_lo19 = min(b[0] for _, b in ranges)
    r_hi19 = max(b[1] for _, b in ranges)
    r_lo23 = min(b[2] for _, b in ranges)
    r_hi23 = max(b[3] for _, b in ranges)
    d_lo19, d_hi19, d_lo23, d_hi23 = d_b
    spans = sorted((iv.start or datetime.min, iv.end or datetime.max) for iv in
                   [Interval("w", start, end), *intervals])
    # a whole-second stamp may fall in two ranges less than a second apart
    disjoint = all((b[0] - a[1]).total_seconds() > 1 for a, b in zip(spans, spans[1:]))
    dec = acc.decode
    streams: dict[bytes, tuple[int, int]] = {}
    # bulk needs every range strictly inside or outside a block, with MARGIN to spare
    plan = _BulkPlan(window or _FOREVER, (dec_start, dec_end), intervals) if bulk else None
    first_ts = last_ts = None
    size = 0
    tail = b""

    for buf, lo, hi in iter_blocks(path, block):
        size += hi - lo
        if first_ts is None:
            first_ts = _first_ts(buf, lo, hi)
        tail = buf[max(lo, hi - 4096):hi]
        complete_end = buf[hi - 1: hi] == b"\n"
        find = buf.find
        rfind = buf.rfind

        if plan is not None and _bulk_block(buf, lo, hi, plan, acc):
            p = -1
        else:
            p = find(b" batch", lo, hi)
        # ---- batch lines ----------------------------------------------------------------
        # Per line: ~10 C calls. buf[ls] == '[' and '] ' before the kind mean SGLang's own
        # prefix; anything else (Ray prefix, colour codes, odd stamps, a cut last line) takes
        # the general parser.
        while p >= 0:
            c = buf[p - 1]
            if c == 101 and buf[p - 6: p] == b"Decode":          # 'e'
                is_dec, ks = True, p - 6
            elif c == 108 and buf[p - 7: p] == b"Prefill":       # 'l'
                is_dec, ks = False, p - 7
            else:
                p = find(b" batch", p + 6, hi)
                continue
            le = find(b"\n", p, hi)
            if le < 0:
                le = hi
            ls = rfind(b"\n", lo, ks) + 1
            if ls < lo:
                ls = lo
            sep = buf[ls + 20] if ls + 20 < hi else 0
            if buf[ls] != 91 or buf[ks - 2: ks] != b"] " or (le == hi and not complete_end) \
                    or sep not in (32, 93, 46) or buf[ls + 5] != 45:   # '[', ' ', ']', '.', '-'
                _slow_batch(buf[ls:le], le < hi or complete_end, acc, start, end, dec_start,
                            dec_end, intervals)
                p = find(b" batch", le, hi)
                continue
            if sep == 46:
                tsk, rk, ms = buf[ls + 1: ls + 24], buf[ls + 24: ks - 2], True
                if rk[:1] not in (b" ", b""):                  # not a 3-digit fraction
                    _slow_batch(buf[ls:le], True, acc, start, end, dec_start, dec_end,
                                intervals)
                    p = find(b" batch", le, hi)
                    continue
            else:
                tsk, rk, ms = buf[ls + 1: ls + 20], buf[ls + 20: ks - 2], False
            if is_dec:
                acc.decode_lines += 1
                if acc.first_decode is None:
                    acc.first_decode = tsk
                if (d_lo23 <= tsk <= d_hi23) if ms else (d_lo19 <= tsk <= d_hi19):
                    key = streams.get(rk)
                    if key is None:
                        r = parse_ranks(rk.decode("ascii", "replace"))
                        key = streams[rk] = (r.get("DP", 0), r.get("PP", 0))
                        acc.tagged = acc.tagged or "DP" in r or "PP" in r
                    a = dec.get(key)
                    if a is None:
                        a = dec[key] = [0, 0, 0.0, 0, 0.0, 0, 0.0]
                    a[0] += 1
                    i = find(b", accept len: ", p, le)
                    if i >= 0:
                        j = find(b",", i + 14, le)
                        try:
                            a[2] += float(buf[i + 14: le if j < 0 else j])
                            a[1] += 1
                            if j >= 0 and buf.startswith(b" accept rate: ", j + 1):
                                k = find(b",", j + 15, le)
                                try:
                                    a[4] += float(buf[j + 15: le if k < 0 else k])
                                    a[3] += 1
                                except ValueError:
                                    pass
                        except ValueError:
                            pass
                    i = find(b"gen throughput (token/s): ", p, le)
                    if i >= 0:
                        j = find(b",", i + 26, le)
                        try:
                            a[6] += float(buf[i + 26: le if j < 0 else j])
                            a[5] += 1
                        except ValueError:
                            pass
            else:
                acc.prefill_lines += 1
                if acc.first_prefill is None:
                    acc.first_prefill = tsk
                if (r_lo23 <= tsk <= r_hi23) if ms else (r_lo19 <= tsk <= r_hi19):
                    hit = None
                    for target, b in ranges:
                        if (b[2] <= tsk <= b[3]) if ms else (b[0] <= tsk <= b[1]):
                            if hit is None:
                                seq = _num(buf, b"#new-seq: ", p, le) or 0
                                tok = (_num(buf, b"#new-token: ", p, le) or 0) + \
                                    (_num(buf, b"#cached-token: ", p, le) or 0)
                                hit = (int(seq), int(tok))
                            target[0] += 1
                            target[2] += hit[0]
                            if target is not win_counts:
                                target[1] += hit[1]
                            if disjoint:
                                break
            p = find(b" batch", le, hi)

        # ---- generation POSTs (uvicorn access lines) -----------------------------------
        p = find(b'"POST ', lo, hi) if access_log else -1
        while p >= 0:
            if not (buf.startswith(b"/generate ", p + 6) or _is_gen_path(buf, p + 6)):
                p = find(b'"POST ', p + 6, hi)
                continue
            acc.posts += 1
            ls = rfind(b"\n", lo, p) + 1
            if ls < lo:
                ls = lo
            sep = buf[ls + 20] if ls + 20 < hi else 0
            if buf[ls] == 91 and sep in (93, 32) and buf[ls + 5] == 45:   # '[', ']', ' ', '-'
                tsk, ms = buf[ls + 1: ls + 20], False
            elif buf[ls] == 91 and sep == 46 and buf[ls + 5] == 45:       # '.fff'
                tsk, ms = buf[ls + 1: ls + 24], True
            else:
                acc.slow += 1
                le = find(b"\n", p, hi)
                ts = line_timestamp(decode(buf[ls: hi if le < 0 else le]))
                if ts is None:
                    acc.posts_untimed += 1
                else:
                    _count_post_dt(ts, acc, start, end, intervals)
                p = find(b'"POST ', p + 6, hi)
                continue
            if (r_lo23 <= tsk <= r_hi23) if ms else (r_lo19 <= tsk <= r_hi19):
                for target, b in ranges:
                    if (b[2] <= tsk <= b[3]) if ms else (b[0] <= tsk <= b[1]):
                        target[3] += 1
                        if disjoint:
                            break
            p = find(b'"POST ', p + 6, hi)

    last_ts = _last_ts(tail)
    decode_aggs = {k: DecodeAgg(*v) for k, v in sorted(acc.decode.items())}
    return ServerLogScan(
        str(path), size, first_ts, last_ts, decode_aggs, acc.decode_lines, acc.prefill_lines,
        _to_dt(acc.first_prefill), _to_dt(acc.first_decode), Counts(*acc.window),
        {n: Counts(*c) for n, c in acc.intervals.items()}, acc.posts, acc.posts_untimed,
        acc.slow, acc.tagged or bool(plan and plan.tagged))


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


def _count_post_dt(ts, acc, start, end, intervals) -> None:
    if in_window(ts, start, end, whole_seconds=ts.microsecond == 0):
        acc.window[3] += 1
    for iv in intervals:
        if in_window(ts, iv.start, iv.end, whole_seconds=ts.microsecond == 0):
            acc.intervals[iv.name][3] += 1


def _slow_batch(raw: bytes, complete: bool, acc: _Acc, start, end, dec_start, dec_end,
                intervals) -> None:
    """General path for lines with Ray prefixes, colour codes, odd stamps or a cut tail."""
    acc.slow += 1
    s = parse_batch_line(raw, complete=complete)
    if s is None:
        return
    ts, whole = s.ts, not s.ts_has_ms
    if "DP" in s.ranks or "PP" in s.ranks:
        acc.tagged = True
    if s.kind == "Decode":
        acc.decode_lines += 1
        if acc.first_decode is None and ts is not None:
            acc.first_decode = ts
        if ts is None and (dec_start or dec_end):
            return
        if ts is not None and not in_window(ts, dec_start, dec_end, whole_seconds=whole):
            return
        a = acc.decode.setdefault(s.stream, [0, 0, 0.0, 0, 0.0, 0, 0.0])
        a[0] += 1
        if s.accept_len is not None:
            a[1] += 1
            a[2] += s.accept_len
            if s.accept_rate is not None:
                a[3] += 1
                a[4] += s.accept_rate
        if s.gen_throughput is not None:
            a[5] += 1
            a[6] += s.gen_throughput
        return
    acc.prefill_lines += 1
    if acc.first_prefill is None and ts is not None:
        acc.first_prefill = ts
    if ts is None:
        return
    tokens = int((s.new_token or 0) + (s.cached_token or 0))
    seq = int(s.new_seq or 0)
    if in_window(ts, start, end, whole_seconds=whole):
        acc.window[0] += 1
        acc.window[2] += seq
    for iv in intervals:
        if in_window(ts, iv.start, iv.end, whole_seconds=whole):
            c = acc.intervals[iv.name]
            c[0] += 1
            c[1] += tokens
            c[2] += seq


def _b19(t: datetime | None, shift: timedelta, default: bytes) -> bytes:
    return (t + shift).strftime("%Y-%m-%d %H:%M:%S").encode() if t is not None else default


class _BulkPlan:
    """Byte bounds telling whether a block lies wholly inside/outside each range (+- MARGIN)."""

    __slots__ = ("win", "dec", "ivs", "tagged")

    def __init__(self, window, dec_window, intervals):
        def rng(a, b):
            # (inside_lo, inside_hi, outside_before, outside_after): a block [f, l] is inside
            # if inside_lo <= f and l <= inside_hi; outside if l < outside_before or
            # f > outside_after.
            return (_b19(a, MARGIN, b""), _b19(b, -MARGIN, b"\xff"),
                    _b19(a, -MARGIN, b""), _b19(b, MARGIN, b"\xff"))
        self.win = rng(*window)
        self.dec = rng(*dec_window)
        self.ivs = [rng(iv.start, iv.end) for iv in intervals]
        self.tagged: bool | None = None


def _where(r, first: bytes, last: bytes) -> int:
    """1 inside, 0 outside, -1 straddling (or too close to call)."""
    if r[0] <= first and last <= r[1]:
        return 1
    if last < r[2] or first > r[3]:
        return 0
    return -1


_ACC_RATE = re.compile(rb", accept len: ([0-9.]+), accept rate: ([0-9.]+),")
_ACC = re.compile(rb", accept len: ([0-9.]+),")
_GEN = re.compile(rb"gen throughput \(token/s\): ([0-9.]+)[,\r\n]")


def _tag_before(buf: bytes, k: int, lo: int) -> tuple[bytes, bytes] | None:
    """(19-char stamp, rank bytes) of the '[ts ranks]' group ending right before buf[k] == ']'."""
    ob = buf.rfind(b"[", max(lo, k - 120), k)
    if ob < 0:
        return None
    ts = buf[ob + 1: ob + 20]
    if len(ts) != 19 or ts[4:5] != b"-" or ts[13:14] != b":":
        return None
    rk = buf[ob + 20: k]
    if rk[:1] == b".":
        rk = rk[4:]
    return ts, rk


def _bulk_block(buf: bytes, lo: int, hi: int, plan: _BulkPlan, acc: _Acc) -> bool:
    """Account for every batch line of buf[lo:hi] at once; False if the block needs lines."""
    f_dec = buf.find(b"] Decode batch", lo, hi)
    f_pre = buf.find(b"] Prefill batch", lo, hi)
    if f_dec < 0 and f_pre < 0:
        # no SGLang batch lines, but ' batch' text may still form a parseable odd line
        return buf.find(b" batch", lo, hi) < 0
    l_dec = buf.rfind(b"] Decode batch", lo, hi)
    l_pre = buf.rfind(b"] Prefill batch", lo, hi)
    first = _tag_before(buf, min(k for k in (f_dec, f_pre) if k >= 0), lo)
    last = _tag_before(buf, max(l_dec, l_pre), lo)
    if first is None or last is None or first[0] > last[0]:
        return False
    if plan.tagged is None:
        # SGLang tags every scheduler line with DP/PP when dp/pp > 1 and never otherwise, so
        # the first batch line tells for the whole file whether several streams can occur.
        plan.tagged = b"DP" in first[1] or b"PP" in first[1]
    if plan.tagged:
        return False
    f, l_ = first[0], last[0]
    in_win = _where(plan.win, f, l_)
    in_dec = _where(plan.dec, f, l_)
    if in_win < 0 or in_dec < 0 or any(_where(r, f, l_) != 0 for r in plan.ivs):
        return False
    n_dec = buf.count(b"] Decode batch", lo, hi)
    n_pre = buf.count(b"] Prefill batch", lo, hi)
    if n_dec + n_pre != buf.count(b" batch", lo, hi):
        return False                                  # odd 'batch' lines: per line
    sums = None
    seq = 0
    try:
        if in_dec and n_dec:
            # findall + map(float) keep the per-value work in C; a rate only counts right
            # after its accept len (the per-line rule), which is what _ACC_RATE matches.
            n_acc = buf.count(b", accept len: ", lo, hi)
            gens = _GEN.findall(buf, lo, hi)
            if n_acc not in (0, n_dec) or len(gens) != n_dec:
                return False
            pairs = _ACC_RATE.findall(buf, lo, hi) if n_acc else []
            if len(pairs) == n_acc:
                lens, rates = zip(*pairs) if pairs else ((), ())
                a = (sum(map(float, lens)), len(rates), sum(map(float, rates)))
            else:                                     # accept len without (or apart from)
                if pairs:                             # its rate: mixed lines, go per line
                    return False
                lens = _ACC.findall(buf, lo, hi)
                if len(lens) != n_acc:
                    return False
                a = (sum(map(float, lens)), 0, 0.0)
            sums = (n_dec, n_acc, a[0], a[1], a[2], n_dec, sum(map(float, gens)))
        if in_win and n_pre:
            seq = n_pre
            if buf.count(b"#new-seq: 1, ", lo, hi) != n_pre:
                seq_parts = buf[lo:hi].split(b"#new-seq: ")
                if len(seq_parts) - 1 != n_pre:
                    return False
                seq = 0
                for x in seq_parts[1:]:
                    j = x.find(b",")
                    if j < 0:
                        return False
                    seq += int(x[:j])
    except ValueError:
        return False
    # commit
    if acc.first_decode is None and f_dec >= 0:
        acc.first_decode = _tag_before(buf, f_dec, lo)[0]
    if acc.first_prefill is None and f_pre >= 0:
        acc.first_prefill = _tag_before(buf, f_pre, lo)[0]
    acc.decode_lines += n_dec
    acc.prefill_lines += n_pre
    if sums is not None:
        a = acc.decode.setdefault((0, 0), [0, 0, 0.0, 0, 0.0, 0, 0.0])
        for i, v in enumerate(sums):
            a[i] += v
    if in_win and n_pre:
        acc.window[0] += n_pre
        acc.window[2] += seq
    return True
