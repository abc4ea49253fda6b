"""Issue 33 on the local cluster, two jobs that show several features each.

test_software_ab_capacity: `slurm-ab capacity v0523 v0524` over the testbed's two images (the
exec runtime's stand-in for apptainer): each launch runs in its own image (every step's log names
it), the preflight runs again in the second image, the capacity search finds the emulator's knee
within one probe of its analytic value (ab_stats/capacity.py in the job, recomputed by the
collector), the two capacities are compared, the correctness canary passes on both images, and the
page's settings show the image difference.

test_images_gate_and_prefix_cache_in_one_campaign: four launches, two images (each launch in its
own, the page's settings showing the difference), the normal modes passing the gate across images,
a diverging mode (the divergence fault) and an empty one invalid naming the prompts, shared-prefix
prompts hitting the prefix cache (/metrics, the table).

test_radix_on_and_off_over_a_rate_sweep: shared-prefix prompts at two request rates, the radix
cache off and on: the prefix cache's hits in /metrics and the tables, achieved against offered
rates, the saturated pass marked (radix off falls behind where radix on keeps up).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers import CLIENT_052, ROOT, SMALL, set_args
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
    from slurm_ab.model.campaign import rate_text
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
                 "--set", f'server.env.SLURM_AB_EMU_CONFIG="{quiet}"',
                 "--set", "cluster.teardown_grace_s=16", cwd=tmp_path, timeout=900)
    seconds = time.monotonic() - t0
    print(f"MEASURE software A/B capacity job: {seconds:.0f} s")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    # the grace above the local cluster's KillWait (15 s) is said when capacity submits, as by submit
    assert ("slurm-ab: warning: cluster.teardown_grace_s = 16 s is longer than this cluster's KillWait (15 s)"
            in r.stderr), r.stderr[-2000:]
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
    # one forest chart per rate both modes probed (all probes run at concurrency --prompts: named by
    # rate; a rate only one search probed has no change to chart)
    rates = sorted({c["rate"] for c in s["comparisons"] if any(m["change_pct"] is not None for m in c["metrics"])})
    assert rates, s["comparisons"]
    assert sorted(p.name for p in (run / "plots").glob("forest-*.png")) == sorted(
        f"forest-v0524-vs-v0523-q{rate_text(q)}.png" for q in rates), rates

    # the canary: both images answer as the reference (v0523 launch 1 replica 0) does
    for x in la.values():
        assert x["correctness"]["verdict"] == "ok" and x["correctness"]["exact_match"] == 1.0

    # the page's settings show the image difference, highlighted
    page = (run / "report.html").read_text()
    row = next(line for line in page.splitlines() if "<code>image</code>" in line)
    assert 'class="hl"' in row and "sglang-0.5.23" in row and "sglang-0.5.24" in row


# One campaign, four launches (SMALL's time scale): two images, both with the radix cache on and
# shared-prefix prompts; a broken draft model (the divergence fault) in the second image and an
# empty-output mode in the first.
# (The divergence fault acts on a speculative server only: v0524-bad is DFlash's.)
CAMPAIGN = """
[modes.v0523.args]
disable-radix-cache = false
[modes.v0524.args]
disable-radix-cache = false

[modes.v0524-bad]
description = "v0524 + DFlash with a broken draft model (the emulator's divergence fault)"
tp = 32
pp = 1
ep = 4
[modes.v0524-bad.args]
speculative-algorithm = "DFLASH"
speculative-draft-model-path = "{paths.draft_model}"
speculative-num-draft-tokens = 16
speculative-draft-kv-cache-dtype = "bf16"
mem-fraction-static = 0.83
[modes.v0524-bad.settings.container]
image = "/var/lib/slurm-ab-local/images/sglang-0.5.24"
[modes.v0524-bad.settings.server.env]
SLURM_AB_EMU_FAULT = "divergence=4"

