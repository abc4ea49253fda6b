"""The emulator's /metrics on every node, as SGLang 0.5.23 serves them: node rank >= 1 answers with
its own schedulers' series on the server port (PP stages with pp_rank, DP-attention ranks with
dp_rank), node rank 0 adds the tokenizer and HTTP families, and with PP each report counts the
micro-batch just processed (scheduler_pp_mixin.event_loop_pp, report_decode_stats(running_batch=
batch)) while the HTTP in-flight gauge counts the replica's open requests."""
from __future__ import annotations

import json
import threading
import time
import urllib.request

from slurm_ab.collect.gauges import by_stage, in_flight, label_set
from slurm_ab.parse.prometheus import parse_scrape
from slurm_ab_testbed.emulator.build import build_core, plan_replica
from slurm_ab_testbed.emulator.cli_args import parse
from slurm_ab_testbed.emulator.costs import load_costs
from slurm_ab_testbed.emulator.metrics import HttpMetrics, MetricsState, render
from slurm_ab_testbed.emulator.scheduler import Req
from slurm_ab_testbed.emulator.topology import Topology
from slurm_ab_testbed.testing import http_get, wait_healthy
from test_emulator_multinode import replica

RUNNING = "sglang:num_running_reqs"


def core_for(*flags: str, interval: int = 4, nnodes: int = 1):
    argv = ["--model-path", "m", "--ep-size", "4", "--nnodes", str(nnodes), "--dist-init-addr", "127.0.0.1:1",
            "--decode-log-interval", str(interval), "--max-running-requests", "32", *flags]
    rep = plan_replica(parse(argv).args, load_costs(), 8, "0.5.23")
    lines: list[str] = []
    return build_core(rep, lambda rng, n: [7] * n, lines.append, 1), lines


def run(core, reqs, until=None):
    now = 0.0
    for r in reqs:
        core.add(r, now)
    reports = []
    while not all(r.finished for r in reqs):
        fwd = core.plan(now)
        now += fwd.duration
        core.complete(fwd, now)
        running = len(core.running)
        if running and core.metrics.gauges.get("num_running_reqs") is not None:
            reports.append((running, core.metrics.gauges["num_running_reqs"]))
    return reports


def test_pp_reports_count_one_micro_batch_not_the_replica():
    core, lines = core_for("--tp-size", "4", "--pp-size", "8", nnodes=4)
    assert core.cfg.pp_micro_batches == 8
    reports = run(core, [Req(f"r{i}", 512, 200) for i in range(4)])
    # 4 requests spread over 8 micro-batches: each report says 1, never the 4 running
    assert reports and max(g for _, g in reports) == 1 and max(r for r, _ in reports) == 4
    decode = [ln for ln in lines if ln.startswith("Decode batch")]
    assert decode and all("#running-req: 1," in ln for ln in decode)


def test_without_pp_the_report_is_the_whole_batch():
    core, lines = core_for("--tp-size", "8")
    assert core.cfg.pp_micro_batches == 1
    reports = run(core, [Req(f"r{i}", 512, 200) for i in range(4)])
    assert any(g == 4 for _, g in reports)
    assert all(g == r for r, g in reports[-3:])


def test_each_node_renders_its_own_schedulers():
    topo = Topology(tp=4, pp=8, ep=4, dp=1, dp_attention=False, nnodes=4, gpus_per_node=8)
    st = MetricsState(gauges={"num_running_reqs": 1, "token_usage": 0.4})
    g1 = topo.metric_groups(1)
    text = render(st, "m", list(g1.stages), tokenizer=False, **g1.kwargs())
    sc = parse_scrape(text)
    assert by_stage([sc], RUNNING) == {2: 1.0, 3: 1.0}
    assert "sglang:generation_tokens_total" not in text and "e2e_request" not in text
    # every scheduler on the node pre-creates its time-accounting counters
    assert sc.label_values("tp_rank", ["sglang:scheduler_idle_seconds_total"]) == {"0", "1", "2", "3"}
    # tp32 without PP: node 1 has no stats-logging scheduler, only those counters
    flat = Topology(tp=32, pp=1, ep=4, dp=1, dp_attention=False, nnodes=4, gpus_per_node=8).metric_groups(1)
    assert flat.stages == ()
    sc = parse_scrape(render(st, "m", [], tokenizer=False, **flat.kwargs()))
    assert RUNNING not in sc and sc.label_values("tp_rank") == {str(t) for t in range(8, 16)}


