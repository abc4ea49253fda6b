"""Run directories: created once, never reused or overwritten; found again by run id or job id."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .errors import UsageError


def create(run_dir: Path) -> Path:
    """Create the run directory; an existing one is never reused (its evidence stays intact)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise UsageError(f"run directory {run_dir} already exists; slurm-ab never reuses one "
                         f"(choose another --run-id or RUN_ID)") from None
    return run_dir


def write_new(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file that must not exist yet (O_EXCL)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def write_atomic(path: Path, text: str) -> None:
    """Replace a derived file (manifest, summaries) in one step, so readers never see half of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_manifest(run_dir: Path) -> dict:
    """The manifest as a dict; {} when missing, unreadable or not a JSON object."""
    try:
        data = json.loads((run_dir / "manifest.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def job_id_of(run_dir: Path) -> str | None:
    """The Slurm job id of a run: from the manifest (submit) or events.log (plain sbatch)."""
    m = read_manifest(run_dir)
    if m.get("job_id"):
        return str(m["job_id"])
    try:
        with open(run_dir / "events.log", errors="replace") as f:
            for line in f:
                for part in line.split():
                    if part.startswith("job_id="):
                        return part[len("job_id="):]
    except OSError:
        pass
    return None


def find(ref: str, results: Path) -> Path:
    """A run directory from a path, a run id (directory name) or a Slurm job id."""
    p = Path(ref)
    if p.is_dir() and ((p / "manifest.json").exists() or (p / "events.log").exists() or (p / "job.sbatch").exists()):
        return p
    if "/" not in ref and (results / ref).is_dir():
        return results / ref
    job = ref.split("+")[0]
    if job.isdigit():
        from .collect.locate import find_run_dirs

        found = find_run_dirs(results, job)
        if found:
            return found[0]
    raise UsageError(f"no run {ref!r}: not a run directory, a run id under {results}, or the job id of one")


def submitted(run_dir: Path) -> bool:
    """A job ran (or was submitted) for this directory; `render` alone prepares one without."""
    return (run_dir / "events.log").exists() or bool(read_manifest(run_dir).get("job_id"))


def all_runs(results: Path) -> list[Path]:
    """Run directories under results/ that a job ran or was submitted for."""
    if not results.is_dir():
        return []
    return sorted(d for d in results.iterdir() if d.is_dir() and submitted(d))
