"""`slurm-ab plan A B` and `submit --plan`: the planner's inputs from a finished campaign or from
stated values, and its answer as text. The planning itself is planner.py (pure).

From a campaign: launch and pass CoV of the primary metric (ab_stats.components, REML over its ok
passes), model-load time (server_launch -> last replica ready), warm-ups (-> first bench_start) and
pass time (bench_start -> bench_end) from every launch's events.log, and the first-pass effect.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from ..model.errors import UsageError
from ..parse.events import read_events
from ..ab_stats.planner import Costs, Noise, Target


def _minutes(events_files: list[Path]) -> dict[str, Optional[float]]:
    """Median load, warm-up and pass minutes over the launches' events files."""
    load, warm, passes = [], [], []
    for f in events_files:
        ev = read_events(f)
        launch = ev.named("server_launch")
        ready = ev.named("ready")
        starts, ends = ev.named("bench_start"), ev.named("bench_end")
        if launch and ready:
            load.append((max(e.epoch for e in ready) - min(e.epoch for e in launch)) / 60.0)
            if starts:
                warm.append((starts[0].epoch - max(e.epoch for e in ready)) / 60.0)
        for s in starts:
            end = next((e for e in ends if e.fields.get("pass") == s.fields.get("pass") and e.line > s.line), None)
            if end is not None:
                passes.append((end.epoch - s.epoch) / 60.0)
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return {"load_min": med(load), "warmup_min": med(warm), "pass_min": med(passes)}


def from_campaign(run_dir: Path, primary: str = "output_tps") -> dict:
    """The planner's inputs measured in a job (its collected summary, read back)."""
    from ..ab_stats.components import components, first_pass
    from ..collect.rows import ok_rows, pass_rows
    from ..collect.write import read_summary
    from ..model.rundir import RELATIVE, open_run

    job = read_summary(run_dir)
    if job is None:
        raise UsageError(f"{run_dir} has no {RELATIVE.summary('json')}: collect it first "
                         f"(slurm-ab collect {run_dir.name})")
    rows = ok_rows(pass_rows(job))
    if not rows:
        raise UsageError(f"{run_dir}: no ok pass to estimate variance from")
    metric = "steady_output_tps" if primary == "output_tps" and all(
        isinstance(r.get("steady_output_tps"), (int, float)) for r in rows) else primary
    comp = components(rows, metric)
    run = open_run(run_dir)
    times = _minutes([run.launch_layout(la).events for la in run.campaign.launches])
    return {"components": comp, "first_pass": first_pass(rows, metric), **times}


def inputs(src_campaign: Optional[Path], launch_cov, pass_cov, load_min, pass_min, primary: str) -> tuple[Noise, dict, list[str]]:
    """(Noise, measured minutes, notes): stated values win over measured ones; what neither gives
    is an error naming the option."""
    notes: list[str] = []
    measured: dict = {}
    if src_campaign is not None:
        m = from_campaign(src_campaign, primary)
        comp = m["components"]
        notes.append(f"from {src_campaign.name}: {comp.metric} over {comp.passes} passes in {comp.launches} "
                     f"launches: launch CoV {_pct(comp.launch_cov)}, pass CoV {_pct(comp.pass_cov)}"
                     + (f" ({comp.note})" if comp.note else ""))
        notes.append(m["first_pass"].text())
        measured = {k: m[k] for k in ("load_min", "warmup_min", "pass_min")}
        notes.append("measured: " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items() if v is not None))
        launch_cov = launch_cov if launch_cov is not None else comp.launch_cov
        pass_cov = pass_cov if pass_cov is not None else comp.pass_cov
    missing = [o for o, v in (("--launch-cov", launch_cov), ("--pass-cov", pass_cov)) if v is None]
    if missing:
        raise UsageError(f"give {' and '.join(missing)} (percent): "
                         + ("the campaign cannot estimate it" if src_campaign else "or --from CAMPAIGN"))
    return Noise(launch_cov, pass_cov), {**measured, **{k: v for k, v in (("load_min", load_min), ("pass_min", pass_min))
                                                        if v is not None}}, notes


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


def costs(minutes: dict, nodes: int, modes: int, time_limit_min: Optional[float]) -> Costs:
    for key, opt in (("load_min", "--load-min"), ("pass_min", "--pass-min")):
        if minutes.get(key) is None:
            raise UsageError(f"give {opt} (minutes) or --from CAMPAIGN")
    return Costs(minutes["load_min"], minutes["pass_min"], warmup_min=minutes.get("warmup_min") or 1.0,
                 nodes=nodes, modes=modes, time_limit_min=time_limit_min)


def target(detect: Optional[str], halfwidth: Optional[str], power: float) -> Target:
    if halfwidth is not None:
        return Target(halfwidth_pct=percent(halfwidth))
    return Target(detect_pct=percent(detect) if detect is not None else 5.0, power=power)


def time_limit_minutes(limit: str) -> Optional[float]:
    """Slurm's [D-]HH:MM:SS / MM:SS / MM -> minutes; None for anything else (auto, unlimited)."""
    try:
        days, _, rest = limit.rpartition("-")
        parts = [int(p) for p in rest.split(":")]
    except (ValueError, AttributeError):
        return None
    h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return (int(days or 0) * 24 + h) * 60 + m + s / 60.0


def plan_for_modes(src, modes: tuple, campaign: Optional[Path], opts: dict) -> tuple:
    """(Plan, notes) for the modes' experiment: its node count and time limit, the campaign's or
    the stated noise and times."""
    from ..ab_stats.planner import plan
    from ..model.sources import load_experiment

    exp = load_experiment(src, modes[0])
    noise, minutes, notes = inputs(campaign, opts.get("launch_cov"), opts.get("pass_cov"), opts.get("load_min"),
                                   opts.get("pass_min"), exp.benchmark.primary_metric)
    limit = opts.get("time_limit_min")
    if limit is None:
        limit = time_limit_minutes(exp.cluster.time_limit)
    c = costs(minutes, exp.replicas * exp.nodes_per_replica, len(modes), limit)
    return plan(noise, c, target(opts.get("detect"), opts.get("halfwidth"), opts.get("power", 0.8)),
                campaigns=opts.get("campaigns", 1000)), notes
