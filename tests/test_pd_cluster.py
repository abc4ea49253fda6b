"""Prefill/decode (PD) modes on the real local Slurm cluster: the emulator's PD roles, the real
sglang-router 0.3.2 in PD mode and SGLang 0.5.23's client (0.5.2's in the faults that come during a
benchmark: its import is half the CPU). DP2 against 1P1D in one allocation (the campaign), 1P1D +
DFlash, every PD failure with its time to a named verdict, and a slow link between the prefill and
the decode. Lean: the emulator at time scale 0.02, the failures without the
preflight (it checks nothing PD-specific they need) and with short PD timeouts; one shared
campaign run for every test that reads it. Measured times: 'MEASURE ...' lines (pytest -rA)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from slurm_ab.model.rundir import Layout, open_run

from helpers import CLIENT_052
from helpers.jobdrive import Job, job_starter, measure
from helpers.jobs import slurm_ab, wait_no_processes

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FAST = 'server.env.SLURM_AB_EMU_TIME_SCALE="0.02"'
NO_PREFLIGHT = "preflight.enabled=false"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("pd")


@pytest.fixture
def job(workdir):
    made: list[Job] = []
    start = job_starter(workdir, made, FAST)
    # the seed's client (0.5.23) through the router in PD mode, unless the test says
    yield lambda name, *sets, client=(), **kw: start(name, *sets, client=client, **kw)
    for j in made:
        j.cleanup()


def _summary(run_dir: Path) -> dict:
    """summary.json as other programs read it: "rows" the passes' numeric rows."""
    return json.loads(Layout(run_dir).summary("json").read_text())


@pytest.fixture(scope="module")
def dp2_vs_pd(workdir):
    """`slurm-ab submit tp32 pd-1p1d --wait`, one launch of each, one pass of 40 prompts each: DP2
    and 1P1D on the same 2 x 4 nodes in one job."""
    run_id = f"dp2-vs-pd-{int(time.time())}"
    t0 = time.monotonic()
    r = slurm_ab("submit", "tp32", "pd-1p1d", "--launches", "1", "--repeats", "1", "--order", "interleaved",
                 "--site", "local", "--run-id", run_id, "--wait", "--no-collector", "--no-report", "--set", FAST,
                 cwd=workdir, timeout=900)
    return r, workdir / "results" / run_id, time.monotonic() - t0


def _pd_pass(summary: dict) -> dict:
    return next(p for p in summary["rows"] if p["mode"] == "pd-1p1d")


def test_dp2_and_pd_run_in_one_job(dp2_vs_pd):
    r, run_dir, took = dp2_vs_pd
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(run_dir)
    assert [x["mode"] for x in s["campaign"]["launches"]] == ["tp32", "pd-1p1d"]
    assert [(p["mode"], p["verdict"], p["requests_ok"], p["requests_total"]) for p in s["rows"]] == \
        [("tp32", "ok", 40, 40), ("pd-1p1d", "ok", 40, 40)], [p.get("reason") for p in s["rows"]]
    # one job, the same nodes for both deployments
    job = json.loads(Layout(run_dir).manifest.read_text())["job_id"]
    run = open_run(run_dir)
    hosts = [[e.split("nodes=")[1].split()[0] for e in run.launch_layout(la).events.read_text().splitlines()
              if " hosts " in e] for la in run.campaign.launches]
    assert hosts[0] == hosts[1] and len(hosts[0]) == 2
    # the comparison and its interval come from the campaign machinery (one launch a side)
    (cmp,) = s["comparisons"]
    rows = {m["metric"]: m for m in cmp["metrics"]}
    # one pass a side: a change, no interval
    assert (cmp["a"], cmp["b"]) == ("tp32", "pd-1p1d") and rows["output_tps"]["verdict"] == "inconclusive (n=1)"
    assert _pd_pass(s)["kv_transfer_share"] > 0
    assert wait_no_processes(job) == []
    measure("DP2 vs 1P1D campaign (1 launch each, 40 prompts)", took, f"job {job}: "
            + ", ".join(f"{p['mode']} {p['verdict']} {p['output_tps']:.0f} tok/s TTFT {p['ttft_mean_s']:.2f} s"
                        for p in s["rows"]))


