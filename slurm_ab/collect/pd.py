"""What a prefill/decode (PD) pass adds to its collection: which component is which role, the TTFT
breakdown, the KV transfer's volume and speed, per-role load and KV usage, and the PD validity
gates. From each instance head's /metrics at the window's start and end and every scrape round
between (SGLang 0.5.23's PD series; docs/metrics.md "PD"):

- prefill: sglang:per_stage_req_latency_seconds{stage=prefill_bootstrap} (waiting for the decode's
  KV indices), sglang:queue_time_seconds (waiting queue to the first forward),
  {stage=prefill_forward}, sglang:kv_transfer_latency_ms / _total_mb / _speed_gb_s (observed on the
  prefill only: disaggregation/prefill.py -> observability/req_time_stats.py);
- decode: {stage=decode_bootstrap} (handshake and KV reservation), {stage=decode_transferred}
  (until the KV arrived: the prefill's queue, forward and transfer as the decode sees them),
  {stage=decode_waiting} (the received request's wait for its first decode step);
- both: sglang:num_bootstrap_failed_reqs_total, sglang:num_transfer_failed_reqs_total (created at
  the first failure: absent = 0), the PD queue gauges, sglang:token_usage; decode:
  sglang:num_retracted_requests_total.

TTFT is the prefill's chain: bootstrap wait + queue + forward + KV transfer + the decode's first
step, plus what none of them sees (router, HTTP, tokenizer, streaming the first token), shown as
'other' = the client's mean TTFT minus the chain, never hidden. The decode's own view
(bootstrap + transferred + waiting) is kept beside it as a cross-check.

The chain's KV transfer is the one on TTFT's path, for every backend: the decode's wait for its KV
(decode_transferred: from its transfer-queue entry, when it announced where the KV goes, to the
poll that saw it arrive) less the prefill's queue and forward, which that wait spans. The prefill's
own sglang:kv_transfer_latency_ms is not it (SGLang 0.5.23 req_time_stats.py, prefill.py): stamped
by the prefill's inflight-queue poll, which runs after the prefill's next forward, it is Mooncake's
transfer-queue entry (or NIXL's first KV send) to that poll, so a busy prefill adds a forward to it
while the decode already decodes. It is kept, labelled for what it is, with the transfer's volume.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..model.experiment import instance_name, kind_of
from ..parse.events import EventLog
from ..parse.prometheus import Scrape
from .gauges import groups
from .scrapes import by_replica, load, window_scrapes
from .server_metrics import increase

STAGES = "sglang:per_stage_req_latency_seconds"
QUEUE = "sglang:queue_time_seconds"
KV_LATENCY, KV_MB, KV_SPEED = ("sglang:kv_transfer_latency_ms", "sglang:kv_transfer_total_mb",
                               "sglang:kv_transfer_speed_gb_s")
BOOTSTRAP_FAILED = "sglang:num_bootstrap_failed_reqs_total"
TRANSFER_FAILED = "sglang:num_transfer_failed_reqs_total"
RETRACTED_TOTAL = "sglang:num_retracted_requests_total"
REQUESTS, PROMPT_TOKENS = "sglang:num_requests_total", "sglang:prompt_tokens_total"
QUEUE_GAUGES = {"prefill": (("bootstrap", "sglang:num_prefill_bootstrap_queue_reqs"),
                            ("inflight", "sglang:num_prefill_inflight_queue_reqs")),
                "decode": (("prealloc", "sglang:num_decode_prealloc_queue_reqs"),
                           ("transfer", "sglang:num_decode_transfer_queue_reqs"))}
KV_USAGE = "sglang:token_usage"


@dataclass(frozen=True)
class RoleInstance:
    """One prefill or decode instance over the window."""

    replica: int                        # het group (file names: logs/server-r<G>-n<R>.log)
    role: str
    instance: int
    nodes: tuple = ()
    exposed: bool = False               # head scrapes at both ends of the window
    requests: float | None = None       # finished requests (sglang:num_requests_total delta)
    prompt_tokens: float | None = None
    bootstrap_failed: float | None = None
    transfer_failed: float | None = None
    retracted: float | None = None      # decode: requests retracted (counter delta)
    queue_peaks: tuple = ()             # ((name, peak), ...): bootstrap/inflight or prealloc/transfer
    kv_usage_peak: float | None = None
    running_peak: float | None = None

    @property
    def name(self) -> str:
        return f"{self.role} {self.instance}"


@dataclass(frozen=True)
class Stage:
    """One component of the TTFT breakdown: the window's mean of one histogram."""

    key: str
    label: str
    mean_ms: float | None
    count: float = 0.0
    share: float | None = None          # of the client's mean TTFT


