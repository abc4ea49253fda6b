"""Collect a job: each launch's server logs read once, then every pass of it (collect_pass).

A single run is the campaign of one launch (the run directory itself) and one pass (its
bench.jsonl and logs/client.log), collected by the same code. A campaign launch lives in its own
launch<N>-<MODE>/ directory with one client output per pass; each pass sees the launch's events
without the other passes' benchmark windows and without what came after its own end, so a
completed pass (bench_end rc=0) is judged completed even if the job was later cancelled or a later
pass failed: its numbers were final when it ended.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping

from ..model import rundir
from ..model.campaign import Campaign, Launch, Pass
from ..parse.events import EventLog, read_events
from ..parse.server_scan import Interval
from ..model.rundir import Layout, Manifest
from ..model.slurm import is_active
from .job import job_info
from .passes import PassInputs, collect_pass
from .records import CampaignStop, CampaignSummary, LaunchSummary, PassRef, PassSummary
from .replicas import scan_launch
from .rows import campaign_record

NOT_RUN = "not run"
SKIPPED_TIME = "skipped (time)"


def campaign_of(run_dir: Path) -> Campaign | None:
    """The campaign a run directory holds (from its manifest), None for a single run."""
    m = rundir.read_manifest(Path(run_dir))
    return m.campaign if m else None


def single_campaign(manifest: Manifest, mode: str | None) -> Campaign:
    """A single run as a campaign: one launch, one pass (its figures from the manifest)."""
    b = manifest.config.benchmark if manifest.config is not None else None
    c, n = (b.concurrency, b.num_prompts) if b is not None else (None, None)
    m = mode or "?"
    return Campaign((m,), 1, (c or 0,), "blocked", False,
                    (Launch(1, m, (Pass(1, m, c or 0, 1, n or 0),)),))


def launch_status(root_events: EventLog) -> dict[int, dict]:
    """launch index -> fields of its launch_end line in the job's events.log."""
    return {e.get_int("launch"): dict(e.fields) for e in root_events.named("launch_end")
            if e.get_int("launch") is not None}


def collect(run_dir: str | Path, *, sacct: Mapping | None = None, all_samples: bool = False,
            workers: int | None = None) -> CampaignSummary:
    """Everything about a job (pure but for reading files): launches, passes and their verdicts."""
    run_dir = Path(run_dir)
    root = Layout(run_dir)
    manifest = rundir.read_manifest(run_dir) or Manifest()
    who = rundir.identify(run_dir, manifest)
    single = manifest.campaign is None
    campaign = single_campaign(manifest, who.mode) if single else manifest.campaign
    root_events = read_events(root.events)
    status = launch_status(root_events)
    outputs = tuple(root.slurm_outs())
    launches, passes = [], []
    stop = None if single else time_stop(root_events, campaign)
    for launch in campaign.launches:
        if stop is not None and launch.index > stop.launches_run:     # the job did not start its block
            launches.append(LaunchSummary(launch.index, launch.mode, root.rel(root.launch(launch, False).root),
                                          SKIPPED_TIME, None, tuple(f"{p.key}: {SKIPPED_TIME}" for p in launch.passes)))
            continue
        lay = root.launch(launch, single)
        events = root_events if single else with_job_end(read_events(lay.events), root_events)
        lman = manifest if single else (rundir.read_manifest(lay.root) or replace(manifest, campaign=None))
        summaries = _collect_launch(run_dir, lay, launch, lman, events, who, single, sacct,
                                    outputs, all_samples, workers)
        verdicts = []
        for p, s in zip(launch.passes, summaries):
            if p.burn_in:
                verdicts.append(f"{p.key}: {s.verdict} (burn-in, discarded)")
                continue
            passes.append(s)
            verdicts.append(f"{p.key}: {s.verdict}")
        fail = next(iter(events.failures()), None)
        st = status.get(launch.index, {})
        launches.append(LaunchSummary(
            launch.index, launch.mode, "." if single else root.rel(lay.root),
            (summaries[0].verdict if single else
             st.get("status") or ("not run" if not events.exists else "unfinished")),
            dict(fail.fields) if fail else None, tuple(verdicts)))
    job = passes[0].job if single and passes else job_info(sacct, root_events, who.job_id)
    running = job.source == "sacct" and is_active(str(job.state_raw or ""))      # this job's state only
    return CampaignSummary(who.run_id, manifest.job_id or who.job_id, campaign, single, job,
                           running, tuple(launches), tuple(passes), stop)


