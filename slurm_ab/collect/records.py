"""The collector's result: frozen, JSON-ready records (times as ISO strings, ms for latencies).

summary.json is a CampaignSummary written from these records (to_dict) and read back into them
(read_record): one schema for every job, whatever its launches and passes.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import asdict, dataclass, field, replace

from ..model.campaign import Campaign
from ..model.experiment import instance_name
from ..parse.diagnose import Finding
from .capacity import CapacitySummary
from .correctness import CorrectnessSummary
from .load import LoadCheck
from .pd import PdSummary
from .profiles import ProfileRecord
from .sequential import SequentialRecord
from .server_metrics import ServerMetrics
from .telemetry import TelemetrySummary

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
    slo_ms: tuple[tuple[str, float], ...] = ()   # benchmark.slo as ((client key, ms), ...): ("ttft", 500.0), ...
    steady_ratio: float = 0.5           # benchmark.steady_concurrency_ratio
    slo_target_pct: float = 90.0        # benchmark.slo_target_pct: a pass meets the SLOs at this attainment


@dataclass(frozen=True)
class Latency:
    """One metric in milliseconds: its mean and percentiles (the client's own figures hold only
    these four); from the per-request details also p90, min, max, the sample standard deviation
    and how many values they rest on (a p95 of 2 values is their larger one, interpolated)."""

    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None
    std: float | None = None
    n: int | None = None


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts (the prompts' lengths)."""

    n: int
    mean: float
    min: int
    max: int


@dataclass(frozen=True)
class SteadyState:
    """Output throughput in the steady state: the longest window with at least ceil(ratio x peak)
    requests in flight (SGLang 0.5.23's steady_state.py). `source` says whose figure it is: the
    client's own block ("client", cross-checked against the details) or ours over the replayed
    per-request details ("details"); docs/metrics.md."""

    output_tps: float
    window_s: float
    start_s: float                      # the replayed window, s since the benchmark started
    end_s: float
    concurrency: int                    # the window's minimum concurrency
    output_tokens: float
    completed: int                      # requests that ended inside the window
    source: str = "details"             # "client" | "details"
    merged_requests: int = 0            # requests whose gaps were merged (tokens spread over time)
    # The client's own figure (SGLang 0.5.23 sglang.benchmark.steady_state_serving) and ours of
    # its definition (its window, its counting) over the replayed details: the cross-check.
    client_output_tps: float | None = None
    client_window_s: float | None = None
    client_min_concurrency: int | None = None
    recomputed_client_tps: float | None = None
    agrees: bool | None = None          # None: no steady-state block, or its window is a fragment
    recomputed_client_window_s: float | None = None


@dataclass(frozen=True)
class Goodput:
    """Requests that met every latency SLO of benchmark.slo (sglang/benchmark/goodput.py's
    definitions), from the per-request details; the client's own figures beside them."""

    slo_ms: dict                        # {"ttft": 500.0, "tpot": 50.0, "e2el": 20000.0}
    requests: int                       # every request sent
    good: int
    goodput_rps: float | None           # good requests per second of the benchmark duration
    attainment: float                   # good / requests
    attainment_by_metric: dict          # SLO -> share of requests meeting it
    client_goodput_rps: float | None = None
    client_attainment: float | None = None
    client_attainment_by_metric: dict = field(default_factory=dict)
    agrees: bool | None = None          # None: the client computed none (no --goodput)


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
    itl: Latency | None = None          # every inter-token gap (from the per-request details only)
    source: str | None = None           # jsonl | stdout: where totals came from
    latency_source: str | None = None   # details | record | stdout (| mixed: see notes)
    disagreements: tuple[str, ...] = ()     # details vs the client's own values, beyond tolerance
    errors: tuple[str, ...] = ()        # distinct request error texts
    accept_length: float | None = None  # the client's own (lifetime avg of the first worker)
    prompt_tokens: Lengths | None = None    # per successful request (details' input_lens)
    steady: SteadyState | None = None
    goodput: Goodput | None = None      # with benchmark.slo set


@dataclass(frozen=True)
class ReplicaSummary:
    replica: int
    logs: tuple[str, ...] = ()          # run-dir relative paths of its server logs
    nodes: tuple[str, ...] = ()         # hosts by node rank, when known
    decode_samples: int = 0             # decode samples in the window (or all: all_samples)
    accept_samples: int = 0
    accept_len: float | None = None
    accept_rate: float | None = None
    gen_throughput: float | None = None
    speed_samples: int = 0              # decode lines' tokens/s per running request (speed rule)
    speed_mean: float | None = None
    speed_sd: float | None = None
    requests_served: int | None = None
    requests_source: str | None = None  # access_log | prefill_new_seq
    warmup_seen: bool = False
    warmup: str = ""                    # how the warm-up was (or was not) established
    log_end: str | None = None          # last timestamp in its node-0 log
    untimed_batch_lines: int = 0        # batch lines whose time could not be read
    retractions: int = 0                # KV-cache retractions (in the window, or all)
    retracted_requests: int = 0         # requests they sent back to the queue
    role: str | None = None             # server | prefill | decode (None: unknown, an old manifest's)
    instance: int | None = None         # its index within the role

    @property
    def name(self) -> str:
        """How users read it: "replica 1", "prefill 0", "decode 0"."""
        return instance_name(self.role, self.replica if self.instance is None else self.instance)


@dataclass(frozen=True)
class Pooled:
    """Acceptance pooled over every replica's decode samples (the seed's '37 samples')."""

    samples: int = 0                    # decode samples with accept figures (spec decoding)
    accept_len: float | None = None
    accept_rate: float | None = None
    decode_samples: int = 0             # all decode samples, with or without accept figures


