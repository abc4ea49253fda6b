"""`slurm-ab plan A B` and `submit --plan`: the planner's inputs from a finished campaign or from
stated values, and its answer as text. The planning itself is planner.py (pure).

From a campaign: launch and pass CoV of the primary metric (ab_stats.components, REML over its ok
passes) and the first-pass effect. Times are the one time model's (model/duration.py): the same
[estimate] figures and earlier runs under paths.results that dry-run --time auto reads (the
campaign among them when it lies there), or --load-min / --pass-min when stated; the time limit is
the job's own (pinned, else the partition's MaxTime) unless --time-limit-min is given.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..model.errors import UsageError
from ..ab_stats.planner import Costs, Noise, Runs, Target, pilot_noise

if TYPE_CHECKING:
    from ..ab_stats.components import Components, FirstPass, Serial


def from_campaign(run_dir: Path, primary: str = "output_tps") -> tuple[Components, FirstPass, Serial]:
    """The planner's noise inputs measured in a job (its collected summary, read back): the launch
    and pass components of the primary metric (the steady-state figure when every ok pass has one)
    with their degrees of freedom, the first-pass effect, AR(1) and drift."""
    from ..ab_stats.components import components, first_pass, serial
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
    return components(columns(rows), metric), first_pass(columns(rows), metric), serial(columns(rows), metric)


def pilot_prior(src, modes, ref: str):
    """--prior-from CAMPAIGN: the pilot's noise of the primary metric (as `plan --from` measures
    it: REML components with their degrees of freedom, AR(1) and drift) for a sequential
    campaign's looks; ConfigErrors naming the option when the campaign cannot give one."""
    import os

    from ..ab_stats.planner import PilotPrior
    from ..model import rundir
    from ..model.errors import ConfigError, ConfigErrors
    from ..model.sources import load_experiment

    allowed = "a collected campaign (run directory, run id or job id) with 2 or more launches per mode"
    try:
        run_dir = rundir.find(ref, Path(os.environ.get("SLURM_AB_RESULTS", "results")))
        primary = load_experiment(src, modes[0]).benchmark.primary_metric
        comp, _, ser = from_campaign(run_dir, primary)
    except UsageError as e:
        raise ConfigErrors([ConfigError("--prior-from", ref, str(e), allowed)]) from None
    if comp.launch_cov is None or comp.pass_cov is None or not comp.launch_df:
        raise ConfigErrors([ConfigError("--prior-from", ref, "no launch-level variance in that campaign ("
                                        + (comp.note or "one launch per mode") + ")", allowed)])
    return PilotPrior(ref, pilot_noise(comp, ser), f"{run_dir.name} ({comp.metric}, {comp.launches} launches, "
                      f"{ser.repeats} passes per launch)")


def inputs(src_campaign: Optional[Path], launch_cov, pass_cov, primary: str, ar1=None, drift_pct=None
           ) -> tuple[Noise, list[str]]:
    """(Noise, notes): stated values win over measured ones; what neither gives is an error
    naming the option. A campaign's estimates carry their degrees of freedom (the planner sizes
    on their upper confidence bound); stated values are taken as exact."""
    notes: list[str] = []
    launch_df = pass_df = None
    k0 = 0
    if src_campaign is not None:
        comp, first, ser = from_campaign(src_campaign, primary)
        notes.append(f"from {src_campaign.name}: {comp.metric} over {comp.passes} passes in {comp.launches} "
                     f"launches: launch CoV {_pct(comp.launch_cov)}, pass CoV {_pct(comp.pass_cov)}"
                     + (f" ({comp.note})" if comp.note else ""))
        notes.append(first.text())
        notes.append(ser.text())
        if ar1 is None and ser.ar1 is not None:
            ar1 = ser.ar1
        if drift_pct is None and ser.drift_pct is not None:
            drift_pct = ser.drift_pct
        k0 = ser.repeats
        stated = launch_cov is not None or pass_cov is not None
        if not stated and comp.launch_cov is not None and comp.pass_cov is not None and comp.launch_df > 0:
            return pilot_noise(comp, ser, ar1, drift_pct), notes
        else:
            launch_cov = launch_cov if launch_cov is not None else comp.launch_cov
            pass_cov = pass_cov if pass_cov is not None else comp.pass_cov
    missing = [o for o, v in (("--launch-cov", launch_cov), ("--pass-cov", pass_cov)) if v is None]
    if missing:
        raise UsageError(f"give {' and '.join(missing)} (percent): "
                         + ("the campaign cannot estimate it" if src_campaign else "or --from CAMPAIGN"))
    if launch_cov == 0 and pass_cov == 0:
        raise UsageError("--launch-cov and --pass-cov are both 0: no noise to plan against (allowed: at least "
                         "one > 0; measure them with --from CAMPAIGN)")
    return Noise(launch_cov, pass_cov, ar1 or 0.0, drift_pct or 0.0, launch_df=launch_df, pass_df=pass_df,
                 pilot_repeats=k0), notes


