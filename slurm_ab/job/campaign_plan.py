"""Every job is a campaign: its options and checks, one or several validated modes of one shape
in one allocation (a run of one mode is the campaign of one launch and one pass).

Every mode is resolved and validated on its own; modes whose allocation differs (replicas, nodes
per replica, the #SBATCH options of a component) cannot share one job. The schedule
(campaign.schedule) becomes the JobPlan's launches and passes in plan.make_plan. `plan_job` is
the one path from the CLI's sources to a plan.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace

from ..model.campaign import (LAUNCHES_PER_BLOCK, MAX_LAUNCHES, MAX_REPEATS, MIN_BLOCKS, ORDERS, Campaign,
                              capacity_schedule, parse_concurrencies, parse_rates, rate_text, resolve_spending,
                              schedule)
from ..model.errors import ConfigError, ConfigErrors
from ..model.rundir import RELATIVE
from ..model.experiment import Experiment
from ..ab_stats.metrics import PRIMARY_CHOICES
from ..ab_stats.planner import PilotPrior
from .render import mode_lines
from .plan import JobPlan, check_run_id, component_options, make_plan

MODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class CampaignOptions:
    """The CLI's campaign options; None: the experiment's [benchmark] value."""

    repeats: int | None = None
    concurrencies: str | None = None
    order: str | None = None
    burn_in: bool | None = None
    launches: int | None = None
    sequential: bool | None = None
    margin: str | None = None           # --margin: '3%' or '3'
    rates: str | None = None           # --request-rate "2,4,8": open-loop passes
    capacity: bool = False             # a capacity search ([capacity]): one launch of probes per mode
    prior: PilotPrior | None = None    # --prior-from: a pilot's noise for a sequential campaign's looks


def _shape(exp: Experiment) -> tuple:
    """The allocation a mode's launch needs: every component's nodes (one per role instance)."""
    return (tuple(c.nodes for c in exp.components), exp.cluster.gpus_per_node, component_options(exp))


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
    sequential = opts.sequential if opts.sequential is not None else bench.sequential
    sequential = bool(sequential) and len(modes) > 1
    launches = _launches(opts, bench, len(modes), order, errors, sequential)
    margin = _margin(opts, bench, errors)
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
    rates: tuple[float, ...] = ()
    rtext, rkey = (opts.rates, "--request-rate") if opts.rates is not None else (bench.request_rates, "benchmark.request_rates")
    if rtext:
        try:
            rates = parse_rates(rtext)
        except ValueError as e:
            errors.append(ConfigError(rkey, rtext, str(e), "requests per second, e.g. 1,2.5,4"))
        if opts.concurrencies is None:
            concurrencies = ()               # open loop only, unless --concurrency asks for both
    ref = exps[0].correctness.reference
    if ref and ref not in modes:
        errors.append(ConfigError("correctness.reference", ref, "not a mode of this job (the canary's answers of "
                                  "every launch are compared with its mode's)", ", ".join(modes) + ", or \"\" for the first"))
    shapes = {}
    for e in exps:
        shapes.setdefault(_shape(e), []).append(e)
    if len(shapes) > 1:
        groups = "; ".join(f"{', '.join(x.mode.name for x in es)}: {_describe_shape(es[0])}"
                           for es in shapes.values())
        errors.append(ConfigError("modes", list(modes), "modes of different shape cannot share one "
                                  f"allocation ({groups})", "modes whose components (role instances) "
                                  "have the same nodes and options; submit the others separately"))
    if opts.capacity:
        spec = _capacity_spec(exps[0], errors)
        if exps[0].profile.target:
            errors.append(ConfigError("profile.target", exps[0].profile.target, "a capacity search's probes "
                                      "are all it runs (their rates decided in the job): none is profiled",
                                      "\"\" (profile a campaign's pass instead)"))
        if errors:
            raise ConfigErrors(errors)
        return capacity_schedule(modes, exps[0].capacity.prompts or bench.num_prompts, spec, primary)
    if sequential:
        errors += _sequential_checks(modes, order, concurrencies, launches, opts)
    if opts.prior is not None and not sequential:
        errors.append(ConfigError("--prior-from", opts.prior.ref, "a prior is pooled into a sequential campaign's "
                                  "looks; this campaign is fixed", "with --sequential (or benchmark.sequential = "
                                  "true) and two modes"))
    if errors:
        raise ConfigErrors(errors)
    target = exps[0].profile.target
    out = schedule(modes, repeats, concurrencies, order, burn_in, exps[0].benchmark.num_prompts, ppc,
                   launches, primary, margin, sequential, resolve_spending(bench.spending, opts.prior is not None),
                   rates, target)
    if opts.prior is not None:
        out = replace(out, prior=opts.prior.at(repeats))
    if target and not out.profiled:
        keys = sorted({p.key for p in out.passes}, key=lambda k: (len(k), k))
        raise ConfigErrors([ConfigError("profile.target", target, "no pass of this job has that key",
                                        "\"extra\" or one of " + ", ".join(keys[:8]))])
    if any(p.burn_in for p in out.profiled):
        raise ConfigErrors([ConfigError("profile.target", target, "a burn-in pass is discarded already",
                                        "\"extra\" or a timed pass's key")])
    return out


def _capacity_spec(exp: Experiment, errors: list) -> dict:
    """The capacity search's spec from [capacity] (ab_stats.capacity reads it), its values checked."""
    c = exp.capacity
    for k in ("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms"):
        v = getattr(c, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            errors.append(ConfigError(f"capacity.{k}", v, "not a latency in ms", "a number > 0, or 0 for no SLO on it"))
    if not c.slo_ms:
        errors.append(ConfigError("capacity.slo_ttft_ms", c.slo_ttft_ms, "the capacity search needs an SLO",
                                  "--slo ttft:MS,tpot:MS (or capacity.slo_ttft_ms / slo_tpot_ms / slo_e2e_ms > 0)"))
    if not 0 < c.attainment <= 1:
        errors.append(ConfigError("capacity.attainment", c.attainment, "not a share of requests", "(0, 1], e.g. 0.9 or --attainment 90%"))
    if not 0 < c.rate_lo < c.rate_hi:
        errors.append(ConfigError("capacity.rate_hi", c.rate_hi, f"the bracket needs 0 < rate_lo ({c.rate_lo:g}) < rate_hi",
                                  "requests per second, e.g. --rates 0.5:8"))
    if not 1 <= c.probes <= 20:
        errors.append(ConfigError("capacity.probes", c.probes, "not a number of probes", "1..20"))
    if c.prompts < 0:
        errors.append(ConfigError("capacity.prompts", c.prompts, "must be >= 0", "0: benchmark.num_prompts"))
    return {"slo_ms": c.slo_ms, "attainment": c.attainment, "lo": c.rate_lo, "hi": c.rate_hi, "probes": c.probes}


def _margin(opts: CampaignOptions, bench, errors: list) -> float:
    """The equivalence margin in percent: --margin, else benchmark.margin_pct."""
    if opts.margin is None:
        return float(bench.margin_pct)
    try:
        value = float(str(opts.margin).strip().rstrip("%"))
    except ValueError:
        value = None
    if value is None or not 0 <= value < 50:
        errors.append(ConfigError("--margin", opts.margin, "not an equivalence margin in percent",
                                  "a number in [0, 50), e.g. 3% (0: no equivalence verdicts)"))
        return 0.0
    return value


def _sequential_checks(modes, order, concurrencies, launches, opts) -> list[ConfigError]:
    """A sequential campaign: two modes, counterbalanced blocks at one concurrency, 2+ blocks."""
    errs = []
    key = "--sequential" if opts.sequential else "benchmark.sequential"
    if len(modes) != 2:
        errs.append(ConfigError(key, list(modes), "a sequential campaign compares two modes",
                                "two modes (A B), or --fixed for several"))
    if order != "counterbalanced":
        errs.append(ConfigError("--order" if opts.order else "benchmark.order", order,
                                "a sequential campaign looks after counterbalanced blocks (A B B A)",
                                "counterbalanced, or --fixed"))
    if len(concurrencies) != 1:
        errs.append(ConfigError("--concurrency", ",".join(map(str, concurrencies)),
                                "a sequential campaign decides at one concurrency", "one concurrency, or --fixed"))
    if launches % LAUNCHES_PER_BLOCK or launches < LAUNCHES_PER_BLOCK * MIN_BLOCKS:
        errs.append(ConfigError("--launches" if opts.launches is not None else "benchmark.max_blocks", launches,
                                "a sequential campaign runs whole blocks of two launches per mode, at least "
                                f"{MIN_BLOCKS}", f"an even number of launches per mode >= "
                                f"{LAUNCHES_PER_BLOCK * MIN_BLOCKS} (2 per block)"))
    return errs


def _launches(opts: CampaignOptions, bench, n_modes: int, order: str, errors: list, sequential: bool = False) -> int:
    """Launches per mode: --launches, else benchmark.launches (one mode) / compare_launches, or
    for a sequential campaign 2 x benchmark.max_blocks (at most: its blocks stop early); blocked
    order launches each mode once."""
    key = "--launches" if opts.launches is not None else ("benchmark.launches" if n_modes == 1
                                                          else "benchmark.max_blocks" if sequential
                                                          else "benchmark.compare_launches")
    value = opts.launches if opts.launches is not None else (
        bench.launches if n_modes == 1 else LAUNCHES_PER_BLOCK * bench.max_blocks if sequential
        else bench.compare_launches)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LAUNCHES:
        errors.append(ConfigError(key, value, "not a number of launches per mode", f"1..{MAX_LAUNCHES}"))
        return 1
    if order == "blocked":
        if opts.launches is not None and value > 1:
            errors.append(ConfigError("--launches", value, "blocked order launches each mode once",
                                      "--order counterbalanced or interleaved for several launches"))
        return 1
    return value


def default_run_id(exps: list[Experiment], now: float | None = None) -> str:
    """<experiment>-<mode>[-vs-<mode>...]-<timestamp>."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{exps[0].name}-{'-vs-'.join(e.mode.name for e in exps)}-{stamp}"[:100]


def campaign_summary(plan: JobPlan) -> str:
    """What the job runs, launch by launch, for dry-run (after the summary of its first mode)."""
    cp = plan.campaign
    c = cp.campaign
    loads = ([f"concurrency {', '.join(map(str, c.concurrencies))}"] if c.concurrencies else []) + \
        ([f"request rate {', '.join(f'{rate_text(q)} req/s' for q in dict.fromkeys(c.rates))} (open loop, Poisson arrivals)"] if c.rates else [])
    lines = [f"campaign: modes {', '.join(c.modes)}; {c.repeats} repeat(s) x {' and '.join(loads)}; order {c.order}; burn-in "
             f"{'on' if c.burn_in else 'off'}; {len(c.launches)} server launch(es), "
             f"{len(c.passes)} timed pass(es) in one allocation"]
    if c.capacity:
        k = c.capacity
        slo = ", ".join(f"{m} <= {v:g} ms" for m, v in k["slo_ms"].items())
        width = (k["hi"] - k["lo"]) / 2 ** k["probes"]
        lines = [f"capacity search: modes {', '.join(c.modes)}, one launch each; {k['probes']} open-loop probes per "
                 f"launch, each at the middle of the bracket [{k['lo']:g}, {k['hi']:g}] req/s the earlier probes left "
                 f"(a probe meets the target when >= {k['attainment']:.0%} of its requests meet {slo}); the job "
                 f"decides each rate ({RELATIVE.capacity_program} on ROUTER_HOST), the collector recomputes; result within "
                 f"{width:.3g} req/s"]
    for launch in cp.launches:
        lines.append(f"  launch {launch.index} ({launch.mode}) -> {launch.dir}/: "
                     + ", ".join(f"{p.key} ({p.prompts} prompts{', profiled' if p.profile else ''})"
                                 for p in launch.passes))
    if len(c.passes) > 1 and not c.capacity:
        lines.append(f"  intervals will include variance {c.variance.split(':')[0]}")
        lines.append("  equivalence margin: " + (f"±{c.margin_pct:g}% (an interval inside it that includes 0 reads "
                                                 f"'equivalent within ±{c.margin_pct:g}%')" if c.margin_pct else
                                                 "none (benchmark.margin_pct = 0)"))
    if c.sequential:
        lines += sequential_lines(c)
    for i in range(1, len(c.modes)):
        lines += mode_lines(plan, i)
    for mode, roles in zip(c.modes, cp.roles):
        for r, rc in roles:           # each role's command, its environment first
            lines.append(f"  {r} role of {mode}: " + " ".join(str(w) for w in rc.env + _words(rc)))
    return "\n".join(lines) + "\n"



def sequential_lines(c: Campaign) -> list[str]:
    """A sequential campaign's looks, as dry-run shows them: blocks, boundaries, what stops it."""
    from ..ab_stats.sequential import critical_table

    k = len(c.blocks)
    b = critical_table(k, 1, name=c.spending)
    return [f"  sequential: a look after each of at most {k} counterbalanced blocks (launches "
            + "; ".join(",".join(map(str, blk)) for blk in c.blocks) + f"); alpha spending {c.spending} "
            "(two-sided 5%; benchmark.spending); stops for better/worse when the look's interval excludes 0, for equivalence "
            f"when it lies inside ±{c.margin_pct:g}%; never mid-block",
            "  look boundaries |z| >= " + ", ".join(f"{z:.3f}" for z in b.z) + " (nominal two-sided levels "
            + ", ".join(f"{p:.2g}" for p in b.nominal) + "; t critical values per degrees of freedom in the "
            "script)"] + prior_lines(c)


def prior_lines(c: Campaign) -> list[str]:
    """A sequential campaign's prior (--prior-from), as dry-run shows it."""
    from ..ab_stats.sequential import PRIOR_GUARD

    if c.prior is None:
        return []
    p = c.prior
    return [f"  prior (--prior-from): launch-mean variance {p.variance:.4g} (log scale; CoV "
            f"{p.variance ** 0.5:.2%} at {c.repeats} passes per launch) with {p.df} degrees of freedom, from {p.source}; "
            f"pooled with each look's own (t with {p.df} + the look's degrees of freedom), dropped at a look whose "
            f"own variance exceeds it (one-sided F test at {PRIOR_GUARD:g}); each look's event says "
            "prior=used|dropped"]


def _words(cmd) -> tuple:
    return tuple(w for line in cmd.lines for w in line)


__all__ = ["CampaignOptions", "PilotPrior", "campaign_summary", "default_run_id", "plan_job", "resolve_options"]


def plan_job(src, modes: list[str], run_id: str | None = None,
             opts: CampaignOptions = CampaignOptions()) -> JobPlan:
    """The plan of a job from the CLI's sources: validate each mode, check their shapes, schedule
    the launches and passes (options, else [benchmark]), plan. The run id: run_id, else $RUN_ID
    (as in the seed's script), else default_run_id."""
    import os

    from ..model.sources import load_experiment, run_dir_for

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
    rid = run_id if run_id is not None else (os.environ.get("RUN_ID") or default_run_id(exps))
    check_run_id(rid)
    return make_plan(exps, rid, str(run_dir_for(exps[0], rid)), campaign)
