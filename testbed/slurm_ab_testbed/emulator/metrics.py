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
Families the emulator does not model are exported with their real names and value 0.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from .metrics_spec import FAMILIES

# Tokenizer histograms -> the per-request observation they take.
_HIST = {"sglang:e2e_request_latency_seconds": "e2e",
         "sglang:request_time_per_output_token_seconds": "tpot",
         "sglang:prompt_tokens_histogram": "prompt",
         "sglang:uncached_prompt_tokens_histogram": "prompt",
         "sglang:generation_tokens_histogram": "gen"}
_STREAM_COUNTERS = {"sglang:prompt_tokens_total": "prompt", "sglang:generation_tokens_total": "gen",
                    "sglang:num_requests_total": "requests"}


@dataclass
class Finished:
    """Tokenizer-side totals of one is_streaming value."""
    requests: int = 0
    prompt: int = 0
    gen: int = 0
    obs: dict = field(default_factory=lambda: {"e2e": [], "tpot": [], "prompt": [], "gen": []})


@dataclass
class MetricsState:
    finished: dict = field(default_factory=dict)        # "true"/"false" -> Finished
    verify_calls: int = 0
    any_verify: bool = False
    gauges: dict = field(default_factory=dict)          # scheduler gauge name -> value
    prefill_input_tokens: int = 0

    def on_finish(self, streaming: bool, prompt: int, gen: int, verify_ct: int,
                  e2e: float, tpot: float | None) -> None:
        f = self.finished.setdefault("true" if streaming else "false", Finished())
        f.requests += 1
        f.prompt += prompt
        f.gen += gen
        f.obs["e2e"].append(e2e)
        f.obs["prompt"].append(prompt)
        f.obs["gen"].append(gen)
        if tpot is not None:
            f.obs["tpot"].append(tpot)
        if verify_ct > 0:
            self.verify_calls += verify_ct
            self.any_verify = True

    def on_report(self, **values: float) -> None:
        """A scheduler statistics report: gauge name (without 'sglang:') -> value."""
        self.gauges.update(values)


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


def render(state: MetricsState, model_name: str, stages: list[int], pid: int | None = None) -> str:
    """The /metrics body. stages: the PP stages whose TP0 scheduler reports on this node."""
    pid = os.getpid() if pid is None else pid
    tok = {"model_name": model_name, "engine_type": "unified"}
    out: list[str] = []
    for name, kind, help_, side, has_pid, has_stream, samples in FAMILIES:
        lines: list[str] = []
        if side == "scheduler":
            short = name.split(":", 1)[1]
            for pp in stages:
                base = dict(tok, tp_rank="0", pp_rank=str(pp), moe_ep_rank="0")
                if has_pid:
                    base["pid"] = str(pid)
                value = state.gauges.get(short, 0.0)
                if name == "sglang:prefill_effective_tokens_total":
                    lines += [f"{name}{suffix}{_labels(dict(base, **dict(extra)))} "
                              f"{_num(state.prefill_input_tokens if dict(extra).get('mode') == 'input' else 0)}"
                              for suffix, extra in samples]
                    continue
                for suffix, extra in samples:
                    v = value if not extra and not suffix else 0.0
                    lines.append(f"{name}{suffix}{_labels(dict(base, **dict(extra)))} {_num(v)}")
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
    return "\n".join(out) + "\n"


def _merged(state: MetricsState) -> Finished:
    m = Finished()
    for f in state.finished.values():
        for k in m.obs:
            m.obs[k] += f.obs[k]
    return m
