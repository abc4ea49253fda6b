"""The emulated server's /metrics (``--enable-metrics``): SGLang 0.5.23's families, rendered as its
prometheus_client multiprocess collector does, with values from the same scheduler state that
writes the "Prefill batch" / "Decode batch" lines.

Which process updates what, as in SGLang 0.5.23 (shared/research/sglang-0.5.23-metrics/README.md):
- tokenizer side, when a request finishes (``observe_one_finished_request``): prompt / generation
  tokens, requests (each split by ``is_streaming``), ``spec_verify_calls_total`` += the request's
  verify count (only when > 0), latency and length histograms. A labeled series has no sample
  until its first increment, so a fresh server lists none of them.
- scheduler side, at each statistics report (a Prefill or Decode batch line): the gauges
  (running/queued requests, token usage, gen throughput, last interval's accept length/rate).
- HTTP side (node rank 0, ``observability/http_request_metrics.py``): requests and responses per
  endpoint and ``sglang:http_requests_active`` (multiprocess livesum), counted from arrival to the
  end of the (streamed) response body, the scrape's own GET /metrics included.
Every node serves its own schedulers' series: node rank 0 adds the tokenizer and HTTP families;
a node rank >= 1 (SGLang's dummy health server, same port) only its schedulers' (``render(...,
tokenizer=False)``). With DP attention each DP rank's scheduler reports under ``dp_rank``; the
emulator deals running/queued requests over the DP ranks evenly (the DP controller's round robin).
Families the emulator does not model are exported with their real names and value 0.
Prefix cache (SGLang 0.5.23 metrics_collector.py / metrics_reporter.report_prefill_stats): each
prefill report adds its new and cached tokens to ``sglang:realtime_tokens_total{mode=
prefill_compute|prefill_cache}`` (decode steps to ``mode="decode"``; no sample before the first
increment) and sets ``sglang:cache_hit_rate`` to the batch's cached / (cached + new); a finished
request adds its uncached and cached prompt tokens to ``prefill_effective_tokens_total{mode=
"input"|"device_hit"}``, its cached ones to ``sglang:cached_tokens_total{cache_source="device"}``
and observes prompt - cached in ``uncached_prompt_tokens_histogram``.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from .metrics_spec import FAMILIES

# Tokenizer histograms -> the per-request observation they take.
_HIST = {"sglang:e2e_request_latency_seconds": "e2e",
         "sglang:request_time_per_output_token_seconds": "tpot",
         "sglang:prompt_tokens_histogram": "prompt",
         "sglang:uncached_prompt_tokens_histogram": "uncached",
         "sglang:generation_tokens_histogram": "gen"}
_STREAM_COUNTERS = {"sglang:prompt_tokens_total": "prompt", "sglang:generation_tokens_total": "gen",
                    "sglang:num_requests_total": "requests"}


@dataclass
class Finished:
    """Tokenizer-side totals of one is_streaming value."""
    requests: int = 0
    prompt: int = 0
    gen: int = 0
    obs: dict = field(default_factory=lambda: {"e2e": [], "tpot": [], "prompt": [], "gen": [], "uncached": []})


@dataclass
class HttpMetrics:
    """SGLang's HTTP middleware counters (node rank 0, with --enable-metrics)."""
    requests: dict = field(default_factory=dict)        # (endpoint, method) -> count
    responses: dict = field(default_factory=dict)       # (endpoint, method, status) -> count
    active: dict = field(default_factory=dict)          # (endpoint, method) -> open requests
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, endpoint: str, method: str) -> None:
        with self.lock:
            k = (endpoint, method)
            self.requests[k] = self.requests.get(k, 0) + 1
            self.active[k] = self.active.get(k, 0) + 1

    def end(self, endpoint: str, method: str, status: int) -> None:
        with self.lock:
            k = (endpoint, method)
            self.active[k] = self.active.get(k, 1) - 1
            r = (endpoint, method, str(status))
            self.responses[r] = self.responses.get(r, 0) + 1

    def render(self) -> list[str]:
        with self.lock:
            req, resp, act = dict(self.requests), dict(self.responses), dict(self.active)
        out = []
        for name, help_, kind, rows in (
                ("sglang:http_requests_total", "Total number of HTTP requests by endpoint and method",
                 "counter", [({"endpoint": e, "method": m}, v) for (e, m), v in sorted(req.items())]),
                ("sglang:http_responses_total", "Total number of HTTP responses by endpoint and status code",
                 "counter", [({"endpoint": e, "method": m, "status_code": c}, v)
                             for (e, m, c), v in sorted(resp.items())]),
                ("sglang:http_requests_active", "Number of currently active HTTP requests", "gauge",
                 [({"endpoint": e, "method": m}, v) for (e, m), v in sorted(act.items())])):
            if rows:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
                out += [f"{name}{_labels(lab)} {_num(v)}" for lab, v in rows]
        out += ["# HELP sglang:routing_keys_active Number of unique routing keys with active requests",
                "# TYPE sglang:routing_keys_active gauge", "sglang:routing_keys_active 0.0"]
        return out