@dataclass(frozen=True)
class PassRef:
    """Which pass of its job a PassSummary is (a run of one mode: launch 1's only pass)."""

    launch: int = 1
    key: str | None = None              # c<C>-r<k>, its files' and events' name
    mode: str | None = None
    concurrency: int | None = None
    repeat: int | None = None
    prompts: int | None = None
    rate: float | None = None           # an open-loop pass's offered requests per second


@dataclass(frozen=True)
class PassSummary:
    """One timed benchmark pass of a job and its verdict. The unit of collection
    (collect.passes.collect_pass)."""

    run_id: str                         # the job's run id (ref says which pass)
    mode: str | None = None
    label: str | None = None            # e.g. "2 x TP32/PP1/EP4 + DFlash" when the manifest has it
    job: JobInfo = JobInfo()
    spec: BenchSpec = BenchSpec()
    bench: BenchResult = BenchResult()
    replicas: tuple[ReplicaSummary, ...] = ()   # by replica
    accept: Pooled = Pooled()
    window: tuple[str | None, str | None] = (None, None)    # benchmark window (ISO local times)
    all_samples: bool = False
    verdict: str = "failed"
    reasons: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()  # diagnosis findings (failed runs only)
    notes: tuple[str, ...] = ()
    server_metrics: ServerMetrics | None = None     # from /metrics
    ref: PassRef = PassRef()
    pd: PdSummary | None = None         # a prefill/decode pass's TTFT breakdown, transfer, roles
    load: LoadCheck | None = None       # an open-loop pass: achieved vs offered rate, saturation
    telemetry: TelemetrySummary | None = None   # GPU and host samplers over the pass (issue 34)

    def to_dict(self) -> dict:
        return _clean(asdict(self))


@dataclass(frozen=True)
class LaunchSummary:
    """One server launch of a job: how it ended and the verdict of each of its passes."""

    launch: int
    mode: str
    dir: str                            # relative to the run directory (launch<N>-<MODE>)
    status: str                         # ok | failed | unfinished | not run (launch_end event) |
    #                                     skipped (time): after a block-boundary stop | skipped (sequential stop)
    failure: dict | None = None         # the first 'fail' event's fields
    passes: tuple[str, ...] = ()        # "<key>: <verdict>" (burn-ins marked discarded)
    correctness: CorrectnessSummary | None = None   # its canary against the reference mode's
    capacity: CapacitySummary | None = None         # a capacity search's probes and result

    def to_dict(self) -> dict:
        return _clean(asdict(self))


@dataclass(frozen=True)
class CampaignStop:
    """A campaign the job ended at a block boundary (its time_stop event): the block it did not
    start, why, and the design it ran instead of the one planned."""

    reason: str                         # "time": the block could not finish in the time left
    block: int                          # the block not started (1-based), of `blocks`
    blocks: int
    launches_run: int                   # launches 1..launches_run ran; the rest were skipped
    launches_planned: int
    need_s: int | None = None           # what the block needed (estimate, or the longest block run)
    left_s: int | None = None           # what the job had left before its own early stop
    design: str = ""                    # the design actually run, in words

    def to_dict(self) -> dict:
        return _clean(asdict(self))


@dataclass(frozen=True)
class CampaignSummary:
    """Everything collected from one job: every launch and timed pass (a run of one mode is the
    campaign of one launch and one pass). summary.json holds it (to_dict; read_record)."""

    run_id: str
    job_id: str | None
    campaign: Campaign
    job: JobInfo = JobInfo()
    running: bool = False               # Slurm says the job has not ended: nothing is final
    launches: tuple[LaunchSummary, ...] = ()
    passes: tuple[PassSummary, ...] = ()    # every timed pass (burn-ins and profiled passes left out)
    profiles: tuple[ProfileRecord, ...] = ()    # the profiled passes' traces (issue 34)
    sequential: SequentialRecord | None = None   # a sequential campaign's looks (collect.sequential)
    stop: CampaignStop | None = None    # the job stopped the campaign at a block boundary

    @property
    def design(self) -> Campaign:
        """The campaign as it ran: the planned one, or its launches up to a block-boundary stop."""
        if self.stop is None:
            return self.campaign
        return replace(self.campaign, launches=self.campaign.launches[:self.stop.launches_run])

    @property
    def verdict(self) -> str:
        """One word for the job: ok when every pass is, else the gravest of its passes'."""
        found = {p.verdict for p in self.passes} | ({"running"} if self.running else set())
        if found == {"ok"}:
            return "ok"
        return next((v for v in GRAVEST_FIRST if v in found), "failed")

    def to_dict(self) -> dict:
        return _clean(asdict(self))


# How a job's verdict is told from its passes' (the first one some pass has).
GRAVEST_FIRST = ("running", "failed", "timeout", "cancelled", "invalid")


def read_record(cls, data):
    """A record read back from its JSON form (to_dict): every nested record, tuple and number as
    the collector made it; keys it does not know are left out, missing ones take their default."""
    return _read(cls, data)


def _read(tp, value):
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _read(next(a for a in args if a is not type(None)), value)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _read(hints[f.name], value[f.name]) for f in dataclasses.fields(tp)
                     if f.init and f.name in value})
    if origin is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], v) for v in value)
        return tuple(_read(a, v) for a, v in zip(args, value))
    if tp is tuple or origin is tuple:
        return tuple(_number(v) if not isinstance(v, list) else _read(tuple, v) for v in value)
    if tp is float:
        return _number(value)
    return value


def _number(v):
    """A float that JSON could not hold ('inf', '-inf', 'nan' as _clean wrote them)."""
    return float(v) if isinstance(v, str) and v in ("inf", "-inf", "nan") else v


def _clean(value):
    """JSON-safe: tuples -> lists, non-finite floats -> strings, keys -> str."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
