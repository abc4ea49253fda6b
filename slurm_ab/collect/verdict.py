"""Verdict rules: one of ok | invalid | failed | cancelled | timeout | running, with reasons.

- running: Slurm says the job is not finished, or nothing says it is (no sacct state, no
  job_end in events.log, no Slurm cancellation line): nothing final may be written.
- cancelled / timeout: Slurm state (or Slurm's own '*** ... CANCELLED AT ... ***' line).
- failed: Slurm failure state, a non-zero job/client exit, a 'fail' event, no result at all.
- invalid: the job completed but the numbers do not measure what was asked: not every prompt
  succeeded, a request error, a replica that served nothing or was not warmed up, logs missing.
- ok: everything above holds (state COMPLETED, or unknown state with job_end rc=0).
"""
from __future__ import annotations

from typing import Sequence

from ..parse.diagnose import ROOT_CAUSE_KINDS, Finding
from ..parse.events import EventLog
from .job import CANCELLED_STATES, FAILED_STATES, RUNNING_STATES, TIMEOUT_STATES
from .model import BenchResult, JobInfo


def state_verdict(job: JobInfo, events: EventLog, slurm_lines: Sequence[Finding]
                  ) -> tuple[str | None, list[str]]:
    """Verdict decided by the job's state alone (None: the job completed or looks completed)."""
    state, raw = job.state, job.state_raw
    kinds = {f.kind for f in slurm_lines}
    if state in RUNNING_STATES:
        return "running", [f"job is {raw} (Slurm)"]
    if state in CANCELLED_STATES:
        return "cancelled", [f"job {raw} (Slurm)"]
    if state in TIMEOUT_STATES:
        return "timeout", [f"job hit its time limit ({raw})"]
    if state in FAILED_STATES:
        return "failed", [f"job {raw} (Slurm, exit code {job.exit_code or '?'})"]
    if state is None:
        fails = {e.fields.get("kind") for e in events.failures()}
        if "slurm_timeout" in kinds or "time_limit" in fails:
            return "timeout", ["job hit its time limit (Slurm/job log)"]
        if "slurm_node_failure" in kinds:
            return "failed", ["job lost a node (DUE TO NODE FAILURE)"]
        if "slurm_cancelled" in kinds or "signal" in fails:
            return "cancelled", ["job was cancelled (Slurm/job log)"]
        if events.job_rc() is None and not fails:
            return "running", ["no Slurm state given and no job_end in events.log: the job may "
                               "still be running"]
    return None, []


def outcome_reasons(job: JobInfo, events: EventLog, bench: BenchResult, has_result: bool
                    ) -> list[str]:
    """Reasons that make a finished job 'failed'."""
    out = []
    rc = events.job_rc()
    if rc not in (None, 0):
        out.append(f"job script exited with status {rc}")
    brc = events.bench_rc()
    if brc not in (None, 0):
        out.append(f"benchmark client exited with status {brc}")
    for e in events.failures():
        kind = e.fields.get("kind", "?")
        extra = " ".join(f"{k}={v}" for k, v in e.fields.items() if k != "kind")
        out.append(f"job recorded failure {kind}" + (f" ({extra})" if extra else ""))
    if not has_result:
        out.append("no benchmark result: bench.jsonl missing, empty or unreadable and no "
                   "result block in logs/client.log")
    elif bench.completed == 0:
        out.append("no request succeeded")
    return out


def validity_reasons(bench: BenchResult, replica_problems: Sequence[str], replicas,
                     window) -> list[str]:
    """Reasons that make a completed run 'invalid'."""
    out = []
    if bench.total is None:
        out.append("number of prompts unknown (no per-request details, no num_prompts)")
    elif bench.completed is not None and bench.completed != bench.total:
        out.append(f"only {bench.completed}/{bench.total} requests succeeded")
    if bench.failed:
        first = bench.errors[0] if bench.errors else "error text not recorded"
        out.append(f"{bench.failed} request(s) failed: {first}")
    if window is None:
        out.append("no bench_start in events.log: the benchmark window is unknown")
    out.extend(replica_problems)
    for r in replicas:
        if r.logs and not r.requests_served:
            out.append(f"replica {r.replica} served no requests during the benchmark")
        if r.logs and not r.warmup_seen:
            out.append(f"replica {r.replica} was not warmed up: {r.warmup}")
    return out


def finding_reason(f: Finding, node_lists: dict) -> str:
    d = f.details
    where = ""
    if "replica" in d:
        hosts = node_lists.get(str(d["replica"]), [])
        host = hosts[d["node_rank"]] if d["node_rank"] < len(hosts) else None
        where = f"replica {d['replica']} node rank {d['node_rank']}" + \
            (f" ({host})" if host else "") + ": "
    elif f.file:
        where = f"{f.file}: "
    if f.kind == "oom":
        mf = d.get("mem_fraction_static")
        return (f"{where}{d.get('label')} during {d.get('phase')}"
                + (f" (mem_fraction_static={mf:g})" if mf is not None else "")
                + f" [{f.file}:{f.line}]")
    if f.kind == "job_fatal":
        return f"job: {d.get('message') or f.excerpt}"
    if f.kind == "srun_error":
        return f"srun: {d.get('message') or f.excerpt}"
    return f"{where}{d.get('label', f.kind)}: {f.excerpt} [{f.file}:{f.line}]"


def diagnosis_reasons(findings: Sequence[Finding], node_lists: dict) -> list[str]:
    """Root causes first (by kind priority, then time), then the job's own FATAL lines."""
    def key(f: Finding):
        return (ROOT_CAUSE_KINDS.index(f.kind), f.details.get("ts") or "9999", f.file, f.line)
    roots = sorted((f for f in findings if f.kind in ROOT_CAUSE_KINDS), key=key)
    fatal = [f for f in findings if f.kind in ("job_fatal", "srun_error")]
    seen, out = set(), []
    for f in roots + fatal:
        text = finding_reason(f, node_lists)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out
