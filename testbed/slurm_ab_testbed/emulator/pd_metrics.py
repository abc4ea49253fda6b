"""The /metrics families only a PD server fills (SGLang 0.5.23 ``observability/metrics_collector.py``).

Scheduler-side series (labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank), rendered as
prometheus_client's multiprocess collector does (``_sum``, cumulative ``_bucket``s, ``_count``). As in
SGLang a labelled counter or histogram has no sample before its first increment or observation,
so a fresh PD server lists none of them. Who observes what (0.5.23):

- prefill, when a transfer succeeds (``prefill.py`` -> ``req_time_stats.compute_and_observe_kv_
  transfer_metrics``): ``kv_transfer_latency_ms``, ``kv_transfer_total_mb``, ``kv_transfer_speed_gb_s``,
  ``kv_transfer_bootstrap_ms`` / ``kv_transfer_alloc_ms``;
- decode, when a request enters the transfer queue (``set_decode_transfer_queue_entry_time``):
  ``kv_transfer_bootstrap_ms`` / ``kv_transfer_alloc_ms``;
- both: ``num_bootstrap_failed_reqs_total``, ``num_transfer_failed_reqs_total``, and
  ``per_stage_req_latency_seconds{stage}`` for the stages ``prefill_prepare``, ``prefill_bootstrap``,
  ``prefill_forward``, ``prefill_transfer_kv_cache`` / ``decode_prepare``, ``decode_bootstrap``,
  ``decode_transferred``, ``decode_waiting``;
- both, at a request's first forward (``set_forward_entry_time``): ``queue_time_seconds``, the wait from
  the waiting queue (prefill: bootstrapped; decode: KV arrived) to that forward;
- decode retraction: ``num_retracted_requests_total`` and its input/output token counters.

The queue gauges (``num_prefill_bootstrap_queue_reqs`` ...) are in metrics_spec with every server's
families; the PD cores set their values at each statistics report.
"""
from __future__ import annotations

import threading
from collections import defaultdict

_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)
STAGE_BUCKETS = tuple(0.001 * 1.62 ** i for i in range(30))   # exponential_buckets(0.001, 1.62, 30)
QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90,
                 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)

# name -> (type, HELP, buckets for histograms)
FAMILIES = {
    "sglang:num_retracted_requests_total": ("counter", "Total number of retracted requests.", None),
    "sglang:num_retracted_input_tokens_total": ("counter", "Total number of retracted input tokens.", None),
    "sglang:num_retracted_output_tokens_total": ("counter", "Total number of retracted output tokens.", None),
    "sglang:kv_transfer_speed_gb_s": ("histogram", "Histogram of KV cache transfer speed in GB/s.",
                                      (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)),
    "sglang:kv_transfer_latency_ms": ("histogram", "Histogram of KV cache transfer latency in ms.",
                                      (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)),
    "sglang:num_bootstrap_failed_reqs_total": ("counter", "The number of bootstrap failed requests.", None),
    "sglang:num_transfer_failed_reqs_total": ("counter", "The number of transfer failed requests.", None),
    "sglang:kv_transfer_bootstrap_ms": ("histogram", "Histogram of KV transfer bootstrap time in ms.", _MS),
    "sglang:kv_transfer_alloc_ms": ("histogram", "Histogram of KV transfer allocation waiting time in ms.", _MS),
    "sglang:kv_transfer_total_mb": ("histogram", "Histogram of KV cache transfer size in MB.",
                                    (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)),
    "sglang:queue_time_seconds": ("histogram", "Histogram of queueing time in seconds.", QUEUE_BUCKETS),
    "sglang:per_stage_req_latency_seconds": ("histogram", "The latency of each stage of requests.", STAGE_BUCKETS),
}


def go_float(v: float) -> str:
    """prometheus_client's floatToGoString (how ``le`` labels are written)."""
    v = float(v)
    if v == float("inf"):
        return "+Inf"
    s = repr(v)
    dot = s.find(".")
    if v > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(d.items())) + "}"


class PdMetrics:
    """Counters and histogram observations of one PD server (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counters: dict[str, float] = {}
        self.obs: dict[tuple, list[float]] = defaultdict(list)     # (name, stage or "") -> values

    def inc(self, name: str, value: float = 1.0) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0.0) + value

    def observe(self, name: str, value: float, stage: str = "") -> None:
        with self._lock:
            self.obs[(name, stage)].append(float(value))

    def stage(self, stage: str, seconds: float) -> None:
        self.observe("sglang:per_stage_req_latency_seconds", max(0.0, seconds), stage)

    def render(self, labels: dict) -> list[str]:
        out: list[str] = []
        with self._lock:
            for name, (kind, help_, buckets) in FAMILIES.items():
                lines = []
                if kind == "counter" and name in self.counters:
                    lines.append(f"{name}{_labels(labels)} {self.counters[name]!r}")
                elif kind == "histogram":
                    for (n, stage), values in sorted(self.obs.items()):
                        if n != name:
                            continue
                        lab = dict(labels, stage=stage) if stage else dict(labels)
                        lines.append(f"{name}_sum{_labels(lab)} {float(sum(values))!r}")
                        for le in (*buckets, float("inf")):
                            count = float(sum(1 for x in values if x <= le))
                            lines.append(f"{name}_bucket{_labels(dict(lab, le=go_float(le)))} {count!r}")
                        lines.append(f"{name}_count{_labels(lab)} {float(len(values))!r}")
                if lines:
                    out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"] + lines
        return out