@dataclass(frozen=True)
class TtftBreakdown:
    client_ttft_ms: float | None
    chain: tuple[Stage, ...] = ()       # prefill bootstrap, queue, forward, KV transfer, decode wait
    other_ms: float | None = None       # client TTFT - the chain (router, HTTP, tokenizer, first token)
    decode_view: tuple[Stage, ...] = ()     # decode bootstrap, transferred, waiting (cross-check)
    kv_share: float | None = None       # KV transfer / client TTFT


@dataclass(frozen=True)
class Transfer:
    """KV moved from the prefills to the decodes in the window (prefill-side histograms)."""

    requests: float = 0.0
    total_mb: float | None = None
    mb_per_request: float | None = None
    latency_ms: float | None = None     # mean per request (the prefill's kv_transfer_latency_ms)
    speed_gb_s: float | None = None     # mean of the per-request speeds
    latency_label: str = ""             # what that latency measures with the run's backend


@dataclass(frozen=True)
class PdSummary:
    instances: tuple[RoleInstance, ...] = ()    # by het group
    breakdown: TtftBreakdown | None = None
    transfer: Transfer | None = None
    notes: tuple = ()


def role_names(config) -> dict[int, tuple[str, int]]:
    """het group -> (role, instance) of every component of the run's mode ({} for an unknown
    configuration)."""
    comps = getattr(config, "components", None) or ()
    return {c.group: (c.role, c.instance) for c in comps}


def disaggregated(names: Mapping[int, tuple[str, int]]) -> bool:
    """The components are prefill/decode role instances (the pass gets collect_pd's record)."""
    return any(kind_of(role).disaggregation for role, _ in names.values())


def component_name(g: int, names: Mapping[int, tuple[str, int]] | None) -> str:
    """'replica 1', 'prefill 0': het group g as the model names it ('replica G' when unknown)."""
    got = (names or {}).get(g)
    return instance_name(*got) if got else f"replica {g}"


def _hist(a: Scrape, b: Scrape, name: str, where=None) -> tuple[float, float]:
    """(delta sum, delta count) of a histogram between two scrapes (0, 0 when absent)."""
    def val(sc, suffix):
        return sc.total(name + suffix, where) or 0.0
    return val(b, "_sum") - val(a, "_sum"), val(b, "_count") - val(a, "_count")


def _stage(stage: str):
    return lambda s: s.label("stage") == stage


@dataclass
class _Acc:
    """Histogram deltas summed over the instances of a role."""

    sums: dict

    def add(self, key: str, d: tuple[float, float]) -> None:
        s, c = self.sums.get(key, (0.0, 0.0))
        self.sums[key] = (s + d[0], c + d[1])

    def mean(self, key: str, scale: float = 1.0) -> tuple[float | None, float]:
        s, c = self.sums.get(key, (0.0, 0.0))
        return (s / c * scale if c > 0 else None), c


# (key, label, histogram, stage, seconds -> ms)
PREFILL_CHAIN = (("prefill_bootstrap", "prefill waits for the decode's KV indices", STAGES, "prefill_bootstrap", 1000),
                 ("prefill_queue", "prefill queue", QUEUE, None, 1000),
                 ("prefill_forward", "prefill forward (compute)", STAGES, "prefill_forward", 1000))
