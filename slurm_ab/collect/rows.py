"""The collector's records as flat rows: one numeric row per pass (summary.csv/json, the
statistics' input), a job's aggregates and comparisons (typed), and summary.json's record.
Data, not presentation: the tables package prints them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from ..ab_stats import METRICS, PRIMARY_DEFAULT, Aggregate, aggregate
from ..ab_stats.family import Row
from ..model.campaign import Campaign, rate_text
from .records import CampaignSummary, PassSummary
from .sequential import SequentialRecord, primary_row

# Verdicts whose pass has no numbers worth showing (the client's output, if any, is not final).
NUMBERLESS = ("failed", "cancelled", "timeout", "running")


def numeric_row(s: PassSummary) -> dict:
    """One pass as numbers (summary.csv/json, the campaign statistics); the tables print it."""
    b = s.bench
    numbers = s.verdict not in NUMBERLESS

    def g(lat, attr, scale=1.0):
        v = getattr(lat, attr) if lat is not None and numbers else None
        return v * scale if v is not None else None
    return {
        "run_id": s.run_id, "mode": s.mode, "verdict": s.verdict,
        "reason": s.reasons[0] if s.reasons else "",
        "input_tps": b.input_tps if numbers else None,
        "output_tps": b.output_tps if numbers else None,
        "ttft_mean_s": g(b.ttft, "mean", 1e-3), "ttft_p95_s": g(b.ttft, "p95", 1e-3),
        "tpot_mean_ms": g(b.tpot, "mean"), "tpot_p95_ms": g(b.tpot, "p95"),
        "e2e_mean_s": g(b.e2e, "mean", 1e-3), "e2e_p95_s": g(b.e2e, "p95", 1e-3),
        "duration_s": b.duration_s if numbers else None,
        "requests_ok": b.completed, "requests_total": b.total,
        "accept_len": s.accept.accept_len, "accept_rate": s.accept.accept_rate,
        "accept_samples": s.accept.samples,
        "client_accept_length": s.bench.accept_length,
        **bench_columns(b, numbers),
        **metrics_columns(s),
        **telemetry_columns(s.telemetry if numbers else None),
    }


def telemetry_columns(t) -> dict:
    """The pass's energy figures (issue 34): J per output token, mean power per GPU, the energy
    and the GPUs it is over (None without telemetry, or when a sample gap makes it unknown)."""
    return {"energy_j_per_token": t.j_per_token if t else None, "gpu_power_w": t.power_w if t else None,
            "energy_j": t.energy_j if t else None, "telemetry_gpus": t.gpus if t else None}


def bench_columns(b, numbers: bool = True) -> dict:
    """The prompts' lengths, the steady-state throughput and goodput (docs/metrics.md): the steady
    state is the one estimator's figure (the client's block, cross-checked, else ours), goodput ours
    from the per-request details; the client's own figures beside them as client_*."""
    p, st, gp = b.prompt_tokens, b.steady if numbers else None, b.goodput if numbers else None
    by = gp.attainment_by_metric if gp else {}
    return {
        "prompt_tokens_mean": p.mean if p else None, "prompt_tokens_min": p.min if p else None,
        "prompt_tokens_max": p.max if p else None,
        "steady_output_tps": st.output_tps if st else None,
        "steady_window_s": st.window_s if st else None,
        "client_steady_output_tps": st.client_output_tps if st else None,
        "goodput_rps": gp.goodput_rps if gp else None,
        "slo_attainment": gp.attainment if gp else None,
        "slo_attainment_ttft": by.get("ttft"), "slo_attainment_tpot": by.get("tpot"),
        "slo_attainment_e2e": by.get("e2el"),
        "client_goodput_rps": gp.client_goodput_rps if gp else None,
        "client_slo_attainment": gp.client_attainment if gp else None,
    }


def metrics_columns(summary) -> dict:
    """Extra numeric columns of summary.csv/json (None without metrics)."""
    sm = getattr(summary, "server_metrics", None)
    p = sm.pooled if sm is not None and sm.available else None

    def g(attr):
        return getattr(p, attr) if p is not None else None
    return {
        "accept_len_counters": g("accept_len"), "accept_rate_counters": g("accept_rate"),
        "accept_len_diff_pct": g("diff_pct"), "gen_tokens_window": g("gen_tokens"),
        "verify_calls_window": g("verify_calls"), "in_flight_peak": g("in_flight_peak"),
        "running_peak": g("running_peak"),
        "queued_peak": g("queued_peak"), "kv_usage_peak": g("kv_usage_peak"),
        "retracted_peak": g("retracted_peak"),
        "prompt_tokens_window": g("prompt_tokens"), "cached_tokens_window": g("cached_tokens"),
        "prefix_cache_hit": g("cache_hit"),
    }


