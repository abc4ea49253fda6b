"""The command line: exit codes, stdout/stderr split, nothing written on errors."""
import os
import subprocess
import sys

from helpers import ROOT
from slurm_ab.model.rundir import Layout, read_manifest


def test_dry_run_prints_script_and_summary(cli):
    code, out, err = cli("dry-run", "tp32", "--run-id", "r1")
    assert code == 0
    assert out.startswith("#!/bin/bash\n") and "#SBATCH hetjob" in out
    assert "role server: 2 instance(s) x 4 nodes, TP32 / PP1 / EP4" in err and "router (srun" in err


def test_dry_run_all_modes(cli):
    for mode in ("tp32", "pp8", "tp32-dflash"):
        code, out, _ = cli("dry-run", mode)
        assert code == 0 and "sglang.launch_server" in out


def test_invalid_input_exit_2_writes_nothing(cli, tmp_path):
    code, out, err = cli("render", "tp32", "-o", "job.sh", "--set", "benchmark.concurrency=0")
    assert code == 2 and out == ""
    assert "benchmark.concurrency = 0: must be >= 1" in err
    assert list(tmp_path.iterdir()) == []


def test_unknown_mode_exit_2(cli, tmp_path):
    code, _, err = cli("dry-run", "tp64")
    assert code == 2 and "unknown mode" in err and "tp32-dflash" in err
    assert list(tmp_path.iterdir()) == []


def test_render_writes_and_never_overwrites(cli, tmp_path):
    assert cli("render", "pp8", "-o", "job.sh", "--run-id", "x")[0] == 0
    first = (tmp_path / "job.sh").read_text()
    assert "--pp-size 8" in first and os.access(tmp_path / "job.sh", os.X_OK)
    assert (tmp_path / "results" / "x" / "job.sbatch").read_text() == first
    assert (tmp_path / "results" / "x" / "manifest.json").exists()
    code, _, err = cli("render", "tp32", "-o", "job.sh")
    assert code == 2 and "does not overwrite" in err
    assert (tmp_path / "job.sh").read_text() == first
    code, _, err = cli("render", "tp32", "--run-id", "x")
    assert code == 2 and "already exists" in err
    assert (tmp_path / "results" / "x" / "job.sbatch").read_text() == first


def test_run_id_from_environment(cli, monkeypatch):
    monkeypatch.setenv("RUN_ID", "dp2-tp32-20260902-123051")
    code, out, _ = cli("dry-run", "tp32")
    assert code == 0 and "--job-name=ab-dp2-tp32-20260902-123051" in out


def test_default_run_id(cli):
    code, out, _ = cli("dry-run", "pp8")
    assert code == 0
    import re
    assert re.search(r"--job-name=ab-dp2-pp8-\d{8}-\d{6}\n", out)


def test_modes_lists_parallelism(cli):
    code, out, _ = cli("modes")
    assert code == 0
    assert "tp32             2 x TP32/PP1/EP4" in out and "2 x TP4/PP8/EP4" in out
    for line in out.splitlines():   # the parallelism once per mode (per role), not again in the description
        if "prefill" in line:
            assert line.count("prefill TP") == line.count("decode TP") == 1 and " x TP" not in line, line
        else:
            assert line.count(" x TP") == 1, line
    assert "tp32-dflash      2 x TP32/PP1/EP4 + DFlash, 4 nodes per replica  [" in out
    # the resolved model: references filled in, as every job gets them
    assert "speculative-draft-model-path=/shared/models/Kimi-K3-DFlash" in out and "{paths." not in out


def test_help_does_not_import_heavy_libraries():
    code = ("import sys; from slurm_ab.cli.main import main\n"
            "try:\n    main(['dry-run', 'tp32'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('pandas', 'submitit', 'numpy', 'tabulate', 'matplotlib', 'tqdm')\n"
            "         if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY []" in r.stderr, r.stderr[-2000:]


def test_collect_of_a_prepared_but_unsubmitted_run(cli, tmp_path):
    assert cli("render", "tp32", "--run-id", "prep")[0] == 0
    code, _, err = cli("collect", "prep")
    assert code == 2 and "never submitted" in err and "sbatch" in err
    run = Layout(tmp_path / "results" / "prep")
    (launch,) = read_manifest(run.root).campaign.launches
    assert sorted(run.root.rglob("*")) == sorted([run.job_script, run.manifest, run.launch(launch).root,
                                                  run.launch(launch).manifest])
    code, _, err = cli("report")
    assert code == 2 and "no runs" in err