def check_options(opts: dict) -> None:
    """Every stated planner option within its range; ConfigErrors naming option, value and the
    allowed range (exit 2) otherwise."""
    from ..model.errors import ConfigError, ConfigErrors

    errs = []

    def rng(name, value, ok, allowed):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and ok(value)):
            errs.append(ConfigError(name, value, "out of range", allowed))

    rng("--launch-cov", _pct100(opts.get("launch_cov")), lambda v: 0 <= v < 100, "a CoV in percent, 0 <= x < 100")
    rng("--pass-cov", _pct100(opts.get("pass_cov")), lambda v: 0 <= v < 100, "a CoV in percent, 0 <= x < 100")
    rng("--load-min", opts.get("load_min"), lambda v: v > 0, "minutes > 0")
    rng("--pass-min", opts.get("pass_min"), lambda v: v > 0, "minutes > 0")
    rng("--time-limit-min", opts.get("time_limit_min"), lambda v: v > 0, "minutes > 0")
    rng("--power", opts.get("power"), lambda v: 0 < v < 1, "a probability, 0 < x < 1 (e.g. 0.8)")
    rng("--ar1", opts.get("ar1"), lambda v: 0 <= v < 1, "a correlation, 0 <= x < 1")
    rng("--drift", opts.get("drift_pct"), lambda v: -50 < v < 50, "percent per pass, -50 < x < 50")
    for name, key, ok, allowed in (
            ("--detect", "detect", lambda v: v != 0 and -100 < v < 1000,
             "a change in percent, not 0, > -100 (a negative change: a decrease of that size)"),
            ("--halfwidth", "halfwidth", lambda v: 0 < v < 100, "percent, 0 < x < 100"),
            ("--margin", "margin", lambda v: 0 <= v < 50, "percent, 0 <= x < 50")):
        text = opts.get(key)
        if text is None:
            continue
        try:
            v = percent(text)
        except UsageError:
            errs.append(ConfigError(name, text, "not a percentage", allowed))
            continue
        rng(name, v, ok, allowed)
    if errs:
        raise ConfigErrors(errs)


def _pct100(x):
    return None if x is None else x * 100.0


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

    from ..model.campaign import prompts_for

    b = exp.benchmark
    runs = Runs(tuple(modes), (b.concurrency,), b.num_prompts, b.prompts_per_concurrency, b.burn_in)
    passes = [(prompts_for(c, b.num_prompts, b.prompts_per_concurrency), c) for c in runs.concurrencies]
    time = time_model(exp, modes, history_for(exp),
                      Figure(load_min * 60.0, "--load-min") if load_min is not None else None,
                      Figure(pass_min * 60.0, "--pass-min") if pass_min is not None else None,
                      sched=[(m, passes) for m in modes])
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
    campaign's or the stated noise, and a sequential design's prior (--prior-from, as submit
    reads it; ConfigErrors naming the option without --sequential)."""
    from ..ab_stats.planner import plan
    from ..model.campaign import resolve_spending
    from ..model.errors import ConfigError, ConfigErrors
    from ..model.sources import load_experiment

    check_options(opts)
    exp = load_experiment(src, modes[0])
    sequential = opts.get("sequential")
    sequential = exp.benchmark.sequential if sequential is None else sequential
    prior = None
    if opts.get("prior_from"):
        if not sequential:
            raise ConfigErrors([ConfigError("--prior-from", opts["prior_from"], "a prior is pooled into a sequential "
                                            "design's looks; this design is fixed", "with --sequential (or "
                                            "benchmark.sequential = true)")])
        prior = pilot_prior(src, modes, opts["prior_from"])      # as submit --prior-from reads it
    noise, notes = inputs(campaign, opts.get("launch_cov"), opts.get("pass_cov"), exp.benchmark.primary_metric,
                          opts.get("ar1"), opts.get("drift_pct"))
    c, limit_notes = costs(exp, tuple(modes), opts.get("load_min"), opts.get("pass_min"), opts.get("time_limit_min"))
    margin = percent(opts.get("margin")) if opts.get("margin") is not None else exp.benchmark.margin_pct
    return plan(noise, c, target(opts.get("detect"), opts.get("halfwidth"), opts.get("power", 0.8)),
                campaigns=opts.get("campaigns", 1000), sequential=bool(sequential),
                margin_pct=margin, spending=resolve_spending(exp.benchmark.spending, prior is not None), prior=prior,
                plain_spending=resolve_spending(exp.benchmark.spending, False)), notes + limit_notes
