"""Find the run directory of a Slurm job id under a results directory.

The job writes slurm-<JOBID>.out into its run directory (#SBATCH --output) and records
'job_start job_id=<JOBID>' in events.log; submit records the id in manifest.json. Any of the
three identifies the run (a re-used run dir gets a '-job<JOBID>' suffix, see the job script).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..parse.events import read_events


def find_run_dirs(results: str | Path, job_id: str | int) -> list[Path]:
    """Run directories of job_id under results (usually one), sorted by name."""
    results, job_id = Path(results), str(job_id)
    if not results.is_dir():
        return []
    out = []
    for run in sorted(p for p in results.iterdir() if p.is_dir()):
        if (run / f"slurm-{job_id}.out").exists() or run.name.endswith(f"-job{job_id}"):
            out.append(run)
            continue
        try:
            manifest = json.loads((run / "manifest.json").read_text(errors="replace"))
            if isinstance(manifest, dict) and str(manifest.get("job_id", "")) == job_id:
                out.append(run)
                continue
        except (OSError, ValueError):
            pass
        start = read_events(run / "events.log").first.get("job_start") \
            if (run / "events.log").is_file() else None
        if start is not None and start.fields.get("job_id") == job_id:
            out.append(run)
    return out
