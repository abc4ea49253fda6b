"""How long a job will run, so its time limit fits it: the one time model of --time auto (the
default), of the refusal of a limit too short, of the planner (`slurm-ab plan`) and of the job's
own stop at a block boundary (block_seconds: the job does not start a block that cannot finish).

A job is its preflight, then per server launch the model load and the direct warm-ups (plus the
teardown grace), then per pass ceil(prompts / concurrency) "rounds" of one request each plus the
client's own start-up. Each figure is the site's [estimate] value unless earlier runs under
paths.results measured it: the model load of the same model on as many nodes at the same lengths
(events.log: first server_launch -> last ready; a launch that never became ready took at least
its ready timeout, so it counts with that), the seconds per request of the same model and mode at
the same lengths, concurrency and prompts (bench_start -> bench_end of a pass that ended well; of
an open-loop pass, its time after the arrivals' span over OPEN_LOOP_DRAIN: the model's own price).
The largest measured value counts: an estimate that is too short kills the job part-way, with an
unbalanced A/B. The site's default model load is conservative for the same reason (30 min:
a 1T-parameter model on 8 nodes loads in 10-30 min).

Slurm may send the job's warning signal (--signal=B:USR1@<s>) up to 60 s early (sbatch(1),
--signal), and the job stops itself then, so the limit needs the estimate plus both. With
cluster.time_limit = "auto" the job asks exactly that, at most the MaxTime of its partition as
Slurm answers at submit/dry-run time (more is refused); a pinned limit shorter than it is refused.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import ConfigError, ConfigErrors
from .experiment import Experiment

SLURM_EARLY_SIGNAL_S = 60        # sbatch(1): "the signal may be sent up to 60 seconds earlier"
HISTORY_RUNS = 30                # most recent run directories read for measured figures
AUTO = "auto"
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


@dataclass(frozen=True)
class Figure:
    seconds: float
    source: str                  # "site default" or what measured it


# An open-loop pass ends its last request's time after its last arrival; the job's limit for it
# (pass_limit) allows this many requests' time for that drain (a saturated pass drains longer: the
# watchdog's factor covers it).
OPEN_LOOP_DRAIN = 4


def rounds(prompts: int, concurrency: int) -> int:
    return max(1, math.ceil(prompts / max(1, concurrency)))


def parse_time(text: str) -> int | None:
    """Slurm's --time ('MM', 'MM:SS', 'HH:MM:SS', 'D-HH', 'D-HH:MM', 'D-HH:MM:SS') in seconds;
    None for UNLIMITED/INFINITE or 'auto'."""
    m = _TIME.match(text.strip())
    if not m:
        return None
    d, a, b, c = m.groups()
    if d is not None:   # D-HH[:MM[:SS]]
        return int(d) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:   # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:   # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def format_time(seconds: float) -> str:
    """Seconds -> Slurm's [D-]HH:MM:SS, rounded up to whole minutes."""
    s = int(math.ceil(seconds / 60.0)) * 60
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    text = f"{h:02d}:{s // 60:02d}:00"
    return f"{d}-{text}" if d else text


Schedule = list  # [(mode, [(prompts, concurrency[, rate]), ...]) per server launch], burn-ins included


def campaign_schedule(campaign) -> Schedule:
    """A campaign's (model.campaign.Campaign) launches as the time model reads them (an open-loop
    pass with its rate)."""
    return [(launch.mode, [(p.prompts, p.concurrency) if p.rate is None else (p.prompts, p.concurrency, p.rate)
                           for p in launch.passes]) for launch in campaign.launches]


def _schedule(plan) -> Schedule:
    return campaign_schedule(plan.campaign.campaign)


# ---- measured figures of earlier runs -----------------------------------------------------------

PassKey = tuple  # (mode, concurrency, prompts): what a pass's seconds per request are measured at