def test_pd_launch_proves_every_pair_and_collects_the_breakdown(dp2_vs_pd):
    _, run_dir, _ = dp2_vs_pd
    run = open_run(run_dir)
    ev = run.launch_layout(run.launch(2)).events.read_text()
    for needle in ("server_launch replica=0 role=prefill", "server_launch replica=1 role=decode",
                   "pd_role replica=0 role=prefill server_role=prefill page_size=1 kv_cache_dtype=bf16",
                   "pd_bootstrap replica=0 ok=1", "pd_canary prefill=0 decode=1 ok=1 http_prefill=200 http_decode=200",
                   "warmup_done replica=0 pair=0,1 ok=1", "warmup_done replica=1 pair=0,1 ok=1",
                   "pd_canary via=router ok=1"):
        assert needle in ev, needle
    order = [ev.index(x) for x in ("pd_role ", "pd_bootstrap ", "pd_canary prefill", "warmup_start", "router_launch",
                                   "pd_canary via=router", "bench_start")]
    assert order == sorted(order)
    # the pass's own record: roles, breakdown, transfer
    from slurm_ab.collect.campaign import collect
    cs = collect(run_dir)
    pd_pass = next(x for x in cs.passes if x.mode == "pd-1p1d")
    assert [(r.name, r.requests_served, r.warmup_seen) for r in pd_pass.replicas] == \
        [("prefill 0", 40, True), ("decode 0", 40, True)]
    b = pd_pass.pd.breakdown
    assert [s.key for s in b.chain] == ["prefill_bootstrap", "prefill_queue", "prefill_forward", "kv_transfer",
                                        "decode_waiting"]
    assert all(s.mean_ms is not None and s.count == 40 for s in b.chain), b.chain
    assert b.other_ms is not None and 0 <= b.other_ms < b.client_ttft_ms
    assert pd_pass.pd.transfer.requests == 40 and pd_pass.pd.transfer.mb_per_request > 0.5
    tp32 = next(x for x in cs.passes if x.mode == "tp32")
    assert tp32.pd is None and [r.name for r in tp32.replicas] == ["replica 0", "replica 1"]
    measure("1P1D TTFT breakdown (mean)", b.client_ttft_ms / 1000,
            ", ".join(f"{s.key} {s.mean_ms:.0f} ms" for s in b.chain) + f", other {b.other_ms:.0f} ms, "
            f"KV share {b.kv_share * 100:.1f} %")


def test_pd_dflash_acceptance_comes_from_the_decode(job):
    j = job("pd-dflash", NO_PREFLIGHT, mode="pd-1p1d-dflash")      # dp2_vs_pd's job runs the PD preflight
    assert j.finish(400) == 0, j.output()[-3000:]
    s = j.summary()
    assert (s["verdict"], s["bench"]["completed"], s["bench"]["total"]) == ("ok", 40, 40), s["reasons"]
    reps = {r["role"]: r for r in s["replicas"]}
    assert reps["prefill"]["accept_samples"] == 0 and reps["decode"]["accept_samples"] > 0
    assert s["accept"]["samples"] == reps["decode"]["accept_samples"] and s["accept"]["accept_len"] > 1
    sm = {r["replica"]: r for r in s["server_metrics"]["replicas"]}
    assert sm[0]["verify_calls"] == 0 and sm[1]["verify_calls"] > 0
    assert s["server_metrics"]["pooled"]["accept_len"] == pytest.approx(sm[1]["accept_len"])
    assert s["pd"]["breakdown"]["chain"][3]["key"] == "kv_transfer"
    text = j.output()
    assert "TTFT breakdown (mean" in text and "samples of the decode instances" in text
    j.assert_nothing_left()
    measure("1P1D + DFlash, job start to end", j.job_end() - j.events()[0][0], f"ok 40/40, accept len {s['accept']['accept_len']:.2f} over "
            f"{s['accept']['samples']} decode samples")


def _fault_job(job, name, *sets, nodes="decode", client=()):
    """A PD job with the emulator fault SETS on the prefill's or the decode's nodes."""
    from helpers.lanes import idle_nodes
    p, d = idle_nodes()
    first = p + d
    on = first[:4] if nodes == "prefill" else first[4:8] if nodes == "decode" else [first[0]]
    return job(name, NO_PREFLIGHT, *sets, f'server.env.SLURM_AB_EMU_FAULT_NODES="{",".join(on)}"',
               mode="pd-1p1d", client=client), on


