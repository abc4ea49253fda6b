"""What users install: the wheel built from the checkout holds the product with all its data files
(the job script's functions.sh included) and no testbed; from its files alone slurm-ab renders every
mode and collects a stored run. The product and the testbed import nothing of each other.
(.ci/run also installs that wheel into a clean virtual environment without test extras.)"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.scripts import MODES

STORED_RUN = ROOT / "tests" / "fixtures" / "runs" / "tp32-stored"
# repository directory -> where the wheel holds it
PRODUCT_DIRS = {"slurm_ab": "slurm_ab", "sbatch_templates": "slurm_ab/sbatch_templates"}
# A checkout's working files that are no source: never copied into the build.
NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", "results",
                                    ".hypothesis", ".pytest_cache", ".venv")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built (no -e) from a copy of the whole checkout, testbed/ included, as CI builds it."""
    src = tmp_path_factory.mktemp("checkout") / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE, symlinks=True)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("slurm_ab-*.whl")
    return whl


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(d)
    return d


def test_wheel_holds_the_product_and_no_testbed(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"slurm_ab", wheel.name.split("-py")[0] + ".dist-info"}, tops
    for needed in ("slurm_ab/sbatch_templates/functions.sh", "slurm_ab/sbatch_templates/hetjob.sbatch.j2",
                   "slurm_ab/sbatch_templates/pipeline.sh",
                   "slurm_ab/data/experiment.toml", "slurm_ab/data/sites/example.toml"):
        assert needed in names
    testbed = [n for n in names if any(w in n for w in ("emulator", "testbed", "cluster.sh", "make_model",
                                                        "sites/local.toml"))]
    assert testbed == []


def test_every_product_file_is_in_the_wheel(wheel):
    """A data file added to slurm_ab/ or sbatch_templates/ but not to package-data fails here."""
    names = set(zipfile.ZipFile(wheel).namelist())
    files = [f"{inside}/{p.relative_to(ROOT / d).as_posix()}" for d, inside in PRODUCT_DIRS.items()
             for p in (ROOT / d).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    assert files and sorted(set(files) - names) == []


def _from_wheel(unpacked: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """python3 -m slurm_ab ARGS importing slurm_ab from the wheel's files only, away from the checkout,
    with no site dirs and no reachable Slurm (a stored run is collected from its own records)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_AB_SITES", "SLURM_AB_SITE", "RUN_ID")}
    env.update(PYTHONPATH=str(unpacked), SLURM_CONF="/dev/null")
    return subprocess.run([sys.executable, "-m", "slurm_ab", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_wheel_renders_every_mode_and_collects_a_stored_run(unpacked, tmp_path):
    where = subprocess.run([sys.executable, "-c", "import slurm_ab; print(slurm_ab.__file__)"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(unpacked)}, capture_output=True, text=True)
    assert where.stdout.strip() == str(unpacked / "slurm_ab" / "__init__.py")
    commands = _from_wheel(unpacked, tmp_path, "--help").stdout.split("Commands:")[1].split()
    assert "cluster" not in commands and "install" not in commands and "submit" in commands
    for mode in MODES:
        r = _from_wheel(unpacked, tmp_path, "dry-run", mode, "--site", "example")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("#!/bin/bash") and "hetjob" in r.stdout
    r = _from_wheel(unpacked, tmp_path, "dry-run", "tp32", "--site", "local")
    assert r.returncode == 2 and "$SLURM_AB_SITES (none, it is unset)" in r.stderr   # the testbed's site is not shipped
    run = Path(shutil.copytree(STORED_RUN, tmp_path / "results" / STORED_RUN.name))
    r = _from_wheel(unpacked, tmp_path, "collect", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: ok" in r.stdout and (run / "summary.json").is_file()


def _imported_tops(py: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(py.read_text(), str(py))):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


@pytest.mark.parametrize("tree,forbidden", [("slurm_ab", "slurm_ab_testbed"), ("testbed", "slurm_ab")])
def test_product_and_testbed_import_nothing_of_each_other(tree, forbidden):
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / tree).rglob("*.py") if forbidden in _imported_tops(p)]
    assert offenders == []
