"""The CLI's campaign side: options, planning, follow-and-collect, report and compare of campaigns.

cli/main.py keeps the commands; every job is planned here (plan) and a job of several timed
passes is reported and compared here.
"""
from __future__ import annotations

from pathlib import Path

import click

from ..model.errors import UsageError


META = "slurm_ab.model.campaign."      # click ctx.meta keys of the options the commands do not take


def _remember(ctx, param, value):
    """--launches and --plan reach plan() through the click context, so the commands' signatures
    (dry-run, render, submit) stay as they are."""
    if value is not None:
        ctx.meta[META + param.name] = value
    return value


def campaign_options(f):
    f = click.option("--profile", "profile", default=None, metavar="extra|PASS", expose_value=False,
                     callback=_remember,
                     help="Profile a pass (profile.target): 'extra' adds a profiled pass after the timed "
                          "ones of each mode's first launch, PASS (e.g. c8-r2) profiles that pass; "
                          "SGLang's traces of every GPU rank go to the launch's profile directory, the pass "
                          "is left out of every statistic.")(f)
    f = click.option("--margin", default=None, metavar="PCT", expose_value=False, callback=_remember,
                     help="Equivalence margin: an interval inside ±PCT that includes 0 reads 'equivalent "
                          "within ±PCT' (default: benchmark.margin_pct = 3; 0: none).")(f)
    f = click.option("--sequential/--fixed", "sequential", default=None, expose_value=False, callback=_remember,
                     help="Sequential: a look after every counterbalanced block (A B B A), stopping when the "
                          "answer is clear (better/worse, or equivalent within --margin); at most "
                          "benchmark.max_blocks blocks, or --launches 2K. Default: benchmark.sequential (off).")(f)
    f = click.option("--prior-from", "prior_from", default=None, metavar="CAMPAIGN", expose_value=False,
                     callback=_remember,
                     help="A sequential campaign's prior: the launch-mean variance (and its degrees of "
                          "freedom) of the primary metric measured in CAMPAIGN (a collected campaign of 2+ "
                          "launches per mode, as `plan --from` reads it), pooled with each look's own so "
                          "the first look can decide; dropped at a look whose own variance exceeds it "
                          "(F test; docs/statistics.md). Needs --sequential.")(f)
    f = click.option("--plan", "plan_from", default=None, metavar="CAMPAIGN", expose_value=False,
                     callback=_remember,
                     help="Launches and passes from the planner (slurm-ab plan): variance and times "
                          "measured in CAMPAIGN, target: detect 5% at 80% power.")(f)
    f = click.option("--burn-in/--no-burn-in", "burn_in", default=None,
                     help="A discarded pass at the start of every launch (default: benchmark.burn_in).")(f)
    f = click.option("--order", type=click.Choice(["counterbalanced", "interleaved", "blocked"]), default=None,
                     help="counterbalanced: A B B A A B B A (a drift cancels, launch variance measured); "
                          "interleaved: A B A B; blocked: each mode launched once (verdicts 'within-launch "
                          "only'). Default: benchmark.order (counterbalanced).")(f)
    f = click.option("--concurrency", "concurrency", default=None, metavar="C[,C...]",
                     help="Concurrency sweep, e.g. 1,8 (default: benchmark.concurrency).")(f)
    f = click.option("--request-rate", "rates", default=None, metavar="R[,R...]", expose_value=False,
                     callback=_remember,
                     help="Open-loop passes: requests sent at each rate (req/s, Poisson arrivals), e.g. "
                          "1,2,4 (default: benchmark.request_rates; with --concurrency too: both).")(f)
    f = click.option("--launches", type=int, default=None, expose_value=False, callback=_remember,
                     help="Server launches per mode (default: 1 for one mode, benchmark.compare_launches "
                          "= 4 for a comparison).")(f)
    f = click.option("--repeats", type=int, default=None,
                     help="Timed passes per (mode, concurrency) in each launch (default: 1 for one mode, "
                          "benchmark.compare_repeats = 2 for a comparison).")(f)
    return f


def _meta() -> dict:
    ctx = click.get_current_context(silent=True)
    return {k[len(META):]: v for k, v in (ctx.meta.items() if ctx else ()) if k.startswith(META)}


