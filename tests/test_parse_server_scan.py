"""The fast scanner must agree with the general line parser on every line shape, for one
benchmark window or several (the passes of a launch) in one read."""
from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta
from unittest import mock

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ab.parse.server_log import parse_access_line, parse_batch_line, parse_head
import slurm_ab.parse.server_scan as scan_mod
from slurm_ab.parse.server_scan import (Counts, Interval, Retractions, WindowScan,
                                        counting_scans, scan_server_log)
from slurm_ab.parse.text import in_window, strip_ansi

T0 = datetime(2026, 9, 2, 12, 0, 0)


def _stamp(ts: datetime, ms: bool) -> str:
    s = ts.strftime("%Y-%m-%d %H:%M:%S")
    return s + f".{ts.microsecond // 1000:03d}" if ms else s


RANKS = ["", " TP0", " TP0 EP0", " PP1 TP0", " DP1 TP0 EP0", " DP0 PP0 TP0"]
# smallest part a block that straddles a range bound is split into: the module's, or small
# enough for the test logs' blocks to be split
SPLIT = st.sampled_from([scan_mod.SPLIT_MIN, 64, 200])


SPECS = ["", "accept len: 3.25, ", "accept len: 2.00, accept rate: 0.31, ",
         "accept len: 4.10, accept rate: 0.50, block accept len: 7.00, "]


@st.composite
def log_line(draw, ranks=None, at=st.integers(0, 120_000), spec=None):
    """A line of any kind SGLang's servers print, at `at` ms after T0, in any layout; with a
    spec (decode fields of speculative decoding, one kind per server) only SGLang's own layout
    and traffic lines, as a log whose blocks can be summed at once."""
    ts = T0 + timedelta(milliseconds=draw(at))
    ms = draw(st.booleans())
    if not ms:
        ts = ts.replace(microsecond=0)
    ranks = draw(st.sampled_from(RANKS)) if ranks is None else ranks
    clean = spec is not None
    prefix = "" if clean else draw(st.sampled_from(["", "", "", "(Actor pid=9) ",
                                                    "\x1b[36m(Actor pid=9)\x1b[0m "]))
    layout = "sglang" if clean else \
        draw(st.sampled_from(["sglang"] * 6 + ["python", "python-ms", "yearless", "none"]))
    if layout == "sglang":
        head = f"{prefix}[{_stamp(ts, ms)}{ranks}]"
    elif layout.startswith("python"):
        # a logging config of the user's: asctime ('%Y-%m-%d %H:%M:%S' or Python's default
        # '...,fff'), level, [file:line]; rank tags, if any, in a bracket group of their own
        stamp = _stamp(ts, False) + (f",{ts.microsecond // 1000:03d}" if layout == "python-ms"
                                     else "")
        tags = f" [{ranks.strip()}]" if ranks else ""
        head = f"{prefix}{stamp} INFO sglang.srt.managers.scheduler{tags} [scheduler.py:1734]"
    elif layout == "yearless":
        head = f"[{ts.strftime('%m-%d %H:%M:%S')}{ranks}]"          # sglang diffusion datefmt
    else:
        head = prefix.strip()
    kind = draw(st.sampled_from(["decode", "prefill", "post", "get", "retraction"]
                                + ([] if clean else ["other", "garbage"])))
    if kind == "decode":
        spec = draw(st.sampled_from(SPECS)) if spec is None else spec
        sep = draw(st.sampled_from([".", ","]))
        tail = draw(st.sampled_from(["", ", "]))
        gen = draw(st.floats(0, 5000, allow_nan=False)).__round__(2)
        return (f"{head} Decode batch{sep} #running-req: 3, #token: 10, token usage: 0.10, "
                f"{spec}cuda graph: True, gen throughput (token/s): {gen:.2f}, "
                f"#queue-req: 0{tail}")
    if kind == "prefill":
        n = draw(st.integers(0, 9000))
        return (f"{head} Prefill batch, #new-seq: {draw(st.integers(1, 3))}, #new-token: {n}, "
                f"#cached-token: {draw(st.integers(0, 5))}, token usage: 0.10, "
                f"#running-req: 0, #queue-req: 0")
    if kind == "post":
        path = draw(st.sampled_from(["/generate", "/v1/completions", "/v1/chat/completions",
                                     "/flush_cache", "/generate?x=1"]))
        head = draw(st.sampled_from([f"[{_stamp(ts, ms)}]", "", "(Actor pid=3)"]))
        return f'{head} INFO:     10.0.0.1:3 - "POST {path} HTTP/1.1" 200 OK'
    if kind == "get":
        return f'[{_stamp(ts, ms)}] INFO:     10.0.0.1:3 - "GET /health HTTP/1.1" 200 OK'
    if kind == "garbage":
        return draw(st.binary(max_size=60)).replace(b"\n", b" ").decode("latin-1")
    if kind == "retraction":
        # 0.4-0.5.x and later wordings (see RETRACTED in server_scan)
        text = draw(st.sampled_from(["Decode out of memory happened.", "KV cache pool is full. "
                                     "Retract requests."]))
        return (f"{head} {text} #retracted_reqs: {draw(st.integers(0, 9))}, "
                f"#new_token_ratio: 0.1474 -> 0.1845")
    return f"{head} Some other line mentioning a batch size, of 8"