KV_PATH = ("kv_transfer", "KV transfer on TTFT's path (decode: until the KV arrived, less prefill queue and forward)")
# What the prefill's sglang:kv_transfer_latency_ms measures, per backend (SGLang 0.5.23: NIXL's
# manager reports transfer_latency_s from its first send; the others leave it to req_time_stats'
# completion - transfer-queue entry); both stamped by the prefill's poll after its next forward.
LATENCY_MEANING = {
    "nixl": "the prefill's first KV send to the poll that saw it done, which runs after its next forward",
    "": "the prefill's transfer-queue entry (its forward's end) to the poll that saw it done, which runs "
        "after its next forward: that forward included, not TTFT's path",
}
DECODE_CHAIN = (("decode_waiting", "decode: first decode step", STAGES, "decode_waiting", 1000),)
DECODE_VIEW = (("decode_bootstrap", "decode: handshake and KV reservation", STAGES, "decode_bootstrap", 1000),
               ("decode_transferred", "decode: until the KV arrived", STAGES, "decode_transferred", 1000),
               ("decode_waiting", "decode: first decode step", STAGES, "decode_waiting", 1000))


def collect_pd(run_dir: Path, events: EventLog, names: Mapping[int, tuple[str, int]],
               node_lists: Mapping, client_ttft_ms: float | None, replica_metrics: Sequence = (),
               problems: list | None = None, backend: str | None = None) -> PdSummary:
    """The PD facts of one pass window (backend: pd.transfer_backend, which says what the
    prefill's transfer latency measures)."""
    problems = problems if problems is not None else []
    per = by_replica(window_scrapes(events))
    rm = {m.replica: m for m in replica_metrics}
    acc = {"prefill": _Acc({}), "decode": _Acc({})}
    transfer = _Acc({})
    instances, notes = [], []
    for g in sorted(names):
        role, inst = names[g]
        head = load(run_dir, per.get(g, {}).get(0, []), problems, f"{role} {inst} /metrics")
        nodes = tuple(node_lists.get(str(g)) or ())
        m = rm.get(g)
        base = dict(replica=g, role=role, instance=inst, nodes=nodes,
                    kv_usage_peak=m.kv_usage_peak if m else None, running_peak=m.running_peak if m else None)
        exposed = len(head) >= 2 and head[0][0].phase == "start" and head[-1][0].phase == "end"
        if not exposed:
            notes.append(f"{role} {inst}: no /metrics of its head at both ends of the benchmark: its PD "
                         "figures are unknown")
            instances.append(RoleInstance(**base))
            continue
        a, b = head[0][1], head[-1][1]
        chain = PREFILL_CHAIN if role == "prefill" else DECODE_VIEW
        for key, _, hist, stage, _ in chain:
            acc[role].add(key, _hist(a, b, hist, _stage(stage) if stage else None))
        if role == "prefill":
            transfer.add("mb", _hist(a, b, KV_MB))
            transfer.add("speed", _hist(a, b, KV_SPEED))
            transfer.add("latency", _hist(a, b, KV_LATENCY))

        def delta(name):
            d, _ = increase([(r.when, sc.total(name) or 0.0) for r, sc in head])
            return d
        peaks = tuple((label, max((sum(groups([sc], name).values()) for _, sc in head), default=None))
                      for label, name in QUEUE_GAUGES[role])
        instances.append(RoleInstance(
            **base, exposed=True, requests=delta(REQUESTS), prompt_tokens=delta(PROMPT_TOKENS),
            bootstrap_failed=delta(BOOTSTRAP_FAILED), transfer_failed=delta(TRANSFER_FAILED),
            retracted=delta(RETRACTED_TOTAL) if role == "decode" else None, queue_peaks=peaks))
    breakdown = _breakdown(acc, client_ttft_ms) if any(i.exposed for i in instances) else None
    tr = None
    if "latency" in transfer.sums:
        mb_sum, mb_n = transfer.sums["mb"]
        tr = Transfer(requests=transfer.sums["latency"][1], total_mb=mb_sum,
                      mb_per_request=mb_sum / mb_n if mb_n else None,
                      latency_ms=transfer.mean("latency")[0], speed_gb_s=transfer.mean("speed")[0],
                      latency_label=LATENCY_MEANING.get(backend or "", LATENCY_MEANING[""]))
    return PdSummary(tuple(instances), breakdown, tr, tuple(notes))


