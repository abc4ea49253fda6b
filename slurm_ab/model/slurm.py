"""Thin wrappers over Slurm's commands (sacct, squeue, scancel, scontrol show partition), every call bounded in time, the
one list of Slurm job states, and sinfo's node-state flags in words."""
from __future__ import annotations

import shutil
import subprocess

TIMEOUT_S = 30  # a hung slurmctld must not hang the tool


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def config_value(key: str) -> str | None:
    """One setting of `scontrol show config` (ClusterName, KillWait, ...); None when Slurm does not
    answer or has no value."""
    for line in (_run(["scontrol", "show", "config"]) or "").splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.strip() or None
    return None


def kill_wait_s() -> int | None:
    """Slurm's KillWait in seconds ("30 sec"): between the SIGTERM and the SIGKILL of a step Slurm
    ends itself (a job's end or cancel, srun --kill-on-bad-exit); None when unknown."""
    v = (config_value("KillWait") or "").split()
    return int(v[0]) if v and v[0].isdigit() else None


SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "Elapsed", "Start", "End", "NodeList", "Reason",
                "Submit", "Cluster")


def sacct(job_id: str) -> dict | None:
    """The job's accounting: overall state plus each component and step; None without sacct."""
    out = _run(["sacct", "-n", "-P", "-j", str(job_id), "-o", ",".join(SACCT_FIELDS)])
    if not out:
        return None
    rows = [dict(zip(SACCT_FIELDS, line.split("|"))) for line in out.splitlines() if line.strip()]
    if not rows:
        return None
    comps = {r["JobID"]: r for r in rows if "." not in r["JobID"]}
    steps = [r for r in rows if "." in r["JobID"]]
    head = comps.get(f"{job_id}+0") or comps.get(str(job_id)) or next(iter(comps.values()), rows[0])
    return {
        "job_id": str(job_id),
        "state": head["State"].split()[0] if head["State"] else "UNKNOWN",
        "state_text": head["State"],
        "exit_code": head["ExitCode"],
        "elapsed": head["Elapsed"],
        "start": head["Start"],
        "end": head["End"],
        # who the job is (collect checks them against the run: job ids wrap and differ per cluster)
        "job_name": head["JobName"],
        "submit": head["Submit"],
        "cluster": head["Cluster"],
        "components": {k: {"state": v["State"], "nodes": v["NodeList"], "exit_code": v["ExitCode"]} for k, v in comps.items()},
        "steps": [{"id": s["JobID"], "name": s["JobName"], "state": s["State"], "exit_code": s["ExitCode"],
                   "nodes": s["NodeList"]} for s in steps],
    }


def squeue_state(job_id: str) -> str | None:
    """State while the job is known to the controller (PENDING, RUNNING, ...), else None."""
    out = _run(["squeue", "-h", "-j", str(job_id), "-o", "%T"])
    if not out:
        return None
    states = [s.strip() for s in out.splitlines() if s.strip()]
    return states[0] if states else None


def partition_fields(partition: str) -> dict[str, str] | None:
    """A partition's settings as `scontrol show partition -o` prints them (MaxTime, MaxNodes,
    TotalNodes, OverSubscribe, ...); None when Slurm does not answer (no scontrol, no controller, no
    such partition)."""
    out = _run(["scontrol", "show", "partition", "-o", partition])
    fields = dict(f.split("=", 1) for f in (out or "").split() if "=" in f)
    return fields or None


def default_partition() -> str | None:
    """Slurm's default partition (Default=YES); None when there is none or Slurm does not answer."""
    out = _run(["scontrol", "show", "partition", "-o"]) or ""
    for line in out.splitlines():
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if f.get("Default") == "YES":
            return f.get("PartitionName")
    return None


def partition_archs(partition: str) -> set[str] | None:
    """The architectures (scontrol show node Arch=) of a partition's nodes; None when unknown."""
    nodes = _run(["sinfo", "-h", "-p", partition, "-o", "%N"])
    if not nodes or not nodes.strip():
        return None
    out = _run(["scontrol", "show", "node", "-o", ",".join(nodes.split())]) or ""
    archs = {f.split("=", 1)[1] for line in out.splitlines() for f in line.split() if f.startswith("Arch=")}
    archs.discard("(null)")
    return archs or None


