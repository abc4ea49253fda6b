"""Fixtures for every test; plain helpers are the package tests/helpers/ (``helpers.X``)."""
import os
from pathlib import Path

import pytest

from helpers import ROOT

# The testbed's `local` site is not shipped with slurm-ab; the site loader finds it through
# $SLURM_AB_SITES (as with `make`), here and in every slurm-ab the tests start.
TESTBED_SITES = ROOT / "testbed" / "sites"
if str(TESTBED_SITES) not in os.environ.get("SLURM_AB_SITES", "").split(os.pathsep):
    os.environ["SLURM_AB_SITES"] = os.pathsep.join(filter(None, [str(TESTBED_SITES), os.environ.get("SLURM_AB_SITES")]))


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
        if os.environ.get("CI"):
            pytest.fail("local model assets missing in CI (make cluster-up makes them)")
        pytest.skip("local model assets missing (make local-assets)")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A small tokenizer-only model directory for the emulator."""
    from slurm_ab_testbed.make_model import make_model

    return str(make_model(tmp_path_factory.mktemp("model") / "m", vocab_size=4000))


@pytest.fixture
def procs(tmp_path):
    """A group of emulator (or other) processes with logs under tmp_path, all ended afterwards."""
    from slurm_ab_testbed.testing import EmuProcs

    ep = EmuProcs(str(tmp_path / "logs"))
    yield ep
    ep.close()
