"""A job's tables: per-pass rows, per-(mode, concurrency) aggregates, the A/B comparison with 95%
intervals, the throughput-latency curve of a sweep, and the job's summary.md (a job of one timed
pass: the run tables of tables.runs, the seed's).

Input rows are the collector's typed pass rows (collect.rows.PassRow: which pass, its verdict and
its numbers by column). Only `ok` passes enter aggregates and
comparisons; the others are listed with their verdict.
"""
from __future__ import annotations

import json
import math
from typing import Sequence

from ..ab_stats import DESCRIPTIVE, INCONCLUSIVE, METRIC_BY_NAME, NO_SPREAD, PRIMARY_DEFAULT, Aggregate, aggregate
from ..ab_stats.family import Row
from ..ab_stats.verdicts import ACROSS_JOBS
from ..collect.records import CampaignSummary, PassSummary
from ..collect.sequential import SequentialRecord
from ..model.rundir import RELATIVE
from ..collect.rows import (Comparison, PassRow, aggregates, columns, comparisons, groups, load_label, ok_rows,
                            pass_rows, rows_of)
from .table import DASH, Table, notes, wrap
from .telemetry import passes_telemetry_md, profiles_md

# Display of each metric: number format (the seed's: 2 decimals; rates 3).
FORMATS = {"accept_rate": ".3f"}
TABLE_METRICS = ("input_tps", "output_tps", "ttft_mean_s", "ttft_p95_s", "tpot_mean_ms",
                 "tpot_p95_ms", "e2e_mean_s", "e2e_p95_s", "duration_s", "accept_len")
OPTIONAL_METRICS = ("energy_j_per_token",)
CURVE_METRICS = ("output_tps", "tpot_mean_ms", "ttft_mean_s", "ttft_p95_s")


def _fmt(x, metric: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x:{FORMATS.get(metric, '.2f')}}"


def value_pm(agg: Aggregate, metric: str) -> str:
    """'85.99 ± 1.20' (95% half-width); one pass: the value alone."""
    if agg.n == 0:
        return DASH
    hw = agg.half_width
    return _fmt(agg.mean, metric) if hw is None else f"{_fmt(agg.mean, metric)} ± {_fmt(hw, metric)}"


def _pct(x) -> str:
    return DASH if x is None else f"{x:+.2f}%"


def _tab(rows, headers, align, width: int | None = None, keys: int = 1) -> str:
    return Table.of(headers, rows, align).text(width, keys) + "\n"


def table_metrics(rows: Sequence[PassRow]) -> tuple[str, ...]:
    """The columns of a job's tables: the seed's, and J/token when some pass has it (telemetry)."""
    return TABLE_METRICS + tuple(m for m in OPTIONAL_METRICS if any(r.value(m) is not None for r in rows))


PERCENTILE_COLUMNS = {"ttft_p95_s": 0.95, "tpot_p95_ms": 0.95, "e2e_p95_s": 0.95}