def _first_reason(j) -> str:
    return j.summary()["reasons"][0]


def _took(j, start_event: str, **match) -> float:
    t, _ = j.event(start_event, **match)
    return j.job_end() - t


def test_transfer_engine_cannot_start(job):
    j, nodes = _fault_job(job, "pd-engine", 'server.env.SLURM_AB_EMU_FAULT="pd_engine_init_fail"')
    rc = j.finish(300)
    assert rc != 0
    s = j.summary()
    assert s["verdict"] == "failed"
    r = _first_reason(j)
    logs = "|".join(re.escape(Layout(j.run_dir).rel(j.launch().server_log(1, rank))) for rank in range(8))
    assert re.match(rf"decode 0 node rank \d \({'|'.join(nodes)}\): KV transfer engine failed to start: "
                    rf".*Mooncake Transfer Engine initialization failed\. \[({logs}):\d+\]", r), s["reasons"]
    j.assert_nothing_left()
    measure("PD: transfer engine init failure (decode)", _took(j, "server_launch", replica="1"), r)


def test_canary_names_the_pair_when_kv_never_arrives(job):
    j, nodes = _fault_job(job, "pd-canary", 'server.env.SLURM_AB_EMU_FAULT="pd_bootstrap_timeout"',
                          'pd.env.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT="5"',
                          'pd.env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT="5"')
    rc = j.finish(300)
    assert rc != 0
    s = j.summary()
    hosts = j.hosts()
    assert s["verdict"] == "failed"
    assert s["reasons"][0].startswith(f"the KV canary (2 tokens) between prefill 0 ({hosts[0][0]}) and decode 0 "
                                      f"({hosts[1][0]}) failed after "), s["reasons"]
    assert any("KV bootstrap timed out" in x or "the KV never arrived at the decode" in x for x in s["reasons"]), \
        s["reasons"]
    assert not j.launch().router_log.exists()                     # stopped before the router
    j.assert_nothing_left()
    measure("PD: KV canary fails (bootstrap/waiting timeout 5 s)", _took(j, "pd_canary_start"), s["reasons"][0])


def test_role_mismatch_is_caught_before_any_request(job):
    j, nodes = _fault_job(job, "pd-role", 'server.env.SLURM_AB_EMU_FAULT="pd_role=decode"', nodes="prefill")
    rc = j.finish(300)
    assert rc != 0
    r = _first_reason(j)
    assert r.startswith(f"prefill 0 ({j.hosts()[0][0]}) runs --disaggregation-mode decode, not prefill "
                        "(its /server_info): a role mismatch"), r
    j.assert_nothing_left()
    t, _ = j.event("ready", replica="0")
    measure("PD: role mismatch (prefill started as decode)", j.job_end() - t, r)


def test_decode_loses_its_prefill_mid_run(job):
    j, nodes = _fault_job(job, "pd-lost", 'server.env.SLURM_AB_EMU_FAULT="die_after_requests=12"',
                          "benchmark.num_prompts=16", nodes="prefill-head", client=CLIENT_052)
    rc = j.finish(400)
    assert rc != 0
    s = j.summary()
    # the crash first, on the prefill's head, whichever way the pass ended
    assert any(x.startswith(f"prefill 0 node rank 0 ({nodes[0]})") for x in s["reasons"][:3]), s["reasons"]
    assert any(x.startswith("benchmark interrupted") and "decode 0: " in x or re.fullmatch(r"only \d+/16 requests succeeded", x)
               for x in s["reasons"]), s["reasons"]
    exited = j.event("fail", kind="step_exited")
    if exited:
        # the job saw the prefill's step end during the pass (srun's --kill-on-bad-exit took its
        # other nodes down): the job failed; the pass cut short, or written when the client saw
        # its last requests fail before the teardown reached it (seen on 3 loaded lanes)
        assert s["verdict"] == "failed", s["reasons"]
        assert any(x.startswith(f"prefill 0 ({nodes[0]}") and "exited during pass" in x and "decode 0" in x
                   for x in s["reasons"]), s["reasons"]
        measure("PD: the decode loses its prefill mid-run (prefill head dies)", j.job_end() - exited[0], s["reasons"][0])
    else:
        # the client's last requests failed at once (503) and its pass ended before srun had ended
        # the prefill's step: the job completed, the run is invalid for the crash and the failures
        assert s["verdict"] == "invalid" and j.event("job_end", rc="0"), s["reasons"]
    j.assert_nothing_left()


