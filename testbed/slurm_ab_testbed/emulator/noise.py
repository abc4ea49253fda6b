"""Run-to-run variation of the emulated engine: what makes two passes of one benchmark differ.

Real GPU serving varies between launches (clocks, placement, NCCL rings: a launch is a little
faster or slower for its whole life), between passes of one launch (thermal state, background
load) and, under queueing, in its latency tails (a prefill stalled behind others). Three seeded,
configurable pieces model that; every duration the scheduler plans is multiplied by
``launch x pass`` factors, and a prefill may stall:

- launch factor: lognormal with mean 1 and coefficient of variation ``launch_cv``, drawn once
  per server process;
- pass factor: lognormal, mean 1, CoV ``pass_cv``, redrawn at the first forward after the engine
  was idle for ``pass_gap_s`` seconds (of the clock the scheduler runs on: wall time in the
  server, virtual time in ``simulate``). Inside a pass a closed-loop client keeps the engine busy
  (gaps of milliseconds); between passes the client restarts (seconds);
- queueing stalls: a prefill forward stalls with probability
  ``min(1, stall_prob_per_queued x requests queued or running besides it)`` for a lognormal time
  (median ``stall_median_ms``, log-sd ``stall_sigma``). Nothing queued (C=1): no stall; so TTFT
  tails grow with concurrency.

Pure and deterministic given its seed; ``launch_seed`` derives a distinct seed per server launch
from the Slurm step, so the replicas of one job and the launches of one campaign differ.
``pass_values`` draws synthetic per-pass metric values from the same factors for the statistics
calibration (``benchmarks/calibrate_stats.py``).
"""
from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import Mapping, Optional


@dataclass(frozen=True)
class NoiseConfig:
    launch_cv: float = 0.0
    pass_cv: float = 0.0
    pass_gap_s: float = 1.0
    stall_prob_per_queued: float = 0.0
    stall_median_ms: float = 0.0
    stall_sigma: float = 1.0

    def validate(self) -> None:
        for name in ("launch_cv", "pass_cv", "pass_gap_s", "stall_prob_per_queued",
                     "stall_median_ms", "stall_sigma"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"noise.{name} must be a number >= 0, got {value!r}")


def lognormal_factor(rng: random.Random, cv: float) -> float:
    """A multiplicative factor with mean 1 and coefficient of variation cv (1.0 when cv is 0)."""
    if cv <= 0:
        return 1.0
    sigma = math.sqrt(math.log1p(cv * cv))
    return math.exp(rng.gauss(-sigma * sigma / 2.0, sigma))


def launch_seed(seed: int, env: Mapping[str, str], discriminator: object = "") -> int:
    """A seed for one server launch: the configured seed mixed with the Slurm job and step (each
    srun of a replica is its own step) and a caller discriminator (e.g. the port). Outside Slurm
    only the seed and discriminator count, so tests are reproducible."""
    key = f"{seed}/{env.get('SLURM_JOB_ID', '')}/{env.get('SLURM_STEP_ID', '')}/{discriminator}"
    return zlib.crc32(key.encode())


class Noise:
    """The variation of one server launch. Call ``forward_factor(now)`` when a forward is planned,
    ``forward_done(now)`` when it completes, ``prefill_stall_s(queued)`` for a prefill."""

    def __init__(self, cfg: NoiseConfig, seed: int):
        cfg.validate()
        self.cfg = cfg
        self.rng = random.Random(seed)       # own stream: the scheduler's draws stay as they were
        self.launch = lognormal_factor(self.rng, cfg.launch_cv)
        self.pass_factor = 1.0
        self.passes = 0                      # pass factors drawn so far
        self._last_end: Optional[float] = None

    def forward_factor(self, now: float) -> float:
        """Multiplier of a forward's duration; starts a new pass after an idle gap."""
        if self._last_end is None or now - self._last_end >= self.cfg.pass_gap_s:
            self.pass_factor = lognormal_factor(self.rng, self.cfg.pass_cv)
            self.passes += 1
        return self.launch * self.pass_factor

    def forward_done(self, now: float) -> None:
        self._last_end = now

    def prefill_stall_s(self, queued: int) -> float:
        """Extra seconds (time scale 1) of a prefill with `queued` other requests in the engine."""
        c = self.cfg
        if queued <= 0 or c.stall_prob_per_queued <= 0 or c.stall_median_ms <= 0:
            return 0.0
        if self.rng.random() >= min(1.0, c.stall_prob_per_queued * queued):
            return 0.0
        return c.stall_median_ms * math.exp(self.rng.gauss(0.0, c.stall_sigma)) / 1000.0


def pass_values(cfg: NoiseConfig, rng: random.Random, base: float, passes_per_launch: int,
                launches: int = 1, higher_is_faster: bool = True) -> list[float]:
    """Synthetic per-pass values of a metric whose true value is `base`: `launches` launches of
    `passes_per_launch` passes, each pass scaled by its launch and pass factors (a throughput
    divides by the time factor, a latency multiplies)."""
    out = []
    for _ in range(launches):
        launch = lognormal_factor(rng, cfg.launch_cv)
        for _ in range(passes_per_launch):
            f = launch * lognormal_factor(rng, cfg.pass_cv)
            out.append(base / f if higher_is_faster else base * f)
    return out
