"""The emulator's /metrics: SGLang 0.5.23's exact families, fed by the scheduler that writes the
decode logs, so counter-based and log-based acceptance agree under steady batches and disagree
(token-weighted vs unweighted mean of intervals) when batch sizes vary strongly."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from slurm_ab.collect.server_metrics import agreement_check, gauge
from slurm_ab.parse.prometheus import parse_scrape
from slurm_ab_testbed.emulator.build import build_core, plan_replica
from slurm_ab_testbed.emulator.cli_args import parse
from slurm_ab_testbed.emulator.costs import load_costs
from slurm_ab_testbed.emulator.metrics import MetricsState, render
from slurm_ab_testbed.emulator.scheduler import Req
from slurm_ab_testbed.testing import SPEC, free_ports, http_get, wait_healthy

DATA = Path(__file__).parent / "data" / "sglang-0.5.23-metrics"


def shape(text: str) -> dict:
    """Per family: type, HELP and the label keys and non-identity label values of each sample."""
    from prometheus_client.parser import text_string_to_metric_families
    ident = {"model_name", "pid"}
    out = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = (fam.type, fam.documentation, sorted(
            (s.name, tuple(sorted((k, "*" if k in ident else v) for k, v in s.labels.items())))
            for s in fam.samples))
    return out


def test_fresh_server_renders_like_real_start_prom():
    text = render(MetricsState(), "/shared/models/Kimi-K3", [0])
    assert shape(text) == shape((DATA / "start.prom").read_text())


def test_after_requests_renders_like_real_end_prom():
    st = MetricsState()
    for _ in range(20):
        st.on_finish(True, 16384, 512, 136, 58.4, 0.098)
    text = render(st, "/shared/models/Kimi-K3", [0])
    assert shape(text) == shape((DATA / "end.prom").read_text())
    sc = parse_scrape(text)
    assert sc.total("sglang:generation_tokens_total") == 10240
    assert sc.total("sglang:spec_verify_calls_total") == 2720
    assert sc.total("sglang:e2e_request_latency_seconds_count") == 20


def test_pp_stages_on_node_zero_each_report():
    text = render(MetricsState(gauges={"num_running_reqs": 4}), "m", [0, 1])
    sc = parse_scrape(text)
    assert sc.label_values("pp_rank", ["sglang:num_running_reqs"]) == {"0", "1"}
    assert gauge(sc, "sglang:num_running_reqs") == 4      # stages are not double-counted


# ---- the same scheduler feeds the decode log and /metrics ---------------------------------------

def core_for(interval: int = 10):
    argv = ["--model-path", "m", "--tp-size", "8", "--ep-size", "4", "--nnodes", "1",
            "--dist-init-addr", "127.0.0.1:1", "--decode-log-interval", str(interval),
            "--max-running-requests", "32", *SPEC]
    rep = plan_replica(parse(argv).args, load_costs(), 8, "0.5.23")
    lines: list[str] = []
    core = build_core(rep, lambda rng, n: [7] * n, lines.append, 1)
    return core, lines


def drive(core, phases):
    """phases: lists of (output_len, accept_mean) sent together; each phase runs to completion."""
    now, n = 0.0, 0
    for phase in phases:
        reqs = []
        for out_len, mean in phase:
            n += 1
            r = Req(f"r{n}", 1024, out_len)
            core.add(r, now)
            if mean is not None:
                r.accept_mean = mean
            reqs.append(r)
        while not all(r.finished for r in reqs):
            fwd = core.plan(now)
            now += fwd.duration
            core.complete(fwd, now)


def both(core, lines):
    acc = [float(ln.split("accept len: ")[1].split(",")[0]) for ln in lines if "accept len" in ln]
    sc = parse_scrape(render(core.metrics, "m", [0]))
    counters = sc.total("sglang:generation_tokens_total") / sc.total("sglang:spec_verify_calls_total")
    return sum(acc) / len(acc), counters, len(acc)


def test_steady_batches_agree():
    core, lines = core_for()
    drive(core, [[(512, 3.76)] * 8])
    log, counters, n = both(core, lines)
    assert n >= 10
    assert abs(counters / log - 1) < 0.02
    assert agreement_check("r0", counters, log, n, None) is None
    assert core.metrics.gauges["spec_accept_length"] == pytest.approx(
        float(lines[-1].split("accept len: ")[1].split(",")[0]), abs=0.005)


def test_strongly_varying_batches_disagree():
    # a long request alone at low acceptance, then a wide burst at high acceptance: the burst
    # holds most tokens, the lone request most decode-log intervals.
    core, lines = core_for()
    drive(core, [[(2000, 1.5)], [(300, 6.0)] * 24])
    log, counters, n = both(core, lines)
    assert counters > log * 1.2
    msg = agreement_check("replica 0", counters, log, n, None)
    assert msg and f"{counters:.3f}" in msg and f"{log:.3f}" in msg


# ---- over HTTP -----------------------------------------------------------------------------------

def test_server_metrics_endpoint_counts_what_it_served(procs, model_dir):
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--ep-size", "4", "--port", str(port),
                     "--enable-metrics", "--decode-log-interval", "5", *SPEC], "node",
                    {"SLURM_AB_EMU_TIME_SCALE": "0.005"})
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url), p.text()
    before = parse_scrape(http_get(url + "/metrics")[1].decode())
    body = {"input_ids": [5] * 300, "sampling_params": {"max_new_tokens": 64, "ignore_eos": True},
            "stream": False}
    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    meta = json.loads(urllib.request.urlopen(req, timeout=60).read())["meta_info"]
    after = parse_scrape(http_get(url + "/metrics")[1].decode())

    def delta(name, where=None):
        return (after.total(name, where) or 0) - (before.total(name, where) or 0)
    non_stream = (lambda s: s.label("is_streaming") == "false")
    assert delta("sglang:generation_tokens_total", non_stream) == meta["completion_tokens"] == 64
    assert delta("sglang:num_requests_total", non_stream) == 1
    assert delta("sglang:spec_verify_calls_total") == meta["spec_verify_ct"] > 0
    assert after.types["sglang:num_running_reqs"] == "gauge"
