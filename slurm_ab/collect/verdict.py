"""Verdict rules: one of ok | invalid | failed | cancelled | timeout | running, with reasons.

- running: Slurm says the job is not finished, or nothing says it is (no sacct state, no
  job_end in events.log, no Slurm cancellation line): nothing final may be written.
- cancelled / timeout: Slurm state (or Slurm's own '*** ... CANCELLED AT ... ***' line); also
  timeout when the job stopped itself on Slurm's USR1 ahead of its limit (Slurm says FAILED).
- failed: Slurm failure state, a non-zero job/client exit, a 'fail' event, no result at all.
- invalid: the job completed but the numbers do not measure what was asked: not every prompt
  succeeded, a request error, a replica that served nothing or was not warmed up, logs missing.
  Also: the router retried more attempts than router.max_retry_pct % of the pass's requests.
- ok: everything above holds (state COMPLETED, or unknown state with job_end rc=0). An ok pass
  whose router retried fewer is flagged: its reasons give the counts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Sequence

from ..parse.diagnose import NO_KV_MEMORY, ROOT_CAUSE_KINDS, Finding, is_job_output
from ..parse.events import EventLog
from ..parse.preflight import preflight_reasons
from ..model.rundir import RELATIVE, server_log_identity
from ..model.slurm import ACTIVE_STATES, CANCELLED_STATES, FAILED_STATES, TIMEOUT_STATES, node_state_words
from .pd import component_name, pd_fail_reasons
from .records import BenchResult, JobInfo


def state_verdict(job: JobInfo, events: EventLog, slurm_lines: Sequence[Finding]
                  ) -> tuple[str | None, list[str]]:
    """Verdict decided by the job's state alone (None: the job completed or looks completed)."""
    state, raw = job.state, job.state_raw
    kinds = {f.kind for f in slurm_lines}
    if state in ACTIVE_STATES:
        return "running", [f"job is {raw} (Slurm)"]
    if state in CANCELLED_STATES:
        asked = "cancelled" in {e.fields.get("kind") for e in events.failures()}
        return "cancelled", [f"job {raw} (Slurm)"] + ([cancel_reason(events)] if asked else [])
    if state in TIMEOUT_STATES:
        return "timeout", [f"job hit its time limit ({raw})"]
    if state in FAILED_STATES and state != "NODE_FAIL" and \
            "cancelled" in {e.fields.get("kind") for e in events.failures()}:
        # slurm-ab cancel: the script tore down on its request and could not cancel itself
        return "cancelled", [cancel_reason(events)]
    if state in FAILED_STATES and state != "NODE_FAIL" and \
            "time_limit" in {e.fields.get("kind") for e in events.failures()}:
        # The job's own teardown on Slurm's USR1 (--signal=B:USR1@N) ran before the limit: Slurm
        # records the script's exit status (FAILED), but the run ended because time ran out.
        return "timeout", [time_limit_reason(events)]
    if state in FAILED_STATES:
        return "failed", [f"job {raw} (Slurm, exit code {job.exit_code or '?'})"]
    if state is None:
        fails = {e.fields.get("kind") for e in events.failures()}
        if "slurm_timeout" in kinds:
            return "timeout", ["job hit its time limit (Slurm/job log)"]
        if "time_limit" in fails:
            return "timeout", [time_limit_reason(events)]
        if "slurm_node_failure" in kinds:
            return "failed", ["job lost a node (DUE TO NODE FAILURE)"]
        if "cancelled" in fails:
            return "cancelled", [cancel_reason(events)]
        if "slurm_cancelled" in kinds or "signal" in fails:
            return "cancelled", ["job was cancelled (Slurm/job log)"]
        if events.job_rc() is None and not fails:
            return "running", [f"no Slurm state given and no job_end in {RELATIVE.events}: the job may "
                               "still be running"]
    return None, []


def cancel_reason(events: EventLog) -> str:
    fail = next(e for e in events.failures() if e.fields.get("kind") == "cancelled")
    who = fail.fields.get("request", "")
    return f"job cancelled by slurm-ab cancel ({who}): its script tore everything down" if who else \
        "job cancelled by slurm-ab cancel: its script tore everything down"


