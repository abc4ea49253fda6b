"""SGLang's scheduler gauges, read the way SGLang 0.5.23 writes them.

- Which series: each stats-logging scheduler (attn_tp_rank == 0: one per DP rank and PP stage)
  sets its gauges under its own labels tp_rank, pp_rank, moe_ep_rank (+ dp_rank with DP
  attention), each node serving its own schedulers' series (observability/metrics_collector.py,
  SchedulerMetricsCollector.init_new). With --enable-metrics-for-all-schedulers every TP rank
  reports the same batch: the lowest tp_rank of each (dp, pp) group is read.
- Priorities: with priority scheduling the total sits under priority="" and each priority's share
  under priority="<n>" beside it (_log_gauge_queue_count): only the total is read.
- DP ranks hold disjoint requests: summed.
- PP stages: every stage reports the micro-batch it just processed. event_loop_pp
  (managers/scheduler_pp_mixin.py) cycles pp_size + pp_async_batch_depth micro-batches, each
  with its own running batch, and process_batch_result_decode reports
  len(batch.reqs) of that micro-batch (scheduler_components/batch_result_processor.py,
  metrics_reporter.report_decode_stats(running_batch=batch)). So with PP, sglang:num_running_reqs
  is one micro-batch (about 1/pp of the replica's running requests), never the replica's total;
  each stage's token usage is that stage's own KV pool.
- In flight: sglang:http_requests_active{endpoint,method} (observability/http_request_metrics.py,
  multiprocess mode livesum) counts HTTP requests from arrival to the end of the response body
  on node rank 0 (utils/http_middleware_patch.py makes call_next wait for the whole streamed
  body): the replica's in-flight requests, the same count the client keeps in flight.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..parse.prometheus import Sample, Scrape

RUNNING, QUEUED = "sglang:num_running_reqs", "sglang:num_queue_reqs"
KV_USAGE = ("sglang:token_usage", "sglang:full_token_usage")
RETRACTED = "sglang:num_retracted_reqs"
DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
HTTP_ACTIVE = "sglang:http_requests_active"


def _int(s: Sample, key: str) -> int:
    try:
        return int(s.label(key, "0"))
    except (TypeError, ValueError):
        return 0


def total_series(scrape: Scrape, name: str) -> list[Sample]:
    """Finite samples of a gauge that hold totals (no per-priority breakdown)."""
    return [s for s in scrape.get(name) if math.isfinite(s.value) and not s.label("priority")]


def groups(scrapes: Iterable[Scrape], name: str) -> dict[tuple[int, int], float]:
    """(dp_rank, pp_rank) -> the gauge of that scheduler group (its lowest tp_rank's series),
    over the scrapes of one replica's nodes taken in one round."""
    best: dict[tuple[int, int], Sample] = {}
    for sc in scrapes:
        for s in total_series(sc, name):
            key = (_int(s, "dp_rank"), _int(s, "pp_rank"))
            if key not in best or _int(s, "tp_rank") < _int(best[key], "tp_rank"):
                best[key] = s
    return {k: s.value for k, s in best.items()}


def by_stage(scrapes: Iterable[Scrape], name: str) -> dict[int, float]:
    """pp_rank -> the gauge summed over DP ranks."""
    out: dict[int, float] = {}
    for (_, pp), v in groups(scrapes, name).items():
        out[pp] = out.get(pp, 0.0) + v
    return out


def first_stage(scrapes: Iterable[Scrape], name: str) -> float | None:
    """The gauge of the lowest pipeline stage present, summed over DP ranks (the replica's value
    for a quantity every stage repeats, e.g. its waiting queue; without PP: the only stage)."""
    st = by_stage(scrapes, name)
    return st[min(st)] if st else None


def gauge(scrape: Scrape, name: str) -> float | None:
    """One scrape's gauge for the replica: lowest stage, DP ranks summed, totals only."""
    return first_stage([scrape], name)


def gauge_max(scrapes: Iterable[Scrape], names: Sequence[str]) -> float | None:
    vals = [s.value for sc in scrapes for n in names for s in total_series(sc, n)]
    return max(vals) if vals else None


def kv_by_stage(scrapes: Iterable[Scrape]) -> dict[int, float]:
    """pp_rank -> KV-cache usage of that stage's pool (the fullest DP rank; token_usage or, on
    hybrid pools, full_token_usage, whichever is higher)."""
    out: dict[int, float] = {}
    for name in KV_USAGE:
        for (_, pp), v in groups(scrapes, name).items():
            out[pp] = max(out.get(pp, v), v)
    return out


def in_flight(scrape: Scrape) -> float | None:
    """HTTP requests in flight on node rank 0 (POST: the generation endpoints; the scrape's own
    GET /metrics and health checks are not requests of the benchmark)."""
    vals = [s.value for s in scrape.get(HTTP_ACTIVE) if math.isfinite(s.value)
            and (s.label("method") or "").upper() == "POST"]
    return sum(vals) if vals else (0.0 if HTTP_ACTIVE in scrape else None)


def label_set(scrapes: Iterable[Scrape], key: str, names: Sequence[str] = (RUNNING,)) -> set[int]:
    out: set[int] = set()
    for sc in scrapes:
        for n in names:
            for s in total_series(sc, n):
                if s.label(key) is not None:
                    out.add(_int(s, key))
    return out