def _add_decode_sample(dec: dict, s) -> None:
    """The reference's sums per stream: samples, accept len (n, sum), accept rate (n, sum),
    gen throughput (n, sum)."""
    a = dec.setdefault(s.stream, [0, 0, 0.0, 0, 0.0, 0, 0.0, 0, 0.0, 0.0])
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
        if s.running_req:
            a[7] += 1
            a[8] += s.gen_throughput / s.running_req
            a[9] += (s.gen_throughput / s.running_req) ** 2


RETRACTED = "#retracted_reqs: "


def _reference(lines, window, intervals, all_samples):
    """Per-line parsing with the general parser: the definition of the right answer."""
    dec = {}
    win = [{}, 0]                     # [{stream: [prefill lines, tokens, new_seq]}, posts]
    ivs = {iv.name: [{}, 0] for iv in intervals}
    ret = {}                          # (dp, pp, other ranks) -> [events, requests]
    untimed = 0
    start, end = window
    for i, line in enumerate(lines):
        complete = i < len(lines) - 1
        if RETRACTED in line:
            ts, ranks, ms = parse_head(strip_ansi(line[:line.index(RETRACTED)]))
            if all_samples or ts is None or in_window(ts, start, end, whole_seconds=not ms):
                key = (ranks.get("DP", 0), ranks.get("PP", 0),
                       tuple(sorted((k, v) for k, v in ranks.items() if k not in ("DP", "PP"))))
                r = ret.setdefault(key, [0, 0])
                r[0] += 1
                r[1] += _leading_int(line.split(RETRACTED, 1)[1])
        s = parse_batch_line(line, complete=complete)
        if s is not None and s.ts is None:
            untimed += 1
        if s is not None and s.ts is not None:
            whole = not s.ts_has_ms
            if s.kind == "Decode":
                if all_samples or in_window(s.ts, start, end, whole_seconds=whole):
                    _add_decode_sample(dec, s)
            else:
                for c, (lo, hi) in [(win, window)] + [(ivs[iv.name], (iv.start, iv.end))
                                                     for iv in intervals]:
                    if in_window(s.ts, lo, hi, whole_seconds=whole):
                        p = c[0].setdefault(s.stream, [0, 0, 0])
                        p[0] += 1
                        if c is not win:          # tokens are counted for warm-ups only
                            p[1] += int((s.new_token or 0) + (s.cached_token or 0))
                        p[2] += int(s.new_seq or 0)
            continue
        if s is not None and s.kind == "Decode" and (all_samples or window == (None, None)):
            _add_decode_sample(dec, s)            # untimed: only where the range is everything
        a = parse_access_line(line)
        if a is not None and a.is_generation and a.ts is not None:
            whole = not a.ts_has_ms
            for c, (lo, hi) in [(win, window)] + [(ivs[iv.name], (iv.start, iv.end))
                                                 for iv in intervals]:
                if in_window(a.ts, lo, hi, whole_seconds=whole):
                    c[1] += 1
    return dec, win, ivs, untimed, ret