def time_stop(root_events: EventLog, campaign: Campaign) -> CampaignStop | None:
    """The job's stop before a block it could not finish in its time left (time_stop in the job's
    events.log, pipeline.sh), with the design that ran: the launches before that block."""
    e = next(iter(root_events.named("time_stop")), None)
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


def with_job_end(launch_events: EventLog, root_events: EventLog) -> EventLog:
    """A launch's events with the job's job_end line (the job script writes it to the job's
    events.log only): without Slurm's word (sacct absent, or about another job) a launch of an
    ended job does not look like a running one."""
    end = root_events.named("job_end")
    if not end or launch_events.named("job_end"):
        return launch_events
    return replace(launch_events, events=launch_events.events + (end[-1],))


def _collect_launch(run_dir: Path, lay: Layout, launch: Launch, manifest: Manifest,
                    events: EventLog, who, single: bool, sacct, outputs, all_samples: bool,
                    workers) -> list[PassSummary]:
    """Every pass of one launch, its server logs scanned once for all of them."""
    views = {p.key: (events, None) if single else events.pass_view(p.key) for p in launch.passes}
    windows = []
    for p in launch.passes:
        view = views[p.key][0]
        bounds = view.bench_window() if view is not None else None
        if single or bounds is not None:
            windows.append(Interval(p.key, *(bounds or (None, None))))
    replica_ids = set(events.replicas())
    if manifest.replicas is not None:
        replica_ids |= set(range(manifest.replicas))
    logs = scan_launch(run_dir, lay, events, windows, replica_ids, all_samples=all_samples,
                       workers=workers)
    out = []
    for p in launch.passes:
        ref = PassRef(launch.index, None if single else p.key, p.mode, p.concurrency, p.repeat,
                      p.prompts)
        view, rc = views[p.key]
        run_id = who.run_id if single else f"{who.run_id}/{Layout(run_dir).rel(lay.root)}/{p.key}"
        if not events.exists and not single:
            out.append(PassSummary(run_id=run_id, mode=p.mode, label=manifest.mode_description,
                                   verdict=NOT_RUN, ref=ref, reasons=(
                                       f"launch {launch.index} ({launch.mode}) never started",)))
            continue
        facts = dict(sacct) if sacct else None
        if rc == 0:                   # this pass completed whatever happened to the job later
            facts = dict(facts or {}, state="COMPLETED", exit_code="0:0")
        s = collect_pass(PassInputs(
            root=run_dir, launch=lay, manifest=manifest, run_id=run_id,
            mode=who.mode if single else p.mode, job_id=who.job_id, ref=ref,
            bench=lay.pass_bench(p.key, single), client_log=lay.pass_client_log(p.key, single),
            events=view if view is not None else events, window_name=p.key, logs=logs,
            sacct=facts, all_samples=all_samples, job_outputs=outputs))
        if view is None:
            reasons = list(s.reasons)
            if s.verdict not in ("cancelled", "timeout", "running"):
                reasons.append(f"pass {p.key} never started: launch {launch.index} ({launch.mode}) "
                               "ended first")
            s = replace(s, verdict="failed" if s.verdict == "ok" else s.verdict,
                        reasons=tuple(reasons))
        out.append(s)
    return out


def collect_campaign(run_dir: str | Path, sacct: Mapping | None = None) -> dict:
    """A campaign collected into its summary.json's dict."""
    cs = collect(run_dir, sacct=sacct)
    if cs.single:
        raise ValueError(f"{run_dir} is not a campaign")
    return campaign_record(cs)
