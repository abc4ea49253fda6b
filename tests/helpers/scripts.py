"""Rendered job scripts for tests: golden-file placeholders, render(), shellcheck."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_ab.job.campaign_plan import plan_job
from slurm_ab.job.render import render_script
from slurm_ab.model.sources import Sources

from . import ROOT

GOLDEN = ROOT / "tests" / "golden"
MODES = ("tp32", "pp8", "tp32-dflash")
# Stable placeholders for golden files: fixed run id and results directory.
GOLDEN_SETS = ("paths.results=/results",)
GOLDEN_RUN_ID = "RUN-ID"


def plan_for(src: Sources, mode: str, run_id: str | None = None):
    """The plan of a job of one mode, as `slurm-ab dry-run MODE` makes it."""
    return plan_job(src, [mode], run_id)


def render(mode: str, site: str = "example", sets=(), run_id: str = GOLDEN_RUN_ID, configs=()) -> str:
    src = Sources(site, tuple(configs), GOLDEN_SETS + tuple(sets))
    return render_script(plan_for(src, mode, run_id))


def layout_formats() -> str:
    """The generated F_* assignments (the run directory's file names, rundir.Layout's): what a
    harness sourcing the static part alone must define first."""
    import shlex

    from slurm_ab.model.rundir import job_formats
    return "".join(f"{name}={shlex.quote(fmt)}\n" for name, fmt, _ in job_formats())


# The first line of the static part (functions.sh, then pipeline.sh) of every job script.
STATIC_START = "# ---- helpers (static)"


def generated(text: str) -> str:
    """A job script without its static part: what the plan decides (goldens hold only this)."""
    return text[: text.index(STATIC_START)]


def static(text: str) -> str:
    """The static part of a job script (the same for every plan), without its last line, the
    call of `main` (so a test can source it and call single functions)."""
    return text[text.index(STATIC_START): text.rindex("\nmain\n") + 1]


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/<name>; UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    import difflib
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    expected = path.read_text()
    assert text == expected, "".join(difflib.unified_diff(
        expected.splitlines(True), text.splitlines(True), "golden", "rendered"))


def changed_lines(a: str, b: str) -> list[str]:
    """'-'/'+' lines of the difference between two texts (ndiff), in order."""
    import difflib
    return [ln for ln in difflib.ndiff(a.splitlines(), b.splitlines()) if ln[:2] in ("- ", "+ ")]


def shellcheck(path: Path) -> subprocess.CompletedProcess:
    """shellcheck -x PATH. Without shellcheck the test is skipped, except under CI, where it fails:
    `make setup` installs it, so its absence there is a broken setup, not a pass."""
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed under CI: `make setup` must install it")
        pytest.skip("shellcheck not installed (make setup installs it)")
    return subprocess.run(["shellcheck", "-x", str(path)], capture_output=True, text=True)


def template_lib(path: Path, *names: str) -> Path:
    """The static functions of sbatch_templates/NAMES (up to each one's EXIT trap) as one bash
    library at PATH, for tests that call the job's own functions."""
    def part(name: str) -> str:
        text = (ROOT / "sbatch_templates" / name).read_text().replace("{% raw %}", "").replace("{% endraw %}", "")
        return text.split("\ntrap on_exit EXIT", 1)[0]
    path.write_text("declare -A STEP_PIDS=()\n" + "".join(part(n) for n in names))
    return path
