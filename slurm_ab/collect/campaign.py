"""Collect a job: each launch's server logs read once, then every pass of it (collect_pass).

Every job is a campaign (a run of one mode: one launch, one pass), read through
rundir.open_run: the layout of its launch<N>-<MODE>/ directories and the schedule of its
passes (a run directory from before launch directories through its one adapter). A launch's
events are its own with the job's until it ended (parse.events.launch_view: the preflight, a
signal or the time limit that hit it); each pass sees them without the other passes' benchmark
windows and, once it completed, without what came after its end, so a completed pass (bench_end
rc=0) is judged completed even if the job was later cancelled or a later pass failed: its
numbers were final when it ended.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping

from ..model import rundir
from ..model.campaign import Campaign, Launch
from ..model.rundir import Layout, Manifest
from ..model.slurm import is_active
from ..parse.events import EventLog, launch_view, read_events
from ..parse.server_scan import Interval
from .capacity import search_result
from .correctness import apply, campaign_correctness
from .job import job_info
from .pd import role_names
from .passes import PassInputs, collect_pass
from .records import CampaignStop, CampaignSummary, LaunchSummary, PassRef, PassSummary
from .replicas import scan_launch
from .profiles import profile_record
from .telemetry import read_launch
from .sequential import recompute

SKIPPED_TIME = "skipped (time)"
WHOLE_LAUNCH = "launch"     # the window of passes when none of the launch's started: its whole logs
SKIPPED = "skipped (sequential stop)"


def launch_status(root_events: EventLog) -> dict[int, dict]:
    """launch index -> fields of its launch_end line in the job's events.log."""
    return {e.get_int("launch"): dict(e.fields) for e in root_events.named("launch_end")
            if e.get_int("launch") is not None}


def collect(run_dir: str | Path, *, sacct: Mapping | None = None, all_samples: bool = False,
            workers: int | None = None) -> CampaignSummary:
    """Everything about a job (pure but for reading files): launches, passes and their verdicts."""
    run_dir = Path(run_dir)
    run = rundir.open_run(run_dir)
    root, manifest = run.layout, run.manifest
    who = rundir.identify(run_dir, manifest)
    job_events = read_events(root.events)
    status = launch_status(job_events)
    outputs = tuple(root.slurm_outs())
    launches, passes, profiles = [], [], []
    checked = _correctness(run, manifest)
    stop = time_stop(job_events, run.campaign)
    seq = next(iter(job_events.named("sequential_stop")), None)
    # launches the job never started: after a block it had no time for, or after a sequential decision
    ends = [(stop.launches_run, SKIPPED_TIME)] if stop is not None else []
    if seq is not None and seq.get_int("launches_run") is not None:
        ends.append((seq.get_int("launches_run"), SKIPPED))
    for launch in run.campaign.launches:
        lay = root.launch(launch)
        skipped = next((why for last, why in ends if launch.index > last), None)
        if skipped:
            launches.append(LaunchSummary(launch.index, launch.mode, root.rel(lay.root), skipped, None,
                                          tuple(f"{p.key}: {skipped}" for p in launch.passes)))
            continue
        own = read_events(lay.events)
        events = launch_view(job_events, own, launch.index)
        lman = rundir.read_manifest(lay.root) or replace(manifest, campaign=None)
        summaries = _collect_launch(run_dir, lay, launch, lman, events, own.exists, who, sacct,
                                    outputs, all_samples, workers)
        verdicts = []
        check = checked.get(launch.index)
        summaries = [replace(s, **dict(zip(("verdict", "reasons"), apply(check, s.verdict, s.reasons))))
                     for s in summaries]
        for p, s in zip(launch.passes, summaries):
            if p.burn_in:
                verdicts.append(f"{p.key}: {s.verdict} (burn-in, discarded)")
                continue
            if p.profile:
                verdicts.append(f"{p.key}: {s.verdict} (profiled, left out of the statistics)")
                profiles.append(profile_record(run_dir, lay, launch, p, s, lman))
                continue
            passes.append(s)
            verdicts.append(f"{p.key}: {s.verdict}")
        fail = next(iter(events.failures()), None)
        probes = [(s, lay.bench(p.key)) for p, s in zip(launch.passes, summaries) if p.probe]
        search = search_result(launch.mode, launch.index, run.campaign.capacity, [s for s, _ in probes],
                               [b for _, b in probes]) if run.campaign.capacity else None
        launches.append(LaunchSummary(
            launch.index, launch.mode, root.rel(lay.root),
            _status(status.get(launch.index), own.exists, events), dict(fail.fields) if fail else None,
            tuple(verdicts), check, search))
    job = job_info(sacct, job_events, who.job_id)
    running = job.source == "sacct" and is_active(str(job.state_raw or ""))      # this job's state only
    return CampaignSummary(who.run_id, manifest.job_id or who.job_id, run.campaign, job, running,
                           tuple(launches), tuple(passes), tuple(profiles),
                           recompute(run_dir, run.campaign, job_events), stop)