def _leading_int(text: str) -> int:
    """The count up to the next ',' (0 when it is not a number, e.g. a cut line)."""
    try:
        return int(float(text.split(",", 1)[0]))
    except ValueError:
        return 0


def _shared(lines, windows, all_samples):
    """Lines the reference counts in more than one window (see server_scan's docstring)."""
    n = 0
    for i, line in enumerate(lines):
        s = parse_batch_line(line, complete=i < len(lines) - 1)
        if RETRACTED in line:
            ts, _, ms = parse_head(strip_ansi(line[:line.index(RETRACTED)]))
            stamp = None if all_samples else (ts, ms)
        elif s is not None:
            stamp = None if s.kind == "Decode" and all_samples else (s.ts, s.ts_has_ms)
        else:
            a = parse_access_line(line)
            stamp = (a.ts, a.ts_has_ms) if a is not None and a.is_generation else None
        if stamp is not None and stamp[0] is not None:
            n += sum(in_window(stamp[0], w.start, w.end, whole_seconds=not stamp[1])
                     for w in windows) > 1
    return n


def _ts_key(line: str) -> str:
    m = re.search(r"2026-\d\d-\d\d \d\d:\d\d:\d\d", line)
    return m.group(0) if m else ""


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(log_line(), min_size=0, max_size=60),
       w0=st.integers(0, 120_000), wlen=st.integers(0, 120_000),
       block=st.sampled_from([64, 257, 4096]), all_samples=st.booleans())
def test_fast_scan_equals_line_parser(tmp_path_factory, lines, w0, wlen, block, all_samples):
    """Lines in any order: per-line scanning (bulk=False) must equal the reference."""
    _check(tmp_path_factory, lines, w0, wlen, block, all_samples, bulk=False,
           split=scan_mod.SPLIT_MIN)


@settings(max_examples=150, deadline=None)
@given(lines=st.sampled_from(RANKS).flatmap(lambda r: st.lists(log_line(r), max_size=200)),
       w0=st.integers(0, 120_000), wlen=st.integers(0, 120_000),
       block=st.sampled_from([64, 300, 1000, 4096]), all_samples=st.booleans(), split=SPLIT)
def test_bulk_scan_equals_line_parser_on_chronological_logs(tmp_path_factory, lines, w0, wlen,
                                                           block, all_samples, split):
    """Logs in time order with one rank tag per file (as SGLang writes them): block-at-once
    summing, of whole blocks or of parts of them, changes nothing."""
    _check(tmp_path_factory, sorted(lines, key=_ts_key), w0, wlen, block, all_samples,
           bulk=True, split=split)


def _check(tmp_path_factory, lines, w0, wlen, block, all_samples, bulk, split):
    p = tmp_path_factory.mktemp("scan") / "server-r0-n0.log"
    p.write_bytes("\n".join(lines).encode("utf-8", "replace"))
    start = T0 + timedelta(milliseconds=w0)
    window = (start, start + timedelta(milliseconds=wlen))
    intervals = [Interval("w", T0, T0 + timedelta(seconds=30)), Interval("open", None, start)]
    with mock.patch.object(scan_mod, "SPLIT_MIN", split):
        scan = scan_server_log(p, window=window, intervals=intervals, all_samples=all_samples,
                               block=block, bulk=bulk)
    lines_back = p.read_bytes().decode("utf-8", "replace").split("\n") if lines else []
    dec, win, ivs, untimed, ret = _reference(lines_back, window, intervals, all_samples)
    _assert_window(WindowScan(scan.decode, scan.window, scan.retractions), dec, win, ret)
    for iv in intervals:
        assert _flat(scan.intervals[iv.name]) == (ivs[iv.name][0], ivs[iv.name][1])
    assert scan.untimed_batch_lines == untimed
    assert scan.tagged == _tagged(lines_back)
    assert (scan.windows, scan.shared_lines) == ({}, 0)