def test_dp_attention_ranks_report_their_share_under_dp_rank():
    topo = Topology(tp=32, pp=1, ep=4, dp=4, dp_attention=True, nnodes=4, gpus_per_node=8)
    st = MetricsState(gauges={"num_running_reqs": 7, "num_queue_reqs": 2})
    texts = []
    for n in range(4):
        g = topo.metric_groups(n)
        assert g.dps == (n,)
        texts.append(parse_scrape(render(st, "m", list(g.stages), tokenizer=n == 0, **g.kwargs())))
    assert set.union(*(label_set([t], "dp_rank") for t in texts)) == {0, 1, 2, 3}
    assert sum(t.total(RUNNING) for t in texts) == 7 and sum(t.total("sglang:num_queue_reqs") for t in texts) == 2
    assert texts[1].label_values("tp_rank", [RUNNING]) == {"8"}


def test_http_in_flight_counts_open_requests():
    h = HttpMetrics()
    h.begin("/generate", "POST")
    h.begin("/generate", "POST")
    h.end("/generate", "POST", 200)
    h.begin("/metrics", "GET")
    sc = parse_scrape(render(MetricsState(), "m", [0], http=h))
    assert in_flight(sc) == 1                  # the scrape's own GET is not counted
    assert sc.total("sglang:http_requests_total", lambda s: s.label("method") == "POST") == 2
    assert sc.total("sglang:http_responses_total") == 1


def test_two_node_pp_replica_serves_every_stage_and_in_flight(procs, model_dir):
    (n0, n1), url, port = replica(procs, model_dir, layout=("--tp-size", "4", "--pp-size", "4"),
                                  hosts=["127.0.0.1", "127.0.0.2"],
                                  extra=("--enable-metrics", "--decode-log-interval", "5"))
    assert wait_healthy(url, 30), n0.text() + n1.text()
    done = []

    def one():
        body = {"input_ids": [5] * 2000, "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True},
                "stream": True}
        req = urllib.request.Request(url + "/generate", json.dumps(body).encode())
        done.append(len(urllib.request.urlopen(req, timeout=60).read()))
    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    t0 = time.time()
    time.sleep(1.0)
    head = parse_scrape(http_get(url + "/metrics")[1].decode())
    code, body = http_get(f"http://127.0.0.2:{port}/metrics")
    for t in threads:
        t.join(60)
    assert code == 200 and len(done) == 3 and time.time() - t0 > 1.5
    other = parse_scrape(body.decode())
    assert in_flight(head) == 3
    assert label_set([head], "pp_rank") == {0, 1} and label_set([other], "pp_rank") == {2, 3}
    assert "sglang:generation_tokens_total" not in other.samples
    # each stage reports a micro-batch (1 of the 3 running requests), and its KV usage
    assert max(by_stage([head, other], RUNNING).values()) <= 2
    assert other.total("sglang:token_usage") > 0
    assert http_get(f"http://127.0.0.2:{port}/health")[0] == 200


def test_dummy_server_without_metrics_answers_404():
    from slurm_ab_testbed.emulator.http_api import DummyServer, serve
    srv = DummyServer(("127.0.0.1", 0), None)
    serve(srv)
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        assert http_get(base + "/metrics")[0] == 404 and http_get(base + "/ping")[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()


def test_idle_server_publishes_its_idle_gauges():
    """SGLang refreshes a running-requests gauge that disagrees with the (empty) running batch
    once the scheduler is fully idle (metrics_reporter._maybe_log_idle_metrics): after a run the
    gauge reads 0, not the last batch's size."""
    core, _ = core_for("--tp-size", "8")
    run(core, [Req(f"r{i}", 512, 200) for i in range(4)])
    assert core.metrics.gauges["num_running_reqs"] > 0          # the last report's, stale
    core.note_idle()
    assert core.metrics.gauges["num_running_reqs"] == 0 and core.metrics.gauges["gen_throughput"] == 0