def time_stop(job_events: EventLog, campaign: Campaign) -> CampaignStop | None:
    """The job's stop before a block it could not finish in its time left (time_stop in the job's
    events.log, pipeline.sh), with the design that ran: the launches before that block."""
    e = next(iter(job_events.named("time_stop")), None)
    if e is None:
        return None
    ran = e.get_int("launches_run")
    if ran is None:
        return None
    done = campaign.launches[:ran]
    counts = {m: sum(1 for x in done if x.mode == m) for m in campaign.modes}
    balanced = len(set(counts.values())) == 1
    block, blocks = e.get_int("block") or 0, e.get_int("blocks") or 0
    design = (f"launches 1-{ran} of {len(campaign.launches)} ({block - 1} of {blocks} block(s)): "
              + ", ".join(f"{m} {n}" for m, n in counts.items()) + " launch(es)"
              + ("" if balanced else ", not balanced") if ran else
              f"no launch of the {len(campaign.launches)} planned ran")
    return CampaignStop("time", block, blocks, ran, len(campaign.launches), e.get_int("need_s"),
                        e.get_int("left_s"), design)


def _correctness(run, manifest: Manifest) -> dict:
    """launch index -> its canary against the reference mode's ([correctness] of the job's first
    mode: its thresholds and reference; the reference mode defaults to the campaign's first)."""
    cfg = manifest.config.correctness if manifest.config is not None else None
    if cfg is None or not run.campaign.launches:
        return {}
    items = []
    for launch in run.campaign.launches:
        lay = run.launch_layout(launch)
        lman = rundir.read_manifest(lay.root)
        items.append((launch.index, launch.mode, lay, role_names(lman.config if lman else manifest.config)))
    reference = cfg.reference or run.campaign.modes[0]
    return {i: s for i, s in campaign_correctness(items, reference, cfg).items() if s.verdict != "not run"}


def _ran_rate(view: EventLog | None) -> float | None:
    """The request rate a pass ran at (bench_start rate=; None: closed loop, or it never started)."""
    start = view.last.get("bench_start") if view is not None else None
    return rundir.recorded_rate(start.fields.get("rate")) if start is not None else None


def _status(end: dict | None, started: bool, events: EventLog) -> str:
    """ok | failed (its launch_end line), not run (no events of its own), else from the job's end:
    unfinished while the job has not ended."""
    if end is not None and end.get("status"):
        return end["status"]
    if not started:
        return "not run"
    if events.job_rc() is None:
        return "unfinished"
    return "ok" if events.job_rc() == 0 and not events.failures() else "failed"


def _windows(launch: Launch, views: dict) -> list[Interval]:
    """The passes' benchmark windows in the launch's server logs; when none started, the whole
    logs (WHOLE_LAUNCH): what the servers did before the launch ended."""
    out = []
    for p in launch.passes:
        view = views[p.key][0]
        bounds = view.bench_window() if view is not None else None
        if bounds is not None:
            out.append(Interval(p.key, *bounds))
    return out or [Interval(WHOLE_LAUNCH, None, None)]


def _collect_launch(run_dir: Path, lay: Layout, launch: Launch, manifest: Manifest,
                    events: EventLog, started: bool, who, sacct, outputs, all_samples: bool,
                    workers) -> list[PassSummary]:
    """Every pass of one launch, its server logs scanned once for all of them."""
    views = {p.key: events.pass_view(p.key) for p in launch.passes}
    windows = _windows(launch, views)
    names = {w.name for w in windows}
    replica_ids = set(events.replicas())
    if manifest.replicas is not None:
        replica_ids |= set(range(manifest.replicas))
    logs = scan_launch(run_dir, lay, events, windows, replica_ids, all_samples=all_samples,
                       workers=workers)
    telemetry = read_launch(run_dir, lay, manifest.config)
    out = []
    for p in launch.passes:
        view, rc = views[p.key]
        if p.probe:                     # a capacity probe: the rate the job decided (its bench_start)
            p = replace(p, rate=_ran_rate(view))
        s = collect_pass(PassInputs(
            root=run_dir, launch=lay, manifest=manifest, run_id=who.run_id, mode=p.mode,
            job_id=who.job_id, ref=PassRef(launch.index, p.key, p.mode, p.concurrency, p.repeat, p.prompts, p.rate),
            bench=lay.bench(p.key), client_log=lay.client_log(p.key),
            events=view if view is not None else events,
            window_name=p.key if p.key in names else WHOLE_LAUNCH, logs=logs,
            sacct=dict(sacct) if sacct else None, all_samples=all_samples, job_outputs=outputs,
            completed=rc == 0, telemetry=telemetry))
        if view is None and s.verdict not in ("cancelled", "timeout", "running"):
            why = (f"pass {p.key} never started: launch {launch.index} ({launch.mode}) ended first"
                   if started else f"launch {launch.index} ({launch.mode}) never started")
            s = replace(s, verdict="failed" if s.verdict == "ok" else s.verdict, reasons=s.reasons + (why,))
        out.append(s)
    return out