def sequential_fixed_launches() -> bool:
    """A sequential campaign whose launches the user fixed (--launches or --plan): its maximum
    is not fitted to the time limit."""
    extra = _meta()
    return extra.get("launches") is not None or bool(extra.get("plan_from"))


def plan(src, modes, run_id, repeats, concurrency, order, burn_in, launches_override=None):
    """The job's plan (validated: every mode, shapes, options; what is not given comes from
    [benchmark]: one mode runs one launch and one pass by default). --plan CAMPAIGN sets
    launches, repeats and order from the planner."""
    from ..job.campaign_plan import CampaignOptions, plan_job
    from .planner import pilot_prior

    import dataclasses
    import json

    extra = _meta()
    launches = extra.get("launches") if launches_override is None else launches_override
    if extra.get("profile") is not None:
        src = dataclasses.replace(src, sets=(*src.sets, f"profile.target={json.dumps(extra['profile'])}"))
    if extra.get("plan_from"):
        if launches is not None or repeats is not None:
            raise UsageError("--plan chooses --launches and --repeats: give one or the other")
        launches, repeats, order = planned_shape(src, modes, extra["plan_from"])
    prior = pilot_prior(src, modes, extra["prior_from"]) if extra.get("prior_from") else None
    return plan_job(src, list(modes), run_id, CampaignOptions(repeats, concurrency, order, burn_in, launches,
                                                              extra.get("sequential"), extra.get("margin"),
                                                              extra.get("rates"), prior=prior))


def fit_blocks(make, fit):
    """A sequential campaign at the most blocks (benchmark.max_blocks down to 2) whose job fits
    its time limit (`fit`: duration.fit_time_limit, which refuses a job too long for a pinned
    limit or the partition's MaxTime); `make(launches)` plans it with that many launches per mode."""
    from ..model.campaign import LAUNCHES_PER_BLOCK, MIN_BLOCKS
    from ..model.errors import ConfigErrors

    first = make(None)
    blocks = len(first.campaign.campaign.blocks)
    for k in range(blocks, MIN_BLOCKS - 1, -1):
        try:
            p = fit(first if k == blocks else make(LAUNCHES_PER_BLOCK * k))
        except ConfigErrors:
            if k == MIN_BLOCKS:
                raise
            continue
        if k < blocks:
            click.echo(f"sequential: at most {k} blocks fit the time limit (benchmark.max_blocks = {blocks})",
                       err=True)
        return p


def planned_shape(src, modes, ref: str) -> tuple[int, int, str]:
    """(launches, repeats, order) of the planner's design from a campaign's measurements."""
    import os

    from . import planner as planner_cli
    from ..model import rundir

    run_dir = rundir.find(ref, Path(os.environ.get("SLURM_AB_RESULTS", "results")))
    extra = _meta()
    p, _ = planner_cli.plan_for_modes(src, tuple(modes), run_dir, {"sequential": extra.get("sequential"),
                                                                   "margin": extra.get("margin"),
                                                                   "prior_from": extra.get("prior_from")})
    if p.design is None:
        raise UsageError(f"--plan {ref}: {p.reason}")
    click.echo(f"plan: {p.design.launches} launches per mode x {p.design.repeats} passes, "
               f"{p.design.order} order ({p.design.node_hours(p.costs):.1f} node-hours)", err=True)
    return p.design.launches, p.design.repeats, p.design.order


def shown_as_campaign(run_dir: Path) -> bool:
    """A job of several timed passes: reported by its launches, aggregates and comparisons (a
    job of one pass by the seed's run tables, tables.campaign.the_pass)."""
    from ..model.rundir import open_run

    return len(open_run(run_dir).campaign.passes) > 1


def report(run_dir: Path, passes: bool, fmt: str, width: int | None = None) -> str:
    """`report CAMPAIGN [--passes]`: the aggregate table (or every pass) in md, csv or json (md
    fitted to `width` columns when given)."""
    import json

    from ..collect import collect_and_write
    from ..collect.rows import aggregates, pass_rows
    from ..tables.campaign import campaign_md
    from ..tables.table import numeric_frame

    cs, _ = collect_and_write(run_dir, report=False)   # --html draws its own page
    if fmt == "md":
        return campaign_md(cs, passes=passes, width=width)
    rows = pass_rows(cs)
    if fmt == "csv":
        if passes:
            return numeric_frame([r.to_dict() for r in rows], "csv")
        flat = [{"mode": a.mode, "concurrency": a.concurrency, "passes_ok": a.passes_ok,
                 "passes": a.passes, **{f"{m}_{k}": v for m, agg in a.metrics.items()
                                        for k, v in agg.to_dict().items()}} for a in aggregates(rows)]
        return numeric_frame(flat, "csv")
    out = [r.to_dict() for r in rows] if passes else [a.to_dict() for a in aggregates(rows)]
    return json.dumps(out, indent=2, default=str) + "\n"