# Why a job pends (squeue %r), in words, for the reasons that mean "this will not start by itself"
# or that the user can act on (squeue(1) JOB REASON CODES).
PENDING_WORDS = {
    "PartitionTimeLimit": "its time limit is above the partition's MaxTime: it will not start",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows (MaxNodes/MinNodes): it will not start",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "ReqNodeNotAvail": "a requested node is unavailable (down, drained or reserved)",
    "Resources": "waiting for free nodes",
    "Priority": "jobs of higher priority go first",
    "Dependency": "waiting for another job",
    "DependencyNeverSatisfied": "its dependency can never be satisfied: it will not start",
    "QOSMaxJobsPerUserLimit": "the QOS limit of jobs per user is reached (a het job counts each component)",
    "AssocMaxJobsLimit": "the association's job limit is reached",
    "JobHeldUser": "held by the user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "its start time is in the future",
}


def pending_reason(job_id: str) -> str | None:
    """Why a pending job waits (squeue's %r, e.g. Resources, PartitionTimeLimit); None when Slurm
    does not answer or the job no longer pends."""
    out = _run(["squeue", "-h", "-j", str(job_id), "-t", "PENDING", "-o", "%r"])
    reasons = [r.strip() for r in (out or "").splitlines() if r.strip() and r.strip() != "None"]
    return reasons[0] if reasons else None


def pending_text(reason: str) -> str:
    """'PartitionTimeLimit' -> 'PartitionTimeLimit: its time limit is above ...'."""
    words = PENDING_WORDS.get(reason.split("(")[0].strip())
    return f"{reason}: {words}" if words else reason


def scancel(job_id: str, signal: str | None = None, batch: bool = False) -> bool:
    """scancel [--batch] [--signal=SIG] JOB; batch: the signal goes to the batch script alone
    ("Children of the batch step are not signaled", scancel(1) -b)."""
    cmd = ["scancel"] + (["--batch"] if batch else []) + ([f"--signal={signal}"] if signal else []) + [str(job_id)]
    return _run(cmd) is not None


# ---- job states --------------------------------------------------------------------------------
# Every state of squeue(1) "JOB STATE CODES" (Slurm 22.05), in one place: watch follows a job while
# it is active, the collector's verdict reads the terminal ones. sacct prints the same names, with
# a suffix at times ("CANCELLED by 1000", "CANCELLED+"): see base_state.
PENDING_STATES = frozenset({
    "PENDING",          # awaiting resource allocation
    "REQUEUED",         # completing job is being requeued
    "REQUEUE_HOLD",     # held job is being requeued
    "REQUEUE_FED",      # being requeued by a federation
    "RESV_DEL_HOLD",    # held after its reservation was deleted
})
RUNNING_STATES = frozenset({
    "RUNNING",          # has an allocation
    "CONFIGURING",      # allocated, nodes not ready yet (booting)
    "COMPLETING",       # some processes on some nodes may still be active
    "RESIZING",         # about to change size
    "SUSPENDED",        # allocation kept, execution suspended
    "STOPPED",          # allocation kept, execution stopped with SIGSTOP
    "SIGNALING",        # being signaled
    "STAGE_OUT",        # staging out files
})
ACTIVE_STATES = PENDING_STATES | RUNNING_STATES
COMPLETED_STATES = frozenset({"COMPLETED"})
CANCELLED_STATES = frozenset({"CANCELLED", "PREEMPTED", "REVOKED"})
TIMEOUT_STATES = frozenset({"TIMEOUT", "DEADLINE"})
FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "SPECIAL_EXIT"})
TERMINAL_STATES = COMPLETED_STATES | CANCELLED_STATES | TIMEOUT_STATES | FAILED_STATES


def base_state(raw: str | None) -> str | None:
    """The state's name: 'CANCELLED by 1000' -> 'CANCELLED', 'CANCELLED+' -> 'CANCELLED'."""
    words = str(raw or "").split()
    return words[0].rstrip("+").upper() or None if words else None


def is_active(state: str | None) -> bool:
    """The job is queued or holds (or is about to hold) an allocation: it has not ended."""
    return base_state(state) in ACTIVE_STATES


# sinfo's flags after a node's state (sinfo(1), NODE STATE CODES), in words.
_STATE_FLAGS = {"*": "not responding", "~": "powered off", "#": "powering up", "!": "pending power down",
                "%": "powering down", "@": "pending reboot", "^": "reboot issued",
                "$": "in a maintenance reservation", "-": "planned by the backfill scheduler"}


def node_state_words(state: str) -> str:
    """"down*" -> "down (not responding)": the flag is what tells a lost node from a drained one."""
    if state[-1:] in _STATE_FLAGS and len(state) > 1:
        return f"{state[:-1]} ({_STATE_FLAGS[state[-1]]})"
    return state