def _tagged(lines) -> bool:
    """Whether the file's batch lines carry DP/PP tags (whatever the time ranges)."""
    return any(s is not None and ("DP" in s.ranks or "PP" in s.ranks)
               for s in map(parse_batch_line, lines))


def _assert_window(got: WindowScan, dec, win, ret):
    """One window's scan equals the reference's decode sums, prefill/POST counts, retractions."""
    have = {k: (v.samples, v.accept_samples, round(v.accept_len_sum, 6), v.rate_samples,
                round(v.accept_rate_sum, 6), v.gen_samples, round(v.gen_sum, 4), v.speed_samples,
                round(v.speed_sum, 4), round(v.speed_sq, 2))
            for k, v in got.decode.items()}
    want = {k: (a[0], a[1], round(a[2], 6), a[3], round(a[4], 6), a[5], round(a[6], 4), a[7],
                round(a[8], 4), round(a[9], 2))
            for k, a in dec.items()}
    assert have == want
    assert _flat(got.counts) == (win[0], win[1])
    assert got.retractions == {k: Retractions(*v) for k, v in ret.items()}


def _flat(c):
    return {k: [p.lines, p.tokens, p.new_seq] for k, p in c.prefill.items()}, c.posts


# ---- several windows in one read -----------------------------------------------------------------

def _ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


GRID = 250                          # ms: many line stamps and window bounds meet on it


def _grid(lo: int, hi: int):
    return st.integers(lo, hi).map(lambda k: k * GRID)


# line times (ms after T0): on the grid in the first 40 s, where the windows are (at, or in the
# same second as, their bounds), or anywhere
TIMES = st.one_of(_grid(0, 160), st.integers(0, 120_000))


@st.composite
def pass_windows(draw):
    """1-4 benchmark windows in time order, bounds on the grid or a millisecond off it, often
    less than a second apart (a whole-second stamp may then belong to two), the first possibly
    open at the start, the last at the end."""
    t = draw(_grid(0, 40))
    out = []
    for k in range(draw(st.integers(1, 4))):
        end = t + draw(st.one_of(_grid(0, 8), _grid(0, 80))) + draw(st.sampled_from([0, 1, -1]))
        out.append(Interval(f"c{k}-r1", T0 + _ms(t), T0 + _ms(max(end, t))))
        t = max(end, t) + draw(st.one_of(_grid(0, 3), _grid(0, 40)))
    if draw(st.booleans()):
        out[0] = replace(out[0], start=None)
    if draw(st.booleans()):
        out[-1] = replace(out[-1], end=None)
    return out


# copies of drawn lines moved into the second of a window bound: (line index, bound index)
MOVES = st.lists(st.tuples(st.integers(0, 999), st.integers(0, 7)), max_size=12)
_STAMP_SECOND = re.compile(r"2026-\d\d-\d\d \d\d:\d\d:\d\d")


def _moved(lines, windows, moves) -> list[str]:
    """The lines plus copies of some of them restamped into the second of a window bound (their
    milliseconds, if any, kept): whole-second stamps there may belong to two windows."""
    bounds = [t for w in windows for t in (w.start, w.end) if t is not None]
    extra = [_STAMP_SECOND.sub(bounds[j % len(bounds)].strftime("%Y-%m-%d %H:%M:%S"),
                               lines[i % len(lines)], count=1)
             for i, j in moves if lines and bounds]
    return lines + extra


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(log_line(at=TIMES), min_size=5, max_size=60), windows=pass_windows(),
       moves=MOVES, block=st.sampled_from([64, 257, 4096]), all_samples=st.booleans())