def _side(ref: str, find) -> tuple[str, list, str | None, float, str]:
    """(name, pass rows, variance, equivalence margin, run id) of one side of a comparison: a job
    of one mode (a job of one pass says no variance: no interval comes from it)."""
    from ..collect import collect_and_write
    from ..collect.rows import pass_rows

    cs, _ = collect_and_write(find(ref), report=False)
    modes = cs.campaign.modes
    if len(modes) != 1:
        raise UsageError(f"{ref} is a campaign of {len(modes)} modes: compare it alone "
                         f"(slurm-ab compare {ref}) or name campaigns of one mode each")
    return (modes[0], pass_rows(cs), cs.campaign.variance if len(cs.passes) > 1 else None, cs.campaign.margin_pct,
            cs.run_id)


def compare(refs: list[str], fmt: str, find, margin: str | None = None, trust_jobs: bool = False,
            width: int | None = None, paint=None) -> str:
    """`compare CAMPAIGN` (its first mode against each other, per concurrency) or
    `compare A B` (runs or one-mode campaigns; runs count as one pass each): the answer lines
    first, then each comparison's table (md: fitted to `width` columns when given). --margin
    restates the comparisons with another equivalence margin."""
    from dataclasses import replace

    from ..collect import collect_and_write
    from ..collect.rows import comparisons, pass_rows
    from ..tables.campaign import comparison_json, comparison_section

    if len(refs) == 1:
        cs, _ = collect_and_write(find(refs[0]), report=False)
        if margin is not None:          # the collected job's comparisons with another margin
            cs = replace(cs, campaign=replace(cs.campaign, margin_pct=margin_of(margin, None)))
        if fmt == "json":
            return comparison_json(cs)
        rows = pass_rows(cs)
        found = comparisons(cs, rows)
        if not found:
            raise UsageError(f"{refs[0]} has one mode: nothing to compare inside it")
        from ..tables.campaign import answers
        head = "".join(a.text(width, paint) + "\n" for a in answers(cs, rows)) + "\n"
        return head + "\n".join(comparison_section(cs, cmp, rows, width) for cmp in found)
    return pair_text(pair(refs, find, margin, trust_jobs), fmt, width, paint=paint)


def _concurrencies(rows: list) -> list[int]:
    return sorted({r.concurrency for r in rows})


def margin_of(text: str | None, sides_margin: float | None) -> float | None:
    """--margin (percent, '3%' or '3'), else the A side's benchmark.margin_pct."""
    if text is None:
        return sides_margin
    try:
        value = float(str(text).strip().rstrip("%"))
    except ValueError:
        value = -1.0
    if not 0 <= value < 50:
        raise UsageError(f"--margin {text!r}: not an equivalence margin in percent (allowed: a number in "
                         "[0, 50), e.g. 3%; 0: no equivalence verdicts)")
    return value


