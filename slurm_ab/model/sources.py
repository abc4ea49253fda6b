"""Where the configuration comes from (--site, --config, --set) -> a validated Experiment (the
job's plan: job.campaign_plan.plan_job)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .config import load_tree
from .experiment import Experiment
from .validate import resolve

DEFAULT_SITE = "example"


@dataclass(frozen=True)
class Sources:
    """Where the configuration comes from (the CLI's --site, --config, --set)."""

    site: str | None = None
    configs: tuple[str, ...] = ()
    sets: tuple[str, ...] = field(default_factory=tuple)

    @property
    def site_name(self) -> str:
        return self.site or os.environ.get("SLURM_AB_SITE") or DEFAULT_SITE


def load_tree_for(src: Sources, mode: str | None = None) -> dict:
    return load_tree(src.site_name, src.configs, src.sets, mode)


def mode_names(src: Sources) -> list[str]:
    """The modes the sources define, in their order (each resolved by load_experiment)."""
    return list(load_tree_for(src)["modes"])


def load_experiment(src: Sources, mode: str) -> Experiment:
    return resolve(load_tree_for(src, mode), mode)


def run_dir_for(exp: Experiment, run_id: str) -> Path:
    return (Path(exp.paths.results) / run_id).absolute()
