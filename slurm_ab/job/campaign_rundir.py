"""The run directory of a job: one sub-directory per server launch, each with the manifest of its
mode (its resolved experiment), written at submission; the root manifest holds the schedule."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..model import rundir
from .plan import JobPlan


def launch_manifests(plan: JobPlan, root: rundir.Manifest) -> dict[str, rundir.Manifest]:
    """dirname -> manifest of each launch: its mode's resolved experiment, the job's ids."""
    cp = plan.campaign
    out = {}
    for step, launch in zip(cp.launches, cp.campaign.launches):
        exp = cp.experiments[step.server]
        out[step.dir] = replace(
            root, mode=exp.mode.name, mode_description=exp.mode.description,
            run_dir=str(Path(plan.run_dir) / step.dir), config=exp, campaign=None, launch=launch)
    return out


def write_launch_manifests(plan: JobPlan, run_dir: Path, root: rundir.Manifest) -> None:
    """Create every launch directory with its manifest (again after sbatch answered: job ids)."""
    for name, m in launch_manifests(plan, root).items():
        (Path(run_dir) / name).mkdir(exist_ok=True)
        rundir.write_manifest(Path(run_dir) / name, m)


def campaign_manifest(plan: JobPlan, m: rundir.Manifest) -> rundir.Manifest:
    """The root manifest of a job: its modes and schedule (manifest key "campaign"); its config
    is its first mode's, its mode the modes joined by '+'."""
    cp = plan.campaign
    return replace(m, mode=plan.mode_label, campaign=cp.campaign,
                   mode_description=" vs ".join(f"{x} ({d})" for x, d in zip(cp.modes, cp.descriptions)))
