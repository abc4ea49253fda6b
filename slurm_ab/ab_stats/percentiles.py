"""How sure a latency percentile is: the noise of a per-pass p95, and pooled request percentiles.

A p95 from 40 requests rests on the two largest values: its pass-to-pass coefficient of variation
is about sigma * sqrt(q (1 - q) / n) / phi(z_q) for lognormal request times of log-sd sigma
(the asymptotic variance of a sample quantile, q (1 - q) / (n f(x_q)^2)): ~10 % at sigma 0.3,
n = 40, against ~2 % for the throughput. The comparison names the request count and this noise,
and how many requests per pass would bring it to a target.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Optional, Sequence

from .intervals import CONFIDENCE, finite
from .metrics import METRIC_BY_NAME

# percentile column -> (its mean column, the quantile)
PERCENTILE_OF = {"ttft_p95_s": ("ttft_mean_s", 0.95), "tpot_p95_ms": ("tpot_mean_ms", 0.95),
                 "e2e_p95_s": ("e2e_mean_s", 0.95)}
WARN_COV = 0.05       # warn when a per-pass percentile is expected noisier than this


def _z(q: float) -> float:
    from statistics import NormalDist
    return NormalDist().inv_cdf(q)


def percentile_cov(n: int, q: float, sigma: float) -> float:
    """Expected CoV of the sample q-quantile of n lognormal(., sigma) values (asymptotic)."""
    if n < 1 or sigma <= 0:
        return 0.0
    z = _z(q)
    phi = math.exp(-z * z / 2.0) / math.sqrt(2.0 * math.pi)
    return sigma * math.sqrt(q * (1.0 - q) / n) / phi


def lognormal_sigma(mean: float, quantile: float, q: float) -> Optional[float]:
    """The log-sd of a lognormal with this mean and q-quantile (x_q / mean = exp(z sigma -
    sigma^2 / 2), the smaller root); None when they fit no lognormal."""
    if not (mean > 0 and quantile > 0):
        return None
    r = math.log(quantile / mean)
    z = _z(q)
    disc = z * z - 2.0 * r
    if r <= 0 or disc < 0:
        return None if disc < 0 else 0.0
    return z - math.sqrt(disc)


def requests_for(n: int, cov: float, target: float) -> int:
    """Requests per pass that bring an expected CoV `cov` at n requests to `target` (CoV ~ 1/sqrt(n))."""
    return int(math.ceil(n * (cov / target) ** 2))


@dataclass(frozen=True)
class PercentileNoise:
    metric: str
    requests: int                   # requests per pass (median over the passes)
    sigma: Optional[float]          # lognormal log-sd implied by mean and percentile
    expected_cov: Optional[float]   # per-pass CoV of the percentile from `requests` requests
    measured_cov: Optional[float]   # between the passes of this comparison (one side, the larger)

    @property
    def warn(self) -> bool:
        return max(self.expected_cov or 0.0, self.measured_cov or 0.0) > WARN_COV

    def text(self) -> str:
        label = METRIC_BY_NAME[self.metric].label.split(" (")[0]
        parts = [f"{label} per pass from {self.requests} requests"]
        if self.expected_cov is not None:
            parts.append(f"expected noise {self.expected_cov:.0%} per pass (lognormal request "
                         f"times, sigma {self.sigma:.2f} from mean and p95)")
        if self.measured_cov is not None:
            parts.append(f"measured {self.measured_cov:.0%} between passes")
        need = requests_for(self.requests, max(self.expected_cov or 0, self.measured_cov or 0), WARN_COV)
        return (", ".join(parts) + f"; {need} requests per pass would bring it to "
                f"{WARN_COV:.0%} (benchmark.num_prompts, or prompts_per_concurrency x C)")

    def to_dict(self) -> dict:
        return dict(asdict(self), warn=self.warn)


def _cov(xs: list[float]) -> Optional[float]:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return sd / m if m > 0 else None


def percentile_noise(sides: Sequence[Sequence[Mapping]]) -> list[PercentileNoise]:
    """Per latency percentile of the rows: how noisy a per-pass value is (noisier side)."""
    out = []
    for metric, (mean_col, q) in PERCENTILE_OF.items():
        worst = None
        for rows in sides:
            pct = finite(r.get(metric) for r in rows)
            means = finite(r.get(mean_col) for r in rows)
            reqs = sorted(int(r["requests_ok"]) for r in rows if isinstance(r.get("requests_ok"), int))
            if not pct or not means or not reqs:
                continue
            n = reqs[len(reqs) // 2]
            sigma = lognormal_sigma(sum(means) / len(means), sum(pct) / len(pct), q)
            exp_cov = percentile_cov(n, q, sigma) if sigma is not None else None
            cand = PercentileNoise(metric, n, sigma, exp_cov, _cov(pct))
            key = max(cand.expected_cov or 0, cand.measured_cov or 0)
            if worst is None or key > max(worst.expected_cov or 0, worst.measured_cov or 0):
                worst = cand
        if worst is not None:
            out.append(worst)
    return out


# ---- percentiles of few requests -------------------------------------------------------------------

def tail_requests(q: float) -> int:
    """The fewest values with one of them above the q-quantile: 1 / (1 - q) (p95: 20, p99: 100).
    With fewer, the 'percentile' is the largest values interpolated, not a tail."""
    return int(math.ceil(1.0 / (1.0 - q) - 1e-9))


def thin(q: float, n: Optional[int]) -> bool:
    """A q-percentile of n values that no value lies above (n < 1 / (1 - q))."""
    return isinstance(n, int) and 0 < n < tail_requests(q)


def thin_note(q: float, n: int, what: str = "per pass") -> str:
    """The warning under a table whose percentile cells are marked '*'."""
    return (f"* p{round(q * 100)} from {n} request(s) {what}, fewer than {tail_requests(q)}: no request lies "
            "above it, so it is the largest values interpolated, not a tail (more requests per pass: "
            "benchmark.num_prompts, or prompts_per_concurrency x C)")


def min_requests(q: float, confidence: float = 0.99) -> int:
    """The fewest requests that can support a q-percentile claim at `confidence`: with n requests
    and none above a limit, the share above it is below 1 - q with that confidence once
    q^n <= 1 - confidence (MLPerf LoadGen's binomial early-stopping rule: p99 at 99 %: 459)."""
    return int(math.ceil(math.log(1.0 - confidence) / math.log(q)))


def percentile_note(sides: Sequence[Sequence[Mapping]]) -> str:
    """Why the percentile rows are descriptive, and how many requests a claim needs."""
    reqs = sorted(int(r["requests_ok"]) for rows in sides for r in rows if isinstance(r.get("requests_ok"), int))
    n = f"{reqs[len(reqs) // 2]} requests" if reqs else "its requests"
    return (f"p95 rows are descriptive (no interval, no verdict): a per-pass p95 of {n} is biased by an "
            "amount that depends on the shape of the latency distribution, so two modes with the same true "
            "p95 can differ by several percent; a tail claim needs at least "
            f"{min_requests(0.95)} requests per pass for p95 and {min_requests(0.99)} for p99 (99% "
            "confidence, MLPerf's binomial rule; benchmark.num_prompts) and a test of exceedances, not of "
            "per-pass percentiles")
