"""Fixtures for every test; plain helpers are the package tests/helpers/ (``helpers.X``)."""
import os
import sys
from pathlib import Path

import pytest

# helpers' asserts count as the tests' own (helpers/asserted.py) and explain their failures
pytest.register_assert_rewrite("helpers")

from helpers import ROOT  # noqa: E402  (after the registration)
from helpers import asserted  # noqa: E402
from helpers.lanes import VARS as LANE_VARS, lane_of

# The testbed's `local` site is not shipped with slurm-ab; the site loader finds it through
# $SLURM_AB_SITES (as with `make`), here and in every slurm-ab the tests start.
TESTBED_SITES = ROOT / "testbed" / "sites"
if str(TESTBED_SITES) not in os.environ.get("SLURM_AB_SITES", "").split(os.pathsep):
    os.environ["SLURM_AB_SITES"] = os.pathsep.join(filter(None, [str(TESTBED_SITES), os.environ.get("SLURM_AB_SITES")]))

# The jobs and CLIs the tests start keep their bytecode caches (see the Makefile's unexport).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# pytest-xdist worker gwN runs its jobs in the cluster's partition lane(N+1) (helpers/lanes.py):
# every Slurm command this process and its children start reads these variables.
LANE = lane_of(os.environ.get("PYTEST_XDIST_WORKER"))
if LANE:
    os.environ.update(dict.fromkeys(LANE_VARS, LANE))


def pytest_configure(config):
    asserted.pytest_configure(config)       # a test that passes without an assertion fails


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """Run the slurm-ab CLI in an empty working directory; returns (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from slurm_ab.cli.main import main

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
    if LANE:
        from helpers.lanes import nodes
        if len(nodes()) != 9:
            pytest.fail(f"worker {os.environ.get('PYTEST_XDIST_WORKER')} runs in partition {LANE}, which the "
                        "cluster does not have with 9 nodes: one pytest -n worker per lane (make test counts "
                        "them; SLURM_AB_CLUSTER_NODES=27 make cluster-up gives 3)")
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


# The longest files first (measured on 2 cores, 2026-12-01: seconds of one worker): with `make test`'s
# --dist loadfile each worker takes whole files, two at a start, so a long file started last would
# keep one worker busy while the others idle. The order of the rest is pytest's.
# Seconds each cluster test file keeps its lane busy (make test of 2026-12-07 on 2 cores, read from
# the lanes' tmp directories; the sequential test's after its prior decides at look 1): the cluster tests run a file per lane at a time (--dist loadfile),
# handed out in collection order (--no-loadscope-reorder), so the longest go first (a long file
# handed out last kept one lane busy ~5 min after the others had finished). A file missing here
# counts 60 s; the tests that need no cluster run in one process, where the order is moot.
LANE_SECONDS = {
    "test_pd_cluster.py": 600, "test_e2e.py": 550, "test_issue33_cluster.py": 460,
    "test_network_faults.py": 404, "test_campaign_e2e.py": 396, "test_sequential_cluster.py": 150,
    "test_testbed_workloads_cluster.py": 278, "test_faults.py": 247, "test_telemetry_cluster.py": 235,
    "test_site_faults.py": 202, "test_preflight.py": 133, "test_cancel_phases.py": 100,
    "test_progress_cluster.py": 63, "test_secrets_and_stub.py": 41, "test_readme.py": 13, "test_cluster.py": 4,
}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: -LANE_SECONDS.get(item.path.name, 60))      # stable: a file's own order kept


@pytest.fixture(autouse=True)
def _close_figures():
    """Tests that draw a figure directly (plots.fig_*) leave it open in pyplot; the tests that need
    no cluster share one process (make test), where open figures would pile up."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")
