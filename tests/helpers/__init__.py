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
# ok, a layout, a signal at the job's end): 16 prompts of 128 output tokens instead of 40 of 512
# (the client, the router and the emulators spend their CPU per streamed token; the suite is
# CPU-bound on 2 cores), at the site's clock. With 128 tokens a replica's TPOT is mostly its decode
# stalled behind 16K-token prefills, and healthy runs differ up to 1.9x between replicas: the
# slow-replica rule (collect/speed.py) asks the decode lines too, and these runs must end ok.
SMALL = ("benchmark.num_prompts=16", "benchmark.output_len=128", 'server.env.SLURM_AB_EMU_TIME_SCALE="0.05"')


# --set value for a job whose preflight is there but not its module imports (ROUTER_HOST's import
# of the client is 7-15 s of CPU here): jobs that must fail on another check, or pass it to fail
# later. test_preflight's module checks and the runs that pass the whole preflight keep them.
NO_IMPORT = "preflight.import_command=[]"


def set_args(*sets: str) -> list[str]:
    """Config values as slurm-ab's command-line options: --set KEY=VALUE each."""
    return [a for s in sets for a in ("--set", s)]
