"""Test helpers, importable as ``helpers.X`` from every test (pytest's ``pythonpath = ["tests"]``).

``jobs``: find, track and wait for a real job's processes and its sacct/events records.
``jobdrive``: drive one ``slurm-ab submit --wait`` in the background and watch what it starts.
``rundir_builder``: small run directories whose raw data reproduce the seed's tables.
``scripts``: render a mode to its job script (golden-file placeholders), shellcheck it.
Fixtures live in ``tests/conftest.py``; ``tests/stubs/`` holds programs the jobs run in place of others.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the checkout
