"""sglang.bench_serving output: the --output-file JSONL record, the printed result blocks, and
what the per-request details (--output-details) say beyond the client's own summary.

The JSONL is appended (several records per file are possible), may contain bare 'Infinity',
and may end in a line cut by a killed client. The printed block exists in every version from
0.4.10 to 0.5.23 but its lines change (bench_serving's benchmark/serving.py: 0.4.10 prints no
TPOT lines, 0.5.6 adds 'Peak output token throughput', P95 of TTFT, TPOT and E2E only from
0.5.16): it is parsed label by label. SGLang 0.5.23's steady-state entry point
(sglang/benchmark/steady_state_serving.py) prints a second, 'Steady-State Result' block after it.

From the details this module recomputes latencies, the steady-state output throughput (SGLang
0.5.23's steady_state.py window, on the client's clock replayed from the details, with the tokens
of merged gaps spread over time) and goodput against latency SLOs (the definitions of sglang/benchmark/goodput.py), so the tables never
depend on which of these a client version prints.
"""
from __future__ import annotations

import heapq
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from .stats import Dist
from .text import iter_lines, scalar

__all__ = ["RecordRead", "ResultBlock", "LatencyStats", "Disagreement", "read_last_record",
           "parse_result_block", "latency_stats", "agreement", "REL_TOL", "ABS_TOL_MS",
           "Request", "requests", "replay_starts", "Window", "steady_window", "steady_threshold",
           "busiest_window", "merged_gaps",
           "GoodputCount", "goodput", "GOODPUT_METRICS", "STEADY_TITLE"]


@dataclass(frozen=True)
class RecordRead:
    """The last complete JSON record of a JSONL file and what was wrong with the file."""

    record: dict | None
    records: int = 0                  # complete records seen
    line: int = 0                     # line number of the returned record
    truncated: bool = False           # the last line was not a complete record
    bad_lines: tuple[int, ...] = ()   # lines that were not JSON objects

    @property
    def note(self) -> str:
        notes = []
        if self.truncated:
            notes.append(f"last line of the JSONL is truncated; used the record on line {self.line}"
                         if self.record is not None else "the only JSONL line is truncated")
        if self.records > 1:
            notes.append(f"{self.records} records in the JSONL; used the last (line {self.line})")
        return "; ".join(notes)


def read_last_record(path: str | Path) -> RecordRead:
    """Stream a JSONL file and keep only the last line that parses as a JSON object."""
    record, line_no, count, bad = None, 0, 0, []
    last_bad = False
    try:
        lines = iter_lines(path, max_line=1 << 28)   # a record with details is one long line
        for no, text in lines:
            text = text.strip()
            if not text:
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                record, line_no, last_bad = obj, no, False
                count += 1
            else:
                bad.append(no)
                last_bad = True
    except FileNotFoundError:
        return RecordRead(None)
    return RecordRead(record, count, line_no, last_bad, tuple(bad))


# ---- printed result blocks ------------------------------------------------------------------

STEADY_TITLE = "Steady-State Result"
_BLOCK_START = re.compile(r"=+\s*Serving Benchmark Result\s*=+")
_STEADY_START = re.compile(r"=+\s*" + STEADY_TITLE + r"\s*=+")
_BLOCK_END = re.compile(r"^={40,}\s*$")
_LINE = re.compile(r"^(?P<label>[A-Za-z0-9 ()/.,%_-]+?):\s+(?P<value>\S.*?)\s*$")
_LAT = re.compile(r"^(Mean|Median|Std|P\d+|Max) (E2E Latency|TTFT|TPOT|ITL) \(ms\)$")
_LAT_KEYS = {"E2E Latency": "e2e_latency", "TTFT": "ttft", "TPOT": "tpot", "ITL": "itl"}
_LABELS = {
    "Backend": "backend",
    "Traffic request rate": "request_rate",
    "Max request concurrency": "max_concurrency",
    "Successful requests": "completed",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total input text tokens": "total_input_text_tokens",
    "Total input vision tokens": "total_input_vision_tokens",
    "Total generated tokens": "total_output_tokens",
    "Total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "Request throughput (req/s)": "request_throughput",
    "Input token throughput (tok/s)": "input_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total token throughput (tok/s)": "total_throughput",
    "Concurrency": "concurrency",
    "Accept length": "accept_length",
    # --goodput (0.5.23 benchmark/goodput.py print_goodput); the record has them as fractions
    "SLOs (ms)": "goodput_slos",
    "Request goodput (req/s)": "request_goodput",
    "SLO attainment (%)": "slo_attainment_pct",
}
# The steady-state block (steady_state_serving._print_metrics), keyed like SteadyStateMetrics.
_STEADY_LABELS = {
    "Concurrency ratio": "concurrency_ratio",
    "Measurement duration (s)": "duration",
    "Minimum concurrency": "concurrency_threshold",
    "Completed requests": "completed",
    "Input tokens": "total_input",
    "Input token throughput (tok/s)": "input_throughput",
    "Generated tokens": "total_output",
    "Output token throughput (tok/s)": "output_throughput",
    "Output throughput, retokenized (tok/s)": "output_throughput_retokenized",
    "Average concurrency": "average_concurrency",
    "Peak concurrency": "peak_concurrency",
    "Peak output throughput (tok/s)": "peak_output_throughput",
}


