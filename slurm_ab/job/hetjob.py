"""submitit, taught heterogeneous jobs: the one module that relies on submitit's private surface.

submitit renders one flat ``#SBATCH`` block and reads job state from ``sacct`` rows keyed by job
id; a het job's rows are ``<leader>+0``, ``<leader>+1`` and there is no ``<leader>`` row, so stock
submitit sees it UNKNOWN forever and ``wait()`` never returns (submitit issue #1741, open). Here the
script comes pre-rendered and component 0's row stands for the job (it runs the batch script).

The private names used are listed in PRIVATE_SURFACE, as they are in submitit 1.5.4 (pyproject
pins the tested range); tests/test_hetjob.py checks each signature and a rendered submission, so
a submitit that changes them fails there.
"""
from __future__ import annotations

import typing as tp
from pathlib import Path

import submitit
from submitit.core.utils import JobPaths
from submitit.slurm import slurm as sslurm

# "module:qualname" -> its parameters
PRIVATE_SURFACE: dict[str, tuple[str, ...]] = {
    # writes the submission file (text from _make_submission_file_text), runs sbatch on it and
    # wraps the id it prints in job_class
    "submitit.slurm.slurm:SlurmExecutor._submit_command": ("self", "command"),
    # the submission file's text: overridden to return the rendered script unchanged
    "submitit.slurm.slurm:SlurmExecutor._make_submission_file_text": ("self", "command", "uid"),
    # sacct text -> {job id: row}: extended to map '<leader>+0' to '<leader>'
    "submitit.slurm.slurm:SlurmInfoWatcher.read_info": ("self", "string"),
    # where _submit_command writes the submission file before the job id is known
    "submitit.core.utils:JobPaths.get_first_id_independent_folder": ("folder",),
}


class HetSlurmInfoWatcher(sslurm.SlurmInfoWatcher):
    def read_info(self, string: tp.Union[bytes, str]) -> tp.Dict[str, tp.Dict[str, str]]:
        info = super().read_info(string)
        for key, stats in list(info.items()):
            leader, plus, offset = key.partition("+")
            if plus and offset == "0":
                info.setdefault(leader, stats)
        return info


class HetSlurmJob(sslurm.SlurmJob):
    watcher = HetSlurmInfoWatcher(delay_s=30)


class HetSlurmExecutor(submitit.SlurmExecutor):
    """Submits a rendered heterogeneous-job script as is (sbatch reads every component from it)."""

    job_class = HetSlurmJob

    def __init__(self, folder: tp.Union[str, Path]):
        super().__init__(folder=folder, max_num_timeout=0)
        self._script: str | None = None

    def submit_script(self, script: str) -> HetSlurmJob:
        self._script = script
        JobPaths.get_first_id_independent_folder(self.folder).mkdir(parents=True, exist_ok=True)
        try:
            return self._submit_command("# rendered by slurm-ab")  # type: ignore[return-value]
        finally:
            self._script = None

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        if self._script is None:  # a plain submitit submission (not used by slurm-ab)
            return super()._make_submission_file_text(command, uid)
        return self._script
