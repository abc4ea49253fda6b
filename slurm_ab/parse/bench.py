"""sglang.bench_serving output: the --output-file JSONL record and the printed result block.

The JSONL is appended (several records per file are possible), may contain bare 'Infinity',
and may end in a line cut by a killed client. The printed block exists in every version from
0.4.10 to 0.5.23 but its lines change (bench_serving's benchmark/serving.py: 0.4.10 prints no
TPOT lines, 0.5.6 adds 'Peak output token throughput', P95 of TTFT, TPOT and E2E only from
0.5.16): it is parsed label by label.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .stats import Dist
from .text import iter_lines, scalar

__all__ = ["RecordRead", "ResultBlock", "LatencyStats", "Disagreement", "read_last_record",
           "parse_result_block", "latency_stats", "agreement", "REL_TOL", "ABS_TOL_MS"]


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


# ---- printed result block ---------------------------------------------------------------------

_BLOCK_START = re.compile(r"=+\s*Serving Benchmark Result\s*=+")
_BLOCK_END = re.compile(r"^={40,}\s*$")
_LINE = re.compile(r"^(?P<label>[A-Za-z0-9 ()/.,_-]+?):\s+(?P<value>\S.*?)\s*$")
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
}


def _key(label: str) -> str:
    if label in _LABELS:
        return _LABELS[label]
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


def parse_result_block(path: str | Path) -> ResultBlock | None:
    """Stream a client log and return its last result block (None if there is none)."""
    last: ResultBlock | None = None
    cur_vals: dict | None = None
    cur_labels: dict = {}
    start, blocks = 0, 0
    try:
        for no, text in iter_lines(path):
            if _BLOCK_START.search(text):
                if cur_vals is not None:
                    last = ResultBlock(cur_vals, cur_labels, start, False, blocks)
                cur_vals, cur_labels, start = {}, {}, no
                blocks += 1
                continue
            if cur_vals is None:
                continue
            if _BLOCK_END.match(text):
                last = ResultBlock(cur_vals, cur_labels, start, True, blocks)
                cur_vals = None
                continue
            m = _LINE.match(text.rstrip())
            if m:
                label, value = m.group("label").strip(), m.group("value")
                cur_labels[label] = value
                cur_vals[_key(label)] = scalar(value)
    except FileNotFoundError:
        return None
    if cur_vals is not None:
        last = ResultBlock(cur_vals, cur_labels, start, False, blocks)
    if last is not None:
        last = ResultBlock(last.values, last.labels, last.line, last.complete, blocks)
    return last


# ---- per-request latency statistics --------------------------------------------------------------

@dataclass(frozen=True)
class LatencyStats:
    """TTFT / TPOT / E2E distributions (ms) recomputed from --output-details arrays."""

    requests: int
    succeeded: int
    ttft: Dist | None
    tpot: Dist | None
    e2e: Dist | None
    errors: tuple[str, ...] = ()     # distinct error texts (first 200 chars), in order


def _seq(record: Mapping, key: str) -> list | None:
    value = record.get(key)
    return value if isinstance(value, list) else None


def latency_stats(record: Mapping | None) -> LatencyStats | None:
    """Recompute latencies from per-request details; None without 'ttfts'.

    A request counts as successful when its error is empty and (if lengths are given) it produced
    at least one token: 0.5.2 records an empty error for a failure whose HTTP reason was None.
    TTFT = ttft; E2E = ttft + sum(itls) (the last token's arrival); TPOT = (E2E - TTFT) /
    (output_len - 1) for requests with more than one output token — the client's own definition.
    """
    if not record:
        return None
    ttfts = _seq(record, "ttfts")
    if ttfts is None:
        return None
    itls = _seq(record, "itls") or []
    outs = _seq(record, "output_lens")
    errs = _seq(record, "errors")
    ttft_ms, tpot_ms, e2e_ms, errors = [], [], [], []
    ok = 0
    for i, ttft in enumerate(ttfts):
        err = errs[i] if errs is not None and i < len(errs) else ""
        out = outs[i] if outs is not None and i < len(outs) else None
        if err:
            text = str(err).strip().splitlines()[-1][:200] if str(err).strip() else str(err)
            if text not in errors:
                errors.append(text)
            continue
        if out is not None and not out:
            continue
        if not isinstance(ttft, (int, float)):
            continue
        req_itl = itls[i] if i < len(itls) and isinstance(itls[i], list) else []
        e2e = ttft + math.fsum(x for x in req_itl if isinstance(x, (int, float)))
        ok += 1
        ttft_ms.append(ttft * 1000.0)
        e2e_ms.append(e2e * 1000.0)
        if out is None:
            out = len(req_itl) + 1
        if out > 1:
            tpot_ms.append((e2e - ttft) / (out - 1) * 1000.0)
    return LatencyStats(len(ttfts), ok, Dist.of(ttft_ms), Dist.of(tpot_ms), Dist.of(e2e_ms),
                        tuple(errors))


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
