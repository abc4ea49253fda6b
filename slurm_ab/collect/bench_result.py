"""Benchmark numbers of a run from bench.jsonl, falling back to the printed result block.

Latency percentiles come from per-request details when present (p95 exists in no 0.5.2 output),
else from the record's own keys, else from the stdout block; the source is recorded.
Throughputs are total tokens / duration from the JSONL (input_lens of 0.5.23 are server counts of
successful requests only, so they are not summed), the client's printed figures without it.
The steady-state throughput and goodput come from the details only; where the client computed
its own (SGLang 0.5.23's steady-state block, --goodput), it is kept beside ours and must agree
within the tolerances below, else the run gets a note saying so (docs/metrics.md).
"""
from __future__ import annotations

import math
from typing import Mapping

from ..parse.bench import (ABS_TOL_MS, RecordRead, Request, ResultBlock, agreement, busiest_window,
                           goodput, latency_stats, requests, steady_window)
from ..model.experiment import slo_ms
from .records import BenchResult, BenchSpec, Goodput, Latency, Lengths, SteadyState

# The client's steady-state throughput is compared with the same window definition (its minimum
# concurrency) over the replayed details. The replay leaves out the client's hand-over between
# requests and the stream's close after the last token (well under 1 ms each per request, a few
# up to 0.16 s on the 2-core test machine under load): measured on the local cluster, the two
# windows differ by 0-0.7 % and the throughputs by 0.03-0.44 %. 3 % means the two do not describe
# the same benchmark. A client window more than 5 % shorter than the replayed one is a fragment:
# on the client's own clock the requests in flight dipped below its minimum (hand-overs that lag
# on a loaded machine; seen: 9.99 s of 18.03 s), which the replay cannot see; then its figure
# covers part of the run and is not compared.
STEADY_REL_TOL = 0.03
STEADY_WINDOW_TOL = 0.05
# The steady state leaves out the drain (fewer than its minimum in flight), where the server makes
# fewer tokens a second than with its slots full, so its throughput is at least the makespan's: on
# every stored run (the local cluster, C = 1 and 8, 0.5.2 and 0.5.23 clients) it is 0.0-3.9 %
# above. More than 3 % below means its tokens are not counted where they were made (issue 29: one
# gap for 511 tokens counted at its arrival gave 1249 tok/s against 1582); the run says so.
STEADY_BELOW_MAKESPAN_TOL = 0.03
# benchmark.steady_concurrency_ratio of a manifest written before it existed: the ratio the
# sglang_0_5_23 profile passed its client then.
STEADY_RATIO = 0.5
# benchmark.slo_target_pct of a manifest written before it existed: its default.
SLO_TARGET_PCT = 90.0


def _num(d: Mapping | None, key: str):
    if not d:
        return None
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def _latency_from(values: Mapping | None, metric: str) -> Latency | None:
    vals = {s: _num(values, f"{s}_{metric}_ms") for s in ("mean", "median", "p95", "p99")}
    if all(v is None for v in vals.values()):
        return None
    return Latency(vals["mean"], vals["median"], vals["p95"], vals["p99"])


def _merge(primary: Latency | None, fallback: Latency | None) -> Latency | None:
    if primary is None:
        return fallback
    if fallback is None:
        return primary
    return Latency(*(a if a is not None else b for a, b in
                     zip((primary.mean, primary.p50, primary.p95, primary.p99),
                         (fallback.mean, fallback.p50, fallback.p95, fallback.p99))))