def _breakdown(acc: dict, client_ttft_ms: float | None) -> TtftBreakdown:
    def stages(role, chain):
        out = []
        for key, label, *_ in chain:
            mean, count = acc[role].mean(key, chain_scale(chain, key))
            share = mean / client_ttft_ms if mean is not None and client_ttft_ms else None
            out.append(Stage(key, label, mean, count, share))
        return out
    view = stages("decode", DECODE_VIEW)
    prefill = stages("prefill", PREFILL_CHAIN)
    chain = prefill + [_kv_path(prefill, view, client_ttft_ms)] + stages("decode", DECODE_CHAIN)
    known = [s.mean_ms for s in chain if s.mean_ms is not None]
    other = client_ttft_ms - sum(known) if client_ttft_ms is not None and len(known) == len(chain) else None
    kv = next((s for s in chain if s.key == "kv_transfer"), None)
    return TtftBreakdown(client_ttft_ms, tuple(chain), other, tuple(view), kv.share if kv else None)


def _kv_path(prefill: list, view: list, client_ttft_ms: float | None) -> Stage:
    """The KV transfer on TTFT's path: the decode's wait for its KV (decode_transferred) less the
    prefill's queue and forward it spans (None when one is unknown; 0 when noise makes it negative)."""
    got = {x.key: x for x in prefill + view}
    parts = [got[k].mean_ms for k in ("decode_transferred", "prefill_queue", "prefill_forward")]
    mean = max(0.0, parts[0] - parts[1] - parts[2]) if None not in parts else None
    share = mean / client_ttft_ms if mean is not None and client_ttft_ms else None
    return Stage(KV_PATH[0], KV_PATH[1], mean, got["decode_transferred"].count, share)


def chain_scale(chain, key: str) -> float:
    return next(scale for k, _, _, _, scale in chain if k == key)


def pd_reasons(pd: PdSummary, replicas: Sequence = ()) -> list[str]:
    """What makes a completed PD pass 'invalid': failed bootstraps or transfers on any instance
    (requests that failed or were retried by the router with another room), and a decode that
    retracted requests (its KV pool could not hold the batch: the latencies are not the
    configuration's steady state)."""
    out = []
    retractions = {r.replica: r for r in replicas}
    for i in pd.instances:
        where = f"{i.name} ({', '.join(i.nodes)})" if i.nodes else i.name
        if i.bootstrap_failed:
            out.append(f"{where}: {i.bootstrap_failed:g} KV bootstrap(s) failed during the benchmark "
                       f"({BOOTSTRAP_FAILED}): requests failed or the router retried them with a new room")
        if i.transfer_failed:
            out.append(f"{where}: {i.transfer_failed:g} KV transfer(s) failed during the benchmark "
                       f"({TRANSFER_FAILED}): requests failed or the router retried them with a new room")
        if i.role != "decode":
            continue
        r = retractions.get(i.replica)
        logged = getattr(r, "retracted_requests", 0) or 0
        n = max(i.retracted or 0, logged)
        if n:
            out.append(f"{where}: KV pool full: the decode retracted {n:g} request(s) during the benchmark "
                       f"('KV cache pool is full. Retract requests.'; {RETRACTED_TOTAL}): they were "
                       "recomputed, so TTFT and TPOT are not the configuration's steady state")
    return out


