"""Rendered job scripts for tests: golden-file placeholders, render(), shellcheck."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_ab.render import render_script
from slurm_ab.sources import Sources, plan_for

from . import ROOT

GOLDEN = ROOT / "tests" / "golden"
MODES = ("tp32", "pp8", "tp32-dflash")
# Stable placeholders for golden files: fixed run id and results directory.
GOLDEN_SETS = ("paths.results=/results",)
GOLDEN_RUN_ID = "RUN-ID"


def render(mode: str, site: str = "example", sets=(), run_id: str = GOLDEN_RUN_ID, configs=()) -> str:
    src = Sources(site, tuple(configs), GOLDEN_SETS + tuple(sets))
    return render_script(plan_for(src, mode, run_id))


def shellcheck(path: Path) -> subprocess.CompletedProcess:
    """shellcheck -x PATH. Without shellcheck the test is skipped, except under CI, where it fails:
    `make setup` installs it, so its absence there is a broken setup, not a pass."""
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed under CI: `make setup` must install it")
        pytest.skip("shellcheck not installed (make setup installs it)")
    return subprocess.run(["shellcheck", "-x", str(path)], capture_output=True, text=True)