def time_limit_reason(events: EventLog) -> str:
    fail = next(e for e in events.failures() if e.fields.get("kind") == "time_limit")
    start = events.first.get("job_start")
    after = f" {fail.epoch - start.epoch:.0f} s after the job started" if start else ""
    return (f"job reached its time limit: Slurm's warning signal (USR1) came{after} and the job "
            "stopped itself before Slurm killed it")


def outcome_reasons(job: JobInfo, events: EventLog, bench: BenchResult, has_result: bool,
                    files: tuple[str, str] = (str(RELATIVE.bench("<pass>")), str(RELATIVE.client_log("<pass>")))
                    ) -> list[str]:
    """Reasons that make a finished job 'failed'; files: the pass's client output and log as
    reasons name them."""
    out = []
    rc, brc = events.job_rc(), events.bench_rc()
    if rc not in (None, 0) and brc != 0:            # not about a pass that completed before
        out.append(f"job script exited with status {rc}")
    if brc not in (None, 0):
        out.append(f"benchmark client exited with status {brc}")
    for e in events.failures():
        kind = e.fields.get("kind", "?")
        extra = " ".join(f"{k}={v}" for k, v in e.fields.items() if k != "kind")
        out.append(f"job recorded failure {kind}" + (f" ({extra})" if extra else ""))
    if not has_result:
        out.append(f"no benchmark result: {files[0]} missing, empty or unreadable and no "
                   f"result block in {files[1]}")
    elif bench.completed == 0:
        out.append("no request succeeded")
    return out


def short_of_requests(bench: BenchResult) -> str:
    return f"only {bench.completed}/{bench.total} requests succeeded"


def validity_reasons(bench: BenchResult, replica_problems: Sequence[str], replicas,
                     window, slow_replicas: Sequence[str] = ()) -> list[str]:
    """Reasons that make a completed run 'invalid'; slow_replicas: the speed rule's confirmed
    findings (collect/speed.py)."""
    # A replica the router starved (e.g. marked unhealthy) explains the failed requests: first.
    out = balance_reasons(replicas) + list(slow_replicas)
    if bench.total is None:
        out.append("number of prompts unknown (no per-request details, no num_prompts)")
    elif bench.completed is not None and bench.completed != bench.total:
        out.append(short_of_requests(bench))
    if bench.failed:
        first = bench.errors[0] if bench.errors else "error text not recorded"
        out.append(f"{bench.failed} request(s) failed: {first}")
    if window is None:
        out.append(f"no bench_start in {RELATIVE.events}: the benchmark window is unknown")
    out.extend(replica_problems)
    for r in replicas:
        if r.logs and not r.requests_served:
            out.append(f"{r.name} served no requests during the benchmark")
        if r.logs and not r.warmup_seen:
            out.append(f"{r.name} was not warmed up: {r.warmup}")
    return out


BALANCE_MIN_SHARE = 0.5   # of an even share; round_robin gives exactly even shares


def balance_reasons(replicas) -> list[str]:
    """A replica that served some requests but less than half of an even share: the router sent
    it few (e.g. it marked the worker unhealthy mid-benchmark), so the figures measure fewer
    replicas than asked. A replica that served none is reported on its own. PD: within each role
    (every request reaches one prefill and one decode)."""
    out = []
    for role in dict.fromkeys(r.role for r in replicas):
        same = [r for r in replicas if r.role == role]
        served = [(r, r.requests_served) for r in same if r.logs and r.requests_served is not None]
        total = sum(n for _, n in served)
        if len(served) < 2 or total < 2 * len(served):
            continue
        even = total / len(served)
        out += [f"{r.name}{f' (head {r.nodes[0]})' if r.nodes else ''} served {n} of {total} requests during "
                f"the benchmark (an even share is {even:.0f}): unbalanced, the router may have marked it unhealthy"
                for r, n in served if 0 < n < BALANCE_MIN_SHARE * even]
    return out


def _host_map(node_lists: dict) -> dict[str, tuple[int, int]]:
    """host -> (replica, node rank)."""
    out: dict[str, tuple[int, int]] = {}
    for g, hosts in node_lists.items():
        for rank, host in enumerate(hosts):
            out.setdefault(host, (int(g), rank))
    return out