@dataclass(frozen=True)
class History:
    loads: tuple[tuple[float, str], ...] = ()             # (seconds, run id)
    requests: tuple[tuple[str, int, int, float, str], ...] = ()   # (mode, concurrency, prompts,
    #                                                               seconds per request, run id)
    not_ready: tuple[str, ...] = ()                       # run ids of loads that never became ready

    def request_samples(self, key: PassKey) -> list[tuple[float, str]]:
        """(seconds per request, run id) measured at exactly this mode, concurrency and prompts."""
        return [(secs, run_id) for mode, conc, prompts, secs, run_id in self.requests
                if (mode, conc, prompts) == tuple(key)]


def _run_dirs(results: Path) -> list[Path]:
    from .rundir import Layout

    try:
        dirs = [d for d in results.iterdir() if Layout(d).manifest.is_file()]
    except OSError:
        return []
    return sorted(dirs, key=lambda d: Layout(d).manifest.stat().st_mtime, reverse=True)[:HISTORY_RUNS]


def _launch_figures(events_path: Path, mode: str, cfg, run_id: str, pass_overhead_s: float,
                    loads: list, requests: list, not_ready: list) -> None:
    from ..parse.events import read_events
    from .rundir import recorded_rate

    ev = read_events(events_path)
    launched = ev.named("server_launch")
    ready = ev.named("ready")
    if launched and len(ready) >= len(launched):
        loads.append((max(e.epoch for e in ready) - min(e.epoch for e in launched), run_id))
    elif launched:
        # A launch that never became ready (fail kind=not_ready) took at least its ready timeout:
        # leaving it out would keep the estimate at the loads that were fast enough.
        fail = next((e for e in ev.failures() if e.fields.get("kind") == "not_ready"), None)
        timeout = getattr(getattr(cfg, "cluster", None), "ready_timeout_s", None)
        if fail is not None:
            took = fail.epoch - min(e.epoch for e in launched)
            loads.append((max(took, float(timeout) if isinstance(timeout, (int, float)) else 0.0), run_id))
            not_ready.append(run_id)
    bench = cfg.benchmark
    starts = ev.named("bench_start")
    ends = {e.fields.get("pass", ""): e for e in ev.named("bench_end")}
    for s in starts:
        e = ends.get(s.fields.get("pass", ""))
        if e is None or e.fields.get("rc") != "0" or e.epoch <= s.epoch:
            continue
        prompts = s.get_int("prompts") or bench.num_prompts
        conc = s.get_int("concurrency") or bench.concurrency
        if not isinstance(prompts, int) or not isinstance(conc, int):
            continue
        took = max(0.0, e.epoch - s.epoch - pass_overhead_s)
        rate = recorded_rate(s.fields.get("rate"))
        # the inverse of TimeModel.pass_seconds: an open-loop pass's drain after its arrivals' span
        per = max(0.0, took - prompts / rate) / OPEN_LOOP_DRAIN if rate else took / rounds(prompts, conc)
        requests.append((mode, conc, prompts, per, run_id))


def read_history(exp: Experiment) -> History:
    """Measured loads and seconds per request of earlier runs of this model on as many nodes at
    the same input/output lengths, from the run directories under paths.results (newest first);
    each request figure keeps the concurrency and prompts it was measured at."""
    from .rundir import open_run, read_manifest

    loads: list = []
    requests: list = []
    not_ready: list = []
    b = exp.benchmark
    for d in _run_dirs(Path(exp.paths.results)):
        m = read_manifest(d)
        cfg = m.config if m is not None else None
        if cfg is None or cfg.paths is None or cfg.benchmark is None or cfg.paths.model != exp.paths.model \
                or cfg.nodes_per_replica != exp.nodes_per_replica or cfg.benchmark.input_len != b.input_len \
                or cfg.benchmark.output_len != b.output_len:
            continue
        run_id = m.run_id or d.name
        run = open_run(d)
        for launch in run.campaign.launches:
            lay = run.launch_layout(launch)
            if lay.events.is_file():
                _launch_figures(lay.events, launch.mode, cfg, run_id,
                                exp.estimate.pass_overhead_s, loads, requests, not_ready)
    return History(tuple(loads), tuple(requests), tuple(not_ready))