def _key(label: str, labels: dict = _LABELS) -> str:
    if label in labels:
        return labels[label]
    m = _LAT.match(label)
    if m:
        return f"{m.group(1).lower()}_{_LAT_KEYS[m.group(2)]}_ms"
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


@dataclass(frozen=True)
class ResultBlock:
    """The last 'Serving Benchmark Result' block, keyed like the JSONL record."""

    values: dict = field(default_factory=dict)    # "p95_ttft_ms" -> 20790.0, "completed" -> 40
    labels: dict = field(default_factory=dict)    # printed label -> printed value
    line: int = 0                                 # line of the block's header
    complete: bool = False                        # the closing '=====' line was seen
    blocks: int = 0                               # blocks in the file
    steady: dict = field(default_factory=dict)    # the complete steady-state block printed after it


def parse_result_block(path: str | Path) -> ResultBlock | None:
    """Stream a client log and return its last result block (None if there is none), with the
    steady-state block that followed it."""
    last: ResultBlock | None = None
    cur: tuple | None = None                      # (steady?, values, labels, header line)
    blocks = 0

    def close(complete: bool) -> None:
        nonlocal last
        steady, vals, labels, start = cur
        if not steady:
            last = ResultBlock(vals, labels, start, complete, blocks)
        elif last is not None and complete:
            last = replace(last, steady=vals)
    try:
        for no, text in iter_lines(path):
            header = _BLOCK_START.search(text) is not None
            if header or _STEADY_START.search(text):
                if cur is not None:
                    close(False)
                blocks += header
                cur = (not header, {}, {}, no)
                continue
            if cur is None:
                continue
            if _BLOCK_END.match(text):
                close(True)
                cur = None
                continue
            m = _LINE.match(text.rstrip())
            if m:
                label, value = m.group("label").strip(), m.group("value")
                cur[2][label] = value
                cur[1][_key(label, _STEADY_LABELS if cur[0] else _LABELS)] = scalar(value)
    except FileNotFoundError:
        return None
    if cur is not None:
        close(False)
    return replace(last, blocks=blocks) if last is not None else None


# ---- per-request details ----------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """One request of --output-details, in the client's order (seconds)."""

    ok: bool
    ttft: float
    itls: tuple[float, ...]
    output_len: int
    input_len: int | None = None      # 0.5.23: the server's prompt count (0.5.2: the client's)
    error: str = ""

    @property
    def e2e(self) -> float:
        """The last token's arrival: TTFT + the ITLs (the client's own E2E ends a little later,
        at the stream's close)."""
        return self.ttft + math.fsum(self.itls)

    @property
    def tpot(self) -> float:
        """sglang/benchmark/goodput.py: (E2E - TTFT) / (output - 1); a one-token answer has 0."""
        return (self.e2e - self.ttft) / (self.output_len - 1) if self.output_len > 1 else 0.0


