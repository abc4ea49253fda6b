"""The emulator's analytic capacity: the highest Poisson request rate a replica sustains, and meets
TTFT/TPOT SLOs at, computed from ``costs.toml`` for a workload and a layout.

``python3 -m slurm_ab_testbed.emulator.capacity --input-len 2048 --output-len 64 [--replicas R]
[--time-scale S] [--slo-ttft-ms T] [--slo-tpot-ms P] [--attainment 0.9] -- SGLANG FLAGS``

The model (one replica; R replicas behind a round-robin router each get rate/R), all durations
from the emulator's own cost functions (``costs.CostModel``), at time scale 1 then divided by
``--time-scale``:

- P, the prefill of one request: its uncached tokens in chunks of ``--chunked-prefill-size``, each
  ``prefill_time`` (per-token cost / tp + TP-fabric terms, x (1 + spec_overhead) with a
  speculative algorithm, + batch overhead; with PP the first chunk fills the pipeline), plus the
  expected queueing stall of ``[noise]`` (stall_prob_per_queued x requests in the engine x
  stall_median_ms x exp(stall_sigma^2 / 2)) when noise is on;
- D(b), one decode step with b running requests: ``decode_time(b, b x (input + output / 2))``
  (the step's fixed cost, per-sequence and KV-context terms, PP micro-batches; a verify step with a
  speculative algorithm), and S, the steps a request needs: output - 1 without speculation, else
  (output - 1) x E[1 / tokens per verify step] over the per-request acceptance distribution
  (truncated geometric around a lognormal mean, as ``CostModel.draw_accept``);
- a pending prefill always runs before the next decode step, so with arrival rate L a share
  rho = L x P of the time is prefill and decode steps run in the rest: b running requests advance
  b tokens per step, hence b x (1 - rho) / D(b) = L x S, solved for b (a fixed point when the
  stalls depend on b). Without noise and with D(b) = a + c x b this is b = L S a / (1 - L P - L S c);
- the replica keeps up while that has a solution with b <= max_running_requests and the KV pool:
  saturation rate = 1 / (P + S x c) (c: the step's cost per added request; with noise, the
  largest L for which the fixed point exists);
- mean TTFT = P + W, W = min(1, b) x (1 - rho) x D(b) / 2 (the decode step in progress) +
  rho x P / (2 (1 - rho)) (M/D/1 wait for the prefills ahead); mean TPOT = (S x D(b) + rho x
  (W + P)) / ((1 - rho) x (output - 1)): the prefills of requests that arrived while it waited and
  prefilled run before its first decode step, and arrivals during its decode preempt it (M/G/1
  with prefill priority);
- SLO knee: the highest rate at which the share of requests meeting the TPOT SLO and the share
  meeting the TTFT SLO are both >= ``--attainment``: per-request TPOT taken as normal around its
  mean, its variance that of the prefills preempting the request (Poisson arrivals over
  S D + W + P, each an M/D/1 busy period: mean P / (1 - rho), variance P^2 rho / (1 - rho)^3) plus
  the running batch's own fluctuation (sd sqrt(b), through D's slope, amplified by the feedback
  1 / (1 - rho - L S D'(b))); TTFT - P exponential around W. Without ``--attainment``: the means
  against the SLOs.
  ``simulated_knee`` gives the exact knee of an attainment target for the emulator's scheduler by
  bisection over ``simulate_open_loop`` runs (seconds of CPU).

Accuracy against the emulator's own scheduler in virtual time (``simulate_open_loop``, Poisson
arrivals, noise off), tests/test_emulator_capacity.py: saturation within a few per cent, mean TPOT
and TTFT within 10-20 % below 80 % of saturation. Real runs add HTTP, tokenization and the host's
CPU (the emulator sleeps each forward's modelled duration; at small time scales the host's own
overhead lowers the measured capacity).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
from dataclasses import dataclass
from typing import Optional

from .build import build_core, plan_replica
from .cli_args import parse
from .costs import CostModel, Costs, load_costs
from .noise import Noise
from .scheduler import Req


@dataclass(frozen=True)
class Workload:
    input_len: int
    output_len: int
    cached_len: int = 0            # prompt tokens a prefix-cache hit skips (0: none)


@dataclass(frozen=True)
class Point:
    """The model at one arrival rate (per replica, time scale 1 unless scaled)."""
    rate: float
    running: float                 # b: mean running requests
    prefill_share: float           # rho
    tpot_ms: float
    ttft_ms: float
    stable: bool
    tpot_sd_ms: float = 0.0        # spread of per-request TPOT (normal approximation)
    wait_ms: float = 0.0           # mean TTFT - P

    def tpot_attainment(self, slo_ms: float) -> float:
        if not self.stable:
            return 0.0
        if self.tpot_sd_ms <= 0:
            return 1.0 if self.tpot_ms <= slo_ms else 0.0
        return 0.5 * (1 + math.erf((slo_ms - self.tpot_ms) / (self.tpot_sd_ms * math.sqrt(2))))

    def ttft_attainment(self, slo_ms: float) -> float:
        """P(TTFT <= slo) with TTFT - P exponential around its mean wait."""
        if not self.stable:
            return 0.0
        room = slo_ms - (self.ttft_ms - self.wait_ms)
        if room <= 0:
            return 0.0
        return 1.0 if self.wait_ms <= 0 else 1 - math.exp(-room / self.wait_ms)


@dataclass(frozen=True)
class Capacity:
    """Rates in requests/s of the whole service (all replicas) at the given time scale."""
    saturation_rate: float
    knee_rate: Optional[float]     # highest rate meeting the SLOs (None: no SLO given)
    tpot_knee_rate: Optional[float]
    ttft_knee_rate: Optional[float]
    prefill_s: float               # P at the time scale
    decode_step_ms: float          # D(1) at the time scale
    steps_per_request: float       # S
    replicas: int
    time_scale: float

    def point(self, rate: float) -> Point:
        """The model's means at a service rate (req/s at this time scale, all replicas): per replica."""
        p = self._model.point(rate * self.time_scale / self.replicas)
        s = self.time_scale
        return dataclasses.replace(p, rate=rate, tpot_ms=p.tpot_ms * s, ttft_ms=p.ttft_ms * s,
                                   tpot_sd_ms=p.tpot_sd_ms * s, wait_ms=p.wait_ms * s)


