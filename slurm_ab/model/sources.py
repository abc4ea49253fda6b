"""Where the configuration comes from (--site, --config, --set) -> validated Experiment and JobPlan."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import load_tree
from .experiment import Experiment
from ..job.plan import JobPlan, check_run_id, make_plan
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


def load_experiment(src: Sources, mode: str) -> Experiment:
    return resolve(load_tree_for(src, mode), mode)


def default_run_id(exp: Experiment, now: float | None = None) -> str:
    return f"{exp.name}-{exp.mode.name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"


def pick_run_id(exp: Experiment, run_id: str | None) -> str:
    """--run-id, else $RUN_ID (as in the seed's script), else <experiment>-<mode>-<timestamp>."""
    rid = run_id if run_id is not None else (os.environ.get("RUN_ID") or default_run_id(exp))
    check_run_id(rid)
    return rid


def run_dir_for(exp: Experiment, run_id: str) -> Path:
    return (Path(exp.paths.results) / run_id).absolute()


def plan_for(src: Sources, mode: str, run_id: str | None = None) -> JobPlan:
    exp = load_experiment(src, mode)
    rid = pick_run_id(exp, run_id)
    return make_plan(exp, rid, str(run_dir_for(exp, rid)))