def _requests(rows: Sequence[PassRow]) -> int | None:
    """Successful requests per pass (the median over the rows), what a pass's percentile rests on."""
    reqs = sorted(int(r.value("requests_ok")) for r in rows if r.value("requests_ok") is not None)
    return reqs[len(reqs) // 2] if reqs else None


def _marked(text: str, metric: str, n: int | None) -> str:
    """A percentile cell resting on too few requests, marked '*' (percentiles.thin)."""
    from ..ab_stats.percentiles import thin
    q = PERCENTILE_COLUMNS.get(metric)
    return f"{text}*" if q and text != DASH and thin(q, n) else text


def thin_notes(groups: Sequence[Sequence[PassRow]]) -> list[str]:
    """The warning for '*' cells: the fewest requests per pass of any group with a thin p95."""
    from ..ab_stats.percentiles import thin, thin_note
    ns = [n for n in (_requests(ok_rows(g)) for g in groups) if thin(0.95, n)]
    return [thin_note(0.95, min(ns))] if ns else []


def _goodput_cells(rows: Sequence[PassRow]) -> list[str]:
    """'SLOs met' and 'goodput (req/s)' of a group's ok passes: means ('-' without SLOs)."""
    att = aggregate([r.value("slo_attainment") for r in rows])
    rps = aggregate([r.value("goodput_rps") for r in rows])
    return [DASH if att.mean is None else f"{att.mean:.1%}", _fmt(rps.mean, "goodput_rps")]


def _has_goodput(rows: Sequence[PassRow]) -> bool:
    return any(r.value("slo_attainment") is not None for r in rows)


GOODPUT_HEADERS = ["SLOs met", "Goodput (req/s)"]


def aggregate_table(rows: Sequence[PassRow], width: int | None = None) -> str:
    """One line per (mode, concurrency): mean ± 95% half-width of each metric over its ok passes
    (p95 cells resting on too few requests per pass marked '*'; the goodput columns with SLOs)."""
    good = _has_goodput(rows)
    shown = table_metrics(rows)
    headers = ["Mode", "C", "n ok/total"] + [METRIC_BY_NAME[m].label for m in shown] \
        + (GOODPUT_HEADERS if good else [])
    body = []
    for rec in aggregates(rows):
        mine = ok_rows(rows_of(rows, rec.mode, rec.concurrency, rec.rate))
        n = _requests(mine)
        line = [rec.mode, _load(rec), f"{rec.passes_ok}/{rec.passes}"]
        line += [_marked(value_pm(rec.metrics[m], m), m, n) for m in shown]
        body.append(line + (_goodput_cells(mine) if good else []))
    return _tab(body, headers, ("left", "right", "right") + ("right",) * (len(headers) - 3), width, 2)


def passes_table(rows: Sequence[PassRow], width: int | None = None) -> str:
    """Every pass (burn-ins excluded by the caller): its numbers and verdict word; each pass's
    reason below the table."""
    good = _has_goodput(rows)
    shown = table_metrics(rows)
    headers = ["Mode", "C", "Repeat", "Launch"] + [METRIC_BY_NAME[m].label for m in shown] \
        + (GOODPUT_HEADERS if good else []) + ["Verdict"]
    body = []
    for r in rows:
        n = r.value("requests_ok")
        numbers = [_marked(_fmt(r.value(m), m), m, None if n is None else int(n)) for m in shown]
        body.append([r.mode, str(r.concurrency) if r.rate is None else load_label(None, r.rate), str(r.repeat),
                     str(r.launch)] + numbers + (_goodput_cells([r]) if good else []) + [r.verdict or DASH])
    reasons = [wrap(f"- {r.mode} {r.key or r.concurrency} (launch {r.launch}): {r.verdict}: {r.reason}",
                    width, "    ") for r in rows if r.reason]
    return (_tab(body, headers, ("left", "right", "right", "right") + ("right",) * (len(headers) - 5)
                 + ("left",), width, 4) + ("\n" + "\n".join(reasons) + "\n" if reasons else ""))


def curve_table(rows: Sequence[PassRow], width: int | None = None) -> str:
    """The throughput-latency curve of each mode: one line per concurrency, with intervals (and
    goodput with SLOs: which concurrency still meets them)."""
    good = _has_goodput(rows)
    headers = ["Mode", "C", "n"] + [METRIC_BY_NAME[m].label for m in CURVE_METRICS] + (GOODPUT_HEADERS if good else [])
    body = []
    for rec in aggregates(rows):
        mine = ok_rows(rows_of(rows, rec.mode, rec.concurrency, rec.rate))
        n = _requests(mine)
        line = [rec.mode, _load(rec), str(rec.passes_ok)]
        line += [_marked(value_pm(rec.metrics[m], m), m, n) for m in CURVE_METRICS]
        body.append(line + (_goodput_cells(mine) if good else []))
    return _tab(body, headers, ("left", "right", "right") + ("right",) * (len(headers) - 3), width, 2)


def _side_value(rows: Sequence[PassRow], metric: str, by_launch: bool) -> str:
    """Mean ± 95% half-width over passes, or over launch means when launches are the units."""
    if not by_launch:
        return value_pm(aggregate([r.value(metric) for r in rows]), metric)
    means: dict = {}
    for r in rows:
        v = r.value(metric)
        if v is not None and math.isfinite(v):
            means.setdefault(r.launch, []).append(v)
    return value_pm(aggregate([sum(xs) / len(xs) for xs in means.values()]), metric)


def _design_note(first) -> str:
    d = first.delta
    if d.variance_levels == ("launch", "pass"):
        return (f"variance levels: launch and pass: {d.launches_a} launch(es) of A, {d.launches_b} of B; "
                "the passes of a launch are averaged and launches are the units (A ± / B ±: over launch means)")
    return ("within-launch only: one server launch on a side, so launch and mode are confounded: the "
            "verdicts say how these launches differed, not how the modes do (run 2 or more launches "
            "per mode: --launches L, counterbalanced order)")


def _shared_qualifier(verdicts: Sequence[str]) -> str | None:
    """'within-launch only' when every verdict of the table carries that qualifier."""
    quals = {v.split(" (", 1)[1].rstrip(")") if " (" in v and not v.startswith("inconclusive") else None
             for v in verdicts if v and v != DASH}
    return next(iter(quals)) if len(quals) == 1 and None not in quals else None


def comparison_table(a_name: str, b_name: str, a_rows: Sequence[PassRow], b_rows: Sequence[PassRow],
                     variance: str | None = None, primary: str = PRIMARY_DEFAULT, *,
                     rows: Sequence[Row] | None = None, margin_pct: float | None = None,
                     confound: str | None = None, sequential: SequentialRecord | None = None,
                     width: int | None = None) -> str:
    """The primary metric's row first, then the secondary rows: A, B (mean ± half-width), % change,
    its interval, the p-value (Holm-adjusted in a family) and the verdict; notes say which variance
    the intervals hold, which throughput is primary, how the family is corrected, what the margin
    is, and why percentiles are descriptive. `rows`: the comparison's rows as the collector states
    them (collect.rows.comparisons: a job's family, a sequential campaign's answer); else they are
    computed from the pass rows alone. `width`: for a terminal: the verdict beside the change (a
    qualifier every row shares said once below), folded to fit."""
    from ..ab_stats.family import compare, primary_note
    from ..ab_stats.percentiles import percentile_noise, percentile_note

    a_ok, b_ok = ok_rows(a_rows), ok_rows(b_rows)
    rows = list(rows) if rows is not None else \
        compare(columns(a_ok), columns(b_ok), primary, margin_pct=margin_pct, confound=confound)
    body = []
    for row in rows:
        d = row.delta
        by_launch = d.variance_levels == ("launch", "pass")
        ci = DASH if d.ci_low_pct is None else f"[{d.ci_low_pct:+.2f}%, {d.ci_high_pct:+.2f}%]"
        if d.ci_low_pct is not None and abs(d.confidence - 0.95) > 1e-9:
            ci += f" ({d.confidence:.2%})"
        p = row.p_holm if row.p_holm is not None else d.p_value
        label = f"**{row.label}** (primary)" if row.role == "primary" else row.label
        body.append([label, _side_value(a_ok, d.metric, by_launch), _side_value(b_ok, d.metric, by_launch),
                     _pct(d.change_pct), ci, DASH if p is None else f"{p:.3f}", row.verdict or DASH])
    first = rows[0].delta
    headers = ["metric", f"{a_name} (n={len(a_ok)}, {first.launches_a} launch(es))",
               f"{b_name} (n={len(b_ok)}, {first.launches_b} launch(es))", "change", "interval",
               "p (Holm)", "verdict"]
    align = ("left", "right", "right", "right", "right", "right", "left")
    lines = []
    if width is None:
        text = _tab(body, headers, align)
    else:
        shared = _shared_qualifier([b[-1] for b in body])
        order = (0, 3, 4, 6, 1, 2, 5)           # the answer's columns first
        cut = (lambda v: v.replace(f" ({shared})", "")) if shared else (lambda v: v)
        text = _tab([[cut(b[i]) if i == 6 else b[i] for i in order] for b in body], [headers[i] for i in order],
                    [align[i] for i in order], width)
        if shared:
            lines.append(f"every verdict above is '({shared})'")
    lines.append(primary_note(rows, primary))
    if len(a_ok) < 2 or len(b_ok) < 2:
        lines.append(f"{INCONCLUSIVE}: with fewer than 2 ok passes per side no interval can be "
                     "given; the change is one run against one run (use --repeats and --launches)")
    else:
        lines.append(_design_note(rows[0]))
        lines.append(_family_note(rows))
    margin = first.margin_pct
    if margin:
        lines.append(f"equivalence margin ±{margin:g}% (benchmark.margin_pct, --margin): an interval that "
                     f"includes 0 and lies inside it reads 'equivalent within ±{margin:g}%' (two one-sided "
                     "tests at the interval's level); 'no significant difference' is what is neither")
    if sequential is not None:
        lines.append(_sequential_note(sequential))
    if first.qualifier == ACROSS_JOBS:
        lines.append("separate jobs: A and B ran in different jobs, so job and mode are confounded (a "
                     "job-to-job difference reads as the modes'); verdicts say '(separate jobs)'; run both "
                     "modes in one campaign for a verdict on the modes")
    if any((r.verdict or "").startswith(NO_SPREAD) for r in rows):
        lines.append(f"{NO_SPREAD}: the values of each side are identical to the printed precision (or lie "
                     "on the fitted drift exactly), so the noise cannot be estimated; no interval is given "
                     "(a zero-width one would claim an exact difference)")
    if any(r.verdict == DESCRIPTIVE for r in rows):
        lines.append(percentile_note([columns(a_ok), columns(b_ok)]))
    lines += [w.text() for w in percentile_noise([columns(a_ok), columns(b_ok)]) if w.warn]
    if variance:
        lines.append(f"variance included: {variance}")
    for side, all_rows, ok in (("A", a_rows, a_ok), ("B", b_rows, b_ok)):
        bad = len(all_rows) - len(ok)
        if bad:
            lines.append(f"{side}: {bad} pass(es) not ok left out")
    return text + notes(lines, width=width) + "\n"


def _sequential_note(seq: SequentialRecord) -> str:
    """What a sequential campaign's primary row says and how it was checked."""
    where = (f"stopped at look {seq.stopped_at} of {seq.blocks}" if seq.stopped_at
             else f"ran to look {len(seq.looks)} of {seq.blocks}")
    agree = "the collector's recomputation of every look from the raw files equals the job's" if seq.agree \
        else f"a look recomputed from the raw files DIFFERS from the job's (see {RELATIVE.summary('json')} 'sequential')"
    return (f"sequential: {where} ({seq.decision}); the primary row is that look's decision on the "
            "clients' own figures, its interval the repeated confidence interval at the look's level "
            f"({seq.spending or 'alpha'} spending, two-sided 5% over all looks){_prior_note(seq)}; {agree}")


def _prior_note(seq: SequentialRecord) -> str:
    """Which looks pooled the prior (--prior-from) and which dropped it (its F guard)."""
    if not seq.prior:
        return ""
    said = [f"{what} at look{'s' if len(ks) > 1 else ''} {', '.join(ks)}"
            for what, name in (("pooled", "used"), ("dropped (the look's own variance exceeded it)", "dropped"))
            for ks in [[str(i) for i, u in enumerate(seq.prior_uses, 1) if u == name]] if ks]
    return f"; the prior from {seq.prior} " + ("; ".join(said) if said else "was not used (no estimate)")


def _family_note(rows: Sequence[Row]) -> str:
    """How the rows' tests are corrected (the intervals are stated at those levels)."""
    head = rows[0]
    secondary = next((r.family for r in rows[1:] if r.p_holm is not None), 0)
    text = ("interval: t on log values (launch means when launches are the units); the primary row is "
            + (f"one of {head.family} comparisons of this campaign (B modes x concurrencies) whose primaries "
               "are Holm-adjusted together" if head.family > 1 else "tested alone at 5%"))
    if secondary:
        text += (f"; the {secondary} tested secondary rows are Holm-adjusted together (family-wise 5%)")
    return text + ("; an adjusted row's interval is stated at the level of its Holm step (shown beside it), "
                   "so it excludes 0 exactly when its adjusted p is below 0.05 (docs/statistics.md)")


def the_pass(cs: CampaignSummary) -> PassSummary | None:
    """The one timed pass of a job of one, which the seed's run tables show (tables.runs); None
    for a job of several passes (its launches, aggregates and comparisons here)."""
    return cs.passes[0] if len(cs.passes) == 1 else None


def summary_md(cs: CampaignSummary) -> str:
    """The job's summary.md."""
    from .runs import run_md

    from .capacity import capacity_md
    from .correctness import correctness_md

    from .load import cache_md, load_md

    one = the_pass(cs)
    text = run_md(one) if one is not None else campaign_md(cs)
    single = (load_md(cs.passes), cache_md(pass_rows(cs))) if one is not None else ()
    for section in (*single, capacity_md(cs.launches), correctness_md(cs.launches)):
        text += ("\n" + section if section else "")
    return text


def answers(cs: CampaignSummary, rows: Sequence[PassRow] | None = None, cmps: Sequence[Comparison] | None = None) -> list:
    """The job's answer lines (tables.answer): one per comparison, else one per mode (`cmps`: the
    job's comparisons when the caller has them)."""
    from .answer import job_answers

    rows = pass_rows(cs) if rows is None else rows
    return job_answers(cs, rows, comparisons(cs, rows) if cmps is None else cmps, slo_target(cs))


def slo_target(cs: CampaignSummary) -> float | None:
    """benchmark.slo_target_pct as the passes were judged (None without SLOs)."""
    return next((p.spec.slo_target_pct for p in cs.passes if p.spec.slo_ms), None)


def campaign_md(cs: CampaignSummary, passes: bool = False, width: int | None = None, paint=None) -> str:
    """A job's answer lines, then its tables: launches, aggregates (or passes), comparisons, curve
    (`width`: fitted to a terminal)."""
    c = cs.campaign
    rows = pass_rows(cs)
    cmps = comparisons(cs, rows)
    out = [a.text(width, paint) for a in answers(cs, rows, cmps)]
    out += ["", f"# Campaign {cs.run_id}", "",
            wrap(f"{len(c.modes)} mode(s), {c.launches_per_mode} launch(es) x {c.repeats} pass(es) per "
                 "mode and concurrency, concurrency "
                 f"{', '.join(map(str, c.concurrencies))}, order {c.order}"
                 + (", burn-in pass per launch" if c.burn_in else "")
                 + f"; job {cs.job_id or '?'} ({cs.job.state_raw or cs.job.state or 'state unknown'})", width), ""]
    if cs.stop is not None:
        st = cs.stop
        out += [wrap(f"Stopped at a block boundary ({st.reason}): block {st.block} of {st.blocks} was not started, "
                     f"it needed ~{st.need_s} s and the job had {st.left_s} s left before its own early stop; "
                     f"design run: {st.design}", width), ""]
    for la in cs.launches:
        why = f" ({la.failure.get('kind')})" if la.failure else ""
        out.append(wrap(f"- launch {la.launch} {la.mode}: {la.status}{why} -- " + ", ".join(la.passes), width, "    "))
    if cs.job.note:
        out += ["", wrap(f"note: {cs.job.note}", width)]
    out += ["", "## Passes" if passes else "## Aggregates (mean ± 95% half-width over ok passes)", ""]
    # (open-loop passes' load: tables.load's section below the comparisons)
    out.append((passes_table(rows, width) if passes else aggregate_table(rows, width)).rstrip("\n"))
    thin = thin_notes([rows_of(rows, m, x, q) for m, x, q in groups(rows)])
    if thin:
        out.append(notes(thin, width=width).lstrip("\n"))
    for cmp in cmps:
        out += ["", comparison_section(cs, cmp, rows, width).rstrip("\n")]
    if len(c.concurrencies) > 1 or len(c.rates) > 1:
        out += ["", "## Throughput-latency curve", "", curve_table(rows, width).rstrip("\n")]
    from .load import cache_md, load_md
    for section in (load_md(cs.passes), cache_md(rows), passes_telemetry_md(cs.passes), profiles_md(cs)):
        out += ["", section.rstrip("\n")] if section else []
    return "\n".join(out) + "\n"


def _load(rec) -> str:
    """An aggregate's load: its concurrency, or an open-loop rate with its saturated passes."""
    if rec.rate is None:
        return str(rec.concurrency)
    return rec.load + (f" (saturated {rec.saturated}/{rec.passes_ok})" if rec.saturated else "")


def comparison_section(cs: CampaignSummary, cmp: Comparison, rows: Sequence[PassRow],
                       width: int | None = None) -> str:
    """One comparison of a job (B against A at one load) under its heading."""
    c = cmp.concurrency
    at = f"concurrency {c}" if cmp.rate is None else cmp.load
    return (f"## {cmp.b} vs {cmp.a} at {at}\n\n"
            + comparison_table(cmp.a, cmp.b, rows_of(rows, cmp.a, c, cmp.rate), rows_of(rows, cmp.b, c, cmp.rate),
                               cs.campaign.variance, cs.campaign.primary_metric, rows=cmp.rows,
                               sequential=cs.sequential, width=width))


def comparison_json(cs: CampaignSummary) -> str:
    """`compare --format json` of a job of several modes."""
    return json.dumps({"variance": cs.campaign.variance,
                       "comparisons": [x.to_dict() for x in comparisons(cs)]}, indent=2) + "\n"