def _where_host(host: str, node_lists: dict, names=None) -> str:
    g_r = _host_map(node_lists).get(host)
    return f"{host} ({component_name(g_r[0], names)} node rank {g_r[1]})" if g_r else host


def finding_reason(f: Finding, node_lists: dict, names=None) -> str:
    d = f.details
    where = ""
    if "replica" in d:
        hosts = node_lists.get(str(d["replica"]), [])
        host = hosts[d["node_rank"]] if d["node_rank"] < len(hosts) else None
        where = f"{component_name(d['replica'], names)} node rank {d['node_rank']}" + \
            (f" ({host})" if host else "") + ": "
    elif f.file:
        where = f"{f.file}: "
    if f.kind == "oom" and d.get("profiled_max_total_tokens") is not None:
        return (f"{where}{NO_KV_MEMORY}: profiled max_total_tokens "
                f"{d['profiled_max_total_tokens']}; lower the model's footprint or raise "
                f"mem_fraction_static [{f.file}:{f.line}]")
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


_SRUN_TASK = re.compile(r"^(\S+): task (\d+): (.+)$")
# NCCL's and GLOO's words for a peer that went away (ncclRemoteError's "remote process exited or
# there was a network error"; gloo's "Connection closed/reset by peer"): a node that logs them saw
# another node die. With them, that node's scheduler logs "Scheduler hit an exception" and its
# launcher "Received sigquit from a child process" (SGLang's fatal sequence): all echoes.
_PEER_GONE = re.compile(r"remote process exit|(?:closed|reset) by peer", re.I)
_ECHO_KINDS = ("nccl", "gloo", "scheduler_exception", "child_failed")


def node_reasons(lost: Sequence[Finding], events: EventLog, node_lists: dict, names=None) -> list[str]:
    """Nodes that failed under the job: srun's 'Node failure on X' lines and the nodes the job
    found down, drained or not responding in Slurm as it ended (events 'node_state')."""
    nodes: dict[str, dict] = {}
    for f in lost:
        if f.details.get("node"):
            nodes.setdefault(f.details["node"], {})["srun"] = True
    for e in events.named("node_state"):
        if e.fields.get("node"):
            reason = e.fields.get("reason", "")
            nodes.setdefault(e.fields["node"], {}).update(
                state=node_state_words(e.fields.get("state") or "?"),
                reason=reason if reason and reason != "none" else None)
    out = []
    for node, info in nodes.items():
        where = _where_host(node, node_lists, names)
        why = f"reason: {info['reason']}" if info.get("reason") else ""
        if info.get("srun"):
            out.append(f"node {where} failed (srun: Node failure on {node}"
                       + (f"; Slurm: {info['state']}" + (f", {why}" if why else "")
                          if "state" in info else "") + ")")
        else:
            out.append(f"node {where} was {info['state']} in Slurm when the job ended"
                       + (f" ({why})" if why else ""))
    return out


