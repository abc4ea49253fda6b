"""submitit's private surface that slurm_ab.job.hetjob relies on: a submitit that changes it fails here."""
import importlib
import inspect
import os
import stat

import pytest
import submitit

from slurm_ab.job.hetjob import PRIVATE_SURFACE, HetSlurmExecutor, HetSlurmInfoWatcher, HetSlurmJob

SCRIPT = """#!/bin/bash
#SBATCH --job-name=ab-x
#SBATCH --nodes=4
#SBATCH hetjob
#SBATCH --nodes=4
echo 'it'"'"'s the rendered script, byte for byte'
"""


def _resolve(name: str):
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("name", sorted(PRIVATE_SURFACE))
def test_private_names_exist_with_their_parameters(name):
    params = tuple(inspect.signature(_resolve(name)).parameters)
    assert params == PRIVATE_SURFACE[name], f"submitit {submitit.__version__} changed {name}"


def test_overrides_are_the_private_names_submitit_calls():
    assert HetSlurmExecutor._make_submission_file_text is not \
        submitit.SlurmExecutor._make_submission_file_text
    assert HetSlurmInfoWatcher.read_info is not submitit.slurm.slurm.SlurmInfoWatcher.read_info
    assert isinstance(HetSlurmJob.watcher, HetSlurmInfoWatcher)
    assert HetSlurmExecutor.job_class is HetSlurmJob


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch and srun stand-ins first on PATH: sbatch keeps the file it is given and answers as
    Slurm does ('Submitted batch job <id>'); submitit's executor only needs srun to exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kept = tmp_path / "submitted.sh"
    for name, body in (("sbatch", f'cp -- "$1" {kept}\necho "Submitted batch job 4242"\n'),
                       ("srun", "exit 0\n")):
        p = bin_dir / name
        p.write_text("#!/bin/sh\n" + body)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return kept


def test_a_rendered_script_is_submitted_unchanged(tmp_path, fake_slurm):
    folder = tmp_path / "run" / "submitit"
    job = HetSlurmExecutor(folder=folder).submit_script(SCRIPT)
    assert isinstance(job, HetSlurmJob) and job.job_id == "4242"
    assert fake_slurm.read_text() == SCRIPT                       # what sbatch was given
    assert (folder / "4242_submission.sh").read_text() == SCRIPT  # what submitit keeps


def test_a_plain_submitit_submission_is_left_alone(tmp_path, fake_slurm):
    # outside submit_script the executor renders as stock submitit does
    ex = HetSlurmExecutor(folder=tmp_path / "s")
    text = ex._make_submission_file_text("echo hi", "uid")
    assert text == submitit.SlurmExecutor(folder=tmp_path / "s")._make_submission_file_text("echo hi", "uid")
    assert "#SBATCH" in text and "hetjob" not in text
