"""Submission: a new run directory, the exact script, a manifest, the job, and its collector.

Side effects live here (files, sbatch); everything before it is pure.
"""
from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import __version__
from ..model import rundir
from ..model.rundir import Layout, Manifest
from ..model.errors import ConfigError, UsageError
from .campaign_rundir import campaign_manifest, write_launch_manifests
from .plan import JobPlan
from .render import render_script


@dataclass(frozen=True)
class Submitted:
    job_id: str
    run_dir: Path
    collector_job_id: str | None


def _git_commit() -> str | None:
    src = Path(__file__).resolve().parent.parent
    try:
        r = subprocess.run(["git", "-C", str(src), "describe", "--always", "--dirty", "--abbrev=40"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _cmd_version(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip().splitlines()[0] if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


def versions() -> dict:
    import submitit

    return {
        "slurm_ab": __version__,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "submitit": submitit.__version__,
        "slurm": _cmd_version(["sbatch", "--version"]),
    }


def manifest(plan: JobPlan) -> Manifest:
    """The manifest of a prepared run (no job id yet)."""
    e = plan.exp
    return Manifest(
        run_id=plan.run_id,
        experiment=e.name,
        mode=e.mode.name,
        mode_description=e.mode.description,
        job_name=plan.job_name,
        run_dir=plan.run_dir,
        components=tuple({"het_group": r.index, "replica": r.index, "nodes": r.nodes}
                         for r in plan.replicas),
        submitted_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        submitted_by=getpass.getuser(),
        submit_host=socket.gethostname(),
        versions=versions(),
        config=e,  # secret values are never part of it: only their names
        # the cluster it goes to (collect checks sacct's answer against it), and the job's estimate
        extra={"cluster": cluster_name(), "estimate": _estimate_record(plan)},
    )


def cluster_name() -> str | None:
    """ClusterName of the Slurm this submits to (scontrol show config), None when unknown."""
    out = _cmd_output(["scontrol", "show", "config"])
    for line in (out or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ClusterName":
            return value.strip() or None
    return None


def _cmd_output(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return r.stdout if r.returncode == 0 else None
    except OSError:
        return None
    except subprocess.TimeoutExpired:
        return None


def _estimate_record(plan: JobPlan) -> dict:
    d = plan.duration
    limit = next((o.split("=", 1)[1] for o in plan.sbatch_component if o.startswith("--time=")), None)
    return {"seconds": round(d.seconds), "time_limit": limit, "launches": d.launches, "passes": d.passes,
            "text": d.text}


def check_secrets(plan: JobPlan) -> None:
    missing = [n for n in plan.secret_env if not os.environ.get(n)]
    if missing:
        raise ConfigError("cluster.secret_env", list(plan.secret_env),
                          f"not set in your environment: {', '.join(missing)}", "export them before submitting")


def prepare(plan: JobPlan) -> tuple[Path, str, Manifest]:
    """Create the run directory with the exact script and a manifest, ready for `sbatch job.sbatch`
    (Slurm opens the job's output file there before the script runs)."""
    run_dir = rundir.create(Path(plan.run_dir))
    script = render_script(plan)
    rundir.write_new(Layout(run_dir).job_script, script, 0o755)
    m = campaign_manifest(plan, manifest(plan))
    rundir.write_manifest(run_dir, m)
    write_launch_manifests(plan, run_dir, m)
    return run_dir, script, m


def submit(plan: JobPlan, *, collector: bool = True) -> Submitted:
    from .hetjob import HetSlurmExecutor

    check_secrets(plan)
    run_dir, script, m = prepare(plan)
    lay = Layout(run_dir)
    executor = HetSlurmExecutor(folder=lay.submitit)
    try:
        job = executor.submit_script(script)
    except Exception as e:  # sbatch refused: keep the directory as evidence, say why
        msg = str(e).strip().splitlines()
        lay.submit_error.write_text(str(e) + "\n")
        raise UsageError(f"sbatch refused the job: {msg[-1] if msg else e} (details in {lay.submit_error})") from None
    collector_id = submit_collector(plan, job.job_id, run_dir) if collector else None
    m = replace(m, job_id=str(job.job_id), collector_job_id=collector_id,
                extra={**m.extra, "collector_python": collector_python() if collector_id else None})
    rundir.write_manifest(run_dir, m)
    write_launch_manifests(plan, run_dir, m)
    return Submitted(job.job_id, run_dir, collector_id)


def collector_python() -> str:
    """The submitter's own Python, by absolute path (not realpath: a virtualenv's interpreter is a
    link whose location selects its site-packages): the chained job runs this slurm-ab, not
    whatever an image or $PATH on the node has."""
    return os.path.abspath(sys.executable)


def collector_request(plan: JobPlan, job_id: str, run_dir: Path) -> dict:
    """The chained collector job's submitit parameters ([collector]): one CPU task and a little
    memory on the collector partition, no GPU (--gres=none), after the experiment (afterany),
    running in the run directory (so no slurm_ab source tree in the submitting directory shadows
    the installed one)."""
    col, c = plan.exp.collector, plan.exp.cluster
    extra = {"dependency": f"afterany:{job_id}", "kill-on-invalid-dep": "yes", "gres": "none",
             "chdir": str(run_dir)}
    for opt in col.sbatch_extra:
        key, eq, value = opt[2:].partition("=")
        extra[key] = value if eq else True
    params = dict(partition=col.partition or c.partition, time=col.time_min, nodes=1, ntasks_per_node=1,
                  cpus_per_task=1, mem=col.mem, job_name=f"ab-collect-{plan.run_id}", use_srun=False,
                  additional_parameters=extra)
    if col.qos:
        params["qos"] = col.qos
    if c.account:
        params["account"] = c.account
    return params


def submit_collector(plan: JobPlan, job_id: str, run_dir: Path) -> str | None:
    """A one-node job after the experiment (afterany), so the tables exist without a manual step."""
    import shlex

    import submitit

    from ..collect.chained import collect_after_job

    ex = submitit.SlurmExecutor(folder=Layout(run_dir).submitit, max_num_timeout=0,
                                python=shlex.quote(collector_python()))
    ex.update_parameters(**collector_request(plan, job_id, run_dir))
    try:
        return ex.submit(collect_after_job, str(run_dir), job_id).job_id
    except Exception as e:  # the experiment is submitted; a missing collector is not fatal
        print(f"slurm-ab: warning: collector job not submitted ({str(e).strip().splitlines()[-1:]}); "
              f"run `slurm-ab collect {job_id}` after the job", file=sys.stderr)
        return None