def bench_result(read: RecordRead, block: ResultBlock | None, spec: BenchSpec
                 ) -> tuple[BenchResult, list[str]]:
    notes: list[str] = []
    rec = read.record
    if read.note:
        notes.append(read.note)
    blk = block.values if block else None
    if block is not None and not block.complete:
        notes.append("the client's result block is incomplete (client killed while printing?)")
    src = rec if rec is not None else blk
    if src is None:
        return BenchResult(), notes
    source = "jsonl" if rec is not None else "stdout"

    reqs = requests(rec)
    stats = latency_stats(rec, reqs)
    total = spec.num_prompts
    failed = None
    errors: tuple = ()
    if stats is not None:
        total = stats.requests
        failed = stats.requests - stats.succeeded
        errors = stats.errors
    completed = _num(src, "completed")
    if completed is None and stats is not None:
        completed = stats.succeeded
    if stats is not None and completed is not None and stats.succeeded != completed:
        notes.append(f"details show {stats.succeeded} successful requests, the client reports "
                     f"{int(completed)}")
    if failed is None and total is not None and completed is not None:
        failed = int(total - completed)

    duration = _num(src, "duration")
    tin = _num(src, "total_input_tokens")
    tout = _num(src, "total_output_tokens")
    in_tps, out_tps = _throughputs(rec, blk, duration, tin, tout)

    own = {m: _merge(_latency_from(rec, m), _latency_from(blk, m))
           for m in ("ttft", "tpot", "e2e_latency")}
    if stats is not None and stats.ttft is not None:
        def lat(d):
            return Latency(d.mean, d.p50, d.p95, d.p99, d.p90, d.min, d.max, d.std, d.n) if d else None
        ttft, tpot, e2e, itl = lat(stats.ttft), lat(stats.tpot), lat(stats.e2e), lat(stats.itl)
        lsource = "details"
        disagreements = tuple(str(d) for d in agreement(rec, stats))
        if disagreements:
            notes.append("per-request details disagree with the client's summary: "
                         + "; ".join(disagreements))
    else:
        ttft, tpot, e2e, itl = own["ttft"], own["tpot"], own["e2e_latency"], None
        lsource = "record" if rec is not None and _latency_from(rec, "ttft") else \
            ("stdout" if blk and _latency_from(blk, "ttft") else None)
        disagreements = ()
        if lsource and any(x is not None and x.p95 is None for x in (ttft, tpot, e2e)):
            notes.append(f"no per-request details: latencies from the client's {lsource} "
                         "values, p95 where the client printed none is missing")
    prompt_tokens = _prompt_tokens(reqs, tin, notes)
    steady = _steady(reqs, spec.max_concurrency, spec.steady_ratio, block.steady if block else {}, notes)
    _check_against_makespan(steady, out_tps, notes)
    good = _goodput(reqs, spec, rec, duration, notes)
    return BenchResult(
        duration_s=duration, completed=int(completed) if completed is not None else None,
        total=int(total) if total is not None else None,
        failed=int(failed) if failed is not None else None,
        input_tokens=int(tin) if tin is not None else None,
        output_tokens=int(tout) if tout is not None else None,
        input_tps=in_tps, output_tps=out_tps, ttft=ttft, tpot=tpot, e2e=e2e, itl=itl,
        source=source, latency_source=lsource, disagreements=disagreements,
        errors=errors, accept_length=_accept_length(rec, blk),
        prompt_tokens=prompt_tokens, steady=steady, goodput=good), notes


def _prompt_tokens(reqs: list[Request] | None, total_input, notes: list[str]) -> Lengths | None:
    """The prompts' lengths; and whether the servers counted what the client counted (0.5.23's
    input_lens are the servers' prompt_tokens; total_input_tokens the client's own count of the
    prompts it built, chat template included)."""
    lens = [r.input_len for r in reqs or () if r.ok and r.input_len is not None]
    if not lens:
        return None
    if total_input is not None and len(lens) == len(reqs) and sum(lens) != total_input:
        notes.append(f"the servers counted {sum(lens)} prompt tokens, the client {int(total_input)}: "
                     "the prompts re-tokenize differently on the server than in the client's dataset")
    return Lengths(len(lens), sum(lens) / len(lens), min(lens), max(lens))


