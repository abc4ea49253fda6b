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

from . import __version__, rundir
from .rundir import Layout, Manifest
from .errors import ConfigError, UsageError
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
        config=e.to_dict(),  # secret values are never part of it: only their names
    )


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
    m = replace(m, job_id=str(job.job_id), collector_job_id=collector_id)
    rundir.write_manifest(run_dir, m)
    write_launch_manifests(plan, run_dir, m)
    return Submitted(job.job_id, run_dir, collector_id)


def submit_collector(plan: JobPlan, job_id: str, run_dir: Path) -> str | None:
    """A one-node job after the experiment (afterany), so the tables exist without a manual step."""
    import submitit

    from .collect.chained import collect_after_job

    ex = submitit.SlurmExecutor(folder=Layout(run_dir).submitit, max_num_timeout=0)
    c = plan.exp.cluster
    params = dict(partition=c.partition, time=10, nodes=1, ntasks_per_node=1,
                  job_name=f"ab-collect-{plan.run_id}", use_srun=False,
                  additional_parameters={"dependency": f"afterany:{job_id}", "kill-on-invalid-dep": "yes"})
    if c.account:
        params["account"] = c.account
    ex.update_parameters(**params)
    try:
        return ex.submit(collect_after_job, str(run_dir), job_id).job_id
    except Exception as e:  # the experiment is submitted; a missing collector is not fatal
        print(f"slurm-ab: warning: collector job not submitted ({str(e).strip().splitlines()[-1:]}); "
              f"run `slurm-ab collect {job_id}` after the job", file=sys.stderr)
        return None