def test_decode_kv_exhaustion_makes_the_run_invalid(job):
    j, nodes = _fault_job(job, "pd-kv", 'server.env.SLURM_AB_EMU_FAULT="kv_pool_tokens=33000"',
                          "benchmark.num_prompts=16", 'mode.roles.decode.args.num-reserved-decode-tokens=16',
                          client=CLIENT_052)
    rc = j.finish(400)
    assert rc == 1, j.output()[-3000:]              # completed, but not ok: submit --wait exits 1
    s = j.summary()
    assert s["verdict"] == "invalid", s["reasons"]
    hosts = ", ".join(j.hosts()[1])
    r = next(x for x in s["reasons"] if "KV pool full" in x)
    assert r.startswith(f"decode 0 ({hosts}): KV pool full: the decode retracted "), s["reasons"]
    j.assert_nothing_left()
    t, _ = j.event("bench_start")
    measure("PD: decode KV exhaustion (kv_pool_tokens=33000)", j.job_end() - t, r)


def test_a_slow_link_shows_as_kv_transfer_share_of_ttft(job, dp2_vs_pd):
    """tbf 8 Mbit/s on the prefill's head (its KV leaves the node there): the breakdown's KV-transfer
    share of TTFT grows, as on a slow fabric; the unlimited run is the campaign's 1P1D pass."""
    from slurm_ab_testbed.cluster import net

    _, run_dir, _ = dp2_vs_pd
    from slurm_ab.collect.campaign import collect
    base = next(x for x in collect(run_dir).passes if x.mode == "pd-1p1d").pd.breakdown
    j = job("pd-slow", NO_PREFLIGHT, "benchmark.num_prompts=16", mode="pd-1p1d", client=CLIENT_052)
    j.wait_event("router_ready", timeout_s=240)
    head = j.hosts()[0][0]
    net("rate", head, "8mbit")
    try:
        rc = j.finish(400)
    finally:
        net("rate", head, "off")
    assert rc in (0, 1), j.output()[-3000:]
    slow = j.summary()["pd"]["breakdown"]
    kv = {x["key"]: x for x in slow["chain"]}["kv_transfer"]
    # The unlimited transfer is host scheduling more than bytes: 33 ms alone, 151 ms on CI's loaded
    # host (beside 2 other cluster lanes and the unit tests), against 1,400-1,700 ms at 8 Mbit/s.
    assert kv["mean_ms"] > 5 * next(x.mean_ms for x in base.chain if x.key == "kv_transfer")
    # a share is at most 1: compare odds (0.11 -> 0.63 is 0.13 -> 1.70), and the slow link's transfer
    # must be a large part of TTFT
    odds = lambda share: share / (1 - share)                               # noqa: E731
    assert slow["kv_share"] > 0.4 and odds(slow["kv_share"]) > 2.5 * odds(base.kv_share), (slow["kv_share"], base.kv_share)
    measure("PD: 8 Mbit/s on the prefill's head, benchmark", j.summary()["bench"]["duration_s"],
            f"KV transfer {kv['mean_ms']:.0f} ms = {slow['kv_share'] * 100:.1f} % of TTFT "
            f"(unlimited: {next(x.mean_ms for x in base.chain if x.key == 'kv_transfer'):.0f} ms = "
            f"{base.kv_share * 100:.1f} %)")


def _requests_done(launch: Layout, kv: dict) -> float | None:
    """sglang:num_requests_total of one /metrics scrape the job recorded (None when it failed;
    its file named relative to the launch's directory)."""
    if kv.get("ok") != "1":
        return None
    text = (launch.root / kv["file"]).read_text(errors="replace")
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith("sglang:num_requests_total{"))