def _measured(samples, default: float, what: str, not_ready: tuple = ()) -> Figure:
    if not samples:
        return Figure(float(default), f"site default [estimate] {what}")
    value, run_id = max(samples)
    slow = sum(1 for _, r in samples if r in not_ready)
    return Figure(value, f"measured: the longest of {len(samples)} earlier launch(es)/pass(es), run {run_id}"
                         + (f"; {slow} never became ready, counted at their ready timeout" if slow else ""))


# ---- the one time model ------------------------------------------------------------------------

@dataclass(frozen=True)
class TimeModel:
    """What the job itself, each server launch and each pass cost: the one time model of --time
    auto, of the refusal of a short limit, of the planner (`slurm-ab plan` prices a design with
    `estimate` of its schedule, so its wall time is what dry-run --time auto asks for it) and of
    the job's block-boundary stop (block_seconds)."""

    load: Figure
    warmup: Figure
    requests: tuple              # ((mode, concurrency, prompts), Figure): seconds per request measured there
    teardown_s: float
    pass_overhead_s: float
    job_overhead_s: float
    margin: float
    signal_before_limit_s: int   # the job's own early stop (cluster.signal_before_limit_s)
    pass_s: Figure | None = None  # a stated pass duration (plan --pass-min), client start-up included
    default_request: Figure = Figure(60.0, "site default [estimate] request_s")

    def figure(self, mode: str, prompts: int, concurrency: int) -> Figure:
        """Seconds per request of a pass: measured at this mode, concurrency and prompts, else the
        site's default."""
        return dict(self.requests).get((mode, concurrency, prompts), self.default_request)

    def pass_seconds(self, mode: str, prompts: int, concurrency: int, rate: float | None = None) -> float:
        """Expected duration of one pass (client start-up included); an open-loop pass: its arrivals'
        span (prompts / rate) and OPEN_LOOP_DRAIN requests' time for the last ones to finish."""
        if self.pass_s is not None:
            return self.pass_s.seconds
        figure = self.figure(mode, prompts, concurrency).seconds
        if rate:
            return prompts / rate + OPEN_LOOP_DRAIN * figure + self.pass_overhead_s
        return rounds(prompts, concurrency) * figure + self.pass_overhead_s

    @property
    def launch_s(self) -> float:
        return self.load.seconds + self.warmup.seconds + self.teardown_s

    def launch_seconds(self, mode: str, passes) -> float:
        """One server launch of the schedule with its passes [(prompts, C[, rate]), ...]: its expected
        duration without the margin, which the time limit keeps as slack (a block, the sum of its
        launches, is started when the time left covers this; with the margin the first block of a
        job whose preflight took longer than estimated would never start)."""
        return self.launch_s + sum(self.pass_seconds(mode, *x) for x in passes)

    def estimate(self, sched: Schedule) -> "Estimate":
        """The job's expected duration and the --time it needs, for [(mode, [(prompts, C), ...])
        per server launch]."""
        base = self.job_overhead_s + sum(self.launch_s + sum(self.pass_seconds(m, *x) for x in passes)
                                         for m, passes in sched)
        total = base * (1 + self.margin)
        limit = int(math.ceil(total)) + self.signal_before_limit_s + SLURM_EARLY_SIGNAL_S
        npasses = sum(len(passes) for _, passes in sched)
        return Estimate(total, limit, len(sched), npasses, self, self._text(sched, npasses, total, limit))

    def _text(self, sched: Schedule, npasses: int, total: float, limit: int) -> str:
        if self.pass_s is not None:
            passes = f"{npasses} pass(es) of {self.pass_s.seconds:.0f} s ({self.pass_s.source}) each"
        else:
            keys = dict.fromkeys((m, c, p) for m, ps in sched for p, c, *_ in ps)
            req = ", ".join(f"{m} C={c} x {p} prompts {self.figure(m, p, c).seconds:.1f} s "
                            f"({self.figure(m, p, c).source})" for m, c, p in keys)
            passes = (f"{npasses} pass(es) of ceil(prompts / C) requests at {req} + "
                      f"{self.pass_overhead_s:.0f} s each")
        return (f"{len(sched)} server launch(es) x (model load {self.load.seconds:.0f} s ({self.load.source}) + "
                f"warm-ups {self.warmup.seconds:.0f} s + teardown {self.teardown_s:g} s) + {passes} + "
                f"{self.job_overhead_s:.0f} s preflight and clean-up, +{self.margin:.0%} = "
                f"{format_time(total)}; with the job's early stop ({self.signal_before_limit_s} s) and "
                f"Slurm's early warning ({SLURM_EARLY_SIGNAL_S} s) the job needs --time {format_time(limit)}")


