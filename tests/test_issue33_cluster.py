"""Issue 33 on the local cluster, two jobs that show several features each.

test_software_ab_capacity: `slurm-ab capacity v0523 v0524` over the testbed's two images (the
exec runtime's stand-in for apptainer): each launch runs in its own image (every step's log names
it), the preflight runs again in the second image, the capacity search finds the emulator's knee
within one probe of its analytic value (ab_stats/capacity.py in the job, recomputed by the
collector), the two capacities are compared, the correctness canary passes on both images, and the
page's settings show the image difference.

test_faults_radix_and_a_rate_sweep: a campaign of four modes made by mode settings (radix cache
on; DFlash with the emulator's divergence fault; empty output) on shared-prefix prompts at two
request rates: the prefix cache's hits in /metrics and the tables, achieved against offered rates
with the saturated passes marked (radix off saturates where radix on keeps up), the diverging and
the empty modes invalid naming the prompts, the normal ones passing the gate.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers import CLIENT_052, ROOT
from helpers.jobs import slurm_ab
from helpers.lanes import wait_idle

pytestmark = pytest.mark.cluster

SOFTWARE_AB = str(ROOT / "testbed" / "configs" / "software-ab.toml")
IMAGES = Path("/var/lib/slurm-ab-local/images")
EMU_ARGV = ("--model-path /var/lib/slurm-ab-local/models/Kimi-K3 --tp-size 32 --pp-size 1 --ep-size 4 --nnodes 4 "
            "--chunked-prefill-size 8192 --disable-radix-cache").split()
# The emulator without its run-to-run noise (the analytic capacity is noiseless) and with a short
# start-up (costs.toml's start-up phases scale with the time scale: 200 s x 0.5 otherwise).
QUIET_FAST = """[noise]
launch_cv = 0.0
pass_cv = 0.0
stall_prob_per_queued = 0.0

