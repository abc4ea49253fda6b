"""SGLang server log lines: 'Decode batch' / 'Prefill batch' samples, HTTP access lines, readiness.

Formats differ by version (the lines are built in SGLang's scheduler_metrics_mixin.py up to
0.5.10, in scheduler_components/metrics_reporter.py from 0.5.16): 0.4.x writes 'Decode batch.'
and a trailing ', '; 0.5.6 'Decode batch,' with the trailing ', '; 0.5.10+ drops it; hybrid
pools print 'full token usage' instead of 'token usage'; PD-decode servers add fields; one
third-party build swaps the field order. So the body is parsed as 'key: value' pairs, never by
position.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator, Mapping

from .text import (decode, iter_blocks, line_stamp, line_timestamp, scalar, stamp_in,
                   strip_ansi)

__all__ = [
    "BatchSample", "AccessLine", "parse_batch_line", "iter_batch_samples", "parse_ranks",
    "parse_access_line", "parse_head", "is_ready_line", "line_timestamp", "READY_TEXT",
    "GENERATE_PATHS",
]

READY_TEXT = "The server is fired up and ready to roll!"
# Endpoints that carry generation traffic (bench_serving backends and the job's warm-up).
GENERATE_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")

_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)$")
_ITER = re.compile(r"\s*\[(\d+)\]")
_RANK_GROUP = re.compile(r"\[((?:\s*[A-Z][A-Z_]*\d+)+)\s*\]")     # '[PP1 TP0]'



@dataclass(frozen=True)
class BatchSample:
    """One periodic scheduler sample ('Decode batch' or 'Prefill batch')."""

    kind: str                                  # "Decode" | "Prefill"
    ts: datetime | None
    ranks: Mapping[str, int] = field(default_factory=dict)   # {"TP": 0, "EP": 0, "PP": 1}
    fields: Mapping[str, object] = field(default_factory=dict)  # "accept len" -> 3.05, ...
    ts_has_ms: bool = False                    # stamp carries milliseconds (SGLANG_LOG_MS)

    def _num(self, *keys: str) -> float | None:
        for key in keys:
            value = self.fields.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value
        return None

    @property
    def accept_len(self) -> float | None:
        return self._num("accept len")

    @property
    def accept_rate(self) -> float | None:
        return self._num("accept rate")

    @property
    def gen_throughput(self) -> float | None:
        return self._num("gen throughput (token/s)")

    @property
    def running_req(self) -> int | None:
        return self._num("#running-req")

    @property
    def queue_req(self) -> int | None:
        return self._num("#queue-req")

    @property
    def new_seq(self) -> int | None:
        return self._num("#new-seq")

    @property
    def new_token(self) -> int | None:
        return self._num("#new-token")

    @property
    def cached_token(self) -> int | None:
        return self._num("#cached-token")

    @property
    def stream(self) -> tuple[int, int]:
        """(DP, PP) rank: samples of one stream describe one batch; TP/EP ranks do not matter."""
        return self.ranks.get("DP", 0), self.ranks.get("PP", 0)


@dataclass(frozen=True)
class AccessLine:
    """A uvicorn access line: '[ts] INFO:     127.0.0.1:PORT - "POST /generate HTTP/1.1" 200 OK'."""

    ts: datetime | None
    client: str
    method: str
    path: str
    status: int
    ts_has_ms: bool = False                    # stamp carries milliseconds (SGLANG_LOG_MS)

    @property
    def is_generation(self) -> bool:
        return self.method == "POST" and self.path.split("?", 1)[0] in GENERATE_PATHS


def parse_body(body: str, complete: bool = True) -> dict[str, object]:
    """'k: v, k: v, ' -> {k: v}; pieces without ': ' (a truncated tail, junk) are skipped.

    complete=False (a line cut by a dying process) also drops the last piece: '...: 14' may be
    the head of '144.95'.
    """
    out: dict[str, object] = {}
    parts = body.split(", ")
    if not complete and parts:
        parts.pop()
    for part in parts:
        key, sep, val = part.rpartition(": ")
        if sep and key:
            out[key.strip().lstrip(",. ")] = scalar(val.rstrip(", "))
    return out


def parse_ranks(text: str) -> dict[str, int]:
    """' DP0 PP1 TP0 EP0' -> {'DP': 0, 'PP': 1, 'TP': 0, 'EP': 0}; unknown tokens are ignored."""
    out: dict[str, int] = {}
    for tok in text.split():
        m = _RANK.match(tok)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def parse_head(head: str) -> tuple[datetime | None, dict[str, int], bool]:
    """Text before 'Decode batch' -> (ts, ranks, has_ms).

    The stamp is the first date-time of the head, whatever the layout (text.stamp_in): SGLang's
    '[ts ranks]', Python logging's 'YYYY-mm-dd HH:MM:SS,fff [INFO] ... [file:line]', a Ray
    prefix in front. SGLang prints the rank tags inside the stamp's brackets; other layouts may
    carry them in bracket groups of their own ('[PP1 TP0]').
    """
    ts, has_ms, start, end = stamp_in(head)
    if start > 0 and head[start - 1] == "[":
        close = head.find("]", end)
        if close >= 0:
            return ts, parse_ranks(head[end:close]), has_ms
    ranks: dict[str, int] = {}
    for group in _RANK_GROUP.findall(head):
        ranks.update(parse_ranks(group))
    if not ranks:              # SGLang's '[stamp ranks]' with a stamp that is not one
        close = head.rfind("]")
        open_ = head.rfind("[", 0, close) if close >= 0 else -1
        ranks = parse_ranks(head[open_ + 1: close]) if open_ >= 0 else {}
    return ts, ranks, has_ms


def parse_batch_line(line: str | bytes, complete: bool = True) -> BatchSample | None:
    """Parse one log line into a BatchSample, or None if it is not a batch line.

    complete=False marks a line that did not end with a newline (see parse_body).
    """
    if isinstance(line, (bytes, bytearray)):
        line = decode(bytes(line))
    elif "\x1b" in line:
        line = strip_ansi(line)
    pos = line.find(" batch")
    while pos >= 0:
        if line.startswith("Decode", pos - 6):
            kind, start = "Decode", pos - 6
        elif line.startswith("Prefill", pos - 7):
            kind, start = "Prefill", pos - 7
        else:
            pos = line.find(" batch", pos + 6)
            continue
        rest = line[pos + 6:]
        m = _ITER.match(rest)
        fields: dict[str, object] = {}
        if m:
            fields["iter"] = int(m.group(1))
            rest = rest[m.end():]
        if rest[:1] not in (".", ","):
            pos = line.find(" batch", pos + 6)
            continue
        ts, ranks, has_ms = parse_head(line[:start])
        body = rest[1:].strip()
        fields.update(parse_body(body.rstrip(","), complete))
        return BatchSample(kind, ts, ranks, fields, has_ms)
    return None


def iter_batch_samples(path: str | Path, kinds: tuple[str, ...] = ("Decode", "Prefill")
                       ) -> Iterator[BatchSample]:
    """Stream every batch sample of a log file (blocks are searched for ' batch' at C speed)."""
    for buf, start, end in iter_blocks(path):
        find = buf.find
        pos = find(b" batch", start, end)
        while pos >= 0:
            ls = buf.rfind(b"\n", start, pos) + 1 or start
            le = find(b"\n", pos, end)
            le = end if le < 0 else le
            complete = le < end or buf.endswith(b"\n", 0, end)
            sample = parse_batch_line(buf[max(ls, start):le], complete)
            if sample is not None and sample.kind in kinds:
                yield sample
            pos = find(b" batch", le, end)


_ACCESS = re.compile(
    r'(?P<client>[\w.:\[\]-]+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


def parse_access_line(line: str | bytes) -> AccessLine | None:
    """Parse a uvicorn access line (timestamped by SGLang's log config, or bare)."""
    if isinstance(line, (bytes, bytearray)):
        line = decode(bytes(line))
    else:
        line = strip_ansi(line)
    if '"' not in line:
        return None
    m = _ACCESS.search(line)
    if not m:
        return None
    ts, has_ms = line_stamp(line)
    return AccessLine(ts, m.group("client"), m.group("method"), m.group("path"),
                      int(m.group("status")), has_ms)


def is_ready_line(line: str | bytes) -> bool:
    """The one line node rank 0 prints after its own warm-up request succeeded."""
    if isinstance(line, (bytes, bytearray)):
        return READY_TEXT.encode() in line
    return READY_TEXT in line
