"""Failure signatures in a run's logs: what killed the run, where, and in which phase.

Blocks are searched with one compiled bytes regex, so a clean GiB log costs one C-speed pass and
Python only runs on matching lines. Each (kind, file) is reported once, with the first matching
line and a count of repeats (an OOM is printed by every TP rank of a node).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePath
from typing import Iterable

from ..model.rundir import server_log_identity
from .text import BLOCK, decode, iter_blocks, line_timestamp

__all__ = ["Finding", "diagnose", "SIGNATURES", "ROOT_CAUSE_KINDS", "server_log_identity",
           "NO_KV_MEMORY"]

NO_KV_MEMORY = "no memory left for the KV cache after loading weights"

# (kind, label, bytes regex). Order = priority among kinds when choosing the headline reason.
SIGNATURES: tuple[tuple[str, str, bytes], ...] = (
    ("oom", "CUDA out of memory",
     rb"torch\.OutOfMemoryError|CUDA out of memory|CUDA error: out of memory"),
    # The model runner's 'max_total_tokens=%s is larger than the profiled value %s. Use the
    # profiled value instead.' (every version since 0.1): a profiled value <= 0 means the weights
    # left no memory for the KV cache (the server dies or serves nothing); a positive one only
    # caps the pool ('kv_capped' below).
    ("oom", NO_KV_MEMORY,
     rb"max_total_tokens=\d+ is larger than the profiled value (?:-\d+|0+)\b"),
    ("oom", "Not enough memory for the KV cache",
     rb"Not enough memory\. Please try to increase --mem-fraction-static"),
    ("oom", "Prefill out of memory", rb"Prefill out of memory"),
    # not 'Decode out of memory happened' (a retraction: 'kv_pressure' below)
    ("oom", "Decode out of memory", rb"Decode out of memory(?! happened)"),
    ("oom", "Capture cuda graph failed", rb"Capture cuda graph failed"),
    ("oom", "request slots out of memory", rb"alloc_req_slots runs out of memory"),
    ("cuda_error", "CUDA error", rb"CUDA error: (?!out of memory)"),
    ("nccl", "NCCL error",
     rb"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclRemoteError"
     rb"|Watchdog caught collective operation timeout|DistBackendError"),
    ("gloo", "GLOO error",
     rb"[Gg]loo[^\n]{0,120}(?:[Ee]rror|[Cc]onnection closed|[Tt]imed out|[Cc]onnection refused)"),
    # torch's TCPStore rendezvous at --dist-init-addr (a node that cannot reach rank 0, or rank 0
    # waiting for nodes that never come).
    ("dist_init", "torch.distributed rendezvous failed", rb"DistNetworkError|DistStoreError"),
    # uvicorn's start line of a server bound to loopback: no other node can reach it.
    ("loopback_only", "server listens on loopback only, unreachable from other nodes (--host)",
     rb"Uvicorn running on http://(?:127\.\d+\.\d+\.\d+|localhost|\[::1\]):\d+"),
    # Prefill/decode disaggregation (SGLang 0.5.23; research note pd-disaggregation.md section 5):
    # the KV transfer engine cannot start on a rank (mooncake_transfer_engine.py, mooncake/conn.py,
    # nixl/conn.py), or the two roles disagree on the KV layout (common/conn.py, first handshake).
    ("pd_transfer_engine", "KV transfer engine failed to start",
     rb"Mooncake Transfer Engine initialization failed|Please install mooncake|Please install NIXL"
     rb"|NIXL_ERR_BACKEND|Mooncake memory registration failed|No available RNIC"),
    ("pd_mismatch", "prefill and decode disagree on the KV layout",
     rb"Page size mismatch: prefill server has|KV cache dtype mismatch|should be equal to prefill pp size"),
    # No GPUDirect RDMA (nvidia_peermem not loaded, no dma-buf): Mooncake's own (glog) error for each
    # GPU buffer it cannot register; SGLang 0.5.23 logs batch_register's failure at debug level only
    # and starts, then every KV transfer from or to the node fails (NVIDIA/srt-slurm#429).
    ("pd_gpudirect", "GPU memory not registered for RDMA: no GPUDirect RDMA (nvidia_peermem or dma-buf)",
     rb"rdma_context\.cpp:\d+\] Failed to register memory|DMA BUF supported required for GPU RDMA"),
    ("scheduler_exception", "Scheduler hit an exception", rb"Scheduler hit an exception"),
    ("init_failed", "Initialization failed", rb"Initialization failed"),
    ("health_check_failed", "Health check failed", rb"Health check failed"),
    ("child_failed", "a server process failed", rb"Received sigquit from a child process"),
    ("router", "router: no available workers", rb"No available workers"),
    # PD requests that failed between the roles (the consequence of a lost peer, a broken link or a
    # full KV pool; the root cause is often the other role's own failure, listed before these).
    ("pd_prefill_lost", "the decode lost its prefill (bootstrap heartbeat)",
     rb"Lost connection with prefill instance"),
    ("pd_handshake", "the decode cannot reach the prefill's bootstrap server",
     rb"Could not fetch prefill parallel info from"),
    ("pd_bootstrap_timeout", "KV bootstrap timed out: the prefill never received the decode's KV indices",
     rb"timed out after [0-9.]+s in KVPoll\.Bootstrapping"),
    ("pd_waiting_timeout", "the KV never arrived at the decode",
     rb"timed out after [0-9.]+s in KVPoll\.WaitingForInput"),
    # --disaggregation-enable-kv-checksum: the decode's digest of the KV it received differs from the
    # prefill's (decode.py _verify_kv_checksums): hardware or transport corrupted it.
    ("pd_kv_checksum", "KV checksum mismatch: the KV arrived corrupted", rb"KV checksum mismatch req="),
    # The decode's side of a transfer the prefill reported failed without a reason frame (mooncake
    # KVReceiver's default 'Failed to get kvcache from prefill instance, it might be dead'): the
    # prefill's own line says why, and which role logs first is a race (conn.py tells the decode
    # before the prefill's scheduler polls the failure), so this one ranks after it.
    ("pd_transfer_reported", "KV transfer failed",
     rb"Decode transfer failed for request.*Failed to get kvcache from prefill instance"),
    ("pd_transfer_failed", "KV transfer failed", rb"(?:Prefill|Decode) transfer failed for request"),
    ("pd_kv_too_small", "a prompt exceeds the decode's KV pool",
     rb"exceeds the maximum number of tokens: \d+ > \d+"),
    ("bad_args", "invalid command-line arguments",
     rb": error: (?:unrecognized arguments|argument -|the following arguments are required"
     rb"|invalid choice)"),
    ("tokenizer", "tokenizer registration error",
     rb"(?i:(?:fail|error|unable|cannot|could not)[^\n]{0,80}tokenizer"
     rb"|tokenizer[^\n]{0,80}(?:fail|error|not found|no such file))"),
    ("job_fatal", "slurm-ab fatal", rb"slurm-ab: FATAL:?"),
    ("slurm_timeout", "Slurm time limit", rb"CANCELLED AT \S+ DUE TO TIME LIMIT"),
    ("slurm_node_failure", "Slurm node failure",
     rb"(?:CANCELLED AT \S+ )?DUE TO NODE FAIL(?:URE)?"),
    ("node_failure", "a node of the job failed", rb"srun: error: Node failure on \S+"),
    ("slurm_cancelled", "Slurm cancellation", rb"CANCELLED AT \S+"),
    ("srun_error", "srun error", rb"srun: error: "),
    # A retraction, logged by every TP rank; the run goes on. 0.1-0.3 'decode out of memory
    # happened, #retracted_reqs: ...', 0.4-0.5.x 'Decode out of memory happened. #retracted_reqs:
    # ...', later 'KV cache pool is full. Retract requests. #retracted_reqs: ...'.
    ("kv_pressure", "KV cache pool full (requests retracted)",
     rb"KV cache pool is full\. Retract requests|[Dd]ecode out of memory happened"),
    ("kv_capped", "max_total_tokens capped to the profiled KV cache size",
     rb"max_total_tokens=\d+ is larger than the profiled value \d+\b"),
    ("connection_refused", "connection refused", rb"[Cc]onnection refused"),
    # NCCL's init lines when a rank does not use InfiniBand (NCCL_DEBUG=INFO; parse/nccl.py reads
    # which network each node chose): evidence for the job's nccl_network failure, no root cause
    # by itself (a site without IB uses sockets on purpose).
    ("nccl_net", "NCCL did not use InfiniBand",
     rb"NCCL INFO (?:NET/IB : No device found|Using network Socket)|Failed to open libibverbs"),
)
# Kinds that explain a failure by themselves, most specific first. 'connection_refused',
# 'kv_pressure' and 'kv_capped' are left out: they also occur in healthy runs (start-up retries,
# load peaks, a max_total_tokens above what fits).
ROOT_CAUSE_KINDS = ("oom", "cuda_error", "nccl", "gloo", "pd_transfer_engine", "pd_mismatch", "pd_gpudirect",
                    "scheduler_exception", "init_failed", "health_check_failed", "child_failed",
                    "router", "pd_prefill_lost", "pd_handshake", "pd_bootstrap_timeout",
                    "pd_waiting_timeout", "pd_kv_checksum", "pd_transfer_failed", "pd_transfer_reported", "pd_kv_too_small", "tokenizer",
                    "bad_args", "dist_init", "loopback_only")

_EACH = [(kind, label, re.compile(rx)) for kind, label, rx in SIGNATURES]
# Literal fragments, one of which every signature contains: blocks are searched for these with
# bytes.find (C speed; a regex alternation would test every byte), and only lines holding one
# are matched against the signatures.
_JOB_LINE = b"slurm-ab: "                 # the prefix of the job's own lines (functions.sh log)
ANCHORS = (b"out of memory", b"OutOfMemory", b"Not enough memory", b"rror", b"ailed",
           b"xception", b"FATAL", b"CANCELLED", b"DUE TO NODE", b"sigquit", b"No available",
           b"pool is full", b"refused", b"loo", b"Watchdog", b"okenizer", b"nccl",
           b"profiled value", b"Dist", b"Uvicorn running on http://", b"No device found",
           b"Using network Socket", b"libibverbs", b"Please install", b"NIXL_ERR", b"No available RNIC",
           b"mismatch", b"pp size", b"Lost connection with prefill", b"Could not fetch prefill", b"KVPoll",
           b"transfer failed for request", b"exceeds the maximum number of tokens", b"DMA BUF",
           _JOB_LINE)
# The job's own lines (slurm-*.out) that start tearing steps down: a launch that is done, the job's
# end after its launches, a FATAL. srun's errors after one of them ('task N: Killed' as the steps
# go) are the teardown's, not a cause, until the job logs anything else (the next launch starts).
_TEARDOWN = re.compile(rb"slurm-ab: (?:FATAL|launch \d+ \(.*\) done: tearing down|benchmark done|teardown \()")
_MEMFRAC = re.compile(rb"mem_fraction_static=([0-9.]+)|--mem-fraction-static[ =]([0-9.]+)")
_FAILED_NODE = re.compile(r"Node failure on (\S+)")
_PROFILED = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")


@dataclass(frozen=True)
class Finding:
    kind: str                       # oom, nccl, gloo, scheduler_exception, job_fatal, ...
    file: str                       # path as given
    line: int                       # 1-based line of the first occurrence
    excerpt: str                    # that line, cleaned and shortened
    details: dict = field(default_factory=dict)   # label, count, ts, phase, replica, ...

    @property
    def ts(self) -> datetime | None:
        value = self.details.get("ts")
        return datetime.fromisoformat(value) if value else None


class _FileState:
    """What is known about one file up to the current position (for the phase of an OOM)."""

    __slots__ = ("prefill_seen", "decode_seen", "last_kind", "mem_fraction", "first_prefill",
                 "first_decode")

    def __init__(self) -> None:
        self.prefill_seen = self.decode_seen = False
        self.last_kind: str | None = None
        self.mem_fraction: str | None = None
        self.first_prefill: datetime | None = None
        self.first_decode: datetime | None = None

    def advance(self, buf: bytes, lo: int, hi: int) -> None:
        """Take in buf[lo:hi] (up to a finding) without per-line Python work."""
        if lo >= hi:
            return
        p = buf.rfind(b"Prefill batch", lo, hi)
        d = buf.rfind(b"Decode batch", lo, hi)
        if p >= 0 or d >= 0:
            self.last_kind = "Prefill" if p > d else "Decode"
        if p >= 0 and not self.prefill_seen:
            self.prefill_seen = True
            self.first_prefill = _ts_at(buf, buf.find(b"Prefill batch", lo, hi), lo)
        if d >= 0 and not self.decode_seen:
            self.decode_seen = True
            self.first_decode = _ts_at(buf, buf.find(b"Decode batch", lo, hi), lo)
        if self.mem_fraction is None:
            for key in (b"mem_fraction_static=", b"--mem-fraction-static"):
                i = buf.find(key, lo, hi)
                if i >= 0:
                    m = _MEMFRAC.match(buf, i)
                    if m:
                        self.mem_fraction = (m.group(1) or m.group(2)).decode()
                        break

    def phase(self, label: str) -> str:
        if label == "Capture cuda graph failed":
            return "cuda graph capture (startup)"
        if label in ("Not enough memory for the KV cache", NO_KV_MEMORY):
            return "startup (KV cache pool)"
        if label == "Prefill out of memory":
            return "first prefill" if not self.decode_seen else "prefill"
        if label == "Decode out of memory":
            return "decode"
        if not self.prefill_seen and not self.decode_seen:
            return "startup"
        if not self.decode_seen:
            return "first prefill"
        return "prefill" if self.last_kind == "Prefill" else "decode"


def _ts_at(buf: bytes, pos: int, lo: int) -> datetime | None:
    ls = max(buf.rfind(b"\n", lo, pos) + 1, lo)
    return line_timestamp(decode(buf[ls: ls + 200]))


def is_job_output(name: str) -> bool:
    """The job's own output (slurm-<id>.out, its name in the job script), not a server's log."""
    return PurePath(name).name.startswith("slurm-")


def _scan_file(path: Path, shown: str, block: int = BLOCK) -> tuple[list[Finding], _FileState]:
    state = _FileState()
    found: dict[str, list] = {}          # kind -> [finding fields..., count]
    job_output = is_job_output(shown)
    tearing_down = False                     # in the job's output: since a _TEARDOWN line
    lineno = 1
    carried: datetime | None = None          # last stamp of the previous blocks
    for buf, lo, hi in iter_blocks(path, block):
        counted = lo
        done = lo                                  # state advanced up to here
        for ls in _candidate_lines(buf, lo, hi):
            le = buf.find(b"\n", ls, hi)
            le = hi if le < 0 else le
            raw = buf[ls:le]
            if job_output and _JOB_LINE in raw:
                tearing_down = bool(_TEARDOWN.search(raw))
            for kind, label, rx in _EACH:
                if rx.search(raw):
                    break
            else:
                continue
            lineno += buf.count(b"\n", counted, ls)
            counted = ls
            state.advance(buf, done, ls)
            done = ls
            if kind in found and not (kind == "srun_error" and found[kind][4].get("teardown")
                                      and not tearing_down):
                found[kind][-1] += 1
                if kind == "srun_error" and not tearing_down:
                    _other_task(found, raw, shown, lineno, _previous_ts(buf, lo, ls) or carried)
                continue
            count = found[kind][-1] + 1 if kind in found else 1   # a teardown's srun line replaced
            text = decode(raw[:2000])
            ts = line_timestamp(text) or _previous_ts(buf, lo, ls) or carried
            details = {"label": label, "ts": ts.isoformat(sep=" ") if ts else None}
            if kind == "oom" or kind == "kv_capped":
                m = _PROFILED.search(text)
                if m:
                    details["max_total_tokens"] = int(m.group(1))
                    details["profiled_max_total_tokens"] = int(m.group(2))
            if kind == "oom":
                details["phase"] = state.phase(label)
                mf = state.mem_fraction or _mem_in(raw)
                details["mem_fraction_static"] = float(mf) if mf else None
            if kind == "job_fatal":
                details["message"] = text.split("FATAL", 1)[1].lstrip(": ").strip()
            if kind == "srun_error":
                details["message"] = text.split("srun: error:", 1)[1].strip()
                if tearing_down:            # kept only until an srun error outside a teardown
                    details["teardown"] = True
            if kind == "node_failure":
                m = _FAILED_NODE.search(text)
                if m:
                    details["node"] = m.group(1)
            found[kind] = [kind, shown, lineno, _excerpt(text), details, count]
        state.advance(buf, done, hi)
        lineno += buf.count(b"\n", counted, hi)
        carried = _previous_ts(buf, lo, hi) or carried
    out = []
    for kind, f, line, excerpt, details, count in found.values():
        if kind == "oom" and details.get("mem_fraction_static") is None and state.mem_fraction:
            details["mem_fraction_static"] = float(state.mem_fraction)
        details["count"] = count
        out.append(Finding(kind, f, line, excerpt, details))
    return out, state


SRUN_TASKS_KEPT = 64       # distinct srun lines kept beside a file's first (one per task of a large job)


def _other_task(found: dict, raw: bytes, shown: str, lineno: int, ts: datetime | None) -> None:
    """Keep an srun error outside a teardown whose message differs from the first one's as a
    finding of its own: which task srun saw die first is a race between the nodes' reports (a
    replica's peers, killed by SGLang's fatal sequence once their head died, may be reported
    before it), and collect.verdict tells the node that died first from the ones that saw a peer
    go only with every task's line."""
    text = decode(raw[:2000])
    message = text.split("srun: error:", 1)[-1].strip()
    key = ("srun_error", message)
    if key in found:
        found[key][-1] += 1
        return
    if found["srun_error"][4].get("message") == message or \
            sum(1 for k in found if isinstance(k, tuple)) >= SRUN_TASKS_KEPT:
        return
    found[key] = ["srun_error", shown, lineno, _excerpt(text),
                  {"label": "srun error", "ts": ts.isoformat(sep=" ") if ts else None, "message": message}, 1]