def diagnosis_reasons(findings: Sequence[Finding], node_lists: dict,
                      events: EventLog | None = None, names=None, stalled: Sequence[str] = ()) -> list[str]:
    """What went wrong, most telling first: lost nodes, root causes in the logs (by kind
    priority, then time), the task srun saw die in the replica whose server step failed, the
    job's own FATAL line, where each replica the job gave up on stopped (stalled: its head log's
    last line), then other srun errors (a line srun printed about a task of another step, e.g. a
    telemetry sampler's, cannot be tied to the failure: it comes last).

    The job's output (slurm-*.out) repeats the last lines of the failing logs: its root causes
    count only when no log file has one of the same kind. srun errors printed after the job's
    FATAL line come from its own teardown and are left out, as are those diagnose marks as printed
    while a launch or the job tore its steps down (details 'teardown'). A root cause logged after the job
    declared its first failure is a consequence of the teardown (rank 0 sees NCCL peers exit
    when the job stops the other nodes): it follows every cause logged before. A node that died of
    a signal (srun: 'task N: Killed') logs nothing; its replica's peers log NCCL's 'remote process
    exited' at once, before or after the job notices: those peers' lines follow srun's, and srun's
    lines about the peers themselves (SGLang's fatal sequence kills them; srun may report one
    before the node that died first) follow the FATAL line.
    """
    events = events or EventLog()
    fails = [e.local for e in events.failures() if e.local]
    failed_at = min(fails) if fails else None

    def key(f: Finding):
        after = failed_at is not None and f.ts is not None and f.ts > failed_at
        return (after, ROOT_CAUSE_KINDS.index(f.kind), f.details.get("ts") or "9999", f.file, f.line)
    roots = sorted((f for f in findings if f.kind in ROOT_CAUSE_KINDS), key=key)
    in_logs = {f.kind for f in roots if not is_job_output(f.file)}
    roots = [f for f in roots if not (is_job_output(f.file) and f.kind in in_logs)]
    fatal = [f for f in findings if f.kind == "job_fatal"]
    fatal_at = {f.file: f.line for f in fatal}
    sruns = [f for f in findings if f.kind == "srun_error" and not f.details.get("teardown")
             and (f.file not in fatal_at or f.line < fatal_at[f.file])]
    lost = [f for f in findings if f.kind == "node_failure"]

    # The replica whose server step the job saw exit: srun's line about its task goes first.
    failed_replica = None
    for e in events.failures():
        step = e.fields.get("step", "")
        if step.startswith("server-r") and step[len("server-r"):].isdigit():
            failed_replica = int(step[len("server-r"):])
            break
    hosts = _host_map(node_lists)
    # Node ranks of the failed replica that saw a peer go away (their logs say so).
    saw_peer_go = {f.details.get("node_rank") for f in findings
                   if f.kind in ("nccl", "gloo") and f.details.get("replica") == failed_replica
                   and _PEER_GONE.search(f.excerpt)}
    tasks, other_sruns = [], []
    for f in sruns:
        m = _SRUN_TASK.match(f.details.get("message") or "")
        g_r = hosts.get(m.group(1)) if m else None
        if m and g_r and g_r[0] == failed_replica:
            # a task killed by a signal ('Killed', 'Terminated', ...) on a node whose log does not
            # say it saw a peer go: the node that died first, with no log line of its own
            origin = not m.group(3).startswith("Exited") and g_r[1] not in saw_peer_go
            tasks.append((not origin, f"{component_name(g_r[0], names)} node rank {g_r[1]} ({m.group(1)}): "
                                      f"srun: task {m.group(2)}: {m.group(3)}"))
        else:
            other_sruns.append(finding_reason(f, node_lists, names))
    # the node that died first, then its peers' echoes; srun's lines about the peers (dead by
    # SGLang's fatal sequence) after the job's FATAL: consequences, kept as evidence
    origins = [text for later, text in tasks if not later]
    peers_died = [text for later, text in tasks if later]
    task_lines, late_tasks = (origins, peers_died) if origins else (peers_died, [])
    # When srun saw such a node die, its peers' fatal sequence (logged before or after the job
    # noticed the step's end: a race) follows srun's line about it; their own causes (an OOM, a
    # CUDA error) keep their place.
    echoes = [f for f in roots if any(not later for later, _ in tasks) and f.kind in _ECHO_KINDS
              and f.details.get("replica") == failed_replica and f.details.get("node_rank") in saw_peer_go]
    roots = [f for f in roots if f not in echoes]

    seen, out = set(), []
    texts = preflight_reasons(events) + guard_reasons(events, findings, node_lists, names) \
        + pd_fail_reasons(events, names) + node_reasons(lost, events, node_lists, names) \
        + [finding_reason(f, node_lists, names) for f in roots] + task_lines \
        + [finding_reason(f, node_lists, names) for f in echoes] \
        + [finding_reason(f, node_lists, names) for f in fatal] + list(stalled) \
        + late_tasks + other_sruns
    for text in texts:
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


# ---- the job's own guards (issue 20): fabric, hung replicas, pass time limits, router retries ---

