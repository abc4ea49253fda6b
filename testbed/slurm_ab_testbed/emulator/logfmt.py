"""SGLang's log lines, byte for byte: the ``[date time ranks]`` prefix, uvicorn lines, and the
"Prefill batch" / "Decode batch" statistics in the formats of three SGLang generations
(sglang.md §3), selected by ``SLURM_AB_EMU_LOG_VERSION``.

The collector parses these lines; they are the part of the emulator that must be exact.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, TextIO


@dataclass(frozen=True)
class PrefillPD:
    """The queues of a PD prefill server (SGLang's bootstrap and inflight queues)."""
    bootstrap_req: int
    inflight_req: int
    optimistic_req: int = 0


@dataclass(frozen=True)
class DecodePD:
    """The queues of a PD decode server (preallocation, transfer, retracted requests)."""
    prealloc_usage: float
    prealloc_req: int
    transfer_req: int
    retracted_req: int


@dataclass(frozen=True)
class PrefillStats:
    new_seq: int
    new_token: int
    cached_token: int
    token_usage: float
    running_req: int
    queue_req: int
    pending_token: int
    cuda_graph: bool
    input_throughput: float
    pd: Optional[PrefillPD] = None          # a PD prefill server's queues


@dataclass(frozen=True)
class DecodeStats:
    running_req: int
    num_token: int
    token_usage: float
    cuda_graph: bool
    gen_throughput: float
    queue_req: int
    accepted_tokens: Optional[int] = None   # window totals, only with a speculative algorithm
    verify_ct: Optional[int] = None
    num_draft_tokens: Optional[int] = None
    pd: Optional[DecodePD] = None           # a PD decode server's queues


def prefill_line(version: str, s: PrefillStats) -> str:
    """The body (after the prefix) of a Prefill batch line. A PD prefill server adds its queues
    (0.5.23 metrics_reporter.report_prefill_stats; 0.5.6 "#prealloc-req/#inflight-req" and 0.4.10
    "#unbootstrapped-req/#transferring-req" in scheduler_metrics_mixin, 0.4.10 without #running-req)."""
    sep = "." if version == "0.4.10" else ","
    head = (f"Prefill batch{sep} #new-seq: {s.new_seq}, #new-token: {s.new_token}, "
            f"#cached-token: {s.cached_token}, token usage: {s.token_usage:.2f}, ")
    pd, tput = s.pd, f"input throughput (token/s): {s.input_throughput:.2f}"
    if pd is not None and version == "0.4.10":
        return (head + f"#unbootstrapped-req: {pd.bootstrap_req}, #queue-req: {s.queue_req}, "
                f"#transferring-req: {pd.inflight_req}, {tput}, ")
    body = head + f"#running-req: {s.running_req}, #queue-req: {s.queue_req}, "
    if version in ("0.4.10", "0.5.6"):
        # these versions end the line with ", "
        return body + (f"#prealloc-req: {pd.bootstrap_req}, #inflight-req: {pd.inflight_req}, {tput}, " if pd else "")
    if pd is not None:
        body += (f"#pending-token: {s.pending_token}, #bootstrap-req: {pd.bootstrap_req}, "
                 f"#inflight-req: {pd.inflight_req}, #optimistic-req: {pd.optimistic_req}, ")
    else:
        body += f"#pending-token: {s.pending_token}, "
    return body + f"cuda graph: {s.cuda_graph}, {tput}"


def decode_pd_fields(version: str, pd: Optional[DecodePD]) -> str:
    if pd is None:
        return ""
    usage = f"pre-allocated usage: {pd.prealloc_usage:.2f}, "
    if version == "0.4.10":
        return usage + f"#retracted-req: {pd.retracted_req}, "
    return usage + (f"#prealloc-req: {pd.prealloc_req}, #transfer-req: {pd.transfer_req}, "
                    f"#retracted-req: {pd.retracted_req}, ")


def accept_fields(version: str, s: DecodeStats) -> str:
    if s.accepted_tokens is None or not s.verify_ct:
        return ""
    accept_len = s.accepted_tokens / s.verify_ct
    if version == "0.4.10":
        return f"accept len: {accept_len:.2f}, "
    n = s.num_draft_tokens or 1
    if version == "0.5.6":  # accepted tokens / (forward_ct * num_draft_tokens)
        rate = s.accepted_tokens / (s.verify_ct * n)
    else:                   # 0.5.16+: correct drafts / (forward_ct * (num_draft_tokens - 1))
        rate = (s.accepted_tokens - s.verify_ct) / (s.verify_ct * (n - 1)) if n > 1 else 0.0
    return f"accept len: {accept_len:.2f}, accept rate: {rate:.2f}, "


def decode_line(version: str, s: DecodeStats) -> str:
    """The body (after the prefix) of a Decode batch line."""
    sep = "." if version == "0.4.10" else ","
    body = (f"Decode batch{sep} #running-req: {s.running_req}, #token: {s.num_token}, "
            f"token usage: {s.token_usage:.2f}, {accept_fields(version, s)}{decode_pd_fields(version, s.pd)}"
            f"cuda graph: {s.cuda_graph}, gen throughput (token/s): {s.gen_throughput:.2f}, "
            f"#queue-req: {s.queue_req}")
    return body + (", " if version in ("0.4.10", "0.5.6") else "")


def dummy_health_line(version: str, host: str, port: int) -> str:
    if version == "0.4.10":
        return f"Dummy health check server scheduled on existing loop at {host}:{port}"
    return f"Dummy health check server started in background thread at {host}:{port}"


_PHRASES = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            500: "Internal Server Error", 503: "Service Unavailable"}


class LogSink:
    """Thread-safe writer of SGLang-style lines (stderr for the logger, stdout for uvicorn access,
    as in SGLang); every line is flushed so a SIGKILL loses nothing already logged."""

    def __init__(self, log_ms: bool, out: TextIO = None, err: TextIO = None):
        self.log_ms = log_ms
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._lock = threading.Lock()

    def stamp(self, t: Optional[float] = None) -> str:
        t = time.time() if t is None else t
        s = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        return s + (f".{int(t * 1000) % 1000:03d}" if self.log_ms else "")

    def write(self, text: str, stream: Optional[TextIO] = None) -> None:
        stream = stream or self.err
        with self._lock:
            stream.write(text if text.endswith("\n") else text + "\n")
            stream.flush()

    def log(self, msg: str, ranks: str = "") -> None:
        """A logger line: ``[ts{ranks}] msg`` (multi-line messages keep their continuation lines)."""
        self.write(f"[{self.stamp()}{ranks}] {msg}")

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        self.write(f"[{self.stamp()}] {(level + ':').ljust(9)} {msg}")

    def access(self, client: str, request_line: str, code: int) -> None:
        phrase = _PHRASES.get(code, "")
        self.write(f"[{self.stamp()}] INFO:     {client} - \"{request_line}\" {code} {phrase}".rstrip(),
                   self.out)
