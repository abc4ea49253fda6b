"""collect_run: one run directory -> RunSummary (pure: reads files, writes nothing)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Mapping

from .. import rundir
from ..parse.bench import parse_result_block, read_last_record
from ..parse.diagnose import ROOT_CAUSE_KINDS, diagnose
from ..parse.events import read_events
from ..parse.preflight import ran_on_note, server_info_note
from .bench_result import bench_result, bench_spec
from .job import job_info
from .records import RunSummary
from .replicas import pooled_acceptance, summarise_replicas
from .server_metrics import collect_server_metrics
from .verdict import (diagnosis_reasons, outcome_reasons, state_verdict, validity_reasons)


def collect_run(run_dir: str | Path, *, all_samples: bool = False,
                sacct: Mapping | None = None, workers: int | None = None) -> RunSummary:
    """Summarise one run directory (layout in rundir.Layout).

    sacct: Slurm facts from the caller (see collect.job); None when unknown.
    all_samples: count decode samples of the whole log instead of the benchmark window.
    workers: processes for scanning server logs (None: automatic, 1: in-process).
    """
    run_dir = Path(run_dir)
    lay = rundir.Layout(run_dir)
    manifest = rundir.read_manifest(run_dir) or rundir.Manifest()
    who = rundir.identify(run_dir, manifest)
    events = read_events(lay.events)
    job = job_info(sacct, events, who.job_id)
    notes: list[str] = []
    if events.bad_lines:
        notes.append(f"events.log: {len(events.bad_lines)} unreadable line(s)")
    # What the run ran on (the preflight's per-node findings) and the router's /server_info answer.
    notes += [n for n in (ran_on_note(run_dir), server_info_note(events)) if n]

    # ---- benchmark numbers -------------------------------------------------------------
    read = read_last_record(lay.bench_jsonl)
    block = parse_result_block(lay.client_log)
    spec = bench_spec(read.record, block, manifest.benchmark)
    bench, bnotes = bench_result(read, block, spec)
    notes += bnotes
    has_result = bench.source is not None

    # ---- replicas ----------------------------------------------------------------------
    window = events.bench_window()
    replica_ids = set(events.replicas())
    if manifest.replicas is not None:
        replica_ids |= set(range(manifest.replicas))
    reps = summarise_replicas(run_dir, replica_ids, events, window, all_samples=all_samples,
                              node_lists=job.node_lists, warmup_tokens=manifest.warmup_input_len,
                              workers=workers)
    if not reps:
        reps = summarise_replicas(run_dir, {0, 1}, events, window, all_samples=all_samples,
                                  node_lists=job.node_lists, warmup_tokens=None, workers=1)
    replicas = tuple(r.summary for r in reps)
    problems = [p for r in reps for p in r.problems]
    notes += [n for r in reps for n in r.notes]
    accept = pooled_acceptance(reps)
    server_metrics = collect_server_metrics(run_dir, events, replicas, accept, manifest.config)
    notes += server_metrics.notes

    # ---- verdict -----------------------------------------------------------------------
    slurm_out = lay.slurm_outs()
    slurm_lines = diagnose(slurm_out, root=run_dir) if job.state is None else []
    verdict, reasons = state_verdict(job, events, slurm_lines)
    findings = []
    if verdict is None:
        failed = outcome_reasons(job, events, bench, has_result)
        if failed:
            verdict, reasons = "failed", failed
        else:
            invalid = validity_reasons(bench, problems, replicas, window,
                                       server_metrics.replicas)
            verdict, reasons = ("invalid", invalid) if invalid else ("ok", [])
    elif verdict in ("failed", "cancelled", "timeout"):
        reasons += [r for r in outcome_reasons(job, events, bench, has_result)
                    if r not in reasons]
    if verdict in ("failed", "cancelled", "timeout"):
        files = slurm_out + (lay.server_logs() + [lay.router_log, lay.client_log]
                             if lay.logs.is_dir() else [])
        findings = diagnose(files, root=run_dir)
        diag = diagnosis_reasons(findings, job.node_lists, events) + \
            stalled_replica_reasons(run_dir, events, job.node_lists)
        reasons = diag + [r for r in reasons if r not in diag] if verdict == "failed" \
            else reasons + [r for r in diag if r not in reasons]
        cut = interrupted_reason(events, replicas, spec.num_prompts, has_result)
        if cut:
            reasons.insert(1, cut)
    elif verdict == "invalid" and lay.logs.is_dir():
        # A replica that failed while the job still completed (e.g. a peer's link went down: the
        # head's watchdog fired, but its server step could not end while srun waited for the
        # unreachable node, and the router sent the rest elsewhere): its root cause goes first.
        roots = [f for f in diagnose(lay.server_logs(), root=run_dir) if f.kind in ROOT_CAUSE_KINDS]
        if roots:
            findings = roots
            diag = diagnosis_reasons(roots, job.node_lists, events)
            reasons = diag + [r for r in reasons if r not in diag]
    elif verdict == "ok" and problems:
        notes += problems

    return RunSummary(
        run_id=who.run_id, mode=who.mode, label=manifest.mode_description,
        job=job, spec=spec, bench=bench, replicas=replicas, accept=accept,
        window=tuple(t.isoformat(sep=" ", timespec="milliseconds") if t else None
                     for t in (window or (None, None))),
        all_samples=all_samples, verdict=verdict, reasons=tuple(reasons),
        findings=tuple(asdict(f) for f in findings), notes=tuple(notes),
        server_metrics=server_metrics)


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
    counted = [r for r in replicas if r.requests_served is not None]
    if not counted:
        return f"benchmark interrupted{after}; no server log to count completed requests"
    n = sum(r.requests_served for r in counted)
    exact = all(r.requests_source == "access_log" for r in counted)
    per = ", ".join(f"replica {r.replica}: {r.requests_served}" for r in counted)
    if exact:
        return (f"benchmark interrupted{after}: {n}" + (f" of {total}" if total else "")
                + f" requests had succeeded (HTTP 200 in the server access logs: {per}; a "
                "streamed request is logged when it starts); the client wrote no result")
    return (f"benchmark interrupted{after}: about {n}" + (f" of {total}" if total else "")
            + f" requests had reached the servers (no access log; new sequences in prefill "
            f"lines: {per}); the client wrote no result")


def stalled_replica_reasons(run_dir: Path, events, node_lists: dict) -> list[str]:
    """The last line of the head log of each replica the job gave up on (not healthy in time,
    warm-up failed): where its start-up stopped. The job's output has the last 20 lines."""
    out = []
    for e in events.failures():
        ids = e.fields.get("replicas") or e.fields.get("replica") or ""
        if e.fields.get("kind") not in ("not_ready", "warmup_failed"):
            continue
        for g in (x for x in ids.split(",") if x.strip().isdigit()):
            path = rundir.Layout(run_dir).server_log(int(g), 0)
            line = _last_line(path)
            hosts = node_lists.get(str(int(g))) or []
            where = f"replica {int(g)} node rank 0" + (f" ({hosts[0]})" if hosts else "")
            out.append(f"{where}: last log line: {line} [{path.relative_to(run_dir)}]" if line
                       else f"{where}: its log is empty or missing [{path.relative_to(run_dir)}]")
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


__all__ = ["collect_run"]
