"""The answer line: what a comparison, a job or a sweep says, first, in one line.

A comparison's answer is its primary row (ab_stats.family: the headline metric, its change, its
interval and verdict) and what it rests on (launches x passes per side, the order, separate jobs);
a job of one mode says its verdict and its primary throughput (and goodput when benchmark.slo is
set); a sweep its highest concurrency meeting the SLOs, else its peak throughput. Pages draw the
same records coloured (report/html.py answer_html), the terminal prints `text()` first.

Colours: a comparison's come from its verdict's kind (ab_stats.verdicts: better, worse, equivalent,
same, inconclusive, descriptive), a job's from its verdict (ok, invalid, failed, ...): RUN_COLOURS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..ab_stats import verdicts
from ..ab_stats.metrics import METRIC_BY_NAME, comparison_rows
from ..collect.rows import PassRow, load_label
from .table import DASH, wrap

# A job's verdict -> its colour (the pages' verdict badges use the same).
RUN_COLOURS = {"ok": "#2e7d32", "invalid": "#ef6c00", "failed": "#c62828", "timeout": "#c62828",
               "cancelled": "#6d4c41", "running": "#1565c0"}
# Colour -> the terminal's nearest (click.style names); grey kinds stay plain.
TERMINAL = {"#2e7d32": "green", "#c62828": "red", "#1565c0": "blue", "#ef6c00": "yellow",
            "#6d4c41": "magenta"}


NO_COMPARISON = "no comparison"     # a side has no ok pass: nothing to compare (kind: inconclusive)


@dataclass(frozen=True)
class Answer:
    subject: str            # "tp32-dflash vs tp32 at C=8", "dev-tp32 (tp32, C=8)"
    verdict: str            # the words shown coloured: a comparison's verdict, a job's verdict
    statement: str          # "Output TPS (steady state) -15.44%, 95% interval [-26.14%, -3.39%]"
    basis: str              # what the answer rests on: "1 launch x 3 passes per mode, blocked order"
    comparison: bool = True

    @property
    def kind(self) -> str:
        """A key of verdicts.KINDS (a comparison) or a job's verdict."""
        return verdicts.kind(self.verdict) if self.comparison else self.verdict

    @property
    def colour(self) -> str:
        return verdicts.colour(self.verdict) if self.comparison else RUN_COLOURS.get(self.verdict, "#757575")

    def text(self, width: int | None = None, paint=None) -> str:
        """The line (wrapped at `width`); `paint(text, colour)` styles the verdict (a terminal's
        colours: cli)."""
        head = f"{self.subject}: {self.verdict}: "
        out = wrap(f"{head}{self.statement}; rests on {self.basis}", width, "    ")
        if paint is not None and out.startswith(head):
            out = f"{self.subject}: {paint(self.verdict, self.colour)}: " + out[len(head):]
        return out


def _pct(x) -> str:
    return DASH if x is None else f"{x:+.2f}%"


def _side(n: int, launches: int) -> str:
    """'1 launch x 3 passes', '4 launches x 2 passes', '5 passes in 2 launches'."""
    if launches and n % launches == 0:
        k = n // launches
        return f"{launches} launch{'es' if launches != 1 else ''} x {k} pass{'es' if k != 1 else ''}"
    return f"{n} pass{'es' if n != 1 else ''} in {launches} launch{'es' if launches != 1 else ''}"


