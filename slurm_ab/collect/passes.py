"""collect_pass: one timed benchmark pass -> PassSummary (pure: reads the files it is given).

A launch runs one or several passes against one set of servers. Every input
is explicit: the pass's client output, its view of the launch's events, the launch's server-log
scans seen through the pass's window (scanned once per launch: collect.replicas.scan_launch),
its /metrics scrapes, and Slurm's facts about the job. File names in reasons and notes are
relative to the run directory (a campaign pass's read 'launch2-tp32/logs/...').
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from ..parse.bench import parse_result_block, read_last_record
from ..parse.diagnose import ROOT_CAUSE_KINDS, diagnose
from ..parse.events import EventLog
from ..parse.preflight import ran_on_note, server_info_note
from ..model.rundir import RELATIVE, Layout, Manifest
from ..model.slurm import CANCELLED_STATES, FAILED_STATES, TIMEOUT_STATES
from .bench_result import bench_result, bench_spec
from .job import job_info
from ..model.experiment import kind_of
from .pd import collect_pd, component_name, disaggregated, pd_reasons, role_names
from .records import PassRef, PassSummary
from .replicas import LaunchLogs, PassWindow, pooled_acceptance, summarise_replicas
from .server_metrics import collect_server_metrics
from .speed import speed_findings
from .telemetry import LaunchTelemetry, pass_telemetry
from .leftovers import leftovers
from .verdict import (diagnosis_reasons, nccl_network_reasons, outcome_reasons, router_retries, router_retry_reasons, short_of_requests,
                      state_verdict, validity_reasons)


@dataclass(frozen=True)
class PassInputs:
    """What one pass is collected from."""

    root: Path                      # the run directory
    launch: Layout                  # its launch directory
    manifest: Manifest              # the launch's manifest (its mode's resolved experiment)
    run_id: str
    mode: str | None
    job_id: str | None
    ref: PassRef
    bench: Path                     # the client's --output-file
    client_log: Path                # the client's stdout+stderr
    events: EventLog                # the launch's events as this pass sees them
    window_name: str                # its window in `logs`
    logs: LaunchLogs                # the launch's server logs, scanned once
    sacct: Mapping | None           # Slurm's facts (collect.job); None when unknown
    all_samples: bool = False
    job_outputs: tuple = ()         # the job's slurm-<id>.out files (run directory)
    completed: bool = False         # its client ended with status 0: judged whatever befell the job later
    telemetry: LaunchTelemetry | None = None    # the launch's samplers' files, read once


def _pass_benchmark(benchmark, ref: PassRef) -> dict:
    """The manifest's [benchmark] with this pass's own concurrency and prompts (a sweep's passes
    run other values than the experiment's defaults)."""
    return {**(benchmark or {}), **{k: v for k, v in (("concurrency", ref.concurrency), ("num_prompts", ref.prompts))
                                    if v is not None}}


def _nccl_network(manifest: Manifest) -> tuple[str, tuple[str, ...]]:
    """cluster.nccl_network as the run recorded it ("": not checked) and its family's names."""
    c = manifest.config.cluster if manifest.config is not None else None
    return ((c.nccl_network if c is not None else None) or "", tuple(c.nccl_names or ()) if c is not None else ())


def _max_retry_pct(manifest: Manifest) -> float:
    """router.max_retry_pct as the run recorded it; the built-in one for runs from before it."""
    r = manifest.config.router if manifest.config is not None else None
    if r is not None and r.max_retry_pct is not None:
        return float(r.max_retry_pct)
    from ..model.config import builtin_experiment
    return float(builtin_experiment()["router"]["max_retry_pct"])


def collect_pass(inp: PassInputs) -> PassSummary:
    """Summarise one pass: numbers, per-replica facts, server metrics, verdict and diagnosis."""
    lay, root, events, manifest = inp.launch, inp.root, inp.events, inp.manifest
    job = job_info(inp.sacct, events, inp.job_id)
    notes: list[str] = []
    if events.bad_lines:
        notes.append(f"{RELATIVE.events}: {len(events.bad_lines)} unreadable line(s)")
    # What the run ran on (the preflight's per-node findings) and the router's /server_info answer.
    # A mode in its own image or environment had a preflight of its own (<node>@<mode>).
    reports = (inp.mode and Layout(root).preflight_reports(inp.mode)) or Layout(root).preflight_reports()
    notes += [n for n in (ran_on_note(reports), server_info_note(events)) if n]

    # ---- benchmark numbers -------------------------------------------------------------
    read = read_last_record(inp.bench)
    block = parse_result_block(inp.client_log)
    spec = bench_spec(read.record, block, _pass_benchmark(manifest.benchmark, inp.ref))
    bench, bnotes = bench_result(read, block, spec)
    notes += bnotes
    has_result = bench.source is not None

    # ---- replicas ----------------------------------------------------------------------
    window = events.bench_window()
    replica_ids = set(events.replicas()) | set(inp.logs.files)
    if manifest.replicas is not None:
        replica_ids |= set(range(manifest.replicas))
    names = role_names(manifest.config)          # het group -> (role, instance)
    reps = summarise_replicas(inp.logs, replica_ids, PassWindow(
        inp.window_name, window, inp.all_samples, manifest.warmup_input_len, job.node_lists, names))
    replicas = tuple(replace(r.summary, role=names[r.summary.replica][0], instance=names[r.summary.replica][1])
                     if r.summary.replica in names else r.summary for r in reps)
    problems = [p for r in reps for p in r.problems]
    if not reps:
        problems.append(f"no replica is known: no server log, no replica in {RELATIVE.events} and no "
                        "replica count in the manifest")
    notes += [n for r in reps for n in r.notes]
    accept = pooled_acceptance(reps)
    server_metrics = collect_server_metrics(lay.root, events, replicas, accept, manifest.config)
    speed = speed_findings(replicas, server_metrics.replicas)     # (confirmed, text): reason or note
    notes += [*server_metrics.notes, *(text for confirmed, text in speed if not confirmed)]
    pd = None
    if disaggregated(names):
        pd = collect_pd(lay.root, events, names, job.node_lists, bench.ttft.mean if bench.ttft else None,
                        server_metrics.replicas, notes,
                        getattr(getattr(manifest.config, "pd", None), "transfer_backend", None))
        notes += pd.notes

    load = _open_loop(inp, lay, read.record, names, window, server_metrics, notes) if inp.ref.rate else None
    telemetry = pass_telemetry(inp.telemetry, events, manifest.config, bench.duration_s, bench.output_tokens,
                               job.node_lists) if has_result else None
    notes += list(telemetry.notes) if telemetry else []

    # ---- verdict -----------------------------------------------------------------------
    # A completed pass's numbers were final when it ended: Slurm's later word on the job (a
    # cancel, the time limit, a failed later launch) is not about it.
    judged = replace(job, state="COMPLETED", exit_code="0:0") if inp.completed else job
    slurm_lines = diagnose(list(inp.job_outputs), root=root) if judged.state is None else []
    verdict, reasons = state_verdict(judged, events, slurm_lines)
    files = (Layout(root).rel(inp.bench), Layout(root).rel(inp.client_log))
    findings = []
    logs_exist = lay.logs.is_dir()
    if verdict is None:
        failed = outcome_reasons(judged, events, bench, has_result, files)
        if failed:
            verdict, reasons = "failed", failed
        else:
            retried, flagged = router_retry_reasons(router_retries(lay.root, events), bench.total,
                                                    _max_retry_pct(manifest))
            invalid = validity_reasons(bench, problems, replicas, window,
                                       [text for confirmed, text in speed if confirmed]) + \
                (pd_reasons(pd, replicas) if pd else []) + retried + \
                (nccl_network_reasons(lay.server_logs(), *_nccl_network(manifest)[:1], job.node_lists, root,
                                      names=_nccl_network(manifest)[1])
                 if logs_exist else [])
            verdict, reasons = ("invalid", invalid) if invalid else ("ok", flagged)
    elif verdict in ("failed", "cancelled", "timeout"):
        reasons += [r for r in outcome_reasons(judged, events, bench, has_result, files)
                    if r not in reasons]
        if has_result and bench.total and bench.completed and bench.completed < bench.total:
            reasons.append(short_of_requests(bench))    # cut short
    if verdict in ("failed", "cancelled", "timeout"):
        files = list(inp.job_outputs) + (lay.server_logs() + [lay.router_log, inp.client_log]
                                         if logs_exist else [])
        findings = diagnose(files, root=root)
        diag = diagnosis_reasons(findings, job.node_lists, events, names,
                                 stalled=stalled_replica_reasons(root, lay, events, job.node_lists, names))
        reasons = diag + [r for r in reasons if r not in diag] if verdict == "failed" \
            else reasons + [r for r in diag if r not in reasons]
        cut = interrupted_reason(events, replicas, spec.num_prompts, has_result)
        if cut:
            reasons.insert(1, cut)
        left = leftovers(root, inp.job_id)          # what the nodes may still hold, and where
        if left is not None and (left.left or verdict == "cancelled"):
            reasons.append(left.text())
    elif inp.completed and job.state in CANCELLED_STATES | FAILED_STATES | TIMEOUT_STATES:
        # The pass completed, the job ended otherwise later (slurm-ab cancel in the launch's
        # teardown, a later launch's failure, the time limit): what its nodes may still hold.
        left = leftovers(root, inp.job_id)
        if left is not None:
            notes.append(f"job {job.state_raw or job.state} after this pass: {left.text()}")
    if verdict == "invalid" and logs_exist:
        # A replica that failed while the job still completed (e.g. a peer's link went down: the
        # head's watchdog fired, but its server step could not end while srun waited for the
        # unreachable node, and the router sent the rest elsewhere): its root cause goes first.
        roots = [f for f in diagnose(lay.server_logs(), root=root) if f.kind in ROOT_CAUSE_KINDS]
        if roots:
            findings = roots
            diag = diagnosis_reasons(roots, job.node_lists, events, names)
            reasons = diag + [r for r in reasons if r not in diag]
    elif verdict == "ok" and problems:
        notes += problems
    if telemetry is not None and verdict in ("ok", "invalid"):
        # named nodes, an energy figure that cannot be given, a saturated client: flags, the
        # verdict stays what the benchmark's own evidence says
        reasons = list(reasons) + [f for f in telemetry.flags if f not in reasons]

    return PassSummary(
        run_id=inp.run_id, mode=inp.mode, label=manifest.mode_description,
        job=job, spec=spec, bench=bench, replicas=replicas, accept=accept,
        window=tuple(t.isoformat(sep=" ", timespec="milliseconds") if t else None
                     for t in (window or (None, None))),
        all_samples=inp.all_samples, verdict=verdict, reasons=tuple(reasons),
        findings=tuple(findings), notes=tuple(notes),
        server_metrics=server_metrics, ref=inp.ref, pd=pd, load=load, telemetry=telemetry)


def _open_loop(inp: PassInputs, lay: Layout, record, names, window, server_metrics, notes: list
               ) -> "LoadCheck | None":
    """An open-loop pass's load check (collect.load): arrivals in the answering servers' access logs,
    each request's E2E from the client's details, the servers' waiting queue from /metrics; a
    saturated pass is noted with its evidence."""
    from ..parse.bench import requests
    from .load import arrival_times, check_load, waiting_queue
    if window is None:
        return None
    heads = [p for g, p in sorted(lay.head_logs().items()) if g not in names or kind_of(names[g][0]).answers]
    reqs = requests(record) or []
    growth = _saturation_growth(inp.manifest)
    load = check_load(float(inp.ref.rate), arrival_times(heads, window), [r.e2e if r.ok else None for r in reqs],
                      growth, waiting_queue([r.series for r in server_metrics.replicas]))
    notes += list(load.notes)
    if load.saturated:
        notes.append(f"saturated: the servers did not keep up with {inp.ref.rate:g} req/s: {load.evidence} "
                     f"(benchmark.saturation_growth = {growth:g})")
    return load


def _saturation_growth(manifest: Manifest) -> float:
    b = manifest.config.benchmark if manifest.config is not None else None
    g = getattr(b, "saturation_growth", None)
    return float(g) if isinstance(g, (int, float)) and g else 0.1


def interrupted_reason(events, replicas, total: int | None, has_result: bool) -> str | None:
    """A benchmark that started and never ended: how far it got, from the servers' access logs
    (the client writes its output only at the end)."""
    window = events.bench_window()
    if window is None or window[1] is not None or has_result:
        return None
    start = events.last["bench_start"]
    stop = next((e for e in events.events if e.line > start.line and e.name in
                 ("fail", "teardown", "job_end")), None)
    after = f" {stop.epoch - start.epoch:.0f} s after it started" if stop else ""
    # PD: every request reaches a prefill and a decode; the decodes' answers are the client's
    counted = [r for r in replicas if r.requests_served is not None and kind_of(r.role).answers]
    if not counted:
        return f"benchmark interrupted{after}; no server log to count completed requests"
    n = sum(r.requests_served for r in counted)
    exact = all(r.requests_source == "access_log" for r in counted)
    per = ", ".join(f"{r.name}: {r.requests_served}" for r in counted)
    if total and n > total:
        # more 200s than prompts: the router retried requests (a lost prefill, a dead replica), so
        # the access logs cannot say how many of the client's requests succeeded
        return (f"benchmark interrupted{after}: the servers answered {n} requests with HTTP 200 ({per}), "
                f"more than the {total} prompts: the router retried some, so how many succeeded is "
                "unknown; the client wrote no result")
    if exact:
        # uvicorn writes a streamed request's access line when its answer starts, not when it
        # ends: a 200 is a request that began to be answered, so n bounds the successes from above
        return (f"benchmark interrupted{after}: at most {n}" + (f" of {total}" if total else "")
                + f" requests had succeeded (HTTP 200 in the server access logs: {per}; a streamed "
                "request is logged when its answer starts, so some may have been cut off); the client "
                "wrote no result")
    return (f"benchmark interrupted{after}: about {n}" + (f" of {total}" if total else "")
            + f" requests had reached the servers (no access log; new sequences in prefill "
            f"lines: {per}); the client wrote no result")


def stalled_replica_reasons(root: Path, lay: Layout, events, node_lists: dict, names=None) -> list[str]:
    """The last line of the head log of each replica the job gave up on (not healthy in time,
    warm-up failed): where its start-up stopped. The job's output has the last 20 lines."""
    out = []
    for e in events.failures():
        ids = e.fields.get("replicas") or e.fields.get("replica") or ""
        if e.fields.get("kind") not in ("not_ready", "warmup_failed"):
            continue
        for g in (x for x in ids.split(",") if x.strip().isdigit()):
            path = lay.server_log(int(g), 0)
            line = _last_line(path)
            hosts = node_lists.get(str(int(g))) or []
            where = f"{component_name(int(g), names)} node rank 0" + (f" ({hosts[0]})" if hosts else "")
            shown = Layout(root).rel(path)
            out.append(f"{where}: last log line: {line} [{shown}]" if line
                       else f"{where}: its log is empty or missing [{shown}]")
    return out


def _last_line(path: Path, tail: int = 16384) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - tail))
            data = f.read()
    except OSError:
        return None
    # Slurm appends its own '*** STEP ... CANCELLED ***' line to a step's output: not the server's.
    lines = [ln for ln in data.decode(errors="replace").splitlines()
             if ln.strip() and not ln.startswith(("slurmstepd", "srun:"))]
    if not lines:
        return None
    text = " ".join(lines[-1].split())
    return text if len(text) <= 300 else text[:297] + "..."


__all__ = ["PassInputs", "collect_pass", "interrupted_reason", "stalled_replica_reasons"]
