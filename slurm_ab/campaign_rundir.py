"""The run directory of a campaign: one sub-directory per server launch, each with the manifest of
its mode (so the single-run collector reads it as a run), written at submission."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from . import rundir
from .plan import JobPlan, make_plan


def launch_manifests(plan: JobPlan, root: rundir.Manifest) -> dict[str, rundir.Manifest]:
    """dirname -> manifest of each launch: its mode's resolved experiment, the campaign's job."""
    cp = plan.campaign
    if cp is None:
        return {}
    exps = {e.mode.name: e for e in cp.experiments}
    out = {}
    for launch in cp.campaign.launches:
        exp = exps[launch.mode]
        sub = make_plan(exp, plan.run_id, str(Path(plan.run_dir) / launch.dirname))
        out[launch.dirname] = replace(
            root, mode=exp.mode.name, mode_description=exp.mode.description, run_dir=sub.run_dir,
            config=exp, campaign=None, launch=launch)
    return out


def write_launch_manifests(plan: JobPlan, run_dir: Path, root: rundir.Manifest) -> None:
    """Create every launch directory with its manifest (again after sbatch answered: job ids)."""
    for name, m in launch_manifests(plan, root).items():
        (Path(run_dir) / name).mkdir(exist_ok=True)
        rundir.write_manifest(Path(run_dir) / name, m)


def campaign_manifest(plan: JobPlan, m: rundir.Manifest) -> rundir.Manifest:
    """The root manifest of a campaign: its modes and schedule (manifest key "campaign")."""
    cp = plan.campaign
    if cp is None:
        return m
    modes = cp.campaign.modes
    return replace(m, mode="+".join(modes),
                   mode_description="campaign: " + " vs ".join(
                       f"{x} ({d})" for x, d in zip(modes, cp.descriptions)),
                   campaign=cp.campaign)