def comparison_answer(a: str, b: str, concurrency, rows: Sequence, order: str | None = None,
                      separate: bool = False, rate: float | None = None) -> Answer:
    """The answer of B against A from its family rows (ab_stats.family.Row, the primary first), at
    a concurrency or (`rate`) an open-loop request rate."""
    head = rows[0]
    d = head.delta
    iv = (f", {d_level(head)} interval [{d.ci_low_pct:+.2f}%, {d.ci_high_pct:+.2f}%]"
          if d.ci_low_pct is not None else ", no interval")
    verdict = head.verdict or verdicts.INCONCLUSIVE
    if d.change_pct is None:            # a side without a value (no ok pass)
        iv, verdict = f": {a} has {d.n_a} ok value(s), {b} {d.n_b}", NO_COMPARISON
    sa, sb = _side(d.n_a, d.launches_a), _side(d.n_b, d.launches_b)
    basis = f"{sa} of each side" if sa == sb else f"{a}: {sa}, {b}: {sb}"
    if separate:
        basis += " (two separate jobs)"
    elif order:
        basis += f", {order} order"
    at = f" at {load_label(concurrency, rate)}" if concurrency is not None or rate is not None else ""
    return Answer(f"{b} vs {a}{at}", verdict, f"{head.label}{'' if d.change_pct is None else ' ' + _pct(d.change_pct)}{iv}",
                  basis)


def pair_answers(a_id: str, a_rows: Sequence[PassRow], b_id: str, b_rows: Sequence[PassRow],
                 primary: str | None = None, margin_pct: float | None = None,
                 confound: str | None = verdicts.ACROSS_JOBS) -> list[Answer]:
    """B's job against A's (two jobs: separate launches, job and mode confounded unless
    `confound` is None: --trust-jobs): one answer per concurrency both ran, the sides named by
    their run ids; their ok passes compared as one family (collect.rows.family), as `compare A B`
    prints them."""
    from ..ab_stats.metrics import PRIMARY_DEFAULT
    from ..collect.rows import family

    def at(rows, c):
        return [r for r in rows if r.concurrency == c]
    common = sorted({r.concurrency for r in a_rows} & {r.concurrency for r in b_rows})
    tables = family([(at(a_rows, c), at(b_rows, c)) for c in common], primary or PRIMARY_DEFAULT,
                    margin_pct=margin_pct or None, confound=confound)
    return [comparison_answer(a_id, b_id, c, rows, separate=True) for c, rows in zip(common, tables)]


def d_level(row) -> str:
    """'95%': the level the row's interval is stated at."""
    level = getattr(row.delta, "confidence", 0.95)
    return f"{level:.0%}" if abs(level * 100 - round(level * 100)) < 1e-9 else f"{level:.2%}"


def _head(rows: Sequence[PassRow], primary: str) -> str:
    """The metric a job's answer states: the comparisons' primary (steady-state output TPS when
    every row has it)."""
    from ..ab_stats.family import steady_available
    from ..collect.rows import columns
    return comparison_rows(primary, steady_available(columns(rows), []))[0]


def _value(x, metric: str) -> str:
    return DASH if x is None else (f"{x:.3f}" if metric == "accept_rate" else f"{x:.2f}")


def goodput_phrase(rows: Sequence[PassRow], target_pct: float | None) -> str:
    """'92.5% of requests met the SLOs (target 90%), goodput 2.85 req/s' over the rows' means."""
    have = [r for r in rows if r.value("slo_attainment") is not None]
    if not have:
        return ""
    att = sum(r.value("slo_attainment") for r in have) / len(have)
    rps = [r.value("goodput_rps") for r in have if r.value("goodput_rps") is not None]
    text = f"{att:.1%} of requests met the SLOs"
    if target_pct:
        text += f" (target {target_pct:g}%)"
    return text + (f", goodput {sum(rps) / len(rps):.2f} req/s" if rps else "")


def job_answers(cs, rows: Sequence[PassRow], comparisons: Sequence = (), target_pct: float | None = None,
                ) -> list[Answer]:
    """A job's answers: one per comparison (B modes x concurrencies); without a comparison, per
    mode: its one pass, its repeats, or its sweep."""
    c = cs.campaign
    if comparisons:
        return [comparison_answer(x.a, x.b, x.concurrency, x.rows, c.order, rate=x.rate) for x in comparisons]
    out = []
    for mode in c.modes:
        mine = [r for r in rows if r.mode == mode]
        if mine:
            out.append(mode_answer(cs.run_id, mode, mine, c.primary_metric, target_pct))
    return out