def _previous_ts(buf: bytes, lo: int, ls: int) -> datetime | None:
    """A traceback line has no stamp: use the nearest stamped line above it (same block)."""
    end = ls
    for _ in range(200):
        i = buf.rfind(b"\n[", lo, end)
        start = lo if i < 0 else i + 1
        if i < 0 and buf[lo:lo + 1] != b"[":
            return None
        ts = line_timestamp(decode(buf[start: start + 80]))
        if ts is not None or i < 0:
            return ts
        end = i
    return None


def _candidate_lines(buf: bytes, lo: int, hi: int) -> list[int]:
    """Sorted start offsets of the lines in buf[lo:hi] that hold an anchor."""
    starts = set()
    for anchor in ANCHORS:
        i = buf.find(anchor, lo, hi)
        while i >= 0:
            ls = buf.rfind(b"\n", lo, i) + 1
            starts.add(ls if ls > lo else lo)
            le = buf.find(b"\n", i, hi)
            if le < 0:
                break
            i = buf.find(anchor, le, hi)
    return sorted(starts)


def _mem_in(raw: bytes) -> str | None:
    m = _MEMFRAC.search(raw)
    return (m.group(1) or m.group(2)).decode() if m else None


def _excerpt(text: str, width: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def diagnose(paths: Iterable[str | Path], *, root: str | Path | None = None,
             block: int = BLOCK) -> list[Finding]:
    """Scan files for failure signatures; return findings in file order, then line order.

    Files that do not exist are skipped. For server logs named logs/server-r<G>-n<R>.log the
    finding names replica and node rank; an OOM in a file without batch lines (node rank > 0:
    only the scheduler of attention-TP rank 0 logs batches) takes its phase from the batch lines
    of the same replica's other files, compared by timestamp.
    """
    results: list[tuple[Path, list[Finding], _FileState]] = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            continue
        shown = str(p.relative_to(root)) if root and p.is_relative_to(root) else str(p)
        findings, state = _scan_file(p, shown, block)
        results.append((p, findings, state))
    by_replica: dict[int, list[_FileState]] = {}
    for p, _, state in results:
        ident = server_log_identity(p)
        if ident:
            by_replica.setdefault(ident[0], []).append(state)
    out: list[Finding] = []
    for p, findings, state in results:
        ident = server_log_identity(p)
        for f in findings:
            if ident:
                f.details["replica"], f.details["node_rank"] = ident
            if f.kind == "oom" and ident and f.details.get("phase") == "startup":
                f.details["phase"] = _replica_phase(f, by_replica.get(ident[0], []))
            out.append(f)
    return out


def _replica_phase(f: Finding, states: list[_FileState]) -> str:
    ts = f.ts
    if ts is None:
        return "startup"
    prefill = [s.first_prefill for s in states if s.first_prefill and s.first_prefill <= ts]
    decode_ = [s.first_decode for s in states if s.first_decode and s.first_decode <= ts]
    if not prefill and not decode_:
        return "startup"
    return "first prefill" if not decode_ else "serving"
