"""The fast scanner must agree with the general line parser on every line shape."""
from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ab.parse.server_log import parse_access_line, parse_batch_line
from slurm_ab.parse.server_scan import Interval, scan_server_log
from slurm_ab.parse.text import in_window

T0 = datetime(2026, 9, 2, 12, 0, 0)


def _stamp(ts: datetime, ms: bool) -> str:
    s = ts.strftime("%Y-%m-%d %H:%M:%S")
    return s + f".{ts.microsecond // 1000:03d}" if ms else s


RANKS = ["", " TP0", " TP0 EP0", " PP1 TP0", " DP1 TP0 EP0", " DP0 PP0 TP0"]


@st.composite
def log_line(draw, ranks=None):
    ts = T0 + timedelta(milliseconds=draw(st.integers(0, 120_000)))
    ms = draw(st.booleans())
    if not ms:
        ts = ts.replace(microsecond=0)
    ranks = draw(st.sampled_from(RANKS)) if ranks is None else ranks
    prefix = draw(st.sampled_from(["", "", "", "(Actor pid=9) ", "\x1b[36m(Actor pid=9)\x1b[0m "]))
    layout = draw(st.sampled_from(["sglang"] * 6 + ["python", "python-ms", "yearless", "none"]))
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
    kind = draw(st.sampled_from(["decode", "prefill", "post", "get", "other", "garbage"]))
    if kind == "decode":
        spec = draw(st.sampled_from(["", "accept len: 3.25, ", "accept len: 2.00, accept rate: "
                                     "0.31, ", "accept len: 4.10, accept rate: 0.50, block "
                                     "accept len: 7.00, "]))
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
    return f"{head} Some other line mentioning a batch size, of 8"


def _add_decode_sample(dec: dict, s) -> None:
    """The reference's sums per stream: samples, accept len (n, sum), accept rate (n, sum),
    gen throughput (n, sum)."""
    a = dec.setdefault(s.stream, [0, 0, 0.0, 0, 0.0, 0, 0.0])
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


def _reference(lines, window, intervals, all_samples):
    """Per-line parsing with the general parser: the definition of the right answer."""
    dec = {}
    win = [{}, 0]                     # [{stream: [prefill lines, tokens, new_seq]}, posts]
    ivs = {iv.name: [{}, 0] for iv in intervals}
    untimed = 0
    start, end = window
    for i, line in enumerate(lines):
        complete = i < len(lines) - 1
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
        if s is not None and s.kind == "Decode" and all_samples:
            _add_decode_sample(dec, s)
        a = parse_access_line(line)
        if a is not None and a.is_generation and a.ts is not None:
            whole = not a.ts_has_ms
            for c, (lo, hi) in [(win, window)] + [(ivs[iv.name], (iv.start, iv.end))
                                                 for iv in intervals]:
                if in_window(a.ts, lo, hi, whole_seconds=whole):
                    c[1] += 1
    return dec, win, ivs, untimed


def _ts_key(line: str) -> str:
    m = re.search(r"2026-\d\d-\d\d \d\d:\d\d:\d\d", line)
    return m.group(0) if m else ""


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(log_line(), min_size=0, max_size=60),
       w0=st.integers(0, 120_000), wlen=st.integers(0, 120_000),
       block=st.sampled_from([64, 257, 4096]), all_samples=st.booleans())
def test_fast_scan_equals_line_parser(tmp_path_factory, lines, w0, wlen, block, all_samples):
    """Lines in any order: per-line scanning (bulk=False) must equal the reference."""
    _check(tmp_path_factory, lines, w0, wlen, block, all_samples, bulk=False)


@settings(max_examples=150, deadline=None)
@given(lines=st.sampled_from(RANKS).flatmap(lambda r: st.lists(log_line(r), max_size=200)),
       w0=st.integers(0, 120_000), wlen=st.integers(0, 120_000),
       block=st.sampled_from([64, 300, 1000, 4096]), all_samples=st.booleans())
def test_bulk_scan_equals_line_parser_on_chronological_logs(tmp_path_factory, lines, w0, wlen,
                                                           block, all_samples):
    """Logs in time order with one rank tag per file (as SGLang writes them): block-at-once
    summing changes nothing."""
    _check(tmp_path_factory, sorted(lines, key=_ts_key), w0, wlen, block, all_samples,
           bulk=True)