[startup]
dist_init_s = 2.0
load_weights_s = 10.0
memory_pool_s = 1.0
cuda_graph_s = 4.0
"""


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_software_ab_capacity(tmp_path):
    from slurm_ab_testbed.emulator.capacity import Workload, capacity
    from slurm_ab_testbed.emulator.costs import load_costs

    quiet = tmp_path / "quiet.toml"
    quiet.write_text(QUIET_FAST)
    run_id = f"cap-{time.strftime('%H%M%S')}"
    wait_idle()
    t0 = time.monotonic()
    r = slurm_ab("capacity", "v0523", "v0524", "--site", "local", "--config", SOFTWARE_AB, *CLIENT_052,
                 "--slo", "tpot:40", "--attainment", "90%", "--rates", "2:10", "--probes", "3", "--prompts", "60",
                 "--run-id", run_id, "--wait", "--no-collector",
                 "--set", "benchmark.input_len=512", "--set", "benchmark.output_len=64",
                 "--set", "warmup.input_len=512", "--set", "preflight.client_import=false",
                 "--set", 'server.env.SLURM_AB_EMU_TIME_SCALE="0.5"',
                 "--set", f'server.env.SLURM_AB_EMU_CONFIG="{quiet}"', cwd=tmp_path, timeout=900)
    seconds = time.monotonic() - t0
    print(f"MEASURE software A/B capacity job: {seconds:.0f} s")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    run = tmp_path / "results" / run_id
    s = _summary(run)
    la = {x["mode"]: x for x in s["launches"]}
    assert set(la) == {"v0523", "v0524"} and all(x["status"] == "ok" for x in la.values())

    # each launch in its own image: every step's log names the image it ran in
    for mode, version in (("v0523", "0.5.23"), ("v0524", "0.5.24")):
        d = run / la[mode]["dir"]
        for log in [d / "logs" / "server-r0-n0.log", d / "logs" / "server-r1-n3.log", d / "logs" / "router.log",
                    d / "logs" / "client-probe1.log"]:
            text = log.read_text(errors="replace")
            assert f"in image {IMAGES}/sglang-{version} ({version})" in text, log
            other = "0.5.24" if version == "0.5.23" else "0.5.23"
            assert f"sglang-{other}" not in text, log
    # the preflight again in the second image, with its modules
    assert sorted(p.name for p in (run / "preflight").glob("*@v0524.json")) and \
        len(list((run / "preflight").glob("*@v0524.json"))) == len(list((run / "preflight").glob("node??.json")))

    # the capacity: within one probe of the emulator's analytic knee (the closed form from
    # costs.toml, the image's own costs for v0524), the job's decisions those the collector makes
    step = (10 - 2) / 2 ** 3
    for mode, costs in (("v0523", str(quiet)), ("v0524", f"{IMAGES}/sglang-0.5.24/costs.toml:{quiet}")):
        c = la[mode]["capacity"]
        knee = capacity(EMU_ARGV, Workload(512, 64), 2, 0.5, slo_tpot_ms=40, attainment=0.9,
                        costs=load_costs(costs)).knee_rate
        low = c["capacity_rps"] if c["capacity_rps"] is not None else 2.0
        high = c["upper_rps"] if c["upper_rps"] is not None else 10.0
        print(f"MEASURE {mode}: capacity bracket [{low}, {high}) req/s, analytic knee {knee:.2f}")
        assert c["agrees"] and len(c["probes"]) == 3
        assert low - step <= knee <= high + step, (mode, low, high, knee)
        # each probe's open-loop check: the servers saw about the offered rate
        for p in c["probes"]:
            assert p["load"] and "under-offered" not in p["load"]
    md = (run / "summary.md").read_text()
    assert "## Capacity: the highest rate at which 90% of the requests meet tpot <= 40 ms" in md
    assert "- v0524 " in md and " vs v0523 " in md

    # the canary: both images answer as the reference (v0523 launch 1 replica 0) does
    for x in la.values():
        assert x["correctness"]["verdict"] == "ok" and x["correctness"]["exact_match"] == 1.0

    # the page's settings show the image difference, highlighted
    page = (run / "report.html").read_text()
    row = next(line for line in page.splitlines() if "<code>image</code>" in line)
    assert 'class="hl"' in row and "sglang-0.5.23" in row and "sglang-0.5.24" in row


CAMPAIGN = """
[modes.tp32-radix]
description = "tp32 with the radix cache"
tp = 32
pp = 1
ep = 4
[modes.tp32-radix.args]
disable-radix-cache = false

[modes.dflash-bad]
description = "tp32 + DFlash with a broken draft model (the emulator's divergence fault)"
tp = 32
pp = 1
ep = 4
[modes.dflash-bad.args]
speculative-algorithm = "DFLASH"
speculative-draft-model-path = "{paths.draft_model}"
speculative-num-draft-tokens = 16
speculative-draft-kv-cache-dtype = "bf16"
mem-fraction-static = 0.83
[modes.dflash-bad.settings.server.env]
SLURM_AB_EMU_FAULT = "divergence=4"

