"""The library surface the CLI uses: lazy heavy imports, run lookup by job id."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.rundir_builder import build_run

from slurm_ab.model.rundir import Layout, find_run_dirs  # noqa: E402


def test_importing_the_collector_does_not_import_pandas_or_tabulate():
    code = ("import sys, slurm_ab.collect, slurm_ab.parse.server_log, slurm_ab.parse.bench, "
            "slurm_ab.parse.diagnose, slurm_ab.parse.events\n"
            "bad = [m for m in ('pandas', 'tabulate', 'numpy') if m in sys.modules]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stdout + r.stderr


def test_find_run_dirs(tmp_path):
    run = build_run(tmp_path)                       # slurm-4242.out, manifest, events
    assert find_run_dirs(tmp_path, 4242) == [run]
    lay = Layout(run)
    lay.slurm_out(4242).unlink()
    assert find_run_dirs(tmp_path, "4242") == [run]            # manifest.json
    m = json.loads(lay.manifest.read_text())
    m["job_id"] = "1"
    lay.manifest.write_text(json.dumps(m))
    assert find_run_dirs(tmp_path, "4242") == [run]            # events.log job_start
    other = lay.resubmitted(77)                                # a script submitted again
    other.mkdir()
    assert find_run_dirs(tmp_path, 77) == [other]
    assert find_run_dirs(tmp_path, 5) == [] and find_run_dirs(tmp_path / "nope", 5) == []


def test_find_run_dirs_prefers_the_run_that_records_the_job(tmp_path):
    # a re-submitted script leaves a one-line slurm-<JOBID>.out pointer in the old run
    old = tmp_path / "r1"
    new = Layout(old).resubmitted(99)
    old.mkdir()
    new.mkdir()
    Layout(old).slurm_out(99).write_text("slurm-ab: r1 was already used by another job\n")
    assert find_run_dirs(tmp_path, 99) == [new]
    only = tmp_path / "r2"
    only.mkdir()
    Layout(only).slurm_out(7).write_text("x\n")
    assert find_run_dirs(tmp_path, 7) == [only]