def _check(tmp_path_factory, lines, w0, wlen, block, all_samples, bulk):
    p = tmp_path_factory.mktemp("scan") / "server-r0-n0.log"
    p.write_bytes("\n".join(lines).encode("utf-8", "replace"))
    start = T0 + timedelta(milliseconds=w0)
    window = (start, start + timedelta(milliseconds=wlen))
    intervals = [Interval("w", T0, T0 + timedelta(seconds=30)), Interval("open", None, start)]
    scan = scan_server_log(p, window=window, intervals=intervals, all_samples=all_samples,
                           block=block, bulk=bulk)
    lines_back = p.read_bytes().decode("utf-8", "replace").split("\n") if lines else []
    dec, win, ivs, untimed = _reference(lines_back, window, intervals, all_samples)
    got = {k: (v.samples, v.accept_samples, round(v.accept_len_sum, 6), v.rate_samples,
               round(v.accept_rate_sum, 6), v.gen_samples, round(v.gen_sum, 4))
           for k, v in scan.decode.items()}
    want = {k: (a[0], a[1], round(a[2], 6), a[3], round(a[4], 6), a[5], round(a[6], 4))
            for k, a in dec.items()}
    assert got == want
    assert _flat(scan.window) == (win[0], win[1])
    for iv in intervals:
        assert _flat(scan.intervals[iv.name]) == (ivs[iv.name][0], ivs[iv.name][1])
    assert scan.untimed_batch_lines == untimed


def _flat(c):
    return {k: [p.lines, p.tokens, p.new_seq] for k, p in c.prefill.items()}, c.posts


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


def test_bulk_path_is_taken_and_agrees(tmp_path, monkeypatch):
    """A long chronological log: most blocks are summed at once, with identical results."""
    import slurm_ab.parse.server_scan as scan_mod
    lines = []
    for s in range(600):
        ts = (T0 + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f'[{ts}] INFO:     10.0.0.1:3 - "POST /generate HTTP/1.1" 200 OK')
        lines.append(f"[{ts} TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, "
                     f"#cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 0")
        lines.append(f"[{ts} TP0 EP0] Decode batch, #running-req: 3, #token: 10, token usage: "
                     f"0.10, accept len: {1 + s % 7 / 2:.2f}, accept rate: 0.{s % 10}0, cuda "
                     f"graph: True, gen throughput (token/s): {s}.50, #queue-req: 0")
        lines.append(f"[{ts} TP3 EP3] some other output")
    p = tmp_path / "server-r0-n0.log"
    p.write_text("\n".join(lines) + "\n")
    window = (T0 + timedelta(seconds=100), T0 + timedelta(seconds=500, milliseconds=300))
    intervals = [Interval("w", T0 + timedelta(seconds=10), T0 + timedelta(seconds=20))]
    calls = []
    real = scan_mod._bulk_block

    def spy(*args):
        ok = real(*args)
        calls.append(ok)
        return ok
    monkeypatch.setattr(scan_mod, "_bulk_block", spy)
    fast = scan_server_log(p, window=window, intervals=intervals, block=2048)
    slow = scan_server_log(p, window=window, intervals=intervals, block=2048, bulk=False)
    assert sum(calls) > len(calls) // 2          # most blocks went the bulk way
    assert fast.decode.keys() == slow.decode.keys() == {(0, 0)}
    f, s = fast.decode[(0, 0)], slow.decode[(0, 0)]
    assert (f.samples, f.accept_samples, f.rate_samples, f.gen_samples) == \
        (s.samples, s.accept_samples, s.rate_samples, s.gen_samples) == (401, 401, 401, 401)
    assert f.accept_len_sum == pytest.approx(s.accept_len_sum, rel=1e-12)
    assert f.gen_sum == pytest.approx(s.gen_sum, rel=1e-12)
    assert (fast.window, fast.intervals) == (slow.window, slow.intervals)
    assert fast.window.posts == 401 and fast.intervals["w"].primary().tokens == 11 * 8192
    assert (fast.decode_lines, fast.prefill_lines, fast.first_decode_ts) == \
        (slow.decode_lines, slow.prefill_lines, slow.first_decode_ts)