@dataclass(frozen=True)
class Estimate:
    """A job's expected run time (margin included) and the time limit it needs."""

    seconds: float
    limit_s: int                 # seconds + the job's own early stop + Slurm's early warning
    launches: int
    passes: int
    model: TimeModel
    text: str                    # one line for dry-run
    limit_note: str = ""         # how the time limit was chosen (fit_time_limit), for dry-run
    warnings: tuple[str, ...] = ()   # what Slurm's settings do to this job (fit_time_limit): dry-run and submit

    @property
    def load(self) -> Figure:
        return self.model.load

    @property
    def pass_overhead_s(self) -> float:
        return self.model.pass_overhead_s

    def pass_seconds(self, mode: str, prompts: int, concurrency: int, rate: float | None = None) -> float:
        return self.model.pass_seconds(mode, prompts, concurrency, rate)


def time_model(exp: Experiment, modes, history: History = History(), load: Figure | None = None,
               pass_s: Figure | None = None, sched: Schedule | None = None) -> TimeModel:
    """The [estimate] figures, each replaced by what earlier runs measured (history), and by a
    stated model load or pass duration (the planner's --load-min, --pass-min) when given. The
    seconds per request of each (mode, concurrency, prompts) of `sched` (default: the benchmark's
    concurrency and prompts for each of `modes`) are the longest measured there."""
    est = exp.estimate
    load = load or _measured(history.loads, est.model_load_s, "model_load_s", history.not_ready)
    b = exp.benchmark
    wanted = [(m, c, p) for m, ps in sched for p, c, *_ in ps] if sched is not None \
        else [(m, b.concurrency, b.num_prompts) for m in modes]
    names = {k[0] for k in wanted}
    keys = dict.fromkeys(wanted + [(m, c, p) for m, c, p, _, _ in history.requests if m in names])
    default = Figure(float(est.request_s), "site default [estimate] request_s")
    request = tuple((k, _measured(history.request_samples(k), est.request_s, "request_s")) for k in keys)
    return TimeModel(load, Figure(float(est.warmup_s), "site default [estimate] warmup_s"), request,
                     float(exp.cluster.teardown_grace_s), float(est.pass_overhead_s), float(est.job_overhead_s),
                     float(est.margin), int(exp.cluster.signal_before_limit_s), pass_s, default)


def estimate(plan, history: History = History()) -> Estimate:
    """The plan's expected duration from the [estimate] figures and the measured history."""
    sched = _schedule(plan)
    return time_model(plan.exp, [m for m, _ in sched], history, sched=sched).estimate(sched)


def block_seconds(plan) -> tuple[tuple[int, int], ...]:
    """(first launch index, seconds) of every block of a campaign's launches (model.campaign's
    time_blocks), each the time model's expected duration of its launches (no margin; each pass
    priced as the estimate prices it, an open-loop one by its arrival span and drain): the
    job starts a block only when the time it has left covers this (and its launches at the pace of
    the slowest block it has already run). () for a job of one launch: no boundary to stop at (its
    time limit's teardown ends it, as any job's)."""
    cp = plan.campaign
    if len(cp.campaign.launches) < 2:
        return ()
    from .campaign import time_blocks
    model = plan.duration.model
    # each launch as the estimate reads it (campaign_schedule: an open-loop pass with its rate)
    sched = dict(zip((x.index for x in cp.campaign.launches), campaign_schedule(cp.campaign)))
    out = []
    for block in time_blocks(cp.campaign):
        secs = sum(model.launch_seconds(*sched[i]) for i in block)
        out.append((block[0], int(math.ceil(secs))))
    return tuple(out)