def guard_reasons(events: EventLog, findings: Sequence[Finding], node_lists: dict, names=None) -> list[str]:
    """Why the job stopped itself: NCCL on a node chose another network than the site declares
    (fail kind=nccl_network; the log line saying why, when diagnose found one), a replica stalled
    (kind=stalled: no request finished for N s while requests were in flight, from its /metrics,
    with the in-flight gauges of its role that held them: a decode's transfer queue, ...),
    a pass ran past its time limit (kind=pass_timeout)."""
    out = []
    for e in events.failures():
        f = e.fields
        kind = f.get("kind")
        if kind == "nccl_network":
            g = int(f["replica"]) if f.get("replica", "").isdigit() else f.get("replica", "?")
            who = component_name(g, names) if isinstance(g, int) else f"replica {g}"
            where = f"{f.get('node', '?')} ({who} node rank {f.get('node_rank', '?')})"
            log = (_int(f.get("replica")), _int(f.get("node_rank")))
            why = next((x for x in findings if x.kind == "nccl_net" and server_log_identity(x.file) == log
                        and "Using network" not in x.excerpt), None) or \
                next((x for x in findings if x.kind == "nccl_net" and server_log_identity(x.file) == log), None)
            out.append(f"NCCL on {where} used network {f.get('network', '?')}, not {f.get('expected', '?')} "
                       f"(cluster.nccl_network): every collective of {who} "
                       "crossed the fallback, so the job stopped before the benchmark"
                       + (f": {why.excerpt} [{why.file}:{why.line}]" if why else
                          f" [{RELATIVE.server_log(*log) if None not in log else 'its server log'}]"))
        elif kind == "stalled":
            g = f.get("replica", "?")
            head = f.get("node") or (node_lists.get(str(g)) or ["?"])[0]
            who = component_name(int(g), names) if g.isdigit() else f"replica {g}"
            # A /metrics that did not answer the batch host cannot tell a hung server from a path
            # down between them (the replica may still serve the router): say both.
            answered = f.get("metrics") == "answered"
            what, seen, metrics = (("stalled", "finished", "its /metrics answered") if answered else
                                   ("stalled or unreachable", "seen to finish", "its /metrics did not answer "
                                    "the batch host: a hung server or a network path down"))
            held = _held(f.get("held", ""))
            out.append(f"{who} (head {head}) {what} in pass {f.get('pass', '?')}: no request {seen} for "
                       f"{f.get('seconds', '?')} s while {f.get('inflight', '?')} were in flight "
                       + (f"in {held} " if held else "")
                       + f"({f.get('finished', '?')} finished before; {metrics}); the job stopped the pass "
                       "(watchdog.stall_s)")
        elif kind == "pass_timeout":
            out.append(f"pass {f.get('pass', '?')} ran {f.get('seconds', '?')} s, past its limit of "
                       f"{f.get('limit', '?')} s (watchdog.pass_factor x its estimated duration); the "
                       "job stopped it")
    return out


def _held(field: str) -> str:
    """The stall event's held=NAME:N,... (the in-flight gauges of the stalled server's role that
    were not 0) as "sglang:num_decode_transfer_queue_reqs (6)"; "" when the job recorded none."""
    parts = [p.rpartition(":") for p in field.split(",") if ":" in p]
    return ", ".join(f"{name} ({n})" for name, _, n in parts if name)


def nccl_network_reasons(server_logs: Sequence, expected: str, node_lists: dict,
                         root=None, names: tuple[str, ...] = ()) -> list[str]:
    """Nodes whose NCCL ranks used another network than the site declares (cluster.nccl_network,
    e.g. Socket on an IB site: no usable HCA in the container): that replica's collectives crossed
    TCP, so the run measured the fallback, not the configuration ('invalid'). Reads NCCL's init
    lines (parse.nccl); NAMES are the family's ([nccl_networks]: IB is also IBext_v8, UCX, ...);
    logs without any (NCCL_DEBUG not INFO) say nothing."""
    from ..parse.diagnose import server_log_identity
    from ..parse.nccl import nccl_network

    if not expected:
        return []
    out = []
    for path in server_logs:
        got = nccl_network(path)
        ident = server_log_identity(path)
        if got is None or ident is None or not got.other_than(expected, names):
            continue
        g, r = ident
        hosts = node_lists.get(str(g)) or []
        host = f" ({hosts[r]})" if r < len(hosts) else ""
        shown = PurePath(path).relative_to(root).as_posix() if root and PurePath(path).is_relative_to(root) \
            else PurePath(path).as_posix()
        why = f"{got.cause} [{shown}:{got.cause_line}]" if got.cause else f"{got.excerpt} [{shown}:{got.line}]"
        out.append(f"replica {g} node rank {r}{host}: NCCL used network {', '.join(got.networks)}, not "
                   f"{expected} (cluster.nccl_network): {why}")
    return out


