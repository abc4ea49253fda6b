"""Fixtures shared by the emulator tests: a small tokenizer-only model and a process group."""
import pytest

from slurm_ab_testbed.make_model import make_model
from slurm_ab_testbed.testing import EmuProcs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(make_model(tmp_path_factory.mktemp("model") / "m", vocab_size=4000))


@pytest.fixture
def procs(tmp_path):
    ep = EmuProcs(str(tmp_path / "logs"))
    yield ep
    ep.close()