[modes.v0523-empty]
description = "v0523 answering nothing (the emulator's empty_output fault)"
tp = 32
pp = 1
ep = 4
[modes.v0523-empty.settings.container]
image = "/var/lib/slurm-ab-local/images/sglang-0.5.23"
[modes.v0523-empty.settings.server.env]
SLURM_AB_EMU_FAULT = "empty_output"
"""


def test_images_gate_and_prefix_cache_in_one_campaign(tmp_path):
    """Done-when clauses of issue 33 in one campaign: each launch in its own image (every step's log
    names it) and the page's settings show the image difference; the normal modes pass the gate
    across images; the diverging mode is invalid naming the prompts, whatever its speed, and the
    empty one too; shared-prefix prompts hit the prefix cache (/metrics, the table)."""
    from slurm_ab.model.experiment import Correctness
    from slurm_ab_testbed.emulator.outputs import diverges

    cfg = tmp_path / "modes.toml"
    cfg.write_text(CAMPAIGN)
    run_id = f"i33-{time.strftime('%H%M%S')}"
    wait_idle()
    t0 = time.monotonic()
    r = slurm_ab("submit", "v0523", "v0524", "v0524-bad", "v0523-empty", "--site", "local", *CLIENT_052,
                 "--config", SOFTWARE_AB, "--config", str(cfg), "--order", "blocked", "--repeats", "1",
                 "--run-id", run_id, "--wait", "--no-collector",
                 *set_args(*SMALL, "benchmark.dataset=generated-shared-prefix", "benchmark.input_len=1024",
                           "benchmark.output_len=64", "warmup.input_len=1024", "preflight.client_import=false"),
                 cwd=tmp_path, timeout=900)
    print(f"MEASURE issue-33 campaign (4 launches): {time.monotonic() - t0:.0f} s")
    run = tmp_path / "results" / run_id
    assert (run / "summary.json").is_file(), r.stdout[-4000:] + r.stderr[-4000:]
    s = _summary(run)
    la = {x["mode"]: x for x in s["launches"]}
    passes = {p["ref"]["mode"]: p for p in s["passes"]}
    assert set(la) == {"v0523", "v0524", "v0524-bad", "v0523-empty"}

    # each launch in its own image: every step's log names the image it ran in, never the other
    for mode, version in (("v0523", "0.5.23"), ("v0524", "0.5.24"), ("v0524-bad", "0.5.24"),
                          ("v0523-empty", "0.5.23")):
        d = run / la[mode]["dir"]
        other = "0.5.24" if version == "0.5.23" else "0.5.23"
        for log in [d / "logs" / "server-r0-n0.log", d / "logs" / "server-r1-n3.log", d / "logs" / "router.log"]:
            text = log.read_text(errors="replace")
            assert f"in image {IMAGES}/sglang-{version} ({version})" in text, log
            assert f"sglang-{other}" not in text, log
    # the preflight again in the second image
    assert len(list((run / "preflight").glob("*@v0524.json"))) == len(list((run / "preflight").glob("node??.json")))
    # the page's settings show the image difference, highlighted
    page = (run / "report.html").read_text()
    row = next(line for line in page.splitlines() if "<code>image</code>" in line)
    assert 'class="hl"' in row and "sglang-0.5.23" in row and "sglang-0.5.24" in row
    row = next(line for line in page.splitlines() if "<code>server.env SLURM_AB_EMU_FAULT</code>" in line)
    assert 'class="hl"' in row and "divergence=4" in row and "empty_output" in row

    # the gate: the normal modes pass (v0524 against the reference v0523: another image, the same tokens)
    for mode in ("v0523", "v0524"):
        assert la[mode]["correctness"]["verdict"] == "ok" and la[mode]["correctness"]["exact_match"] == 1.0
        assert passes[mode]["verdict"] == "ok", passes[mode]["reasons"]
    cfg_c = Correctness()
    diverging = [k for k in range(cfg_c.prompts) if diverges(cfg_c.prompt_ids(k))]
    assert diverging, "no canary prompt diverges under the fault: choose other prompts"
    bad = la["v0524-bad"]["correctness"]
    assert bad["verdict"] == "invalid"
    for g in (0, 1):                                       # both replicas, the same prompts
        assert (f"correctness: replica {g}: diverged for canary prompt(s) {', '.join(map(str, diverging))} against "
                "v0523 launch 1 replica 0 at token " + ", ".join("4" for _ in diverging)) in " ".join(bad["reasons"])
    assert passes["v0524-bad"]["verdict"] == "invalid" and passes["v0524-bad"]["reasons"][0].startswith("correctness: ")
    empty = la["v0523-empty"]["correctness"]
    assert empty["verdict"] == "invalid" and any(
        "an empty answer for canary prompt(s) 0, 1, 2, 3" in x for x in empty["reasons"])
    p = passes["v0523-empty"]          # an empty answer may also fail the client's requests: never ok
    assert p["verdict"] in ("invalid", "failed") and any(x.startswith("correctness: ") for x in p["reasons"])
    md = (run / "summary.md").read_text()
    assert "## Correctness (canary at temperature 0)" in md and "v0524-bad" in md

    # shared-prefix prompts: the prefix cache's hits in /metrics and in the table
    for mode in ("v0523", "v0524"):
        pooled = passes[mode]["server_metrics"]["pooled"]
        assert pooled["cached_tokens"] > 0.5 * pooled["prompt_tokens"], (mode, pooled)
    for mode in ("v0524-bad", "v0523-empty"):              # the built-in --disable-radix-cache: no hits
        pooled = passes[mode]["server_metrics"]["pooled"]
        assert pooled["prompt_tokens"] > 0 and pooled["cached_tokens"] == 0, (mode, pooled)
    assert "## Prefix cache" in md


# 8 groups of 15 prompts (120) of a 16K-token system prompt, 64 tokens out, time scale 0.05: the
# emulator's analytic saturation without the cache is 7.7 req/s (2 replicas), with it far higher;
# 12 req/s (1.55 x) for ten seconds of arrivals, a second half longer than a request's own time.
# Rates above ~15 req/s load this 2-core host itself (the emulators' TPOT grows with the cache on:
# a lane-3 run at 24 req/s: the radix-on pass "too short to tell"). An overloaded SGLang server runs its
# prefill batches first and finishes nothing while its queue drains: the watchdog's stall_s (the
# local site's 15 s) is raised so a saturated pass is measured, not failed as a hang.
RADIX = """
[modes.tp32-radix]
description = "tp32 with the radix cache"
tp = 32
pp = 1
ep = 4
[modes.tp32-radix.args]
disable-radix-cache = false