def _steady(reqs: list[Request] | None, concurrency, ratio: float, client: Mapping, notes: list[str]
            ) -> SteadyState | None:
    """One steady-state estimator (docs/metrics.md): steady_state.py's window (>= ceil(ratio x
    peak) in flight). The client's own figure where it printed one and our recomputation of it
    (its window, its token counting, over the replayed details) agrees within STEADY_REL_TOL;
    else ours, merged gaps spread over each request's [TTFT, last token], with a note why."""
    ratio = _num(client, "concurrency_ratio") or ratio
    w = steady_window(reqs, concurrency, ratio)
    if w is None:
        return None
    if any(not r.ok for r in reqs):
        notes.append(f"steady state replayed with {sum(not r.ok for r in reqs)} failed request(s) "
                     "taking no time (the details do not say how long they took)")
    ctps, k, cdur = (_num(client, x) for x in ("output_throughput", "concurrency_threshold", "duration"))
    cw, agrees = None, None
    if ctps is not None and k:
        cw = busiest_window(reqs, concurrency, int(k))          # the client's own counting
        theirs = f"{ctps:.2f} tok/s over {cdur or 0:.2f} s with >= {int(k)} requests in flight"
        if cw is not None and cdur and cdur < (1 - STEADY_WINDOW_TOL) * cw.duration:
            notes.append(f"the client's steady-state window is a fragment ({theirs}; the replayed details "
                         f"hold >= {int(k)} for {cw.duration:.2f} s): its clock dipped below {int(k)} in "
                         f"flight, so its figure covers part of the run and is not compared; the tables show "
                         f"ours: {w.output_tps:.2f} tok/s over {w.duration:.2f} s")
        else:
            agrees = cw is not None and abs(cw.output_tps - ctps) <= STEADY_REL_TOL * abs(ctps)
            if not agrees:
                notes.append(f"the client's steady-state output throughput ({theirs}) differs from the same "
                             "window over the per-request details ("
                             + (f"{cw.output_tps:.2f} tok/s over {cw.duration:.2f} s" if cw else "none")
                             + f") by more than {STEADY_REL_TOL:.0%}; the tables show ours: "
                               f"{w.output_tps:.2f} tok/s over {w.duration:.2f} s")
    if w.merged:
        notes.append(f"{w.merged} request(s) streamed fewer chunks than tokens (one gap for several tokens): "
                     "the steady state spreads their tokens over [TTFT, last token]"
                     + (f" ({w.output_tps:.2f} tok/s); the client's {ctps:.2f} counts each chunk's tokens "
                        "at its arrival" if ctps is not None else f": {w.output_tps:.2f} tok/s"))
    common = dict(start_s=w.start, end_s=w.end, merged_requests=w.merged, client_output_tps=ctps,
                  client_window_s=cdur, client_min_concurrency=int(k) if k else None,
                  recomputed_client_tps=cw.output_tps if cw else None, agrees=agrees,
                  recomputed_client_window_s=cw.duration if cw else None)
    if agrees and not w.merged and cdur:
        return SteadyState(ctps, cdur, concurrency=int(k), output_tokens=_num(client, "total_output") or 0.0,
                           completed=int(_num(client, "completed") or 0), source="client", **common)
    return SteadyState(w.output_tps, w.duration, concurrency=w.threshold, output_tokens=w.output_tokens,
                       completed=w.completed, source="details", **common)


def _check_against_makespan(steady: SteadyState | None, makespan_tps, notes: list[str]) -> None:
    if steady is None or not makespan_tps or steady.output_tps >= (1 - STEADY_BELOW_MAKESPAN_TOL) * makespan_tps:
        return
    notes.append(f"the steady-state output throughput ({steady.output_tps:.2f} tok/s, {steady.source}) is "
                 f"{1 - steady.output_tps / makespan_tps:.1%} below the makespan figure ({makespan_tps:.2f}): a window "
                 "without the drain cannot be slower than the whole run, so its tokens are not counted where "
                 f"they were made; compare on the makespan Output TPS (docs/metrics.md)")