def mode_answer(run_id: str, mode: str, rows: Sequence[PassRow], primary: str,
                target_pct: float | None = None) -> Answer:
    """One mode of a job: its verdict, its primary figure (over a sweep: its peak and the highest
    concurrency meeting the SLOs; loads are concurrencies and open-loop request rates, each its
    own), what it rests on; its reasons are printed below it."""
    from ..ab_stats import aggregate

    ok = [r for r in rows if r.ok]
    shown = [r for r in rows if r.verdict in ("ok", "invalid")]      # passes with numbers
    cs_ = sorted({(r.rate is not None, r.rate or 0.0, r.concurrency) for r in rows})
    cs_ = [(c, q if open_ else None) for open_, q, c in cs_]          # (concurrency, rate): closed loop first
    worst = next((v for v in ("running", "failed", "timeout", "cancelled", "invalid")
                  if any(r.verdict == v for r in rows)), "ok")
    launches = len({r.launch for r in rows})
    per_c = len(rows) // max(len(cs_), 1)
    per = "concurrency" if all(q is None for _, q in cs_) else "load"
    basis = f"{_side(per_c, launches)} per {per}" if len(cs_) > 1 else _side(len(rows), launches)
    subject = (f"{run_id} ({mode}, C={','.join(str(c) for c, _ in cs_)})" if per == "concurrency" else
               f"{run_id} ({mode}, {', '.join(load_label(c, q) for c, q in cs_)})")
    parts = [] if worst == "ok" else [f"{len(ok)} of {len(rows)} pass{'es' if len(rows) != 1 else ''} ok"]
    use = ok or shown
    if not use:
        return Answer(subject, worst, "; ".join(parts + ["no numbers (the reasons below)"]), basis, comparison=False)
    head = _head(use, primary)
    label = METRIC_BY_NAME[head].label
    if len(cs_) > 1:
        by_c = {c: [r for r in use if (r.concurrency, r.rate) == c] for c in cs_}
        means = {c: aggregate([r.value(head) for r in rs]).mean for c, rs in by_c.items() if rs}
        best = max((c for c in means if means[c] is not None), key=lambda c: means[c], default=None)
        if best is not None:
            parts.append(f"peak {label} {_value(means[best], head)} at {load_label(*best)}")
        if any(_attainment(rs) is not None for rs in by_c.values() if rs):
            meets = [c for c, rs in by_c.items() if rs and _attainment(rs) is not None
                     and _attainment(rs) * 100 >= (target_pct or 100)]
            closed = [c for c, q in meets if q is None]
            rates = [q for _, q in meets if q is not None]
            said = ([f"highest C meeting the SLOs (>= {target_pct or 100:g}% of requests): "
                     f"{max(closed) if closed else 'none'}"] if any(q is None for _, q in cs_) else []) + \
                ([f"highest request rate meeting the SLOs (>= {target_pct or 100:g}% of requests): "
                  f"{load_label(None, max(rates)) if rates else 'none'}"] if any(q is not None for _, q in cs_) else [])
            at = len(parts) - 1 if best is not None else len(parts)
            parts[at:at] = said
    else:
        agg = aggregate([r.value(head) for r in use])
        hw = f" ± {_value(agg.half_width, head)} (95%)" if agg.half_width is not None else ""
        parts.append(f"{label} {_value(agg.mean, head)}{hw}")
        good = goodput_phrase(use, target_pct)
        if good:
            parts.append(good)
    return Answer(subject, worst, "; ".join(parts), basis, comparison=False)


def _attainment(rows: Sequence[PassRow]) -> float | None:
    vals = [r.value("slo_attainment") for r in rows if r.value("slo_attainment") is not None]
    return sum(vals) / len(vals) if vals else None


__all__ = ["Answer", "RUN_COLOURS", "TERMINAL", "comparison_answer", "job_answers", "mode_answer",
           "goodput_phrase", "pair_answers"]