def test_multi_window_scan_equals_line_parser_per_window(tmp_path_factory, lines, windows, moves,
                                                         block, all_samples):
    """Lines in any order, per line: each window gets what the reference gives it alone."""
    _check_windows(tmp_path_factory, _moved(lines, windows, moves), windows, block,
                   all_samples, bulk=False, split=scan_mod.SPLIT_MIN)


@settings(max_examples=100, deadline=None)
@given(lines=st.tuples(st.sampled_from(RANKS), st.sampled_from(SPECS + [None])).flatmap(
           lambda rs: st.lists(log_line(rs[0], at=TIMES, spec=rs[1]), min_size=10,
                               max_size=150)),
       windows=pass_windows(), moves=MOVES, block=st.sampled_from([64, 300, 1000, 4096]),
       all_samples=st.booleans(), split=SPLIT)
def test_multi_window_bulk_scan_equals_line_parser_per_window(tmp_path_factory, lines, windows,
                                                              moves, block, all_samples, split):
    """Chronological logs with one rank tag per file: block-at-once summing across several
    windows changes nothing."""
    _check_windows(tmp_path_factory, sorted(_moved(lines, windows, moves), key=_ts_key),
                   windows, block, all_samples, bulk=True, split=split)


def _check_windows(tmp_path_factory, lines, windows, block, all_samples, bulk, split):
    p = tmp_path_factory.mktemp("scan") / "server-r0-n0.log"
    p.write_bytes("\n".join(lines).encode("utf-8", "replace"))
    intervals = [Interval("w", T0, T0 + timedelta(seconds=30)),
                 Interval("open", None, windows[0].start)]
    with mock.patch.object(scan_mod, "SPLIT_MIN", split):
        scan = scan_server_log(p, windows=windows, intervals=intervals, all_samples=all_samples,
                               block=block, bulk=bulk)
        singles = [scan_server_log(p, window=(w.start, w.end), intervals=intervals,
                                   all_samples=all_samples, block=block, bulk=bulk)
                   for w in windows]
    lines_back = p.read_bytes().decode("utf-8", "replace").split("\n") if lines else []
    assert list(scan.windows) == [w.name for w in windows]
    for w, one in zip(windows, singles):
        dec, win, ivs, untimed, ret = _reference(lines_back, (w.start, w.end), intervals,
                                                 all_samples)
        _assert_window(scan.windows[w.name], dec, win, ret)
        # to the last digit, as the window's own scan
        assert scan.windows[w.name] == WindowScan(one.decode, one.window, one.retractions)
    for iv in intervals:
        assert _flat(scan.intervals[iv.name]) == (ivs[iv.name][0], ivs[iv.name][1])
    assert scan.shared_lines == _shared(lines_back, windows, all_samples)
    assert scan.tagged == _tagged(lines_back)
    # whole-file fields once, as a single-window scan gives them; no single-window fields
    # (slow_lines counts work: more windows may leave more blocks to the per-line path)
    one = singles[0]
    assert replace(scan, windows={}, shared_lines=0, slow_lines=0) == \
        replace(one, decode={}, window=Counts(), retractions={}, slow_lines=0)
    assert bulk or scan.slow_lines == one.slow_lines


