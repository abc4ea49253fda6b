"""Find the run directory of a Slurm job id under a results directory.

The job writes slurm-<JOBID>.out into its run directory (#SBATCH --output) and records
'job_start job_id=<JOBID>' in events.log; submit records the id in manifest.json. Any of the
three identifies the run (a re-used run dir gets a '-job<JOBID>' suffix, see the job script).
"""
from __future__ import annotations

from pathlib import Path

from ..parse.events import read_events
from ..rundir import read_manifest


def find_run_dirs(results: str | Path, job_id: str | int) -> list[Path]:
    """Run directories of job_id under results (usually one), sorted by name.

    A directory that records the job (name suffix, manifest, events.log) wins over one that only
    holds its slurm-<JOBID>.out: a re-submitted script leaves a one-line pointer in the old run.
    """
    results, job_id = Path(results), str(job_id)
    if not results.is_dir():
        return []
    recorded, output_only = [], []
    for run in sorted(p for p in results.iterdir() if p.is_dir()):
        if run.name.endswith(f"-job{job_id}") or str(read_manifest(run).get("job_id", "")) == job_id:
            recorded.append(run)
            continue
        start = read_events(run / "events.log").first.get("job_start") \
            if (run / "events.log").is_file() else None
        if start is not None and start.fields.get("job_id") == job_id:
            recorded.append(run)
        elif (run / f"slurm-{job_id}.out").exists():
            output_only.append(run)
    return recorded or output_only