def pd_fail_reasons(events: EventLog, names: Mapping[int, tuple[str, int]] | None) -> list[str]:
    """Why the job stopped a PD launch before its benchmark (its 'fail kind=pd_*' events, pd.sh):
    a pair whose KV canary or warm-up failed, a server of the other role, the two roles' page size
    or KV dtype, a bootstrap server whose ranks did not all register."""
    out = []
    for e in events.failures():
        f = e.fields
        kind = f.get("kind", "")
        if kind in ("pd_canary", "pd_warmup") and f.get("via") != "router":
            p, d = (int(f[k]) if f.get(k, "").isdigit() else -1 for k in ("prefill", "decode"))
            what = "KV canary (2 tokens)" if kind == "pd_canary" else "16K warm-up"
            ranks = (f", prefill DP rank {f['prefill_dp']} and decode DP rank {f['decode_dp']}"
                     if "prefill_dp" in f and "decode_dp" in f else "")
            why = (": the decode's KV checksum did not match what the prefill sent (pd.kv_checksum): the KV "
                   "arrived corrupted" if f.get("kv_checksum") == "mismatch" else
                   ": KV transfer between them does not work although both servers were healthy")
            out.append(f"the {what} between {component_name(p, names)} ({f.get('prefill_node', '?')}) and "
                       f"{component_name(d, names)} ({f.get('decode_node', '?')}){ranks} failed after "
                       f"{f.get('seconds', '?')} s (prefill HTTP {f.get('http_prefill', '?')}, decode HTTP "
                       f"{f.get('http_decode', '?')}){why}; the job stopped before the benchmark")
        elif kind == "pd_canary":
            out.append(f"a 2-token generation through the router failed (HTTP {f.get('http', '?')}, curl "
                       f"{f.get('curl_rc', '?')}) after every pair's canary had passed: the router's PD path "
                       "does not work; the job stopped before the benchmark")
        elif kind == "pd_role" and f.get("replica", "").isdigit():
            out.append(f"{component_name(int(f['replica']), names)} ({f.get('node', '?')}) runs "
                       f"--disaggregation-mode {f.get('server_role', '?')}, not {f.get('role', '?')} (its "
                       "/server_info): a role mismatch, which the router would have accepted; the job "
                       "stopped before the benchmark")
        elif kind == "pd_mismatch" and f.get("replica", "").isdigit() and f.get("other", "").isdigit():
            out.append(f"{component_name(int(f['replica']), names)} runs page_size={f.get('page_size')} "
                       f"kv_cache_dtype={f.get('kv_cache_dtype')}, {component_name(int(f['other']), names)} "
                       f"page_size={f.get('other_page_size')} kv_cache_dtype={f.get('other_kv_cache_dtype')}: "
                       "SGLang refuses such a pair at its first handshake; the job stopped before the benchmark")
        elif kind == "step_exited" and f.get("replica", "").isdigit() \
                and (names or {}).get(int(f["replica"]), ("",))[0] == "prefill":
            g = int(f["replica"])
            start = next((b for b in reversed(events.named("bench_start")) if b.line < e.line), None)
            if start is None:
                continue
            decodes = ", ".join(component_name(d, names) for d, (r, _) in sorted(names.items()) if r == "decode")
            hosts = events.hosts().get(g) or []
            out.append(f"{component_name(g, names)} ({', '.join(hosts) or '?'}) exited during pass "
                       f"{start.fields.get('pass', '?')}: {decodes} lost their prefill; the requests in flight "
                       "through it failed (its server step's exit stopped the job)")
        elif kind == "pd_bootstrap" and f.get("replica", "").isdigit():
            out.append(f"{component_name(int(f['replica']), names)}'s bootstrap server ({f.get('node', '?')}:"
                       f"{f.get('port', '?')}) did not register every rank of the instance in time")
    return out


__all__ = ["PdSummary", "RoleInstance", "Stage", "TtftBreakdown", "Transfer", "collect_pd",
           "component_name", "pd_fail_reasons", "pd_reasons", "role_names"]
