"""How long a job will run, so its time limit fits it: --time auto, and a limit too short refused.

A job is its preflight, then per server launch the model load and the direct warm-ups (plus the
teardown grace), then per pass ceil(prompts / concurrency) "rounds" of one request each plus the
client's own start-up. Each figure is the site's [estimate] value unless earlier runs under
paths.results measured it: the model load of the same model on as many nodes (events.log: first
server_launch -> last ready), the seconds per request of the same model and mode at the same
lengths (bench_start -> bench_end of a pass that ended well). The largest measured value counts:
an estimate that is too short kills the job part-way, with an unbalanced A/B.

Slurm may send the job's warning signal (--signal=B:USR1@<s>) up to 60 s early (sbatch(1),
--signal), and the job stops itself then, so the limit needs the estimate plus both.
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


@dataclass(frozen=True)
class Estimate:
    """A job's expected run time (margin included) and the time limit it needs."""

    seconds: float
    limit_s: int                 # seconds + the job's own early stop + Slurm's early warning
    launches: int
    passes: int
    load: Figure
    warmup: Figure
    request: dict                # mode -> Figure
    pass_overhead_s: float
    text: str                    # one line for dry-run

    def pass_seconds(self, mode: str, prompts: int, concurrency: int) -> float:
        """Expected duration of one pass (client start-up included)."""
        return rounds(prompts, concurrency) * self.request[mode].seconds + self.pass_overhead_s


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


def _schedule(plan) -> list[tuple[str, list[tuple[int, int]]]]:
    """[(mode, [(prompts, concurrency), ...]) per server launch] of a plan, burn-ins included."""
    return [(launch.mode, [(p.prompts, p.concurrency) for p in launch.passes])
            for launch in plan.campaign.campaign.launches]


# ---- measured figures of earlier runs -----------------------------------------------------------

@dataclass(frozen=True)
class History:
    loads: tuple[tuple[float, str], ...] = ()             # (seconds, run id)
    requests: tuple[tuple[str, float, str], ...] = ()     # (mode, seconds per request, run id)


def _run_dirs(results: Path) -> list[Path]:
    from .rundir import Layout

    try:
        dirs = [d for d in results.iterdir() if Layout(d).manifest.is_file()]
    except OSError:
        return []
    return sorted(dirs, key=lambda d: Layout(d).manifest.stat().st_mtime, reverse=True)[:HISTORY_RUNS]


def _launch_figures(events_path: Path, mode: str, bench, run_id: str, pass_overhead_s: float,
                    loads: list, requests: list) -> None:
    from ..parse.events import read_events

    ev = read_events(events_path)
    launched = ev.named("server_launch")
    ready = ev.named("ready")
    if launched and len(ready) >= len(launched):
        loads.append((max(e.epoch for e in ready) - min(e.epoch for e in launched), run_id))
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
        per = max(0.0, e.epoch - s.epoch - pass_overhead_s) / rounds(prompts, conc)
        requests.append((mode, per, run_id))


def read_history(exp: Experiment) -> History:
    """Measured loads and seconds per request of earlier runs of this model on as many nodes at
    the same input/output lengths, from the run directories under paths.results (newest first)."""
    from .rundir import open_run, read_manifest

    loads: list = []
    requests: list = []
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
                _launch_figures(lay.events, launch.mode, cfg.benchmark, run_id,
                                exp.estimate.pass_overhead_s, loads, requests)
    return History(tuple(loads), tuple(requests))


def _measured(samples, default: float, what: str) -> Figure:
    if not samples:
        return Figure(float(default), f"site default [estimate] {what}")
    value, run_id = max(samples)
    return Figure(value, f"measured: the longest of {len(samples)} earlier launch(es)/pass(es), "
                         f"run {run_id}")


# ---- the estimate ---------------------------------------------------------------------------------

def estimate(plan, history: History = History()) -> Estimate:
    """The plan's expected duration from the [estimate] figures and the measured history."""
    exp = plan.exp
    est = exp.estimate
    sched = _schedule(plan)
    load = _measured(history.loads, est.model_load_s, "model_load_s")
    warmup = Figure(float(est.warmup_s), "site default [estimate] warmup_s")
    request = {mode: _measured([(s, r) for m, s, r in history.requests if m == mode],
                               est.request_s, "request_s")
               for mode in dict.fromkeys(m for m, _ in sched)}
    grace = exp.cluster.teardown_grace_s
    per_launch = load.seconds + warmup.seconds + grace
    pass_s = sum(rounds(p, c) * request[mode].seconds + est.pass_overhead_s
                 for mode, passes in sched for p, c in passes)
    npasses = sum(len(passes) for _, passes in sched)
    base = est.job_overhead_s + len(sched) * per_launch + pass_s
    total = base * (1 + est.margin)
    limit = int(math.ceil(total)) + exp.cluster.signal_before_limit_s + SLURM_EARLY_SIGNAL_S
    req = ", ".join(f"{m} {f.seconds:.1f} s ({f.source})" for m, f in request.items())
    text = (f"{len(sched)} server launch(es) x (model load {load.seconds:.0f} s ({load.source}) + "
            f"warm-ups {warmup.seconds:.0f} s + teardown {grace} s) + {npasses} pass(es) of "
            f"ceil(prompts / C) requests at {req} + {est.pass_overhead_s:.0f} s each + "
            f"{est.job_overhead_s:.0f} s preflight and clean-up, +{est.margin:.0%} = "
            f"{format_time(total)}; with the job's early stop ({exp.cluster.signal_before_limit_s} s) and "
            f"Slurm's early warning ({SLURM_EARLY_SIGNAL_S} s) the job needs --time {format_time(limit)}")
    return Estimate(total, limit, len(sched), npasses, load, warmup, request,
                    float(est.pass_overhead_s), text)


def fit_time_limit(plan, history: History | None = None):
    """The plan with its estimate, and --time sized by it (cluster.time_limit = "auto"); a limit
    shorter than the job needs is refused (ConfigErrors: exit 2, nothing written or submitted)."""
    exp = plan.exp
    if history is None:
        history = read_history(exp) if exp.estimate.from_results else History()
    est = estimate(plan, history)
    limit = exp.cluster.time_limit
    if limit == AUTO:
        chosen = format_time(est.limit_s)
        comp = tuple(f"--time={chosen}" if o == f"--time={AUTO}" else o for o in plan.sbatch_component)
        return replace(plan, sbatch_component=comp, estimate=est)
    given = parse_time(limit)
    if given is not None and given < est.limit_s and exp.estimate.enforce:
        raise ConfigErrors([ConfigError(
            "cluster.time_limit (--time)", limit,
            f"too short for this job: it needs {format_time(est.limit_s)} ({est.text})",
            f"--time auto, or at least {format_time(est.limit_s)}; or fewer launches/passes")])
    return replace(plan, estimate=est)


__all__ = ["AUTO", "Estimate", "Figure", "History", "estimate", "fit_time_limit", "format_time",
           "parse_time", "read_history", "rounds"]
