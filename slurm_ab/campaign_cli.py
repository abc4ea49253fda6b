"""The CLI's campaign side: options, planning, follow-and-collect, report and compare of campaigns.

cli.py keeps the commands; it calls in here when more than one mode is given, when campaign
options are used, or when a run directory holds a campaign.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .errors import UsageError


META = "slurm_ab.campaign."      # click ctx.meta keys of the options the commands do not take


def _remember(ctx, param, value):
    """--launches and --plan reach plan() through the click context, so the commands' signatures
    (dry-run, render, submit) stay as they are."""
    if value is not None:
        ctx.meta[META + param.name] = value
    return value


def campaign_options(f):
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


def wants_campaign(modes, repeats, concurrency, order, burn_in, launches=None) -> bool:
    return len(modes) > 1 or any(x is not None for x in (repeats, concurrency, order, burn_in, launches))


def plan(src, modes, run_id, repeats, concurrency, order, burn_in):
    """A single run's plan exactly as before for one mode without campaign options; else the
    campaign's (validated: every mode, shapes, options). --plan CAMPAIGN sets launches, repeats
    and order from the planner."""
    from .campaign_plan import CampaignOptions, plan_campaign
    from .sources import plan_for

    extra = _meta()
    launches = extra.get("launches")
    if extra.get("plan_from"):
        if launches is not None or repeats is not None:
            raise UsageError("--plan chooses --launches and --repeats: give one or the other")
        launches, repeats, order = planned_shape(src, modes, extra["plan_from"])
    if not wants_campaign(modes, repeats, concurrency, order, burn_in, launches):
        return plan_for(src, modes[0], run_id)
    return plan_campaign(src, list(modes), run_id, CampaignOptions(repeats, concurrency, order, burn_in, launches))


def planned_shape(src, modes, ref: str) -> tuple[int, int, str]:
    """(launches, repeats, order) of the planner's design from a campaign's measurements."""
    import os

    from . import planner_cli, rundir

    run_dir = rundir.find(ref, Path(os.environ.get("SLURM_AB_RESULTS", "results")))
    p, _ = planner_cli.plan_for_modes(src, tuple(modes), run_dir, {})
    if p.design is None:
        raise UsageError(f"--plan {ref}: {p.reason}")
    click.echo(f"plan: {p.design.launches} launches per mode x {p.design.repeats} passes, "
               f"{p.design.order} order ({p.design.node_hours(p.costs):.1f} node-hours)", err=True)
    return p.design.launches, p.design.repeats, p.design.order


def is_campaign(run_dir: Path) -> bool:
    from .collect.campaign import campaign_of

    return campaign_of(run_dir) is not None


def collect_text(result: dict, passes: bool = False) -> str:
    from .collect.campaign import campaign_md

    return campaign_md(result, passes=passes)


def passes_ok(result: dict) -> bool:
    return bool(result["passes"]) and all(r["verdict"] == "ok" for r in result["passes"])


def follow_and_collect(job_id: str, run_dir: Path) -> None:
    """`submit --wait` / `watch` of a campaign: follow the job, collect, print the tables."""
    from .collect.run import collect_campaign_and_write
    from .progress import follow_live
    from .rundir import Layout

    state = follow_live(job_id, run_dir)        # live progress of the launch running now
    click.echo(f"job {job_id} ended: {state}")
    result, _ = collect_campaign_and_write(run_dir, job_id=job_id)
    click.echo(collect_text(result))
    md = Layout(run_dir).summary("summary.md")
    click.echo(f"summary: {md}" if md.exists() else "no summary written")
    if not passes_ok(result):
        sys.exit(1)


def collect(run_dir: Path, passes: bool = False) -> None:
    from .collect.run import collect_campaign_and_write

    result, written = collect_campaign_and_write(run_dir)
    click.echo(collect_text(result, passes=passes))
    if result.get("running"):
        click.echo(f"{run_dir}: the job is still running; nothing final written")
    else:
        click.echo(f"wrote {', '.join(p.name for p in written)}" if written else "summary files unchanged")


def report(run_dir: Path, passes: bool, fmt: str) -> str:
    """`report CAMPAIGN [--passes]`: the aggregate table (or every pass) in md, csv or json."""
    import json

    from .collect.campaign import campaign_csv
    from .collect.run import collect_campaign_and_write

    result, _ = collect_campaign_and_write(run_dir)
    if fmt == "md":
        return collect_text(result, passes=passes)
    if fmt == "csv":
        if passes:
            return campaign_csv(result)
        import pandas as pd
        flat = [{"mode": a["mode"], "concurrency": a["concurrency"], "passes_ok": a["passes_ok"],
                 "passes": a["passes"], **{f"{m}_{k}": v for m, agg in a["metrics"].items()
                                           for k, v in agg.items()}} for a in result["aggregates"]]
        return pd.DataFrame(flat).to_csv(index=False, lineterminator="\n")
    return json.dumps(result["passes"] if passes else result["aggregates"], indent=2, default=str) + "\n"


def _side(ref: str, find) -> tuple[str, list[dict], str | None]:
    """(name, ok pass rows, variance) of one side of a comparison: a campaign of one mode or a
    single run (a run = one pass)."""
    from .collect import collect_and_write
    from .collect.run import collect_campaign_and_write
    from .collect.tables import numeric_row

    run_dir = find(ref)
    if is_campaign(run_dir):
        result, _ = collect_campaign_and_write(run_dir)
        modes = result["campaign"]["modes"]
        if len(modes) != 1:
            raise UsageError(f"{ref} is a campaign of {len(modes)} modes: compare it alone "
                             f"(slurm-ab compare {ref}) or name campaigns of one mode each")
        return modes[0], result["passes"], result["variance"]
    s = collect_and_write(run_dir)[0].only
    row = dict(numeric_row(s), concurrency=s.spec.max_concurrency or 0, repeat=1, launch=1)
    return s.mode or s.run_id, [row], None


def compare(refs: list[str], fmt: str, find) -> str:
    """`compare CAMPAIGN` (its first mode against each other, per concurrency) or
    `compare A B` (runs or one-mode campaigns; runs count as one pass each)."""
    from .collect.campaign import comparison_json, comparison_section
    from .collect.run import collect_campaign_and_write

    if len(refs) == 1:
        result, _ = collect_campaign_and_write(find(refs[0]))
        if fmt == "json":
            return comparison_json(result)
        if not result["comparisons"]:
            raise UsageError(f"{refs[0]} has one mode: nothing to compare inside it")
        return "\n".join(comparison_section(result, cmp) for cmp in result["comparisons"])
    return pair_text(pair(refs, find), fmt)


def pair(refs: list[str], find) -> tuple[str, list[dict], str, list[dict], str]:
    """(A's name, A's ok pass rows, B's name, B's rows, what the intervals cover) of
    `compare A B`: each side collected once, whatever is printed from it."""
    (na, ra, va), (nb, rb, vb) = _side(refs[0], find), _side(refs[1], find)
    if na == nb:
        na, nb = f"A: {refs[0]}", f"B: {refs[1]}"
    variance = ("across runs: A and B come from separate jobs (separate launches), so the "
                "intervals include launch-to-launch variance between the two sides"
                if va is None and vb is None else
                f"A: {va or 'one run'}; B: {vb or 'one run'}")
    return na, ra, nb, rb, variance


def pair_text(sides: tuple, fmt: str) -> str:
    """A pair's comparison as the table (md) or per-metric records (json)."""
    import json

    from .collect import campaign_tables as ct

    na, ra, nb, rb, variance = sides
    if fmt == "json":
        return json.dumps({"variance": variance, "metrics": ct.comparison(ra, rb)}, indent=2) + "\n"
    return ct.comparison_table(na, nb, ra, rb, variance)