def test_transfers_that_hang_mid_run_fail_the_pass_by_the_stall_watchdog(job):
    """The prefill's KV transfer engine hangs once 15 requests finished there (its canary, warm-up
    and router canary, then 12 of the benchmark's): the later requests wait in the prefill's
    inflight queue and the decode's transfer queue, which SGLang 0.5.23 counts in neither
    num_running_reqs nor num_queue_reqs. The stall watchdog reads each role's own in-flight gauges
    (watchdog.role_inflight_metrics) and fails the pass within watchdog.stall_s (15 s on the local
    site) of the last finished request plus its scrape interval (metrics.interval_s = 2 s), naming
    the role instance and the queue; the decode's waiting timeout (120 s here) never comes into play."""
    j, nodes = _fault_job(job, "pd-hang", 'server.env.SLURM_AB_EMU_FAULT="pd_transfer_hang_after=15"',
                          'pd.env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT="120"', nodes="prefill", client=CLIENT_052)
    rc = j.finish(400)
    assert rc != 0, j.output()[-3000:]
    t_fail, f = j.event("fail")
    assert f["kind"] == "stalled" and f["role"] in ("prefill", "decode"), f
    g, stall_s, every = int(f["replica"]), 15, 2
    name = f"{f['role']} 0"
    queues = {"prefill": ("sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_inflight_queue_reqs"),
              "decode": ("sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs")}[f["role"]]
    held = dict(x.rsplit(":", 1) for x in f["held"].split(","))
    assert any(int(held.get(q, 0)) > 0 for q in queues), f        # a PD queue held requests
    # the job checks every `every` s; a loaded host stretches a check's curl calls by a second or two
    assert stall_s <= int(f["seconds"]) <= stall_s + 2 * every + 2, f
    # from the last scrape of that server before its final count (the hang began after it) to the stop
    scrapes = [(t, _requests_done(j.launch(), kv)) for t, k, kv in j.events()
               if k == "metrics_scrape" and kv.get("target") == f"r{g}n0" and t < t_fail]
    before = max(t for t, n in scrapes if n is not None and n < float(f["finished"]))
    took = t_fail - before
    # the final request finished up to a scrape interval after that scrape, the job's check saw it up
    # to a check interval later, then stall_s; each interval stretched by a loaded host's curl calls
    assert took <= stall_s + 2 * every + 6, took
    s = j.summary()
    assert s["verdict"] == "failed", s["reasons"]
    r = next(x for x in s["reasons"] if " stalled in pass " in x)
    head = j.hosts()[g][0]
    assert r.startswith(f"{name} (head {head}) stalled in pass "), r
    assert any(q in r for q in queues) and "(watchdog.stall_s)" in r, r
    j.assert_nothing_left()
    measure("PD: KV transfers hang mid-run (pd_transfer_hang_after=15)", took,
            f"stall verdict {took:.1f} s after the last scrape before the hang (stall_s {stall_s}, scrape "
            f"every {every} s; clock {f['seconds']} s): {r}")


# ---- issue 31: PD on a real fabric, and a campaign that runs out of time --------------------------

DP2_DECODE = ("mode.roles.decode.args.dp-size=2", "mode.roles.decode.args.enable-dp-attention=true")