def _accept_steps(model: CostModel, output_len: int) -> float:
    """S: decode (verify) steps a request needs for output_len - 1 tokens, averaged over the
    per-request mean acceptance (lognormal, CostModel.request_accept_mean) of the truncated
    geometric per step (CostModel.draw_accept)."""
    n_out = max(0, output_len - 1)
    if not model.spec or model.num_draft_tokens <= 1:
        return float(n_out)
    s = model.c.speculative
    mean, cv, n = s.mean_for(model.spec), s.accept_len_request_cv, model.num_draft_tokens
    sigma = math.sqrt(math.log(1 + cv * cv)) if cv > 0 else 0.0
    total, k = 0.0, 400
    for i in range(k):
        z = _norm_ppf((i + 0.5) / k) if sigma else 0.0
        m = min(float(n), max(1.0, mean * math.exp(-sigma * sigma / 2 + sigma * z)))
        a = (m - 1.0) / m
        per_step = 1.0 + (a * (1 - a ** (n - 1)) / (1 - a) if a > 0 else 0.0)
        total += n_out / per_step
    return total / k


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - lo:
        return -_norm_ppf(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


class _Model:
    """One replica's mean-value model (time scale 1)."""

    def __init__(self, model: CostModel, costs: Costs, w: Workload, chunk: Optional[int], max_running: int,
                 pool_tokens: int, noise: bool):
        self.m, self.w = model, w
        new = max(1, w.input_len - w.cached_len)
        sizes = [new] if not chunk or chunk <= 0 else [min(chunk, new - i) for i in range(0, new, chunk)]
        self.prefill = sum(model.prefill_time(t, pipeline_warm=i > 0) for i, t in enumerate(sizes))
        n = costs.noise
        self.stall = (n.stall_prob_per_queued * n.stall_median_ms / 1000.0 * math.exp(n.stall_sigma ** 2 / 2)
                      if noise and n.stall_prob_per_queued > 0 else 0.0)
        self.steps = _accept_steps(model, w.output_len)
        self.ctx = w.input_len + w.output_len / 2.0
        self.b_max = min(float(max_running), pool_tokens / float(w.input_len + w.output_len))

    def D(self, b: float) -> float:
        """Decode (verify) step time with b running requests (seconds, mean, no jitter), linear
        between whole batch sizes."""
        if b <= 1:
            return self.m.decode_time(1, int(self.ctx))
        lo = int(math.floor(b))
        d_lo = self.m.decode_time(lo, int(lo * self.ctx))
        d_hi = self.m.decode_time(lo + 1, int((lo + 1) * self.ctx))
        return d_lo + (d_hi - d_lo) * (b - lo)

    def P(self, b: float) -> float:
        """One request's prefill, with the expected stall of b requests in the engine."""
        return self.prefill + self.stall * b

    def solve_b(self, rate: float) -> Optional[float]:
        """b with b (1 - rate P(b)) = rate S D(b), or None when the replica cannot keep up."""
        if rate <= 0:
            return 0.0
        f = lambda b: b * (1 - rate * self.P(b)) - rate * self.steps * self.D(b)  # noqa: E731
        hi = self.b_max
        if f(hi) < 0:
            return None
        lo = 0.0
        for _ in range(100):
            mid = (lo + hi) / 2
            if f(mid) < 0:
                lo = mid
            else:
                hi = mid
        return hi

    def point(self, rate: float) -> Point:
        """Means at a per-replica rate (time scale 1). An arrival finds a decode step in progress
        with probability min(1, b) x (1 - rho) (the engine idles when nothing runs)."""
        b = self.solve_b(rate)
        if b is None:
            return Point(rate, self.b_max, 1.0, math.inf, math.inf, False)
        rho = min(0.999999, rate * self.P(b))
        d = self.D(max(b, 1.0))
        p = self.P(b)
        wait = min(1.0, b) * (1 - rho) * d / 2 + rho * p / (2 * (1 - rho))
        # the prefills of the requests that arrived while it waited and prefilled run before its
        # first decode step; prefills arriving during its decode preempt it: (S D + rho (W + P)) / (1 - rho)
        n_out = max(1, self.w.output_len - 1)
        tpot = (self.steps * d + rho * (wait + p)) / ((1 - rho) * n_out)
        # spread: the prefills that preempt it (Poisson arrivals over S D + W + P, each an M/D/1
        # busy period of mean P / (1 - rho), variance P^2 rho / (1 - rho)^3) and the running
        # batch's own fluctuation (sd sqrt(b), amplified by the feedback of D on b)
        busy2 = p * p * rho / (1 - rho) ** 3 + (p / (1 - rho)) ** 2
        var_pre = rate * (self.steps * d + wait + p) * busy2
        slope = self.D(b + 1) - self.D(b)
        gain = 1 - rho - rate * self.steps * slope
        sd_b = math.sqrt(max(b, 0.0)) * slope * self.steps / max(0.05, gain) / (1 - rho)
        sd = math.sqrt(var_pre + sd_b * sd_b) / n_out
        return Point(rate, b, rho, tpot * 1000, (p + wait) * 1000, True, sd * 1000, wait * 1000)

    def saturation(self) -> float:
        hi = 1.0 / self.prefill
        lo = 0.0
        for _ in range(100):
            mid = (lo + hi) / 2
            if self.solve_b(mid) is None:
                hi = mid
            else:
                lo = mid
        return lo

    def knee(self, pred) -> float:
        """Highest rate (per replica, scale 1) with pred(point) true, below saturation."""
        lo, hi = 0.0, self.saturation()
        if pred(self.point(hi)):
            return hi
        for _ in range(100):
            mid = (lo + hi) / 2
            if pred(self.point(mid)):
                lo = mid
            else:
                hi = mid
        return lo


def capacity(sglang_argv: list[str], workload: Workload, replicas: int = 1, time_scale: float = 1.0,
             slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None,
             attainment: Optional[float] = None, costs: Optional[Costs] = None, gpus_per_node: int = 8,
             noise: bool = False) -> Capacity:
    """The analytic capacity of ``replicas`` replicas of the SGLang command ``sglang_argv`` (as for
    simulate: --nnodes/--dist-init-addr are added) for one workload; SLOs in ms at time_scale
    (what a benchmark at that SLURM_AB_EMU_TIME_SCALE measures)."""
    from .simulate import _nnodes
    argv = list(sglang_argv)
    if "--nnodes" not in argv:
        argv += ["--nnodes", str(_nnodes(argv, gpus_per_node))]
    if "--dist-init-addr" not in argv:
        argv += ["--dist-init-addr", "127.0.0.1:1"]
    args = parse(argv, gpus_per_node).args
    costs = costs or load_costs()
    rep = plan_replica(args, costs, gpus_per_node, "0.5.23")
    mdl = _Model(rep.model, costs, workload, rep.chunked_prefill_size, rep.max_running_requests,
                 rep.memory.max_total_num_tokens, noise)
    s = time_scale

    def tpot_ok(p: Point) -> bool:
        if attainment is None:
            return p.stable and p.tpot_ms * s <= slo_tpot_ms
        return p.tpot_attainment(slo_tpot_ms / s) >= attainment

    def ttft_ok(p: Point) -> bool:
        if attainment is None:
            return p.stable and p.ttft_ms * s <= slo_ttft_ms
        return p.ttft_attainment(slo_ttft_ms / s) >= attainment

    sat = mdl.saturation()
    tpot_knee = mdl.knee(tpot_ok) if slo_tpot_ms else None
    ttft_knee = mdl.knee(ttft_ok) if slo_ttft_ms else None
    knees = [k for k in (tpot_knee, ttft_knee) if k is not None]
    per = lambda r: r * replicas / s if r is not None else None   # noqa: E731
    cap = Capacity(per(sat), per(min(knees)) if knees else None, per(tpot_knee), per(ttft_knee),
                   mdl.prefill * s, mdl.D(1) * 1000 * s, mdl.steps, replicas, s)
    object.__setattr__(cap, "_model", mdl)
    return cap


# ---- the check: the emulator's own scheduler, open loop, in virtual time -------------------------

@dataclass(frozen=True)
class OpenLoopResult:
    offered_rate: float
    achieved_rate: float           # completed / (last finish - first arrival)
    mean_ttft_ms: float
    mean_tpot_ms: float
    ttft_ms: tuple
    tpot_ms: tuple

    def attainment(self, slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None) -> float:
        ok = [(slo_ttft_ms is None or a <= slo_ttft_ms) and (slo_tpot_ms is None or b <= slo_tpot_ms)
              for a, b in zip(self.ttft_ms, self.tpot_ms)]
        return sum(ok) / len(ok) if ok else 0.0


def simulate_open_loop(sglang_argv: list[str], workload: Workload, rate: float, num_prompts: int = 400,
                       replicas: int = 1, time_scale: float = 1.0, seed: int = 1, noise_seed: Optional[int] = None,
                       warmup: int = 0, costs: Optional[Costs] = None, gpus_per_node: int = 8) -> OpenLoopResult:
    """bench_serving --request-rate RATE (Poisson, round-robin over replicas) against the emulator's
    scheduler in virtual time; rate and results at time_scale. The first ``warmup`` requests are
    left out of the means (the queue starts empty)."""
    from .simulate import _nnodes
    argv = list(sglang_argv)
    if "--nnodes" not in argv:
        argv += ["--nnodes", str(_nnodes(argv, gpus_per_node))]
    if "--dist-init-addr" not in argv:
        argv += ["--dist-init-addr", "127.0.0.1:1"]
    costs = costs or load_costs()
    if noise_seed is None:
        costs = dataclasses.replace(costs, noise=dataclasses.replace(costs.noise, stall_prob_per_queued=0.0,
                                                                     launch_cv=0.0, pass_cv=0.0))
    rep = plan_replica(parse(argv, gpus_per_node).args, costs, gpus_per_node, "0.5.23")
    cores = [build_core(rep, lambda rng, n: [7] * n, lambda line: None, seed + i,
                        noise=None if noise_seed is None else Noise(costs.noise, noise_seed * 1000 + i))
             for i in range(replicas)]
    rng = random.Random(seed)
    lam = rate * time_scale                         # per second at scale 1
    arrivals, t = [], 0.0
    for _ in range(num_prompts):
        arrivals.append(t)
        t += rng.expovariate(lam)
    reqs = [Req(f"r{i}", workload.input_len, workload.output_len) for i in range(num_prompts)]
    busy: list = [None] * replicas
    now, nxt = 0.0, 0
    while not all(r.finished for r in reqs):
        for i, core in enumerate(cores):
            if busy[i] is None and core.has_work():
                fwd = core.plan(now)
                if fwd is not None:
                    busy[i] = (now + fwd.duration, fwd)
                else:
                    core.note_idle()
        ends = [(b[0], i) for i, b in enumerate(busy) if b is not None]
        t_arr = arrivals[nxt] if nxt < len(arrivals) else math.inf
        t_end = min(ends)[0] if ends else math.inf
        if t_arr <= t_end:
            now = t_arr
            cores[nxt % replicas].add(reqs[nxt], now)
            reqs[nxt].arrival = now
            nxt += 1
        else:
            now, i = min(ends)
            fwd = busy[i][1]
            busy[i] = None
            cores[i].complete(fwd, now)
    done = reqs[warmup:]
    s = time_scale
    ttft = tuple((r.first_token_time - r.arrival) * 1000 * s for r in done)
    tpot = tuple((r.finish_time - r.first_token_time) / max(1, len(r.output_ids) - 1) * 1000 * s for r in done)
    span = max(r.finish_time for r in reqs) - arrivals[0]
    return OpenLoopResult(rate, len(reqs) / (span * s), sum(ttft) / len(ttft), sum(tpot) / len(tpot), ttft, tpot)


def simulated_knee(sglang_argv: list[str], workload: Workload, attainment: float,
                   slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None, replicas: int = 1,
                   time_scale: float = 1.0, num_prompts: int = 400, rel_tol: float = 0.02,
                   costs: Optional[Costs] = None) -> float:
    """The highest rate whose simulated SLO attainment (``simulate_open_loop``, noise off, first 10 %
    of requests left out) is >= attainment, by bisection between 0 and the analytic saturation:
    the emulator's knee for an attainment target, exact for its scheduler (not its host)."""
    sat = capacity(sglang_argv, workload, replicas, time_scale, costs=costs).saturation_rate
    lo, hi = 0.0, sat * 1.05
    while hi - lo > rel_tol * sat:
        mid = (lo + hi) / 2
        r = simulate_open_loop(sglang_argv, workload, mid, num_prompts, replicas, time_scale,
                               warmup=num_prompts // 10, costs=costs)
        if r.attainment(slo_ttft_ms, slo_tpot_ms) >= attainment:
            lo = mid
        else:
            hi = mid
    return lo


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        i = argv.index("--")
        own, sglang = argv[:i], argv[i + 1:]
    else:
        own, sglang = argv, []
    ap = argparse.ArgumentParser(prog="python3 -m slurm_ab_testbed.emulator.capacity",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--input-len", type=int, required=True)
    ap.add_argument("--output-len", type=int, required=True)
    ap.add_argument("--cached-len", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--time-scale", type=float, default=1.0, help="SLURM_AB_EMU_TIME_SCALE of the runs")
    ap.add_argument("--slo-ttft-ms", type=float)
    ap.add_argument("--slo-tpot-ms", type=float)
    ap.add_argument("--attainment", type=float, help="TTFT SLO attainment, e.g. 0.9 (default: mean TTFT)")
    ap.add_argument("--noise", action="store_true", help="include costs.toml [noise]'s queueing stalls")
    ap.add_argument("--config", help="a cost TOML overriding costs.toml (as SLURM_AB_EMU_CONFIG)")
    ap.add_argument("--rate", type=float, action="append", default=[], help="also print the model at this rate")
    a = ap.parse_args(own)
    cap = capacity(sglang or ["--model-path", "emulated", "--tp-size", "8"],
                   Workload(a.input_len, a.output_len, a.cached_len), a.replicas, a.time_scale, a.slo_ttft_ms,
                   a.slo_tpot_ms, a.attainment, load_costs(a.config), noise=a.noise)
    print(f"prefill {cap.prefill_s * 1000:.1f} ms, decode step (1 request) {cap.decode_step_ms:.2f} ms, "
          f"{cap.steps_per_request:.1f} steps per request")
    print(f"saturation rate {cap.saturation_rate:.4f} req/s ({cap.replicas} replica(s), time scale {cap.time_scale})")
    if cap.knee_rate is not None:
        print(f"SLO knee {cap.knee_rate:.4f} req/s (TPOT {cap.tpot_knee_rate}, TTFT {cap.ttft_knee_rate})")
    for r in a.rate:
        p = cap.point(r)
        print(f"rate {r}: running {p.running:.1f}, prefill share {p.prefill_share:.2f}, mean TTFT {p.ttft_ms:.1f} ms, "
              f"mean TPOT {p.tpot_ms:.2f} ms" + ("" if p.stable else " (cannot keep up)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