@dataclass(frozen=True)
class PassRow:
    """One timed pass as summary.csv has it: which pass it is (typed fields) and its numbers by
    column name (`columns`: the csv row in order, the fields among them). Consumers read the fields
    and value(metric); only the statistics (ab_stats, generic over tables of numbers) and the
    csv/json writers read `columns`."""

    mode: str
    concurrency: int
    repeat: int | None
    launch: int
    key: str | None
    prompts: int | None
    verdict: str
    reason: str
    columns: Mapping[str, object]
    rate: float | None = None               # an open-loop pass's offered request rate (req/s)
    saturated: bool | None = None           # its load check (collect.load): the servers fell behind

    @classmethod
    def of(cls, columns: Mapping[str, object]) -> "PassRow":
        """A row from its columns (pass_row's, or summary.json's "rows" as other programs read them)."""
        c = dict(columns)
        return cls(str(c.get("mode") or ""), int(c.get("concurrency") or 0), c.get("repeat"),
                   int(c.get("launch") or 1), c.get("pass"), c.get("prompts"), str(c.get("verdict") or ""),
                   str(c.get("reason") or ""), c, c.get("rate"), c.get("saturated"))

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def value(self, name: str) -> float | None:
        """A numeric column (an ab_stats METRICS name, docs/metrics.md); None when it has no number."""
        v = self.columns.get(name)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def to_dict(self) -> dict:
        return dict(self.columns)


def pass_row(s: PassSummary) -> PassRow:
    """A pass as the campaign tables read it: its numeric row and where it ran."""
    row = numeric_row(s)
    r = s.ref
    ld = s.load
    row.update({"mode": r.mode or s.mode, "concurrency": r.concurrency, "repeat": r.repeat,
                "launch": r.launch, "pass": r.key, "prompts": r.prompts, "verdict": s.verdict,
                "reason": s.reasons[0] if s.reasons else "", "rate": r.rate,
                "achieved_rps": ld.achieved_rps if ld else None, "served_rps": ld.served_rps if ld else None,
                "backlog_growth": ld.growth if ld else None,
                "saturated": ld.saturated if ld else None})
    b = s.pd.breakdown if s.pd is not None else None
    if b is not None:                   # PD: the KV transfer's part of TTFT (collect.pd)
        kv = next((x for x in b.chain if x.key == "kv_transfer"), None)
        row.update({"kv_transfer_ms": kv.mean_ms if kv else None, "kv_transfer_share": b.kv_share})
    return PassRow.of(row)


@dataclass(frozen=True)
class GroupAggregate:
    """One (mode, load) of a job: passes ok/total and each metric over its ok passes (the load: a
    concurrency, or an open-loop pass's request rate)."""

    mode: str
    concurrency: int
    passes_ok: int
    passes: int
    metrics: Mapping[str, Aggregate]        # ab_stats METRICS name -> its aggregate
    rate: float | None = None
    saturated: int = 0                      # its ok passes marked saturated

    @property
    def load(self) -> str:
        return load_label(self.concurrency, self.rate)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "concurrency": self.concurrency, "passes_ok": self.passes_ok,
                "passes": self.passes, "metrics": {k: a.to_dict() for k, a in self.metrics.items()},
                **({"rate": self.rate, "saturated": self.saturated} if self.rate is not None else {})}


def load_label(concurrency, rate) -> str:
    """"C=8" or "4 req/s" (model.campaign.Pass.load)."""
    return f"C={concurrency}" if rate is None else f"{rate_text(rate)} req/s"


@dataclass(frozen=True)
class Comparison:
    """B against A at one load: the primary metric's row first, then the secondary ones."""

    a: str
    b: str
    concurrency: int
    rows: tuple[Row, ...]
    rate: float | None = None

    @property
    def load(self) -> str:
        return load_label(self.concurrency, self.rate)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "concurrency": self.concurrency,
                "metrics": [r.to_dict() for r in self.rows], **({"rate": self.rate} if self.rate is not None else {})}


def pass_rows(cs: CampaignSummary) -> list[PassRow]:
    """Every timed pass of a job as its numeric row (summary.csv, the statistics' input)."""
    return [pass_row(p) for p in cs.passes]