def test_pd_on_a_real_fabric_and_a_campaign_out_of_time(job):
    """One PD campaign shows issue 31's fabric items and the block-boundary stop. pd-1p1d with a
    DP-attention decode (2 DP ranks), --launches 4 (blocks of 2 launches), --time 6 min with the
    job's own stop 30 s before it and Slurm's 60 s early warning kept back (270 s usable): every PD
    node advertises its own eth0 address (pd.host_ip_interface, read by the preflight), the preflight
    checks GPUDirect RDMA (the stand-in says peermem), both roles verify KV checksums (pd.kv_checksum,
    off by default), each launch
    proves the pair with one canary per decode DP rank, the breakdown's KV transfer is the one on
    TTFT's path. Each block is priced at 240 s by the time model (10 s load + 10 s teardown + 2 x 10 s
    + 80 s a pass, per launch; the pass limit is 3 x 100 s, as the client's start-up under load
    needs): block 1 starts when the job reaches it within 30 s (the preflight
    without imports: 3-10 s), block 2 is not started once block 1 and the preflight took more than
    30 s (two PD launches alone take more): launches 3 and 4 'skipped (time)'."""
    import socket

    from helpers import NO_IMPORT

    j = job("pd-fabric", NO_IMPORT, 'pd.host_ip_interface="eth0"', "pd.kv_checksum=true", *DP2_DECODE, "benchmark.num_prompts=16",
            "benchmark.output_len=128", "cluster.signal_before_limit_s=30", "estimate.model_load_s=10",
            "estimate.warmup_s=0", "estimate.request_s=10", "estimate.pass_overhead_s=80", "estimate.margin=0",
            "estimate.from_results=false", "estimate.enforce=false", mode="pd-1p1d", client=CLIENT_052,
            extra=("--launches", "4", "--repeats", "1", "--time", "00:06:00"))
    # every emulator process of both roles runs with its own node's eth0 address as SGLANG_HOST_IP
    procs = j.wait_for(lambda: (lambda ps: ps if len(ps) >= 8 else None)(
        [p for p in j.find("slurm_ab_testbed.emulator") if p.envvar("SGLANG_HOST_IP")]), 240, "8 PD servers")
    for p in procs:
        node = p.envvar("SLURMD_NODENAME")
        assert p.envvar("SGLANG_HOST_IP") == socket.gethostbyname(node), (node, p.envvar("SGLANG_HOST_IP"))
    rc = j.finish(500)
    assert rc == 0, j.output()[-4000:]
    s = json.loads(Layout(j.run_dir).summary("json").read_text())      # the job's whole record
    assert [la["status"] for la in s["launches"]] == ["ok", "ok", "skipped (time)", "skipped (time)"], s["launches"]
    stop = s["stop"]
    assert (stop["reason"], stop["block"], stop["blocks"], stop["launches_run"]) == ("time", 2, 2, 2)
    assert stop["need_s"] >= 240 and stop["left_s"] < stop["need_s"], stop
    assert stop["design"] == "launches 1-2 of 4 (1 of 2 block(s)): pd-1p1d 2 launch(es)"
    first, second = j.event("time_check", block="1")[1], j.event("time_check", block="2")[1]
    assert int(first["left_s"]) >= 240 > int(second["left_s"])
    assert not j.event("fail", kind="time_limit")            # stopped by itself, long before USR1
    assert [p["verdict"] for p in s["passes"]] == ["ok", "ok"], [p.get("reason") for p in s["passes"]]
    for d in ("launch1-pd-1p1d", "launch2-pd-1p1d"):
        ev = (j.run_dir / d / "events.log").read_text()
        assert ev.count(" pd_canary prefill=0 decode=1 prefill_dp=0 decode_dp=") == 2 and " ok=0 " not in ev
        assert "decode_dp=0 ok=1" in ev and "decode_dp=1 ok=1" in ev
        ips = dict(x.split("=") for x in re.search(r" pd_host_ip replica=1 interface=eth0 ips=(\S+)", ev)[1].split(","))
        assert ips == {n: socket.gethostbyname(n) for n in ips} and len(ips) == 4
        assert "disaggregation_enable_kv_checksum=True" in (j.run_dir / d / "logs" / "server-r1-n0.log").read_text()
    assert "PF_PD_GPUDIRECT=(python3 -m slurm_ab_testbed.fake_gpudirect)" in (j.run_dir / "job.sbatch").read_text()
    from slurm_ab.collect.campaign import collect
    p = collect(j.run_dir).passes[0]
    kv = next(x for x in p.pd.breakdown.chain if x.key == "kv_transfer")
    assert "TTFT's path" in kv.label and kv.mean_ms is not None and kv.count == 16
    t = p.pd.transfer
    assert t.latency_label.startswith("the prefill's transfer-queue entry") and t.mb_per_request > 100   # real bytes
    j.assert_nothing_left()
    measure("PD fabric campaign, stopped before block 2 (time)", j.job_end() - j.events()[0][0],
            f"{stop['design']}; block 2 needed {stop['need_s']} s, {stop['left_s']} s left; KV on TTFT's path "
            f"{kv.mean_ms:.1f} ms vs the prefill's kv_transfer_latency_ms {t.latency_ms:.1f} ms")