[modes.tp32-empty]
description = "tp32 answering nothing (the emulator's empty_output fault)"
tp = 32
pp = 1
ep = 4
[modes.tp32-empty.settings.server.env]
SLURM_AB_EMU_FAULT = "empty_output"
"""


def test_faults_radix_and_a_rate_sweep(tmp_path):
    from slurm_ab.model.experiment import Correctness
    from slurm_ab_testbed.emulator.outputs import diverges

    cfg = tmp_path / "modes.toml"
    cfg.write_text(CAMPAIGN)
    run_id = f"faults-{time.strftime('%H%M%S')}"
    wait_idle()
    t0 = time.monotonic()
    r = slurm_ab("submit", "tp32", "tp32-radix", "dflash-bad", "tp32-empty", "--site", "local", *CLIENT_052,
                 "--config", str(cfg), "--order", "blocked", "--repeats", "1", "--request-rate", "6,24",
                 "--run-id", run_id, "--wait", "--no-collector", "--no-report",
                 "--set", "benchmark.dataset=generated-shared-prefix", "--set", "benchmark.output_len=64",
                 "--set", "preflight.client_import=false", cwd=tmp_path, timeout=900)
    print(f"MEASURE faults/radix/rate-sweep campaign: {time.monotonic() - t0:.0f} s")
    run = tmp_path / "results" / run_id
    assert (run / "summary.json").is_file(), r.stdout[-4000:] + r.stderr[-4000:]
    s = _summary(run)
    la = {x["mode"]: x for x in s["launches"]}
    passes = {(p["ref"]["mode"], p["ref"]["key"]): p for p in s["passes"]}
    assert set(passes) == {(m, k) for m in la for k in ("q6-r1", "q24-r1")}

    # the correctness gate: the normal modes pass, the broken ones are invalid, the prompts named
    cfg_c = Correctness()
    diverging = [k for k in range(cfg_c.prompts) if diverges(cfg_c.prompt_ids(k))]
    assert diverging, "no canary prompt diverges under the fault: choose other prompts"
    for mode in ("tp32", "tp32-radix"):
        assert la[mode]["correctness"]["verdict"] == "ok", la[mode]["correctness"]
    bad = la["dflash-bad"]["correctness"]
    assert bad["verdict"] == "invalid"
    assert (f"correctness: replica 0: diverged for canary prompt(s) {', '.join(map(str, diverging))} against "
            "tp32 launch 1 replica 0 at token " + ", ".join("4" for _ in diverging)) in bad["reasons"][0]
    empty = la["tp32-empty"]["correctness"]
    assert empty["verdict"] == "invalid" and any(
        "an empty answer for canary prompt(s) 0, 1, 2, 3" in x for x in empty["reasons"])
    for key in ("q6-r1", "q24-r1"):                        # whatever its speed
        p = passes[("dflash-bad", key)]
        assert p["verdict"] == "invalid" and p["reasons"][0].startswith("correctness: ")
        # an empty answer may also fail the client's requests: never ok, the gate's reasons there
        p = passes[("tp32-empty", key)]
        assert p["verdict"] in ("invalid", "failed") and any(x.startswith("correctness: ") for x in p["reasons"])

    # the prefix cache: hits with the radix cache on, none with it off (the built-in flags)
    def hit(mode, key):
        return passes[(mode, key)]["server_metrics"]["pooled"]
    on, off = hit("tp32-radix", "q6-r1"), hit("tp32", "q6-r1")
    assert on["cached_tokens"] > 0.5 * on["prompt_tokens"] and off["cached_tokens"] == 0
    md = (run / "summary.md").read_text()
    assert "## Prefix cache" in md and "## Open-loop load" in md

    # the rate sweep: the servers saw the offered rates; at 24 req/s (3 x the emulator's capacity
    # without the cache) the radix-off servers fell behind and the pass says so, with the cache they
    # kept up
    for (mode, key), p in passes.items():
        ld = p["load"]
        assert ld["offered_rps"] == float(key[1:].split("-")[0])
        assert abs(ld["achieved_rps"] - ld["offered_rps"]) < 0.35 * ld["offered_rps"], (mode, key, ld)
    assert passes[("tp32", "q24-r1")]["load"]["saturated"], passes[("tp32", "q24-r1")]["load"]
    assert not passes[("tp32", "q6-r1")]["load"]["saturated"]
    assert not passes[("tp32-radix", "q24-r1")]["load"]["saturated"]
    assert passes[("tp32", "q6-r1")]["verdict"] == "ok" and passes[("tp32", "q24-r1")]["verdict"] == "ok"
    assert any(n.startswith("saturated: ") for n in passes[("tp32", "q24-r1")]["notes"])