def test_scan_summary_fields(tmp_path):
    p = tmp_path / "server-r0-n0.log"
    p.write_text(
        "[2026-09-02 12:00:00] server_args=ServerArgs(mem_fraction_static=0.8)\n"
        "[2026-09-02 12:00:05 PP0 TP0] Prefill batch, #new-seq: 1, #new-token: 6, "
        "#cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0\n"
        "[2026-09-02 12:00:09 PP0 TP0] Decode batch, #running-req: 1, #token: 5, token usage: "
        "0.00, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n"
        "[2026-09-02 12:00:09 PP1 TP0] Decode batch, #running-req: 1, #token: 5, token usage: "
        "0.00, cuda graph: True, gen throughput (token/s): 30.00, #queue-req: 0\n"
        'INFO:     1.2.3.4:5 - "POST /generate HTTP/1.1" 200 OK\n'
        "[2026-09-02 12:01:00] last line\n")
    s = scan_server_log(p)
    assert s.first_ts == datetime(2026, 9, 2, 12) and s.last_ts == datetime(2026, 9, 2, 12, 1)
    assert s.first_prefill_ts == datetime(2026, 9, 2, 12, 0, 5)
    assert s.first_decode_ts == datetime(2026, 9, 2, 12, 0, 9)
    assert s.decode_lines == 2 and s.prefill_lines == 1
    assert s.posts == 1 and s.posts_untimed == 1
    # two PP stages log the same batch: only the first stage counts
    assert s.primary_stream().samples == 1 and s.primary_stream().gen_throughput == 10.0
    assert s.tagged


def test_scan_empty_and_missing_newline(tmp_path):
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    s = scan_server_log(p)
    assert s.size == 0 and s.decode == {} and s.first_ts is None


def _pass_log(seconds: int) -> list[str]:
    """A chronological node-0 log: per second one POST, one 8K prefill chunk, one spec decode
    sample and an unrelated line."""
    lines = []
    for s in range(seconds):
        ts = (T0 + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f'[{ts}] INFO:     10.0.0.1:3 - "POST /generate HTTP/1.1" 200 OK')
        lines.append(f"[{ts} TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, "
                     f"#cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 0")
        lines.append(f"[{ts} TP0 EP0] Decode batch, #running-req: 3, #token: 10, token usage: "
                     f"0.10, accept len: {1 + s % 7 / 2:.2f}, accept rate: 0.{s % 10}0, cuda "
                     f"graph: True, gen throughput (token/s): {s}.50, #queue-req: 0")
        lines.append(f"[{ts} TP3 EP3] some other output")
    return lines


def _bulk_calls(monkeypatch) -> list[bool]:
    """Whether each block (or part) the scans try at once was summed at once."""
    calls = []
    real = scan_mod._bulk_block

    def spy(*args):
        done = real(*args)
        calls.append(done == scan_mod.SUMMED)
        return done
    monkeypatch.setattr(scan_mod, "_bulk_block", spy)
    return calls


def test_bulk_path_is_taken_and_agrees(tmp_path, monkeypatch):
    """A long chronological log: most blocks are summed at once, with identical results."""
    p = tmp_path / "server-r0-n0.log"
    p.write_text("\n".join(_pass_log(600)) + "\n")
    window = (T0 + timedelta(seconds=100), T0 + timedelta(seconds=500, milliseconds=300))
    intervals = [Interval("w", T0 + timedelta(seconds=10), T0 + timedelta(seconds=20))]
    calls = _bulk_calls(monkeypatch)
    fast = scan_server_log(p, window=window, intervals=intervals, block=2048)
    slow = scan_server_log(p, window=window, intervals=intervals, block=2048, bulk=False)
    assert sum(calls) > len(calls) // 2          # most blocks went the bulk way
    assert fast.decode.keys() == slow.decode.keys() == {(0, 0)}
    f, s = fast.decode[(0, 0)], slow.decode[(0, 0)]
    assert (f.samples, f.accept_samples, f.rate_samples, f.gen_samples) == \
        (s.samples, s.accept_samples, s.rate_samples, s.gen_samples) == (401, 401, 401, 401)
    assert f.accept_len_sum == pytest.approx(s.accept_len_sum, rel=1e-12)
    assert f.gen_sum == pytest.approx(s.gen_sum, rel=1e-12)
    assert (f.speed_samples, f.speed_sum, f.speed_sq) == \
        (s.speed_samples, pytest.approx(s.speed_sum, rel=1e-12), pytest.approx(s.speed_sq, rel=1e-12))
    assert f.speed_samples == 401 and f.speed_mean > 0 and f.speed_sd is not None
    assert (fast.window, fast.intervals) == (slow.window, slow.intervals)
    assert fast.window.posts == 401 and fast.intervals["w"].primary().tokens == 11 * 8192
    assert (fast.decode_lines, fast.prefill_lines, fast.first_decode_ts) == \
        (slow.decode_lines, slow.prefill_lines, slow.first_decode_ts)


