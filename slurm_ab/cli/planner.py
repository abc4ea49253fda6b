"""`slurm-ab plan A B` and `submit --plan`: the planner's inputs from a finished campaign or from
stated values, and its answer as text. The planning itself is planner.py (pure).

From a campaign: launch and pass CoV of the primary metric (ab_stats.components, REML over its ok
passes) and the first-pass effect. Times are the one time model's (model/duration.py): the same
[estimate] figures and earlier runs under paths.results that dry-run --time auto reads (the
campaign among them when it lies there), or --load-min / --pass-min when stated; the time limit is
the job's own (pinned, else the partition's MaxTime) unless --time-limit-min is given.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..model.errors import UsageError
from ..ab_stats.planner import Costs, Noise, Runs, Target

if TYPE_CHECKING:
    from ..ab_stats.components import Components, FirstPass


def from_campaign(run_dir: Path, primary: str = "output_tps") -> tuple[Components, FirstPass]:
    """The planner's noise inputs measured in a job (its collected summary, read back): the launch
    and pass components of the primary metric (the steady-state figure when every ok pass has one)
    and the first-pass effect."""
    from ..ab_stats.components import components, first_pass
    from ..collect.rows import columns, ok_rows, pass_rows
    from ..collect.write import read_summary
    from ..model.rundir import RELATIVE

    job = read_summary(run_dir)
    if job is None:
        raise UsageError(f"{run_dir} has no {RELATIVE.summary('json')}: collect it first "
                         f"(slurm-ab collect {run_dir.name})")
    rows = ok_rows(pass_rows(job))
    if not rows:
        raise UsageError(f"{run_dir}: no ok pass to estimate variance from")
    metric = "steady_output_tps" if primary == "output_tps" and all(
        r.value("steady_output_tps") is not None for r in rows) else primary
    return components(columns(rows), metric), first_pass(columns(rows), metric)


def inputs(src_campaign: Optional[Path], launch_cov, pass_cov, primary: str) -> tuple[Noise, list[str]]:
    """(Noise, notes): stated values win over measured ones; what neither gives is an error
    naming the option."""
    notes: list[str] = []
    if src_campaign is not None:
        comp, first = from_campaign(src_campaign, primary)
        notes.append(f"from {src_campaign.name}: {comp.metric} over {comp.passes} passes in {comp.launches} "
                     f"launches: launch CoV {_pct(comp.launch_cov)}, pass CoV {_pct(comp.pass_cov)}"
                     + (f" ({comp.note})" if comp.note else ""))
        notes.append(first.text())
        launch_cov = launch_cov if launch_cov is not None else comp.launch_cov
        pass_cov = pass_cov if pass_cov is not None else comp.pass_cov
    missing = [o for o, v in (("--launch-cov", launch_cov), ("--pass-cov", pass_cov)) if v is None]
    if missing:
        raise UsageError(f"give {' and '.join(missing)} (percent): "
                         + ("the campaign cannot estimate it" if src_campaign else "or --from CAMPAIGN"))
    return Noise(launch_cov, pass_cov), notes


def _pct(x) -> str:
    return "not estimable" if x is None else f"{x:.2%}"


def percent(text: Optional[str]) -> Optional[float]:
    """'5%' or '5' -> 5.0."""
    if text is None:
        return None
    try:
        return float(str(text).strip().rstrip("%"))
    except ValueError:
        raise UsageError(f"{text!r} is not a percentage (e.g. 5%)") from None


def costs(exp, modes: tuple, load_min: Optional[float], pass_min: Optional[float],
          time_limit_min: Optional[float]) -> tuple[Costs, list[str]]:
    """The design's costs through the one time model, as dry-run --time auto would size the same
    campaign: the [estimate] figures, earlier runs under paths.results, a stated --load-min or
    --pass-min; the time limit the job would get (pinned, else the partition's MaxTime)."""
    from ..model.duration import (Figure, format_time, history_for, limit_bound, partition_limit,
                                  time_model)

    time = time_model(exp, modes, history_for(exp),
                      Figure(load_min * 60.0, "--load-min") if load_min is not None else None,
                      Figure(pass_min * 60.0, "--pass-min") if pass_min is not None else None)
    b = exp.benchmark
    runs = Runs(tuple(modes), (b.concurrency,), b.num_prompts, b.prompts_per_concurrency, b.burn_in)
    notes = []
    if time_limit_min is not None:
        limit = int(time_limit_min * 60)
    else:
        part = partition_limit(exp) if exp.cluster.time_limit == "auto" else None
        limit = limit_bound(exp, part)
        notes.append(f"time limit: {format_time(limit) if limit else 'none'} ("
                     + (f"cluster.time_limit = {exp.cluster.time_limit!r}" if part is None else
                        f"cluster.time_limit = 'auto': {part.text()}") + ")")
    return Costs(time, runs, exp.replicas * exp.nodes_per_replica, limit), notes


def target(detect: Optional[str], halfwidth: Optional[str], power: float) -> Target:
    if halfwidth is not None:
        return Target(halfwidth_pct=percent(halfwidth))
    return Target(detect_pct=percent(detect) if detect is not None else 5.0, power=power)


def plan_for_modes(src, modes: tuple, campaign: Optional[Path], opts: dict) -> tuple:
    """(Plan, notes) for the modes' experiment: its nodes, time model and time limit, the
    campaign's or the stated noise."""
    from ..ab_stats.planner import plan
    from ..model.sources import load_experiment

    exp = load_experiment(src, modes[0])
    noise, notes = inputs(campaign, opts.get("launch_cov"), opts.get("pass_cov"), exp.benchmark.primary_metric)
    c, limit_notes = costs(exp, tuple(modes), opts.get("load_min"), opts.get("pass_min"), opts.get("time_limit_min"))
    return plan(noise, c, target(opts.get("detect"), opts.get("halfwidth"), opts.get("power", 0.8)),
                campaigns=opts.get("campaigns", 1000)), notes + limit_notes
