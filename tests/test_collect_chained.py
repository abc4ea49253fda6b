"""The collector job chained after the experiment returns the run's verdict (its submitit result)."""
import json
import pickle

import pytest

from helpers.rundir_builder import build_oom_run, build_run
from slurm_ab.collect import read_summary
from slurm_ab.collect.chained import collect_after_job
from slurm_ab.model.rundir import Layout


@pytest.fixture
def no_slurm(tmp_path, monkeypatch):
    """No sacct/squeue on PATH: the facts come from the run directory alone."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.parametrize("build,verdict", [(build_run, "ok"), (build_oom_run, "failed")])
def test_the_chained_job_returns_the_verdict_and_writes_the_summary(tmp_path, no_slurm, build, verdict):
    run = build(tmp_path / "results")
    result = collect_after_job(str(run), "4242")
    assert result == verdict and type(result) is str
    assert pickle.loads(pickle.dumps(result)) == verdict              # what submitit stores
    assert json.loads(Layout(run).summary("json").read_text())["verdict"] == verdict
    assert read_summary(run).verdict == verdict