def test_ten_windows_in_one_read_equal_ten_single_window_scans(tmp_path, monkeypatch):
    """The passes of a launch: one read gives every window what its own scan gives it, most
    blocks are still summed at once, and counting_scans sees one scan of the file."""
    p = tmp_path / "server-r0-n0.log"
    p.write_text("\n".join(_pass_log(600)) + "\n")
    # 10 passes of 50 s, 5 s apart; the 4th and 5th only 0.4 s apart, within 12:03:55
    windows = [Interval(f"c8-r{k}", T0 + timedelta(seconds=20 + 55 * k),
                        T0 + timedelta(seconds=70 + 55 * k)) for k in range(10)]
    windows[4] = replace(windows[4], start=windows[3].end + timedelta(milliseconds=400))
    windows[3] = replace(windows[3], end=windows[3].end + timedelta(milliseconds=300))
    intervals = [Interval("warmup-r0", T0 + timedelta(seconds=2), T0 + timedelta(seconds=5))]
    calls = _bulk_calls(monkeypatch)
    with counting_scans() as scans:
        multi = scan_server_log(p, windows=windows, intervals=intervals, block=2048)
    assert scans == {str(p): 1}
    assert sum(calls) > len(calls) // 2              # most blocks went the bulk way
    for w in windows:                                # to the last digit
        one = scan_server_log(p, window=(w.start, w.end), intervals=intervals, block=2048)
        assert multi.windows[w.name] == WindowScan(one.decode, one.window, one.retractions)
        assert multi.intervals == one.intervals
    # 51 s of traffic per window (both ends inclusive), 56 in the 5th; 12:03:55 in two
    assert [multi.windows[w.name].counts.posts for w in windows] == [51] * 4 + [56] + [51] * 5
    assert multi.windows["c8-r3"].primary_stream().samples == 51
    assert multi.shared_lines == 3                    # its POST, prefill and decode line
    assert (multi.decode, multi.window, multi.retractions) == ({}, Counts(), {})
    assert multi.decode_lines == multi.prefill_lines == multi.posts == 600


