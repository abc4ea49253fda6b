import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_ab.sources import Sources, plan_for
from slurm_ab.render import render_script

ROOT = Path(__file__).resolve().parent.parent
# The testbed's `local` site is not shipped with slurm-ab; the site loader finds it through
# $SLURM_AB_SITES (as with `make`), here and in every slurm-ab the tests start.
TESTBED_SITES = ROOT / "testbed" / "sites"
if str(TESTBED_SITES) not in os.environ.get("SLURM_AB_SITES", "").split(os.pathsep):
    os.environ["SLURM_AB_SITES"] = os.pathsep.join(filter(None, [str(TESTBED_SITES), os.environ.get("SLURM_AB_SITES")]))
GOLDEN = Path(__file__).parent / "golden"
MODES = ("tp32", "pp8", "tp32-dflash")
# Stable placeholders for golden files: fixed run id and results directory.
GOLDEN_SETS = ("paths.results=/results",)
GOLDEN_RUN_ID = "RUN-ID"


def render(mode: str, site: str = "example", sets=(), run_id: str = GOLDEN_RUN_ID, configs=()) -> str:
    src = Sources(site, tuple(configs), GOLDEN_SETS + tuple(sets))
    return render_script(plan_for(src, mode, run_id))


def shellcheck(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["shellcheck", "-x", str(path)], capture_output=True, text=True)


requires_shellcheck = pytest.mark.skipif(shutil.which("shellcheck") is None and not os.environ.get("CI"),
                                         reason="shellcheck not installed (CI installs it)")


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """Run the slurm-ab CLI in an empty working directory; returns (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from slurm_ab.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_AB_SITE", raising=False)
    monkeypatch.delenv("RUN_ID", raising=False)

    def run(*args):
        r = CliRunner().invoke(main, list(args), catch_exceptions=False)
        return r.exit_code, r.stdout, r.stderr

    return run


@pytest.fixture(scope="session")
def local_cluster():
    """The local Slurm cluster must be up (make cluster-up); CI brings it up before the tests."""
    from slurm_ab_testbed.cluster import is_up

    if not is_up(min_nodes=9):
        if os.environ.get("CI"):
            pytest.fail("the local Slurm cluster is not up in CI (make cluster-up)")
        pytest.skip("local Slurm cluster not up (make cluster-up)")
    if not Path("/var/lib/slurm-ab-local/models/Kimi-K3/tokenizer.json").exists():
        pytest.skip("local model assets missing (make local-assets)")