def history_for(exp: Experiment) -> History:
    """Earlier runs' measured figures, unless [estimate] from_results is off."""
    return read_history(exp) if exp.estimate.from_results else History()


@dataclass(frozen=True)
class PartitionLimit:
    """The limits of the partition the job goes to, as Slurm answered at submit/dry-run time."""

    partition: str
    max_time: str | None         # scontrol's MaxTime ('UNLIMITED', '2-00:00:00'); None: no answer
    max_nodes: int | None = None     # MaxNodes per job (a het job: per component); None: UNLIMITED/unknown
    total_nodes: int | None = None   # TotalNodes; None: unknown
    kill_wait_s: int | None = None   # the cluster's KillWait (scontrol show config); None: unknown

    @property
    def seconds(self) -> int | None:
        """The bound in seconds; None when there is none (UNLIMITED) or Slurm did not answer."""
        return parse_time(self.max_time) if self.max_time else None

    def text(self) -> str:
        if self.max_time is None:
            return (f"partition {self.partition}'s MaxTime and MaxNodes unknown (Slurm did not answer here): "
                    "a --time or node count above them leaves the job pending (PartitionTimeLimit, "
                    "PartitionNodeLimit) or refused (EnforcePartLimits); not checked")
        nodes = "" if self.max_nodes is None else f", {self.max_nodes} nodes a job"
        return f"partition {self.partition} allows {self.max_time}{nodes}"


def partition_limit(exp: Experiment) -> PartitionLimit:
    """Asks Slurm for the MaxTime of the partition the job goes to ($SBATCH_PARTITION wins over
    the script's #SBATCH --partition, sbatch(1)); of a list, the longest (the job may start in any)."""
    import os

    from .slurm import kill_wait_s, partition_fields

    name = os.environ.get("SBATCH_PARTITION") or exp.cluster.partition
    fields = [partition_fields(p) for p in name.split(",") if p]
    answers = [f.get("MaxTime") for f in fields if f]
    if not fields or None in fields or None in answers:
        return PartitionLimit(name, None, kill_wait_s=kill_wait_s())
    unlimited = [a for a in answers if parse_time(a) is None]

    def most(key):          # of a list, the largest (the job may start in any); None: unlimited
        vals = [f.get(key, "") for f in fields]
        return None if not all(v.isdigit() for v in vals) else max(int(v) for v in vals)
    return PartitionLimit(name, unlimited[0] if unlimited else max(answers, key=parse_time),
                          most("MaxNodes"), most("TotalNodes"), kill_wait_s())


def grace_warnings(exp: Experiment, partition: PartitionLimit | None) -> tuple[str, ...]:
    """The servers' steps run with srun --kill-on-bad-exit=1, so at teardown the first rank that
    exits on the SIGTERM (a non-head node: nothing to drain) makes srun end the whole step
    (slurm src/srun launch _task_finish -> _step_signal(SIG_TERM_KILL)), and Slurm SIGKILLs its
    other tasks KillWait later: a head still draining gets min(teardown_grace_s, KillWait)."""
    kw = partition.kill_wait_s if partition is not None else None
    grace = exp.cluster.teardown_grace_s
    if kw is None or grace <= kw:
        return ()
    return (f"cluster.teardown_grace_s = {grace} s is longer than this cluster's KillWait ({kw} s): at teardown "
            f"Slurm kills a server step {kw} s after its first rank exits (srun --kill-on-bad-exit), so SGLang "
            f"gets about {kw} s to drain, not {grace}; set cluster.teardown_grace_s <= {kw} to have the grace "
            "you are told",)