def test_whole_second_stamp_of_a_second_two_passes_share(tmp_path):
    """Pass 1 ends at 12:00:10.300, pass 2 starts at 12:00:10.700: a line stamped '12:00:10'
    (no SGLANG_LOG_MS) may belong to either and counts in both, as each pass's own scan counts
    it; millisecond stamps go to one pass."""
    decode = ("[2026-09-02 {} TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.01, "
              "accept len: {}, accept rate: 0.50, cuda graph: True, gen throughput (token/s): "
              "10.00, #queue-req: 0")
    p = tmp_path / "server-r0-n0.log"
    p.write_text("\n".join([
        decode.format("12:00:09", "1.00"),
        decode.format("12:00:10", "2.00"),                 # whole second: both passes
        decode.format("12:00:10.200", "3.00"),             # pass 1
        decode.format("12:00:10.500", "4.00"),             # between the passes: neither
        decode.format("12:00:10.800", "5.00"),             # pass 2
        "[2026-09-02 12:00:10] INFO:     10.0.0.1:3 - \"POST /generate HTTP/1.1\" 200 OK",
        "[2026-09-02 12:00:10 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2,"
        " #new_token_ratio: 0.1474 -> 0.1845",
        decode.format("12:00:11", "6.00")]) + "\n")
    cut = T0 + timedelta(seconds=10)
    windows = [Interval("c1-r1", T0, cut + timedelta(milliseconds=300)),
               Interval("c1-r2", cut + timedelta(milliseconds=700), T0 + timedelta(seconds=20))]
    scan = scan_server_log(p, windows=windows)
    first, second = (scan.windows[w.name] for w in windows)
    assert first.primary_stream().accept_len_sum == 1 + 2 + 3
    assert second.primary_stream().accept_len_sum == 2 + 5 + 6
    assert first.counts.posts == second.counts.posts == 1
    assert first.retractions == second.retractions == {(0, 0, (("TP", 0),)): Retractions(1, 2)}
    assert scan.shared_lines == 3                       # decode, POST and retraction lines
    for w in windows:
        one = scan_server_log(p, window=(w.start, w.end))
        assert scan.windows[w.name] == WindowScan(one.decode, one.window, one.retractions)


@pytest.mark.parametrize("windows, message", [
    ([Interval("a", T0, T0 + timedelta(seconds=9)), Interval("b", T0 + timedelta(seconds=8),
                                                             None)],
     "scan windows must be in time order without overlap: 'a'"),
    ([Interval("a", T0 + timedelta(seconds=9), None), Interval("b", T0, None)],
     "scan windows must be in time order without overlap"),
    ([Interval("a", T0, T0), Interval("a", T0 + timedelta(seconds=1), None)],
     "scan windows need distinct names; repeated: 'a'"),
    ([Interval("a", T0 + timedelta(seconds=1), T0)], "scan window 'a' ends"),
])
def test_windows_must_be_ordered_and_named(tmp_path, windows, message):
    p = tmp_path / "server-r0-n0.log"
    p.write_text("")
    with pytest.raises(ValueError, match=re.escape(message)):
        scan_server_log(p, windows=windows)
    with pytest.raises(ValueError, match="window or windows"):
        scan_server_log(p, window=(T0, None), windows=[Interval("a", T0, None)])
    # touching windows (one ends where the next starts) are in order
    scan_server_log(p, windows=[Interval("a", None, T0), Interval("b", T0, None)])


def test_a_block_across_a_pass_boundary_is_split_not_parsed_line_by_line(tmp_path):
    """Blocks are halved around window bounds: only lines within MARGIN of a bound are parsed
    one by one, and the sums are those of unsplit blocks to the last digit."""
    p = tmp_path / "server-r0-n0.log"
    p.write_text("\n".join(_pass_log(600)) + "\n")
    windows = [Interval(f"c8-r{k}", T0 + timedelta(seconds=20 + 190 * k),
                        T0 + timedelta(seconds=200 + 190 * k)) for k in range(3)]

    def scan(split: int):
        parsed = []
        real = scan_mod._batch_lines

        def spy(buf, lo, hi, rg, acc):
            parsed.append(hi - lo)
            real(buf, lo, hi, rg, acc)
        with mock.patch.object(scan_mod, "SPLIT_MIN", split), \
                mock.patch.object(scan_mod, "_batch_lines", spy):
            return scan_server_log(p, windows=windows, block=1 << 16), sum(parsed)
    whole, whole_bytes = scan(1 << 20)               # blocks too small to split
    split, split_bytes = scan(512)
    assert replace(split, slow_lines=0) == replace(whole, slow_lines=0)
    assert [split.windows[w.name].counts.posts for w in windows] == [181] * 3
    # each of the 6 bounds needs about 2 x MARGIN of lines (~520 bytes a second) one by one
    assert whole_bytes > p.stat().st_size * 0.6
    assert split_bytes < 6 * 2 * 5 * 520 * 2
