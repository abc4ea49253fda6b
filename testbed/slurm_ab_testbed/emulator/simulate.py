"""Estimate a benchmark on emulated replicas in virtual time (no sleeping, no HTTP).

``python3 -m slurm_ab_testbed.emulator.simulate [--replicas 2 --num-prompts 40 --concurrency 8
--input-len 16384 --output-len 512] -- SGLANG FLAGS`` runs the real scheduler/cost model of each
replica behind a round-robin client that behaves like ``bench_serving`` (closed loop with
``--max-concurrency``, one warm-up request first) and prints the bench-style summary at time
scale 1. Used to calibrate ``costs.toml`` and to state what the defaults give per mode.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Optional

from .build import build_core, plan_replica
from .cli_args import parse
from .costs import load_costs
from .noise import Noise
from .scheduler import Req


@dataclass(frozen=True)
class Result:
    completed: int
    duration: float
    input_throughput: float
    output_throughput: float
    mean_ttft_ms: float
    p95_ttft_ms: float
    mean_tpot_ms: float
    p95_tpot_ms: float
    mean_e2e_ms: float
    p95_e2e_ms: float
    accept_len: Optional[float]
    per_replica: tuple[int, ...]
    decode_log_accept_len: Optional[float]
    # per request in the client's order: (start, first token, last token, replica), s since the
    # benchmark began; and each replica's launch x pass speed factor at the end (1.0 without
    # noise): what the statistics calibration needs to measure a throughput estimator
    timings: tuple[tuple[float, float, float, int], ...] = ()
    factors: tuple[float, ...] = ()


def _pct(xs: list[float], q: float) -> float:
    """numpy's default (linear) percentile."""
    s = sorted(xs)
    if not s:
        return 0.0
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class _Track:
    def __init__(self):
        self.first: Optional[float] = None
        self.done: Optional[float] = None

    def on_tokens(self, req, ids, now, finished):
        if self.first is None:
            self.first = now
        if finished:
            self.done = now