def _seq(record: Mapping, key: str) -> list | None:
    value = record.get(key)
    return value if isinstance(value, list) else None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def requests(record: Mapping | None) -> list[Request] | None:
    """Every request of the record's details; None without 'ttfts'.

    A request counts as successful when its error is empty and (if lengths are given) it produced
    at least one token: 0.5.2 records an empty error for a failure whose HTTP reason was None.
    """
    if not record:
        return None
    ttfts = _seq(record, "ttfts")
    if ttfts is None:
        return None
    itls = _seq(record, "itls") or []
    outs = _seq(record, "output_lens")
    ins = _seq(record, "input_lens")
    errs = _seq(record, "errors")
    out = []
    for i, ttft in enumerate(ttfts):
        err = str(errs[i]) if errs is not None and i < len(errs) and errs[i] else ""
        req = tuple(x for x in (itls[i] if i < len(itls) and isinstance(itls[i], list) else ())
                    if _number(x))
        n = outs[i] if outs is not None and i < len(outs) and _number(outs[i]) else None
        n_in = ins[i] if ins is not None and i < len(ins) and _number(ins[i]) else None
        ok = not err and n != 0 and _number(ttft)
        out.append(Request(ok, float(ttft) if _number(ttft) else 0.0, req,
                           int(n) if n is not None else len(req) + 1,
                           int(n_in) if n_in is not None else None, err))
    return out


@dataclass(frozen=True)
class LatencyStats:
    """TTFT / TPOT / E2E distributions (ms) recomputed from --output-details arrays."""

    requests: int
    succeeded: int
    ttft: Dist | None
    tpot: Dist | None
    e2e: Dist | None
    errors: tuple[str, ...] = ()     # distinct error texts (first 200 chars), in order
    itl: Dist | None = None          # every inter-token gap of the successful requests


def latency_stats(record: Mapping | None, reqs: Sequence[Request] | None = None) -> LatencyStats | None:
    """Recompute latencies from per-request details (`reqs`, else the record's); None without them.

    TTFT = ttft; E2E = ttft + sum(itls) (the last token's arrival); TPOT = (E2E - TTFT) /
    (output_len - 1) for requests with more than one output token — the client's own definition.
    """
    if reqs is None:
        reqs = requests(record)
    if reqs is None:
        return None
    errors: list[str] = []
    for r in reqs:
        if r.error:
            text = r.error.strip().splitlines()[-1][:200] if r.error.strip() else r.error
            if text not in errors:
                errors.append(text)
    ok = [r for r in reqs if r.ok]
    return LatencyStats(len(reqs), len(ok), Dist.of(r.ttft * 1000.0 for r in ok),
                        Dist.of(r.tpot * 1000.0 for r in ok if r.output_len > 1),
                        Dist.of(r.e2e * 1000.0 for r in ok), tuple(errors),
                        Dist.of(x * 1000.0 for r in ok if not (len(r.itls) == 1 and r.output_len > 2)
                                for x in r.itls))


# ---- the steady state: the longest window with >= ceil(ratio x peak) requests in flight ----------

def replay_starts(e2e_s: Sequence[float], concurrency: int | None) -> list[float]:
    """Each request's start (s since the benchmark started) under bench_serving's concurrency limit.

    With --max-concurrency C and an infinite request rate, bench_serving starts every request as a
    task behind an asyncio.Semaphore(C), which wakes its waiters in FIFO order: requests 0..C-1
    start at once and each later one when the earliest running one ends (benchmark/serving.py,
    limited_request_func). The details carry no start times, so they are replayed from each
    request's E2E; the client's own hand-over between requests is left out (docs/metrics.md).
    """
    c = concurrency if concurrency and concurrency > 0 else len(e2e_s)
    starts: list[float] = []
    running: list[float] = []
    for i, d in enumerate(e2e_s):
        t = 0.0 if i < c else heapq.heappop(running)
        starts.append(t)
        heapq.heappush(running, t + d)
    return starts


def _levels(starts: Sequence[float], ends: Sequence[float]) -> list[tuple[float, float, int]]:
    """(from, to, requests in flight) over the replayed benchmark, as steady_state.py's
    find_steady_state_window builds them (requests that took no time left out)."""
    events: dict[float, int] = {}
    for s, e in zip(starts, ends):
        if e > s:
            events[s] = events.get(s, 0) + 1
            events[e] = events.get(e, 0) - 1
    times = sorted(events)
    out, level = [], 0
    for a, b in zip(times, times[1:]):
        level += events[a]
        out.append((a, b, level))
    return out