def pair(refs: list[str], find, margin: str | None = None, trust_jobs: bool = False) -> tuple:
    """(A's name, A's ok pass rows, B's name, B's rows, what the intervals cover, margin, confound)
    of `compare A B`: each side collected once, whatever is printed from it. Passes of different
    concurrencies are never pooled: a sweep side is cut to the concurrencies both sides ran (each
    compared on its own by pair_text); none in common is a usage error naming them (exit 2). Two
    jobs: job and mode are confounded, so verdicts are qualified '(separate jobs)' unless
    `trust_jobs` (--trust-jobs) says the jobs are alike. Sides of one mode are named by run id."""
    from ..ab_stats.verdicts import ACROSS_JOBS

    (na, ra, va, ma, ida), (nb, rb, vb, _, idb) = _side(refs[0], find), _side(refs[1], find)
    if na == nb:                    # one mode on both sides: the sides are their runs
        na, nb = (f"A: {ida}", f"B: {idb}") if ida != idb else (f"A: {refs[0]}", f"B: {refs[1]}")
    ca, cb = _concurrencies(ra), _concurrencies(rb)
    common = sorted(set(ca) & set(cb))
    if not common:
        raise UsageError(f"{refs[0]} ran concurrency {', '.join(map(str, ca)) or '?'} and {refs[1]} "
                         f"ran {', '.join(map(str, cb)) or '?'}: passes of different concurrencies "
                         "measure different loads and are not compared (run both at one C)")
    variance = ("across runs: A and B come from separate jobs (separate launches), so the "
                "intervals include launch-to-launch variance between the two sides"
                if va is None and vb is None else
                f"A: {va or 'one run'}; B: {vb or 'one run'}")
    variance += ("; job and mode confounded: verdicts across jobs are qualified '(separate jobs)' "
                 "(--trust-jobs: plain verdicts, if job-to-job variance is negligible)" if not trust_jobs else
                 "; job and mode confounded: plain verdicts because --trust-jobs says the jobs are alike")
    left_out = sorted(set(ca) ^ set(cb))
    if left_out:
        variance += (f"; compared at concurrency {', '.join(map(str, common))} only (the passes at "
                     f"{', '.join(map(str, left_out))} have no counterpart on the other side)")
    return (na, [r for r in ra if r.concurrency in common], nb, [r for r in rb if r.concurrency in common],
            variance, margin_of(margin, ma), None if trust_jobs else ACROSS_JOBS)


def by_concurrency(sides: tuple) -> list[tuple[int, list, list]]:
    """(C, A's rows at C, B's rows at C) for every concurrency both sides ran."""
    ra, rb = sides[1], sides[3]
    return [(c, [r for r in ra if r.concurrency == c], [r for r in rb if r.concurrency == c])
            for c in sorted(set(_concurrencies(ra)) & set(_concurrencies(rb)))]


def pair_comparisons(sides: tuple) -> list[tuple[int, list]]:
    """Per concurrency both sides ran: (C, ab_stats.family.Row of every metric, the primary first);
    the concurrencies' primaries one Holm family, the margin and the confound applied."""
    from ..collect.rows import family

    per_c = by_concurrency(sides)
    tables = family([(ra, rb) for _, ra, rb in per_c], margin_pct=sides[5] or None, confound=sides[6])
    return [(c, t) for (c, _, _), t in zip(per_c, tables)]


def pair_records(sides: tuple) -> list[dict]:
    """Per concurrency both sides ran: {concurrency, metrics: the ab_stats records} (json)."""
    return [{"concurrency": c, "metrics": [r.to_dict() for r in rows]} for c, rows in pair_comparisons(sides)]


def pair_answers(sides: tuple) -> list:
    """The answer line of each concurrency both sides ran (two jobs: separate launches), the
    sides named by their run ids: the primary row of the table printed below it (pair_comparisons)."""
    from ..tables.answer import comparison_answer

    ra, rb = sides[1], sides[3]
    return [comparison_answer(ra[0].columns["run_id"], rb[0].columns["run_id"], c, rows, separate=True)
            for c, rows in pair_comparisons(sides)]


def pair_text(sides: tuple, fmt: str, width: int | None = None, head: bool = True, paint=None) -> str:
    """A pair's comparison: its answer lines (unless `head` is false: a page draws them itself),
    then the table (md; fitted to `width` columns when given) or per-metric records (json), one
    per concurrency."""
    import json

    from ..tables.campaign import comparison_table

    na, _, nb, _, variance = sides[:5]
    if fmt == "json":
        out = pair_records(sides)
        return json.dumps({"variance": variance, "metrics": out[0]["metrics"] if len(out) == 1 else [],
                           "by_concurrency": out}, indent=2) + "\n"
    head = "".join(a.text(width, paint) + "\n" for a in pair_answers(sides)) + "\n" if head else ""
    per_c = by_concurrency(sides)
    stated = dict(pair_comparisons(sides))
    if len(per_c) == 1:
        return head + comparison_table(na, nb, per_c[0][1], per_c[0][2], variance, rows=stated[per_c[0][0]],
                                       width=width)
    return head + "\n".join(f"### Concurrency {c}\n\n" + comparison_table(na, nb, ra, rb, variance, rows=stated[c],
                                                                          width=width)
                             for c, ra, rb in per_c)