def simulate(sglang_argv: list[str], replicas: int = 2, num_prompts: int = 40, concurrency: int = 8,
             input_len: int = 16384, output_len: int = 512, replica_warmup: bool = True,
             bench_warmup: bool = True, config_path: Optional[str] = None, gpus_per_node: int = 8,
             seed: int = 1, noise_seed: Optional[int] = None) -> Result:
    """One benchmark in virtual time. `noise_seed`: apply costs.toml's [noise] (one launch per replica); None: no noise."""
    argv = list(sglang_argv)
    if "--nnodes" not in argv:
        argv += ["--nnodes", str(_nnodes(argv, gpus_per_node))]
    if "--dist-init-addr" not in argv:
        argv += ["--dist-init-addr", "127.0.0.1:1"]  # never contacted
    args = parse(argv, gpus_per_node).args
    costs = load_costs(config_path)
    rep = plan_replica(args, costs, gpus_per_node, "0.5.23")
    decode_lines: list[str] = []

    def emit_for(i):
        return lambda body: decode_lines.append(body) if body.startswith("Decode") else None

    noises = [None if noise_seed is None else Noise(costs.noise, noise_seed * 1000 + i) for i in range(replicas)]
    cores = [build_core(rep, lambda rng, n: [7] * n, emit_for(i), seed + i, noise=noises[i])
             for i in range(replicas)]
    busy: list[Optional[tuple[float, object]]] = [None] * replicas
    now = 0.0
    n_sent = [0]

    def send(i_core: int, n_in: int, n_out: int, kind: str = "user") -> _Track:
        t = _Track()
        n_sent[0] += 1
        cores[i_core].add(Req(f"r{n_sent[0]}", n_in, n_out, kind=kind, listener=t), now)
        return t

    def run_until(pred) -> None:
        nonlocal now
        for _ in range(10_000_000):
            if pred():
                return
            for i, core in enumerate(cores):
                if busy[i] is None:
                    fwd = core.plan(now) if core.has_work() else None
                    if fwd is None:
                        core.note_idle()
                    else:
                        busy[i] = (now + fwd.duration, fwd)
            pending = [(b[0], i) for i, b in enumerate(busy) if b is not None]
            if not pending:
                raise RuntimeError("simulation stalled")
            end, i = min(pending)
            now = end
            fwd = busy[i][1]
            busy[i] = None
            cores[i].complete(fwd, now)
        raise RuntimeError("simulation did not finish")

    if replica_warmup:   # the job's direct 16K -> 1 request to each replica
        tracks = [send(i, input_len, 1) for i in range(replicas)]
        run_until(lambda: all(t.done is not None for t in tracks))
    rr = [0]

    def route() -> int:
        i = rr[0] % replicas
        rr[0] += 1
        return i

    if bench_warmup:     # bench_serving's own warm-up through the router, then time.sleep(1.0)
        t = send(route(), input_len, min(output_len, 32))
        run_until(lambda: t.done is not None)
        now += 1.0
    start = now
    tracks: list[tuple[float, _Track, int]] = []
    per_replica = [0] * replicas
    queue = list(range(num_prompts))
    inflight: list[_Track] = []

    def refill():
        while queue and len(inflight) < concurrency:
            queue.pop(0)
            i = route()
            per_replica[i] += 1
            t = send(i, input_len, output_len)
            tracks.append((now, t, i))
            inflight.append(t)

    refill()
    while inflight:
        run_until(lambda: any(t.done is not None for t in inflight))
        inflight[:] = [t for t in inflight if t.done is None]
        refill()
    duration = max(t.done for _, t, _ in tracks) - start
    ttft = [t.first - s for s, t, _ in tracks]
    e2e = [t.done - s for s, t, _ in tracks]
    tpot = [(e - f) / (output_len - 1) for e, f in zip(e2e, ttft)] if output_len > 1 else [0.0]
    accepts = [float(line.split("accept len: ")[1].split(",")[0]) for line in decode_lines if "accept len" in line]
    acc = [c.avg_spec_accept_length for c in cores]
    return Result(
        completed=len(tracks), duration=duration,
        input_throughput=len(tracks) * input_len / duration, output_throughput=len(tracks) * output_len / duration,
        mean_ttft_ms=1000 * sum(ttft) / len(ttft), p95_ttft_ms=1000 * _pct(ttft, 95),
        mean_tpot_ms=1000 * sum(tpot) / len(tpot), p95_tpot_ms=1000 * _pct(tpot, 95),
        mean_e2e_ms=1000 * sum(e2e) / len(e2e), p95_e2e_ms=1000 * _pct(e2e, 95),
        accept_len=acc[0] if rep.model.spec else None, per_replica=tuple(per_replica),
        decode_log_accept_len=sum(accepts) / len(accepts) if accepts else None,
        timings=tuple((s - start, t.first - start, t.done - start, i) for s, t, i in tracks),
        factors=tuple(n.launch * n.pass_factor if n is not None else 1.0 for n in noises))


def _nnodes(argv: list[str], gpus_per_node: int) -> int:
    """nnodes implied by tp * pp when the flags do not say (simulation convenience)."""
    ns = {}
    for flag in ("--tp-size", "--pp-size"):
        if flag in argv:
            ns[flag] = int(argv[argv.index(flag) + 1])
    return max(1, ns.get("--tp-size", 1) * ns.get("--pp-size", 1) // gpus_per_node)


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sglang = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python3 -m slurm_ab_testbed.emulator.simulate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=16384)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--config", help="cost TOML override (like SLURM_AB_EMU_CONFIG)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(own)
    if not any(x in ("--model-path", "--model") for x in sglang):
        sglang = ["--model-path", "emulated"] + sglang
    r = simulate(sglang, a.replicas, a.num_prompts, a.concurrency, a.input_len, a.output_len, config_path=a.config)
    if a.json:
        print(json.dumps(asdict(r), indent=2))
    else:
        for k, v in asdict(r).items():
            print(f"{k:<24} {v:.2f}" if isinstance(v, float) else f"{k:<24} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