def test_a_dp_rank_whose_nodes_cannot_move_kv_fails_its_own_canary(job):
    """The decode's third node (DP rank 1's) has no GPUDirect RDMA (SLURM_AB_EMU_GPUDIRECT=none: Mooncake
    cannot register its GPU memory, SGLang starts anyway). Requests of DP rank 0 still work, so one
    canary per pair would pass; the canary of decode DP rank 1 fails, naming the pair and the ranks,
    before the warm-ups (no preflight here: it would have named the node first)."""
    from helpers.lanes import idle_nodes
    p, d = idle_nodes()
    bad = d[2]
    j = job("pd-dp1", NO_PREFLIGHT, *DP2_DECODE, 'server.env.SLURM_AB_EMU_GPUDIRECT="none"',
            f'server.env.SLURM_AB_EMU_FAULT_NODES="{bad}"', mode="pd-1p1d", client=CLIENT_052)
    rc = j.finish(300)
    assert rc != 0
    assert j.event("pd_canary", decode_dp="0", ok="1"), j.events()
    s = j.summary()
    hosts = j.hosts()
    assert hosts[1][2] == bad
    r = s["reasons"][0]
    assert r.startswith(f"the KV canary (2 tokens) between prefill 0 ({hosts[0][0]}) and decode 0 ({hosts[1][0]}), "
                        "prefill DP rank 0 and decode DP rank 1 failed after "), s["reasons"]
    assert any("GPU memory not registered for RDMA" in x and "server-r1-n2.log" in x for x in s["reasons"]), s["reasons"]
    assert not (j.run_dir / "logs" / "router.log").exists()
    j.assert_nothing_left()
    measure("PD: decode DP rank 1's node without GPUDirect (its canary)", _took(j, "pd_canary_start"), r)


def test_the_preflight_names_a_node_without_gpudirect(job):
    """GPUDirect RDMA missing on one decode node: the preflight (GPUDirect check of an RDMA backend)
    names the node before any model loads."""
    from helpers import NO_IMPORT
    from helpers.lanes import idle_nodes
    p, d = idle_nodes()
    bad = d[1]
    j = job("pd-gdr", NO_IMPORT, 'server.env.SLURM_AB_EMU_GPUDIRECT="none"',
            f'server.env.SLURM_AB_EMU_FAULT_NODES="{bad}"', mode="pd-1p1d", client=CLIENT_052)
    rc = j.finish(300)
    assert rc != 0
    r = _first_reason(j)
    assert r == (f"preflight: {bad} (replica 1 node rank 1): no GPUDirect RDMA: nvidia_peermem is not loaded and "
                 "dma-buf is no: the RDMA transfer engine cannot register GPU memory, every KV transfer from or to "
                 "this node would fail (load nvidia_peermem, or a driver and kernel with dma-buf)"), j.summary()["reasons"]
    assert not j.event("server_launch")
    j.assert_nothing_left()
    measure("PD: no GPUDirect RDMA on a node (preflight)", j.job_end() - j.events()[0][0], r)


def test_random_transfer_failures_fail_the_pass(job):
    """A flaky fabric (pd_transfer_fail_prob=0.2 on the prefill, seeded: the canary, the warm-up and the
    router canary pass, the benchmark's first transfer fails, on the share bound for one of the decode's
    nodes): Mooncake's prefill logs 'Session ... failed.' and 'Failed to send kv chunk of R to HOST:PORT',
    tells the decode ('Failed to get kvcache from prefill instance, it might be dead'), and blacklists
    that decode session until its probe (SGLANG_FAILED_SESSION_PROBE_INTERVAL_S, 30 s): every later
    transfer fails at once ('Decode instance could be dead, remote mooncake session ... is not alive'),
    so one flaky transfer fails the pass, named on both roles."""
    j, nodes = _fault_job(job, "pd-flaky", 'server.env.SLURM_AB_EMU_FAULT="pd_transfer_fail_prob=0.2"',
                          'server.env.SLURM_AB_EMU_SEED="23"', "benchmark.num_prompts=16", nodes="prefill",
                          client=CLIENT_052)
    rc = j.finish(400)
    assert rc != 0, j.output()[-3000:]
    s = j.summary()
    assert s["verdict"] == "failed", s["reasons"]
    assert j.event("bench_start") and j.event("pd_canary", via="router", ok="1")
    r = s["reasons"][0]
    assert re.match(rf"prefill 0 node rank 0 \({nodes[0]}\): KV transfer failed: .*Failed to send kv chunk of (\d+) "
                    r"to [\d.]+:\d+ \[launch1-pd-1p1d/logs/server-r0-n0\.log:\d+\]$", r), s["reasons"]
    assert any(x.startswith("decode 0 node rank 0 (") and "Failed to get kvcache from prefill instance" in x
               for x in s["reasons"]), s["reasons"]
    log = j.launch().server_log(0, 0).read_text()
    assert re.search(r"Session \S+:\d+ failed\.", log) and "remote mooncake session" in log
    j.assert_nothing_left()
    measure("PD: flaky KV transfers (pd_transfer_fail_prob=0.2)", _took(j, "bench_start"), r)