def _span(levels: Sequence[tuple[float, float, int]], threshold: int) -> tuple[float, float] | None:
    """The longest continuous interval with at least `threshold` requests in flight, the first on
    a tie (sglang/benchmark/steady_state.py find_steady_state_window)."""
    best, cur = None, None
    for a, b, level in levels:
        if level >= threshold:
            cur = (cur[0] if cur else a, b)
        elif cur:
            best, cur = (cur if best is None or cur[1] - cur[0] > best[1] - best[0] else best), None
    if cur and (best is None or cur[1] - cur[0] > best[1] - best[0]):
        best = cur
    return best


@dataclass(frozen=True)
class Window:
    """Output throughput over one window of the replayed benchmark (times in s since its start)."""

    start: float
    end: float
    threshold: int                    # requests in flight throughout
    output_tokens: float              # tokens whose arrival lies in the window
    completed: int                    # requests that ended in it
    merged: int = 0                   # requests whose tokens were spread (merged gaps)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def output_tps(self) -> float:
        return self.output_tokens / self.duration


def merged_gaps(r: Request) -> bool:
    """The client recorded fewer inter-token gaps than the request had tokens after its first: a
    streamed chunk carried several tokens and its gap stands for all of them (bench_serving's
    OpenAI-completions backends append one gap per chunk; its sglang backend splits a chunk's gap
    over its tokens, 0.5.23 benchmark/serving.py)."""
    return r.ok and r.output_len > 1 and len(r.itls) < r.output_len - 1


def _tokens_in(r: Request, start: float, lo: float, hi: float, spread: bool) -> float:
    """A request's output tokens that arrived in [lo, hi]. As steady_state.py counts them: its
    output_len spread evenly over its arrivals (first token at TTFT, then one per gap); with
    `spread` and merged gaps, the tokens after the first evenly over [TTFT, last token] instead
    (a chunk's tokens were generated over its gap, not at its arrival)."""
    t = start + r.ttft
    if spread and merged_gaps(r) and r.itls:
        end = t + math.fsum(r.itls)
        first = 1.0 if lo <= t <= hi else 0.0
        overlap = max(0.0, min(end, hi) - max(t, lo))
        return first + (r.output_len - 1) * overlap / (end - t) if end > t else first
    arrivals = [t] + [t := t + x for x in r.itls]
    return r.output_len * sum(1 for x in arrivals if lo <= x <= hi) / len(arrivals)


def busiest_window(reqs: Sequence[Request], concurrency: int | None, threshold: int,
                   spread: bool = False) -> Window | None:
    """The longest window with at least `threshold` requests in flight, and its output throughput
    (tokens counted as steady_state.py counts them; `spread`: merged gaps spread over time)."""
    e2e = [r.e2e if r.ok else 0.0 for r in reqs]
    starts = replay_starts(e2e, concurrency)
    ends = [s + d for s, d in zip(starts, e2e)]
    span = _span(_levels(starts, ends), max(1, threshold))
    if span is None or span[1] <= span[0]:
        return None
    lo, hi = span
    tokens, completed, merged = 0.0, 0, 0
    for r, s, e in zip(reqs, starts, ends):
        if not r.ok or e <= s:
            continue
        tokens += _tokens_in(r, s, lo, hi, spread)
        completed += lo <= e <= hi
        merged += spread and merged_gaps(r)
    return Window(lo, hi, max(1, threshold), tokens, completed, merged)


def steady_threshold(reqs: Sequence[Request], concurrency: int | None, ratio: float) -> int | None:
    """steady_state.py's minimum concurrency: ceil(ratio x the peak in flight), at least 1; None
    when no request took any time."""
    e2e = [r.e2e if r.ok else 0.0 for r in reqs]
    starts = replay_starts(e2e, concurrency)
    levels = _levels(starts, [s + d for s, d in zip(starts, e2e)])
    if not levels:
        return None
    return max(1, math.ceil(max(level for _, _, level in levels) * ratio))


def steady_window(reqs: Sequence[Request] | None, concurrency: int | None, ratio: float) -> Window | None:
    """The steady state as SGLang 0.5.23's steady_state.py defines it: the longest window with at
    least ceil(ratio x peak) requests in flight, its output tokens / its duration, over the
    replayed details; merged gaps spread over each request's [TTFT, last token]. None without
    details or a concurrency limit."""
    if not reqs or not concurrency or concurrency < 1 or not 0 < ratio <= 1:
        return None
    k = steady_threshold(reqs, concurrency, ratio)
    return busiest_window(reqs, concurrency, k, spread=True) if k is not None else None