# Scheduler counters every scheduler (any TP rank) creates with its labels at start-up.
_PRECREATED = ("sglang:scheduler_idle_seconds_total", "sglang:scheduler_process_cpu_seconds_total",
               "sglang:scheduler_stage_seconds_total")
# Gauges that count requests: dealt over the DP ranks (the others are each rank's own pool figures).
_DP_DEALT = ("num_running_reqs", "num_queue_reqs")


def _dp_share(value: float, dp: int, n: int) -> float:
    total = int(round(value))
    return float(total // n + (1 if dp < total % n else 0))


@dataclass
class MetricsState:
    finished: dict = field(default_factory=dict)        # "true"/"false" -> Finished
    listener: Optional[Callable[[dict], None]] = None   # told every report (other nodes' schedulers)
    verify_calls: int = 0
    any_verify: bool = False
    gauges: dict = field(default_factory=dict)          # scheduler gauge name -> value
    prefill_input_tokens: int = 0
    prefill_device_hit_tokens: int = 0                  # prefix-cache hits (prefill_effective device_hit)
    cached_device: int = 0                              # sglang:cached_tokens_total{cache_source="device"}
    realtime: dict = field(default_factory=dict)        # sglang:realtime_tokens_total by mode
    engine_type: str = "unified"                        # "prefill" | "decode" on a PD server
    extra: Optional[Callable[[dict], list[str]]] = None  # more families (pd_metrics), given scheduler labels

    def on_finish(self, streaming: bool, prompt: int, gen: int, verify_ct: int,
                  e2e: float, tpot: float | None, cached: int = 0) -> None:
        f = self.finished.setdefault("true" if streaming else "false", Finished())
        f.requests += 1
        f.prompt += prompt
        f.gen += gen
        f.obs["e2e"].append(e2e)
        f.obs["prompt"].append(prompt)
        f.obs["uncached"].append(prompt - cached)
        self.cached_device += cached
        f.obs["gen"].append(gen)
        if tpot is not None:
            f.obs["tpot"].append(tpot)
        if verify_ct > 0:
            self.verify_calls += verify_ct
            self.any_verify = True

    def add_realtime(self, **tokens: int) -> None:
        """sglang:realtime_tokens_total: tokens per mode (prefill_compute, prefill_cache, decode)."""
        for mode, n in tokens.items():
            if n:
                self.realtime[mode] = self.realtime.get(mode, 0) + n

    def on_report(self, **values: float) -> None:
        """A scheduler statistics report: gauge name (without 'sglang:') -> value."""
        self.gauges.update(values)
        if self.listener is not None:
            self.listener(dict(values))


def _labels(d: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(d.items())) + "}"


def _num(v: float) -> str:
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _le(text: str) -> float:
    return math.inf if text == "+Inf" else float(text)


def render(state: MetricsState, model_name: str, stages: list[int], pid: int | None = None, *,
           dps: Optional[list[int]] = None, dp_size: int = 1, attn_tp: int = 1,
           tokenizer: bool = True, http: Optional[HttpMetrics] = None,
           counter_ranks: Optional[list[tuple[int, int]]] = None) -> str:
    """The /metrics body. stages: the PP stages whose TP0 scheduler reports on this node; dps: with
    DP attention, the DP ranks whose leader (tp_rank dp * attn_tp) runs here (of dp_size);
    tokenizer: node rank 0 (the tokenizer's families, and the HTTP side's when given);
    counter_ranks: (pp, tp) of every scheduler here, for the counters each pre-creates at 0."""
    pid = os.getpid() if pid is None else pid
    tok = {"model_name": model_name, "engine_type": state.engine_type}
    out: list[str] = http.render() if tokenizer and http is not None else []
    for name, kind, help_, side, has_pid, has_stream, samples in FAMILIES:
        lines: list[str] = []
        if side == "scheduler":
            short = name.split(":", 1)[1]
            groups = [(d, k, 0 if d is None else d * attn_tp) for d in (dps if dps else [None]) for k in stages]
            if counter_ranks is not None and name in _PRECREATED:
                groups = [(tp // attn_tp if dps else None, pp, tp)
                          for pp, tp in counter_ranks]
            for dp, pp, tp in groups:
                base = dict(tok, tp_rank=str(tp), pp_rank=str(pp), moe_ep_rank="0")
                if dp is not None:
                    base["dp_rank"] = str(dp)
                if has_pid:
                    base["pid"] = str(pid)
                value = state.gauges.get(short, 0.0)
                if dp is not None and short in _DP_DEALT:
                    value = _dp_share(value, dp, dp_size)
                if name == "sglang:prefill_effective_tokens_total":
                    eff = {"input": state.prefill_input_tokens, "device_hit": state.prefill_device_hit_tokens}
                    lines += [f"{name}{suffix}{_labels(dict(base, **dict(extra)))} "
                              f"{_num(eff.get(dict(extra).get('mode'), 0))}"
                              for suffix, extra in samples]
                    continue
                if name == "sglang:realtime_tokens_total":
                    lines += [f"{name}{_labels(dict(base, **dict(extra)))} {_num(state.realtime[dict(extra)['mode']])}"
                              for _, extra in samples if state.realtime.get(dict(extra)["mode"])]
                    continue
                for suffix, extra in samples:
                    v = value if not extra and not suffix else 0.0
                    lines.append(f"{name}{suffix}{_labels(dict(base, **dict(extra)))} {_num(v)}")
        elif not tokenizer:
            continue
        elif name == "sglang:cached_tokens_total":
            if state.cached_device:
                lines.append(f"{name}{_labels(dict(tok, cache_source='device'))} {_num(state.cached_device)}")
        elif name == "sglang:spec_verify_calls_total":
            if state.any_verify:
                lines.append(f"{name}{_labels(tok)} {_num(state.verify_calls)}")
        elif name in _STREAM_COUNTERS:
            for flag, f in sorted(state.finished.items(), reverse=True):
                lab = dict(tok, is_streaming=flag) if has_stream else tok
                lines.append(f"{name}{_labels(lab)} {_num(getattr(f, _STREAM_COUNTERS[name]))}")
        elif name in _HIST:
            groups = sorted(state.finished.items(), reverse=True) if has_stream else (
                [("", _merged(state))] if state.finished else [])
            for flag, f in groups:
                lab = dict(tok, is_streaming=flag) if has_stream else tok
                obs = f.obs[_HIST[name]]
                for suffix, extra in samples:
                    e = dict(extra)
                    if suffix == "_sum":
                        v = float(sum(obs))
                    elif suffix == "_count":
                        v = float(len(obs))
                    else:
                        v = float(sum(1 for x in obs if x <= _le(e["le"])))
                    lines.append(f"{name}{suffix}{_labels(dict(lab, **e))} {_num(v)}")
        if lines:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"] + lines
    if state.extra is not None:
        out += state.extra(dict(tok, tp_rank="0", pp_rank=str(stages[0] if stages else 0), moe_ep_rank="0"))
    return "\n".join(out) + "\n"


def _merged(state: MetricsState) -> Finished:
    m = Finished()
    for f in state.finished.values():
        for k in m.obs:
            m.obs[k] += f.obs[k]
    return m