# The router's retry counters (smg 1.x; sglang-router 0.3.x is smg inside: both names are in
# 0.3.2's sglang_router_rs): retries performed, one per backoff (a PD router counts each under
# both its prefill and decode worker_type), requests whose last attempt still failed, and failed
# attempts per worker.
ROUTER_RETRIES = "smg_worker_retries_total"
ROUTER_EXHAUSTED = "smg_worker_retries_exhausted_total"
ROUTER_OUTCOMES = "smg_worker_cb_outcomes_total"


@dataclass(frozen=True)
class RouterRetries:
    """What the router's /metrics counted between a pass's first and last scrape."""

    retries: float                      # retry attempts (a PD retry once)
    exhausted: float                    # requests that ran out of retries
    failed: tuple = ()                  # (worker URL, failed attempts)

    def text(self) -> str:
        parts = [f"{self.retries:g} retry attempt(s) ({ROUTER_RETRIES})"]
        if self.exhausted:
            parts.append(f"{self.exhausted:g} request(s) out of retries ({ROUTER_EXHAUSTED})")
        parts += [f"{n:g} failed attempt(s) at {w}" for w, n in self.failed]
        return "; ".join(parts)


def router_retries(run_dir, events: EventLog) -> RouterRetries | None:
    """The router's retries during a pass (its /metrics at bench_start and bench_end,
    metrics/router-*.prom); None without both scrapes or when it retried nothing."""
    from pathlib import Path

    from ..parse.prometheus import ScrapeError, read_scrape

    scrapes = [e for e in events.named("metrics_scrape") if e.fields.get("target") == "router"
               and e.fields.get("ok") == "1" and e.fields.get("file")]
    if events.bench_window() is None or len(scrapes) < 2:
        return None
    try:
        first, last = (read_scrape(Path(run_dir) / scrapes[i].fields["file"]) for i in (0, -1))
    except (OSError, ScrapeError):
        return None

    def delta(name, where=None):
        return (last.total(name, where) or 0) - (first.total(name, where) or 0)

    def per_kind(name):            # a PD retry is counted under prefill and decode: once
        kinds = {k: delta(name, lambda x, k=k: x.label("worker_type") == k)
                 for k in last.label_values("worker_type", [name])}
        pd = [v for k, v in kinds.items() if k in ("prefill", "decode")]
        return sum(v for k, v in kinds.items() if k not in ("prefill", "decode")) + max(pd, default=0)

    failed = []
    for w in sorted(last.label_values("worker", [ROUTER_OUTCOMES])):
        n = delta(ROUTER_OUTCOMES, lambda x, w=w: x.label("worker") == w and x.label("outcome") == "failure")
        if n > 0:
            failed.append((w, n))
    r = RouterRetries(per_kind(ROUTER_RETRIES), per_kind(ROUTER_EXHAUSTED), tuple(failed))
    return r if r.retries > 0 or r.exhausted > 0 or r.failed else None


def router_retry_reasons(r: RouterRetries | None, requests: int | None, max_pct: float
                         ) -> tuple[list[str], list[str]]:
    """(reasons that make the pass invalid, flags of an ok pass): a retried request's latency
    includes a failed attempt on another replica and the replicas' shares are no longer the
    policy's. More retry attempts than router.max_retry_pct % of the pass's requests: invalid
    (its p95 latencies could all be retried requests); fewer: ok, flagged with the counts."""
    if r is None:
        return [], []
    share = 100.0 * r.retries / requests if requests else None
    what = (f"the router retried requests during the benchmark ({r.text()}; router /metrics"
            + (f": {share:.1f}% of {requests} requests" if share is not None else "") + ")")
    if share is None or share > max_pct:
        return [f"{what}, more than router.max_retry_pct = {max_pct:g}%: their latencies include a failed "
                "attempt and the replicas' shares are not the policy's"], []
    return [], [f"{what}, within router.max_retry_pct = {max_pct:g}%: flagged, not invalid"]


def _int(v) -> int | None:
    return int(v) if isinstance(v, str) and v.isdigit() else None
