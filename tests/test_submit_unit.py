"""Submission pieces that need no cluster: the het-aware state watcher, run directories."""
import json

import pytest

from slurm_ab.model import rundir
from slurm_ab.model.errors import UsageError
from slurm_ab.job.hetjob import HetSlurmInfoWatcher
from submitit.slurm.slurm import SlurmInfoWatcher

SACCT = """JobID|State|NodeList
4242+0|COMPLETED|node[01-04]
4242+0.batch|COMPLETED|node01
4242+0.0|CANCELLED|node[01-04]
4242+1|COMPLETED|node[05-08]
4242+1.0|CANCELLED|node[05-08]
"""


def test_stock_submitit_cannot_see_het_leader():
    # the bug we work around: no '4242' key, so stock submitit says UNKNOWN forever
    assert "4242" not in SlurmInfoWatcher().read_info(SACCT)


def test_het_watcher_maps_component_zero_to_leader():
    info = HetSlurmInfoWatcher().read_info(SACCT)
    assert info["4242"]["State"] == "COMPLETED"
    assert info["4242+1"]["NodeList"] == "node[05-08]"


def test_het_watcher_failed_state():
    info = HetSlurmInfoWatcher().read_info("JobID|State|NodeList\n7+0|FAILED|n1\n7+1|FAILED|n2\n")
    assert info["7"]["State"] == "FAILED"


def test_run_dir_never_reused(tmp_path):
    d = rundir.create(tmp_path / "results" / "r1")
    (d / "keep.log").write_text("evidence")
    with pytest.raises(UsageError, match="already exists"):
        rundir.create(d)
    assert (d / "keep.log").read_text() == "evidence"


def test_write_new_refuses_existing(tmp_path):
    p = tmp_path / "job.sbatch"
    rundir.write_new(p, "a")
    with pytest.raises(FileExistsError):
        rundir.write_new(p, "b")
    assert p.read_text() == "a"


def test_find_by_run_id_job_id_and_path(tmp_path):
    res = tmp_path / "results"
    a = rundir.create(res / "dp2-tp32-1")
    (a / "manifest.json").write_text(json.dumps({"job_id": "17"}))
    b = rundir.create(res / "manual")
    (b / "events.log").write_text("1.0 2026-01-01 00:00:00.000 job_start job_id=23 run_id=manual mode=tp32\n")
    assert rundir.find("dp2-tp32-1", res) == res / "dp2-tp32-1"
    assert rundir.find("17", res) == a
    assert rundir.find("23+0", res) == b
    assert rundir.find(str(b), res) == b
    with pytest.raises(UsageError, match="no run"):
        rundir.find("99", res)
