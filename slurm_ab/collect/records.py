"""The collector's result: frozen, JSON-ready records (times as ISO strings, ms for latencies)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

VERDICTS = ("ok", "invalid", "failed", "cancelled", "timeout", "running")


@dataclass(frozen=True)
class JobInfo:
    job_id: str | None = None
    state: str | None = None            # normalised Slurm state: COMPLETED, FAILED, CANCELLED, ...
    state_raw: str | None = None        # as sacct printed it ("CANCELLED by 1000")
    elapsed_s: float | None = None
    exit_code: str | None = None
    node_lists: dict = field(default_factory=dict)   # replica (str) -> [host of node rank 0, ...]
    source: str = "none"                # where state came from: sacct | none | ignored
    note: str | None = None             # why sacct's answer was ignored (another job's record)


@dataclass(frozen=True)
class BenchSpec:
    """What was benchmarked; two runs are comparable only if these agree."""

    backend: str | None = None
    dataset: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    num_prompts: int | None = None
    max_concurrency: int | None = None
    request_rate: str | None = None


@dataclass(frozen=True)
class Latency:
    """One metric in milliseconds."""

    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


@dataclass(frozen=True)
class BenchResult:
    duration_s: float | None = None
    completed: int | None = None
    total: int | None = None
    failed: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    input_tps: float | None = None
    output_tps: float | None = None
    ttft: Latency | None = None
    tpot: Latency | None = None
    e2e: Latency | None = None
    source: str | None = None           # jsonl | stdout: where totals came from
    latency_source: str | None = None   # details | record | stdout (| mixed: see notes)
    disagreements: tuple = ()           # details vs the client's own values, beyond tolerance
    errors: tuple = ()                  # distinct request error texts
    accept_length: float | None = None  # the client's own (lifetime avg of the first worker)


@dataclass(frozen=True)
class ReplicaSummary:
    replica: int
    logs: tuple = ()                    # run-dir relative paths of its server logs
    nodes: tuple = ()                   # hosts by node rank, when known
    decode_samples: int = 0             # decode samples in the window (or all: all_samples)
    accept_samples: int = 0
    accept_len: float | None = None
    accept_rate: float | None = None
    gen_throughput: float | None = None
    requests_served: int | None = None
    requests_source: str | None = None  # access_log | prefill_new_seq
    warmup_seen: bool = False
    warmup: str = ""                    # how the warm-up was (or was not) established
    log_end: str | None = None          # last timestamp in its node-0 log
    untimed_batch_lines: int = 0        # batch lines whose time could not be read
    retractions: int = 0                # KV-cache retractions (in the window, or all)
    retracted_requests: int = 0         # requests they sent back to the queue


@dataclass(frozen=True)
class Pooled:
    """Acceptance pooled over every replica's decode samples (the seed's '37 samples')."""

    samples: int = 0                    # decode samples with accept figures (spec decoding)
    accept_len: float | None = None
    accept_rate: float | None = None
    decode_samples: int = 0             # all decode samples, with or without accept figures


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    mode: str | None = None
    label: str | None = None            # e.g. "2 x TP32/PP1/EP4 + DFlash" when the manifest has it
    job: JobInfo = JobInfo()
    spec: BenchSpec = BenchSpec()
    bench: BenchResult = BenchResult()
    replicas: tuple = ()                # ReplicaSummary, by replica
    accept: Pooled = Pooled()
    window: tuple = (None, None)        # benchmark window (ISO local times)
    all_samples: bool = False
    verdict: str = "failed"
    reasons: tuple = ()
    findings: tuple = ()                # diagnosis findings as dicts (failed runs only)
    notes: tuple = ()
    server_metrics: object = None       # collect.server_metrics.ServerMetrics (from /metrics)

    def to_dict(self) -> dict:
        return _clean(asdict(self))


def _clean(value):
    """JSON-safe: tuples -> lists, non-finite floats -> strings, keys -> str."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