[datasets.generated-shared-prefix]
args = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "8", "--gsp-prompts-per-group", "15",
        "--gsp-system-prompt-len", "{benchmark.input_len}", "--gsp-question-len", "128",
        "--gsp-output-len", "{benchmark.output_len}"]
"""


def test_radix_on_and_off_over_a_rate_sweep(tmp_path):
    cfg = tmp_path / "radix.toml"
    cfg.write_text(RADIX)
    run_id = f"radix-{time.strftime('%H%M%S')}"
    wait_idle()
    t0 = time.monotonic()
    r = slurm_ab("submit", "tp32", "tp32-radix", "--site", "local", *CLIENT_052, "--config", str(cfg),
                 "--order", "blocked", "--repeats", "1", "--request-rate", "4,12", "--run-id", run_id, "--wait",
                 "--no-collector", "--no-report", "--set", "benchmark.dataset=generated-shared-prefix",
                 "--set", "benchmark.output_len=64", "--set", "benchmark.num_prompts=120",
                 "--set", "correctness.enabled=false", "--set", "preflight.client_import=false",
                 "--set", "watchdog.stall_s=60", cwd=tmp_path,
                 timeout=900)
    print(f"MEASURE radix on/off rate sweep: {time.monotonic() - t0:.0f} s")
    run = tmp_path / "results" / run_id
    assert (run / "summary.json").is_file(), r.stdout[-4000:] + r.stderr[-4000:]
    s = _summary(run)
    passes = {(p["ref"]["mode"], p["ref"]["key"]): p for p in s["passes"]}
    assert set(passes) == {(m, k) for m in ("tp32", "tp32-radix") for k in ("q4-r1", "q12-r1")}
    assert all(p["verdict"] == "ok" for p in passes.values()), [p["reasons"] for p in passes.values()]

    # the prefix cache: hits with the radix cache on, none with it off (the built-in flags)
    for key in ("q4-r1", "q12-r1"):
        on = passes[("tp32-radix", key)]["server_metrics"]["pooled"]
        off = passes[("tp32", key)]["server_metrics"]["pooled"]
        assert on["cached_tokens"] > 0.5 * on["prompt_tokens"] and off["cached_tokens"] == 0
    md = (run / "summary.md").read_text()
    assert "## Prefix cache" in md and "## Open-loop load" in md

    # the rate sweep: the servers saw the offered rates; at 12 req/s (1.55 x the capacity without the
    # cache) the radix-off servers fell behind and the pass says so; with the cache they kept up
    for (mode, key), p in passes.items():
        ld = p["load"]
        assert ld["offered_rps"] == float(key[1:].split("-")[0]) and ld["arrivals"] == 120
        assert abs(ld["achieved_rps"] - ld["offered_rps"]) < 0.3 * ld["offered_rps"], (mode, key, ld)
    # past the capacity the radix-off servers fell behind. A prefill-first server finishes nothing
    # while its queue drains (even the first quarter's requests wait for the whole backlog), so the
    # client's side is too short to tell; the servers' waiting queue (/metrics sglang:num_queue_reqs,
    # docs/metrics.md) grew over the arrivals: marked saturated, the evidence in its note and the table
    p = passes[("tp32", "q12-r1")]
    sat = p["load"]
    assert sat["saturated"] and sat["backlog_end"] > sat["backlog_mid"], sat
    assert sat["served_rps"] < 0.5 * sat["offered_rps"], sat
    assert sat["queue_last"] - sat["queue_first"] > 10 and sat["queue_growth"] > 0.1, sat
    assert any(n.startswith("saturated: ") and "waiting queue (/metrics)" in n for n in p["notes"]), p["notes"]
    # well under the capacity (and with the cache at both rates): kept up, the queue level
    for kept in (("tp32", "q4-r1"), ("tp32-radix", "q4-r1"), ("tp32-radix", "q12-r1")):
        ld = passes[kept]["load"]
        assert not ld["saturated"] and ld["told"] and ld["queue_last"] is not None and ld["queue_last"] <= 10, \
            (kept, ld)
    table = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in md.splitlines() if line.startswith("| ")}
    assert "| saturated " in table[("tp32", "q12-r1")] and "| kept up " in table[("tp32", "q4-r1")]
