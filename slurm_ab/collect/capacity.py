"""A capacity search's result per launch (issue 33 item 2): each probe's attainment recomputed from
its client output with the collector's own goodput (parse.bench.goodput, SGLang's definitions), the
bisection's decisions replayed (ab_stats.capacity, the job's program) and checked against the rates
the job ran, the capacity with its uncertainty, and two modes' capacities compared."""
from __future__ import annotations

from dataclasses import dataclass

from ..ab_stats.capacity import bracket, next_rate
from ..model.campaign import rate_text
from ..parse.bench import goodput, read_last_record, requests


@dataclass(frozen=True)
class Probe:
    key: str
    rate: float | None                  # the rate the job ran (its bench_start)
    expected_rate: float | None         # the rate the recomputed decisions give
    good: int = 0
    sent: int = 0
    attainment: float | None = None
    met: bool = False
    goodput_rps: float | None = None    # SGLang's goodput of the probe: good requests per second
    load: str | None = None             # its open-loop check (collect.load): saturated, kept up, ...


@dataclass(frozen=True)
class CapacitySummary:
    """One launch's search: its probes, the capacity (the highest rate that met the target) and its
    uncertainty (the lowest that did not), whether the job's decisions are the recomputed ones."""

    mode: str
    launch: int
    slo_ms: dict
    attainment: float
    lo: float                           # the search's bracket as given
    hi: float
    probes: tuple[Probe, ...] = ()
    capacity_rps: float | None = None   # highest rate that met the target (None: none did)
    upper_rps: float | None = None      # lowest rate that did not (None: every probe met it)
    agrees: bool = True
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """"6.5 req/s (met; 7 req/s did not)", "at least 8 req/s (every probe met the target)"."""
        if self.capacity_rps is None:
            return (f"below {rate_text(self.upper_rps or self.lo)} req/s (no probe met the target)"
                    if self.probes else "not measured")
        if self.upper_rps is None:
            return f"at least {rate_text(self.capacity_rps)} req/s (every probe met the target; bound {self.hi:g})"
        return f"{rate_text(self.capacity_rps)} req/s (met; {rate_text(self.upper_rps)} req/s did not)"


def search_result(mode: str, launch: int, spec: dict, passes, benches) -> CapacitySummary:
    """passes: the launch's probe PassSummaries in order; benches: their client output files."""
    slo = dict(spec["slo_ms"])
    done: list[tuple[float, float]] = []
    probes, notes, agrees = [], [], True
    for p, path in zip(passes, benches):
        expected = next_rate(spec, done)
        reqs = requests(read_last_record(path).record) or []
        count = goodput(reqs, slo) if reqs else None
        good, sent = (count.good, count.requests) if count else (0, 0)
        share = good / sent if sent else 0.0
        dur = p.bench.duration_s
        probes.append(Probe(p.ref.key or "?", p.ref.rate, expected, good, sent, share if sent else None,
                            share >= spec["attainment"], good / dur if dur else None,
                            p.load.state if p.load else None))
        if p.ref.rate is not None and expected is not None and abs(p.ref.rate - expected) > 1e-6 * max(1.0, expected):
            agrees = False
            notes.append(f"{p.ref.key}: the job ran {p.ref.rate:g} req/s, the recomputed search gives {expected:g}")
        done.append((p.ref.rate if p.ref.rate is not None else expected, share))
    met = [x.rate for x in probes if x.met and x.rate is not None]
    unmet = [x.rate for x in probes if not x.met and x.rate is not None]
    low, high = bracket(spec, done)
    return CapacitySummary(mode, launch, slo, float(spec["attainment"]), float(spec["lo"]), float(spec["hi"]),
                           tuple(probes), max(met) if met else None, min(unmet) if unmet else None, agrees,
                           tuple(notes) + ((f"bracket left: [{low:g}, {high:g}] req/s",) if probes else ()))


def compare_capacity(a: CapacitySummary, b: CapacitySummary) -> str:
    """B's capacity against A's: higher / lower only when a gap separates their brackets; brackets
    that overlap or touch (B's lowest failing rate = A's highest passing one) are not resolved. A
    bisection's bracket is not a confidence interval (one launch, one probe of noisy attainment per
    rate): on the local cluster two images 3 % apart analytically gave touching brackets in the
    wrong order, so one step apart is within a probe's noise. Never a statistical verdict: said."""
    def span(x: CapacitySummary) -> tuple[float, float]:
        lo = x.capacity_rps if x.capacity_rps is not None else 0.0
        hi = x.upper_rps if x.upper_rps is not None else float("inf")
        return lo, hi
    (alo, ahi), (blo, bhi) = span(a), span(b)
    if blo > ahi:
        word = "higher"
    elif bhi < alo:
        word = "lower"
    else:
        return (f"{b.mode} {b.text} vs {a.mode} {a.text}: their brackets overlap or touch, not resolved at "
                "this resolution (one probe per rate; more probes, prompts or a repeated search)")
    ratio = f" ({(b.capacity_rps / a.capacity_rps - 1):+.0%})" if a.capacity_rps and b.capacity_rps else ""
    return (f"{b.mode} {b.text} vs {a.mode} {a.text}: {b.mode}'s capacity is {word}{ratio} (brackets apart; "
            "one probe per rate, not a statistical verdict)")


__all__ = ["CapacitySummary", "Probe", "compare_capacity", "search_result"]
