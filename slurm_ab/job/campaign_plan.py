"""A campaign's options and checks: several validated modes of one shape in one allocation.

Every mode is resolved and validated as for a single run; modes whose allocation differs
(replicas, nodes per replica, the #SBATCH options of a component) cannot share one job. The
schedule (campaign.schedule) becomes the JobPlan's launches and passes in plan.make_plan, the
same way a single run's one launch and one pass does.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..model.campaign import MAX_LAUNCHES, MAX_REPEATS, ORDERS, Campaign, parse_concurrencies, schedule
from ..model.errors import ConfigError, ConfigErrors
from ..model.experiment import Experiment
from ..ab_stats.metrics import PRIMARY_CHOICES
from .render import mode_lines
from .plan import JobPlan, check_run_id, make_plan

MODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class CampaignOptions:
    """The CLI's campaign options; None: the experiment's [benchmark] value."""

    repeats: int | None = None
    concurrencies: str | None = None
    order: str | None = None
    burn_in: bool | None = None
    launches: int | None = None


def _shape(exp: Experiment, plan: JobPlan) -> tuple:
    """The allocation a mode's launch needs: every component's nodes (one per role instance)."""
    return (tuple(c.nodes for c in exp.components), exp.cluster.gpus_per_node, plan.sbatch_component)


def _describe_shape(exp: Experiment) -> str:
    comps = exp.components
    return (f"{len(comps)} components of {' + '.join(str(c.nodes) for c in comps)} nodes x "
            f"{exp.cluster.gpus_per_node} GPUs")


def resolve_options(exps: list[Experiment], opts: CampaignOptions) -> Campaign:
    """The campaign's schedule from the CLI options and [benchmark] (the first mode's Experiment);
    ConfigErrors when invalid."""
    errors: list[ConfigError] = []
    bench = exps[0].benchmark
    modes = tuple(e.mode.name for e in exps)
    for m in modes:
        if not MODE_NAME.fullmatch(m):
            errors.append(ConfigError("mode", m, "cannot name a launch directory",
                                      "letters, digits, '.', '_', '-'"))
    dup = sorted({m for m in modes if modes.count(m) > 1})
    if dup:
        errors.append(ConfigError("modes", list(modes), f"mode {dup[0]} given twice",
                                  "distinct modes (repeat a mode with --repeats)"))
    default_repeats = bench.repeats if len(modes) == 1 else bench.compare_repeats
    repeats = opts.repeats if opts.repeats is not None else default_repeats
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= MAX_REPEATS:
        errors.append(ConfigError("--repeats" if opts.repeats is not None else "benchmark.repeats",
                                  repeats, "not a number of repeats", f"1..{MAX_REPEATS}"))
    order = opts.order if opts.order is not None else bench.order
    if order not in ORDERS:
        errors.append(ConfigError("--order" if opts.order is not None else "benchmark.order", order,
                                  "unknown order", ", ".join(ORDERS)))
    launches = _launches(opts, bench, len(modes), order, errors)
    primary = bench.primary_metric
    if primary not in PRIMARY_CHOICES:
        errors.append(ConfigError("benchmark.primary_metric", primary, "not a metric a comparison can lead with",
                                  ", ".join(PRIMARY_CHOICES)))
    burn_in = opts.burn_in if opts.burn_in is not None else bench.burn_in
    ppc = bench.prompts_per_concurrency
    if not isinstance(ppc, int) or isinstance(ppc, bool) or ppc < 0:
        errors.append(ConfigError("benchmark.prompts_per_concurrency", ppc, "must be an integer >= 0",
                                  "0 (every pass runs benchmark.num_prompts) or N (N x concurrency)"))
    concurrencies: tuple[int, ...] = (exps[0].benchmark.concurrency,)
    if opts.concurrencies is not None:
        try:
            concurrencies = parse_concurrencies(opts.concurrencies)
        except ValueError as e:
            errors.append(ConfigError("--concurrency", opts.concurrencies, str(e), "e.g. 1,8,16"))
    shapes = {}
    for e in exps:
        shapes.setdefault(_shape(e, make_plan(e, "shape-check", "/shape-check")), []).append(e)
    if len(shapes) > 1:
        groups = "; ".join(f"{', '.join(x.mode.name for x in es)}: {_describe_shape(es[0])}"
                           for es in shapes.values())
        errors.append(ConfigError("modes", list(modes), "modes of different shape cannot share one "
                                  f"allocation ({groups})", "modes whose components (role instances) "
                                  "have the same nodes and options; submit the others separately"))
    if errors:
        raise ConfigErrors(errors)
    return schedule(modes, repeats, concurrencies, order, burn_in, exps[0].benchmark.num_prompts, ppc,
                    launches, primary)


def _launches(opts: CampaignOptions, bench, n_modes: int, order: str, errors: list) -> int:
    """Launches per mode: --launches, else benchmark.launches (one mode) / compare_launches;
    blocked order launches each mode once."""
    key = "--launches" if opts.launches is not None else ("benchmark.launches" if n_modes == 1
                                                          else "benchmark.compare_launches")
    value = opts.launches if opts.launches is not None else (bench.launches if n_modes == 1 else bench.compare_launches)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LAUNCHES:
        errors.append(ConfigError(key, value, "not a number of launches per mode", f"1..{MAX_LAUNCHES}"))
        return 1
    if order == "blocked":
        if opts.launches is not None and value > 1:
            errors.append(ConfigError("--launches", value, "blocked order launches each mode once",
                                      "--order counterbalanced or interleaved for several launches"))
        return 1
    return value


def default_campaign_id(exps: list[Experiment], now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{exps[0].name}-{'-vs-'.join(e.mode.name for e in exps)}-{stamp}"[:100]


def make_campaign_plan(exps: list[Experiment], campaign: Campaign, run_id: str, run_dir: str) -> JobPlan:
    """The job's plan: every mode's server command, the schedule's launches and passes."""
    return make_plan(exps, run_id, run_dir, campaign)