def comparisons(cs: CampaignSummary, rows: Sequence[PassRow] | None = None) -> tuple[Comparison, ...]:
    """The first mode against each other mode, at each load (each concurrency, each open-loop
    rate; none for one mode): one family (their primaries Holm-adjusted together), the equivalence
    margin applied, and a sequential campaign's primary row stated by its looks."""
    return comparisons_of(cs.campaign, pass_rows(cs) if rows is None else rows, cs.sequential)


def comparisons_of(c: Campaign, rows: Sequence[PassRow], seq: SequentialRecord | None = None) -> tuple[Comparison, ...]:
    """comparisons() of a Campaign's pass rows (compare --margin restates a collected job)."""
    loads = [(conc, None) for conc in c.concurrencies] + list(dict.fromkeys(
        (r.concurrency, r.rate) for r in rows if r.rate is not None))
    keys = [(c.modes[0], b_mode, conc, rate) for b_mode in c.modes[1:] for conc, rate in loads
            if rows_of(rows, c.modes[0], conc, rate) or rows_of(rows, b_mode, conc, rate)
            or rate is None]
    tables = family([(rows_of(rows, a, conc, rate), rows_of(rows, b, conc, rate)) for a, b, conc, rate in keys],
                    c.primary_metric, c.margin_pct or None)
    out = tuple(Comparison(a, b, conc, tuple(t), rate) for (a, b, conc, rate), t in zip(keys, tables))
    if seq is not None and len(out) == 1 and out[0].rows:       # the looks' answer, not a fixed design's
        out = (replace(out[0], rows=(primary_row(out[0].rows[0], seq),) + out[0].rows[1:]),)
    return out


SCHEMA = 2      # summary.json's "summary_schema": 2 = one CampaignSummary for every job


def summary_record(cs: CampaignSummary) -> dict:
    """summary.json: the job's CampaignSummary (read back by read_summary) and, for readers
    outside slurm-ab, its verdict, every pass's numeric row, the aggregates and comparisons."""
    rows = pass_rows(cs)
    return {"summary_schema": SCHEMA, **cs.to_dict(), "verdict": cs.verdict,
            "variance": cs.design.variance, "rows": [r.to_dict() for r in rows],
            "aggregates": [a.to_dict() for a in aggregates(rows)],
            "comparisons": [x.to_dict() for x in comparisons(cs, rows)]}


def rows_of(rows: Sequence[PassRow], mode: str, concurrency: int, rate: float | None = None) -> list[PassRow]:
    """The pass rows of one (mode, load): a concurrency, or with `rate` an open-loop rate."""
    return [r for r in rows if r.mode == mode and r.concurrency == concurrency and r.rate == rate]


def ok_rows(rows: Iterable[PassRow]) -> list[PassRow]:
    return [r for r in rows if r.ok]


def groups(rows: Sequence[PassRow]) -> list[tuple[str, int, float | None]]:
    """(mode, concurrency, rate) in first-seen order (rate None: a closed-loop pass)."""
    return list(dict.fromkeys((r.mode, r.concurrency, r.rate) for r in rows))


def aggregates(rows: Sequence[PassRow]) -> tuple[GroupAggregate, ...]:
    """Per (mode, load): passes ok/total and each metric's mean, sd, CoV, 95% CI."""
    out = []
    for mode, c, q in groups(rows):
        mine = rows_of(rows, mode, c, q)
        good = ok_rows(mine)
        out.append(GroupAggregate(mode, c, len(good), len(mine),
                                  {m.name: aggregate([r.value(m.name) for r in good]) for m in METRICS}, q,
                                  sum(1 for r in good if r.saturated)))
    return tuple(out)


def columns(rows: Iterable[PassRow]) -> list[Mapping[str, object]]:
    """The rows as the statistics read them (ab_stats: tables of numbers by column name)."""
    return [r.columns for r in rows]


def family(pairs: Sequence[tuple[Sequence[PassRow], Sequence[PassRow]]], primary: str = PRIMARY_DEFAULT,
           margin_pct: float | None = None, confound: str | None = None) -> list[list[Row]]:
    """Per (A rows, B rows) of one family (ok passes only): ab_stats.family.Row of every printed
    row, the primary first; the primaries Holm-adjusted together (ab_stats.family.compare_all)."""
    from ..ab_stats.family import compare_all
    return compare_all([(columns(ok_rows(a)), columns(ok_rows(b))) for a, b in pairs], primary,
                       margin_pct=margin_pct, confound=confound)
