"""Submission: a new run directory, the exact script, a manifest, the job, and its collector.

Side effects live here (files, sbatch); everything before it is pure.
"""
from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
from contextlib import contextmanager
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
    from ..model.slurm import config_value

    return config_value("ClusterName")


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


def write_secrets(plan: JobPlan, run_dir: Path) -> None:
    """cluster.secret_env's values for the job, in a file only the user can read (created 0600,
    never rewritten): the job reads it into its batch shell, whose srun steps inherit them, and
    removes it. Never in the script, on a command line or in sbatch's environment (the job's
    environment record: AccountingStoreFlags=job_env keeps it in slurmdbd)."""
    import shlex

    if not plan.secret_env:
        return
    text = "".join(f"export {n}={shlex.quote(os.environ[n])}\n" for n in plan.secret_env)
    fd = os.open(Layout(run_dir).secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


@contextmanager
def _without(names):
    """os.environ without the secret names while sbatch runs (it exports the submitter's
    environment into the job's record)."""
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


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
    if collector:
        check_collector(plan.exp)
    run_dir, script, m = prepare(plan)
    lay = Layout(run_dir)
    write_secrets(plan, run_dir)
    executor = HetSlurmExecutor(folder=lay.submitit)
    with _without(plan.secret_env):
        try:
            job = executor.submit_script(script)
        except Exception as e:  # sbatch refused: keep the directory as evidence, say why
            lay.secrets.unlink(missing_ok=True)
            msg = str(e).strip().splitlines()
            lay.submit_error.write_text(str(e) + "\n")
            raise UsageError(f"sbatch refused the job: {msg[-1] if msg else e} (details in {lay.submit_error})") from None
        collector_id = submit_collector(plan, job.job_id, run_dir) if collector else None
    m = replace(m, job_id=str(job.job_id), collector_job_id=collector_id,
                extra={**m.extra, "collector_python": collector_python(plan.exp) if collector_id else None})
    rundir.write_manifest(run_dir, m)
    write_launch_manifests(plan, run_dir, m)
    return Submitted(job.job_id, run_dir, collector_id)


def collector_python(exp=None) -> str:
    """collector.python, else the submitter's own Python, by absolute path (not realpath: a
    virtualenv's interpreter is a link whose location selects its site-packages): the chained job
    runs this slurm-ab, not whatever an image or $PATH on the node has."""
    if exp is not None and exp.collector.python:
        return exp.collector.python
    return os.path.abspath(sys.executable)


def collector_partition(exp) -> str:
    """collector.partition, else Slurm's default partition (not the GPU one, where one CPU task may
    take a whole exclusive node), else cluster.partition."""
    from ..model.slurm import default_partition

    return exp.collector.partition or default_partition() or exp.cluster.partition


def check_collector(exp) -> list[str]:
    """The collector's Python must run on its partition's nodes: the submitting Python (collector.python
    = "") on nodes of another architecture is refused (ConfigError, exit 2). Returns dry-run notes."""
    from ..model.slurm import partition_archs, partition_fields

    part = collector_partition(exp)
    notes = []
    if (partition_fields(part) or {}).get("OverSubscribe", "").startswith("EXCLUSIVE"):
        notes.append(f"collector: partition {part} is OverSubscribe=EXCLUSIVE: the collector's one CPU task takes "
                     "a whole node (collector.partition)")
    if exp.collector.python:
        return notes + [f"collector: {exp.collector.python} on partition {part} (collector.python)"]
    archs = partition_archs(part)
    here = platform.machine()
    if archs is None:
        return notes + [f"collector: the submitting Python ({collector_python()}, {here}) on partition {part}; its "
                        "nodes' architecture unknown (Slurm did not answer here): not checked"]
    if archs != {here}:
        raise ConfigError("collector.python", "", f"the submitting Python ({collector_python()}) is built for {here}, "
                          f"partition {part}'s nodes are {', '.join(sorted(archs))}: the collector job could not run it",
                          f"the absolute path of a Python with slurm-ab on those nodes, or collector.partition with "
                          f"{here} nodes, or submit with --no-collector")
    return notes + [f"collector: the submitting Python ({collector_python()}) on partition {part} ({here})"]


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
    params = dict(partition=collector_partition(plan.exp), time=col.time_min, nodes=1, ntasks_per_node=1,
                  cpus_per_task=col.cpus, mem=col.mem, job_name=f"ab-collect-{plan.run_id}", use_srun=False,
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
                                python=shlex.quote(collector_python(plan.exp)))
    ex.update_parameters(**collector_request(plan, job_id, run_dir))
    try:
        return ex.submit(collect_after_job, str(run_dir), job_id).job_id
    except Exception as e:  # the experiment is submitted; a missing collector is not fatal
        print(f"slurm-ab: warning: collector job not submitted ({str(e).strip().splitlines()[-1:]}); "
              f"run `slurm-ab collect {job_id}` after the job", file=sys.stderr)
        return None