# ---- goodput: requests that met every latency SLO -----------------------------------------------

# bench_serving's --goodput keys (0.5.23 benchmark/goodput.py GOODPUT_SLO_METRICS) and how a
# request's value is read, in seconds.
GOODPUT_METRICS = {"ttft": lambda r: r.ttft, "tpot": lambda r: r.tpot, "e2el": lambda r: r.e2e}


@dataclass(frozen=True)
class GoodputCount:
    """Requests meeting the SLOs; `near` = good requests the client could count as missing one:
    its E2E ends at the stream's close, after the last token the details end at, by up to `slack_ms`."""

    slo_ms: dict                      # {"ttft": 500.0, "tpot": 50.0, "e2el": 20000.0}
    requests: int                     # every request sent (failed ones are never good)
    good: int
    met: dict                         # per SLO: requests meeting it
    near: int = 0
    near_met: dict = field(default_factory=dict)

    @property
    def attainment(self) -> float:
        return self.good / self.requests if self.requests else 0.0


def goodput(reqs: Sequence[Request], slo_ms: Mapping[str, float], slack_ms: float = 0.0) -> GoodputCount:
    """Count, as sglang/benchmark/goodput.py does, the requests that succeeded and met every SLO
    (value <= SLO), over every request sent. TTFT is the client's own; E2E and TPOT are the
    details' (last token), so a request within slack_ms (TPOT: slack / (output - 1)) under an E2E
    or TPOT SLO is counted in `near` too."""
    slos = {k: float(v) for k, v in slo_ms.items() if k in GOODPUT_METRICS}
    met = dict.fromkeys(slos, 0)
    near_met = dict.fromkeys(slos, 0)
    good = near = 0
    for r in reqs:
        if not r.ok:
            continue
        ok_all, close = True, False
        for k, slo in slos.items():
            value = GOODPUT_METRICS[k](r) * 1000.0
            if value > slo:
                ok_all = False
                continue
            met[k] += 1
            slack = 0.0 if k == "ttft" else slack_ms / (r.output_len - 1 if k == "tpot" and r.output_len > 1 else 1)
            if value > slo - slack:
                near_met[k] += 1
                close = True
        good += ok_all
        near += ok_all and close
    return GoodputCount(slos, len(reqs), good, met, near, near_met)


# ---- agreement with the client's own numbers -------------------------------------------------

# The client stops E2E when the stream closes, after the last token; the details end at the last
# token. That gap is a few ms per request: 5 ms absolute covers it for short requests, 2 % relative
# covers the sampling noise of p99 on small request counts (p99 of 40 values interpolates between
# the two largest). Anything beyond both means the details and the summary disagree for real
# (e.g. a record mixed from two runs).
REL_TOL = 0.02
ABS_TOL_MS = 5.0


@dataclass(frozen=True)
class Disagreement:
    key: str                 # JSONL key, e.g. "p99_ttft_ms"
    record: float            # the client's value
    computed: float          # recomputed from details

    def __str__(self) -> str:
        return f"{self.key}: client {self.record:.2f} vs details {self.computed:.2f}"


def agreement(record: Mapping | None, stats: LatencyStats | None, *, rel_tol: float = REL_TOL,
              abs_tol_ms: float = ABS_TOL_MS) -> tuple[Disagreement, ...]:
    """Compare recomputed stats with the record's own values where present; return misfits."""
    if not record or stats is None:
        return ()
    out = []
    for metric, dist in (("ttft", stats.ttft), ("tpot", stats.tpot), ("e2e_latency", stats.e2e)):
        if dist is None:
            continue
        for stat, ours in (("mean", dist.mean), ("median", dist.p50), ("p95", dist.p95),
                           ("p99", dist.p99)):
            key = f"{stat}_{metric}_ms"
            theirs = record.get(key)
            if not isinstance(theirs, (int, float)) or isinstance(theirs, bool) \
                    or not math.isfinite(theirs):
                continue
            if abs(theirs - ours) > max(abs_tol_ms, rel_tol * abs(theirs)):
                out.append(Disagreement(key, float(theirs), ours))
    return tuple(out)