def check_partition_nodes(plan, partition: PartitionLimit | None) -> None:
    """A job whose component asks more nodes than the partition's MaxNodes, or more nodes in all
    than the partition has, never starts (with Slurm's default EnforcePartLimits=NO it pends as
    PartitionNodeLimit): refused before anything is submitted (ConfigErrors, exit 2)."""
    if partition is None or partition.max_time is None:
        return
    comps = [r.nodes for r in plan.replicas]
    need = sum(comps) if plan.exp.cluster.exclusive else max(comps)
    errs = []
    if partition.max_nodes is not None and max(comps) > partition.max_nodes:
        errs.append(ConfigError(
            "cluster.partition", partition.partition,
            f"a component of this job needs {max(comps)} nodes, more than the partition allows a job "
            f"(MaxNodes={partition.max_nodes}; each het component counts as a job)",
            "a partition with a larger MaxNodes, or fewer nodes per replica/role"))
    if partition.total_nodes is not None and need > partition.total_nodes:
        errs.append(ConfigError(
            "cluster.partition", partition.partition,
            f"the job needs {need} nodes at once, the partition has {partition.total_nodes} (TotalNodes)",
            "a larger partition, or fewer or smaller replicas"))
    if errs:
        raise ConfigErrors(errs)


def limit_bound(exp: Experiment, partition: PartitionLimit | None) -> int | None:
    """The most a job may ask, in seconds: the pinned cluster.time_limit, else (auto) the
    partition's MaxTime; None when neither bounds it."""
    if exp.cluster.time_limit != AUTO:
        return parse_time(exp.cluster.time_limit)
    return partition.seconds if partition is not None else None


def _too_long(est: Estimate, partition: PartitionLimit) -> ConfigErrors:
    return ConfigErrors([ConfigError(
        "cluster.time_limit (--time)", AUTO,
        f"the job needs {format_time(est.limit_s)} ({est.text}), more than partition {partition.partition} "
        f"allows (MaxTime {partition.max_time})",
        "fewer launches/passes (slurm-ab plan prices them), or a partition with a longer MaxTime "
        "(cluster.partition)")])


def fit_time_limit(plan, history: History | None = None, partition: PartitionLimit | None = None):
    """The plan with its estimate and its --time: sized by the estimate when cluster.time_limit
    is "auto" (the default), bounded by the partition's MaxTime; a pinned limit shorter than the
    job needs, or an estimate above the partition's MaxTime, is refused (ConfigErrors: exit 2,
    nothing written or submitted) unless estimate.enforce is off."""
    exp = plan.exp
    check_partition_nodes(plan, partition)
    est = estimate(plan, history_for(exp) if history is None else history)
    est = replace(est, warnings=grace_warnings(exp, partition))
    limit = exp.cluster.time_limit
    where = f"; {partition.text()}" if partition is not None else ""
    if limit == AUTO:
        bound = partition.seconds if partition is not None else None
        if bound is not None and est.limit_s > bound and exp.estimate.enforce:
            raise _too_long(est, partition)
        chosen = format_time(est.limit_s if bound is None else min(est.limit_s, bound))
        est = replace(est, limit_note=f"auto: sized by the estimate{where}")
        comp = tuple(f"--time={chosen}" if o == f"--time={AUTO}" else o for o in plan.sbatch_component)
        return replace(plan, sbatch_component=comp, estimate=est)
    given = parse_time(limit)
    if given is not None and given < est.limit_s and exp.estimate.enforce:
        raise ConfigErrors([ConfigError(
            "cluster.time_limit (--time)", limit,
            f"too short for this job: it needs {format_time(est.limit_s)} ({est.text})",
            f"--time auto, or at least {format_time(est.limit_s)}; or fewer launches/passes")])
    return replace(plan, estimate=replace(est, limit_note=f"pinned (cluster.time_limit or --time){where}"))


def sized(plan):
    """The plan with "auto" replaced by its estimate from the [estimate] figures alone (no
    history, no Slurm): a rendered script never asks for --time=auto, fitted or not."""
    if f"--time={AUTO}" not in plan.sbatch_component:
        return plan
    est = plan.duration
    comp = tuple(f"--time={format_time(est.limit_s)}" if o == f"--time={AUTO}" else o for o in plan.sbatch_component)
    return replace(plan, sbatch_component=comp, estimate=est)


__all__ = ["AUTO", "Estimate", "Figure", "History", "PartitionLimit", "TimeModel", "block_seconds",
           "campaign_schedule", "check_partition_nodes", "estimate", "fit_time_limit", "format_time", "history_for",
           "limit_bound", "parse_time",
           "partition_limit", "read_history", "rounds", "sized", "time_model"]