def campaign_summary(plan: JobPlan) -> str:
    """What a campaign runs, for dry-run (after the single-run summary of its first mode)."""
    cp = plan.campaign
    if plan.single:
        return ""
    c = cp.campaign
    lines = [f"campaign: modes {', '.join(c.modes)}; {c.repeats} repeat(s) x concurrency "
             f"{', '.join(map(str, c.concurrencies))}; order {c.order}; burn-in "
             f"{'on' if c.burn_in else 'off'}; {len(c.launches)} server launch(es), "
             f"{len(c.passes)} timed pass(es) in one allocation"]
    for launch in cp.launches:
        lines.append(f"  launch {launch.index} ({launch.mode}) -> {launch.dir}/: "
                     + ", ".join(f"{p.key} ({p.prompts} prompts)" for p in launch.passes))
    lines.append(f"  intervals will include variance {c.variance.split(':')[0]}")
    for i in range(1, len(c.modes)):
        lines += mode_lines(plan, i)
    for mode, roles in zip(c.modes, cp.roles):
        for r, rc in roles:           # each role's command, its environment first
            lines.append(f"  {r} role of {mode}: " + " ".join(str(w) for w in rc.env + _words(rc)))
    return "\n".join(lines) + "\n"


def _words(cmd) -> tuple:
    return tuple(w for line in cmd.lines for w in line)


__all__ = ["CampaignOptions", "campaign_summary", "default_campaign_id", "plan_campaign",
           "make_campaign_plan", "resolve_options"]


def plan_campaign(src, modes: list[str], run_id: str | None = None,
                  opts: CampaignOptions = CampaignOptions()) -> JobPlan:
    """sources.plan_for for several modes: validate each, check their shapes, schedule, plan."""
    import os

    from ..model.sources import load_experiment, pick_run_id, run_dir_for

    errors: list[ConfigError] = []
    exps = []
    for m in modes:
        try:
            exps.append(load_experiment(src, m))
        except ConfigErrors as e:
            errors += e.errors
        except ConfigError as e:
            errors.append(e)
    if errors:
        raise ConfigErrors(errors)
    campaign = resolve_options(exps, opts)
    if campaign.single:
        rid = pick_run_id(exps[0], run_id)
    else:
        rid = run_id if run_id is not None else (os.environ.get("RUN_ID") or default_campaign_id(exps))
        check_run_id(rid)
    return make_campaign_plan(exps, campaign, rid, str(run_dir_for(exps[0], rid)))
