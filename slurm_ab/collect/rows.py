"""The collector's records as flat rows: one numeric row per pass (summary.csv/json, the
statistics' input), a job's aggregates and comparisons (typed), and summary.json's record.
Data, not presentation: the tables package prints them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from ..ab_stats import METRICS, PRIMARY_DEFAULT, Aggregate, aggregate
from ..ab_stats.family import Row
from ..model.campaign import Campaign
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
    }


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

    @classmethod
    def of(cls, columns: Mapping[str, object]) -> "PassRow":
        """A row from its columns (pass_row's, or summary.json's "rows" as other programs read them)."""
        c = dict(columns)
        return cls(str(c.get("mode") or ""), int(c.get("concurrency") or 0), c.get("repeat"),
                   int(c.get("launch") or 1), c.get("pass"), c.get("prompts"), str(c.get("verdict") or ""),
                   str(c.get("reason") or ""), c)

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
    row.update({"mode": r.mode or s.mode, "concurrency": r.concurrency, "repeat": r.repeat,
                "launch": r.launch, "pass": r.key, "prompts": r.prompts, "verdict": s.verdict,
                "reason": s.reasons[0] if s.reasons else ""})
    b = s.pd.breakdown if s.pd is not None else None
    if b is not None:                   # PD: the KV transfer's part of TTFT (collect.pd)
        kv = next((x for x in b.chain if x.key == "kv_transfer"), None)
        row.update({"kv_transfer_ms": kv.mean_ms if kv else None, "kv_transfer_share": b.kv_share})
    return PassRow.of(row)


@dataclass(frozen=True)
class GroupAggregate:
    """One (mode, concurrency) of a job: passes ok/total and each metric over its ok passes."""

    mode: str
    concurrency: int
    passes_ok: int
    passes: int
    metrics: Mapping[str, Aggregate]        # ab_stats METRICS name -> its aggregate

    def to_dict(self) -> dict:
        return {"mode": self.mode, "concurrency": self.concurrency, "passes_ok": self.passes_ok,
                "passes": self.passes, "metrics": {k: a.to_dict() for k, a in self.metrics.items()}}


@dataclass(frozen=True)
class Comparison:
    """B against A at one concurrency: the primary metric's row first, then the secondary ones."""

    a: str
    b: str
    concurrency: int
    rows: tuple[Row, ...]

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "concurrency": self.concurrency,
                "metrics": [r.to_dict() for r in self.rows]}


def pass_rows(cs: CampaignSummary) -> list[PassRow]:
    """Every timed pass of a job as its numeric row (summary.csv, the statistics' input)."""
    return [pass_row(p) for p in cs.passes]


def comparisons(cs: CampaignSummary, rows: Sequence[PassRow] | None = None) -> tuple[Comparison, ...]:
    """The first mode against each other mode, at each concurrency (none for one mode): one
    family (their primaries Holm-adjusted together), the equivalence margin applied, and a
    sequential campaign's primary row stated by its looks."""
    return comparisons_of(cs.campaign, pass_rows(cs) if rows is None else rows, cs.sequential)


def comparisons_of(c: Campaign, rows: Sequence[PassRow], seq: SequentialRecord | None = None) -> tuple[Comparison, ...]:
    """comparisons() of a Campaign's pass rows (compare --margin restates a collected job)."""
    keys = [(c.modes[0], b_mode, conc) for b_mode in c.modes[1:] for conc in c.concurrencies]
    tables = family([(rows_of(rows, a, conc), rows_of(rows, b, conc)) for a, b, conc in keys],
                    c.primary_metric, c.margin_pct or None)
    out = tuple(Comparison(a, b, conc, tuple(t)) for (a, b, conc), t in zip(keys, tables))
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


def rows_of(rows: Sequence[PassRow], mode: str, concurrency: int) -> list[PassRow]:
    """The pass rows of one (mode, concurrency)."""
    return [r for r in rows if r.mode == mode and r.concurrency == concurrency]


def ok_rows(rows: Iterable[PassRow]) -> list[PassRow]:
    return [r for r in rows if r.ok]


def groups(rows: Sequence[PassRow]) -> list[tuple[str, int]]:
    """(mode, concurrency) in first-seen order."""
    return list(dict.fromkeys((r.mode, r.concurrency) for r in rows))


def aggregates(rows: Sequence[PassRow]) -> tuple[GroupAggregate, ...]:
    """Per (mode, concurrency): passes ok/total and each metric's mean, sd, CoV, 95% CI."""
    out = []
    for mode, c in groups(rows):
        mine = rows_of(rows, mode, c)
        good = ok_rows(mine)
        out.append(GroupAggregate(mode, c, len(good), len(mine),
                                  {m.name: aggregate([r.value(m.name) for r in good]) for m in METRICS}))
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