def _goodput(reqs: list[Request] | None, spec: BenchSpec, rec: Mapping | None, duration,
             notes: list[str]) -> Goodput | None:
    """Goodput against benchmark.slo (else the client's own --goodput SLOs), and the client's own
    figures when it computed them: its E2E and TPOT end at the stream's close, a little after the
    details' last token, so its count of good requests may be lower by the requests within
    ABS_TOL_MS of an E2E SLO (TPOT: that over output - 1), never higher."""
    client_slo = rec.get("goodput_slos_ms") if rec and isinstance(rec.get("goodput_slos_ms"), dict) else {}
    slo = dict(spec.slo_ms) or client_slo
    if not slo or not reqs:
        return None
    g = goodput(reqs, slo, ABS_TOL_MS)
    n = g.requests
    c_att, c_rps = _num(rec, "slo_attainment"), _num(rec, "request_goodput")
    c_by = rec.get("slo_attainment_by_metric") if rec and isinstance(rec.get("slo_attainment_by_metric"), dict) else {}
    agrees = None
    if c_att is not None:
        if {k: float(v) for k, v in client_slo.items()} != g.slo_ms:
            notes.append(f"the client's --goodput SLOs {client_slo} are not benchmark.slo {g.slo_ms}: "
                         "its goodput is not compared")
            c_att, c_rps, c_by = None, None, {}
        else:
            fits = [(round(c_att * n), g.good, g.near, "all SLOs")] + [
                (round(c_by[k] * n), g.met[k], g.near_met[k], k) for k in g.met if _num(c_by, k) is not None]
            bad = [f"{what}: client {c} of {n}, details {ours}" for c, ours, near, what in fits
                   if not ours - near <= c <= ours]
            agrees = not bad
            if bad:
                notes.append("the client's SLO attainment differs from the per-request details beyond "
                             "the requests at the SLO boundary (" + "; ".join(bad) + ")")
    return Goodput(g.slo_ms, n, g.good, g.good / duration if duration else None, g.attainment,
                   {k: v / n for k, v in g.met.items()} if n else {}, c_rps, c_att,
                   {k: float(v) for k, v in c_by.items() if _num(c_by, k) is not None}, agrees)


def _throughputs(rec: Mapping | None, blk: Mapping | None, duration, tin, tout):
    """(input, output) tokens/s.

    From the JSONL: tokens / duration at full precision (what the client itself computes).
    From the printed block only: the client's printed throughputs; recomputing them from the
    printed duration, rounded to 2 decimals, would be off (2250.55 where it printed 2249.22).
    """
    if rec is not None:
        return (tin / duration if tin is not None and duration else
                _num(rec, "input_throughput"),
                tout / duration if tout is not None and duration else
                _num(rec, "output_throughput"))
    printed_in, printed_out = _num(blk, "input_throughput"), _num(blk, "output_throughput")
    return (printed_in if printed_in is not None else
            (tin / duration if tin is not None and duration else None),
            printed_out if printed_out is not None else
            (tout / duration if tout is not None and duration else None))


def _accept_length(rec: Mapping | None, blk: Mapping | None) -> float | None:
    """The client's own 'Accept length' (bench_serving reads it from the first worker's
    /server_info: a lifetime average, warm-ups included), when it printed or stored one."""
    for src in (rec, blk):
        v = _num(src, "accept_length")
        if v:
            return v
    return None


def bench_spec(rec: Mapping | None, block: ResultBlock | None, benchmark: Mapping | None
               ) -> BenchSpec:
    """The benchmark's definition: the manifest's [benchmark] table (resolved config) first, then
    the client's record."""
    bm = dict(benchmark or {})
    rec = rec or {}
    blk = block.values if block else {}
    dataset = bm.get("dataset") or rec.get("dataset_name")
    n_details = len(rec["ttfts"]) if isinstance(rec.get("ttfts"), list) else None
    in_len = bm.get("input_len")
    out_len = bm.get("output_len")
    if isinstance(dataset, str) and dataset.startswith("random"):
        in_len = in_len or rec.get("random_input_len")
        out_len = out_len or rec.get("random_output_len")
    conc = bm.get("concurrency") or rec.get("max_concurrency") or blk.get("max_concurrency")
    rate = rec.get("request_rate", blk.get("request_rate", bm.get("request_rate")))
    return BenchSpec(
        backend=rec.get("backend") or blk.get("backend") or bm.get("backend"),
        dataset=str(dataset) if dataset else None,
        input_len=_int(in_len), output_len=_int(out_len),
        num_prompts=_int(bm.get("num_prompts")) or n_details,
        max_concurrency=_int(conc),
        request_rate=None if rate is None else str(rate),
        slo_ms=slo_ms(bm.get("slo")),
        steady_ratio=float(bm.get("steady_concurrency_ratio") or STEADY_RATIO),
        slo_target_pct=float(bm.get("slo_target_pct") or SLO_TARGET_PCT))


def _int(v) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None
