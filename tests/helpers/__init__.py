"""Test helpers, importable as ``helpers.X`` from every test (pytest's ``pythonpath = ["tests"]``).

``jobs``: find, track and wait for a real job's processes and its sacct/events records.
``jobdrive``: drive one ``slurm-ab submit --wait`` in the background and watch what it starts.
``rundir_builder``: small run directories whose raw data reproduce the seed's tables.
``scripts``: render a mode to its job script (golden-file placeholders), shellcheck it.
Fixtures live in ``tests/conftest.py``; ``tests/stubs/`` holds programs the jobs run in place of others.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the checkout

# SGLang 0.5.2's bench_serving (the second client profile, random-ids prompts): tests that are not
# about the client submit with it. 0.5.23's client imports torch and sglang.srt and chat-templates
# 48 rows of 16K tokens: 26-42 s per pass here against 4-8 s, and the preflight's import of it on
# ROUTER_HOST 15-28 s against 8 s. The seed's client (0.5.23, speed-bench) runs in test_e2e's three
# modes, test_pd_cluster and test_preflight's module checks.
CLIENT_052 = ("--config", str(ROOT / "testbed" / "configs" / "client-sglang-0.5.2.toml"))

# --set values for a job whose benchmark is not what the test checks (a run that must simply end
# ok, a layout, a signal at the job's end): the client, the router and the emulators spend their
# CPU per streamed token, and the suite is CPU-bound on 2 cores (40 x 512 tokens: ~30 s of CPU).
# At the site's clock (0.05, TPOT ~10 ms): at 0.02 (4 ms) the host's scheduling jitter under three
# side-by-side jobs made one replica of a healthy 16-prompt run 1.6-1.7x slower than the other,
# and the slow-replica rule rightly called that invalid (twice in one run).
SMALL = ("benchmark.num_prompts=16", "benchmark.output_len=128", 'server.env.SLURM_AB_EMU_TIME_SCALE="0.05"')
