"""The emulator's prefill/decode disaggregation behind the real sglang-router 0.3.2 in PD mode.

Each server is an emulator process on its own loopback address (127.0.0.2 prefill, 127.0.0.3
decode: the router's bootstrap_host is the prefill's host, as across nodes), the router is
``sglang_router.launch_router --pd-disaggregation``. SGLang 0.5.23 is the reference for every
flag, log line, metric and message asserted here (research note pd-disaggregation.md and the
0.5.23 source files named in slurm_ab_testbed/emulator/pd*.py).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from helpers.clients import client_cmd
from slurm_ab_testbed.emulator.cli_args import ServerArgsError, parse
from slurm_ab_testbed.emulator.logfmt import (DecodePD, DecodeStats, PrefillPD, PrefillStats, decode_line,
                                              prefill_line)
from slurm_ab_testbed.emulator.pd_args import resolve_pd
from slurm_ab_testbed.testing import DECODE_RE, PREFILL_RE, PREFIX, SPEC, free_ports, http_get, wait_healthy

P_HOST, D_HOST = "127.0.0.2", "127.0.0.3"
PD_METRIC = re.compile(r'^(sglang:[a-z_]+?)(_sum|_count|_bucket)?\{([^}]*)\} ([0-9.e+-]+|NaN)$')


# ---- helpers -------------------------------------------------------------------------------------

def server(procs, model_dir, role, name=None, extra=(), env=None, host=None, bootstrap_port=None):
    """One single-node PD server (TP8 on 8 emulated GPUs) on its own loopback address."""
    host = host or (P_HOST if role == "prefill" else D_HOST)
    port, = free_ports(1)
    argv = ["--model-path", model_dir, "--tp-size", "8", "--host", host, "--port", str(port),
            "--disaggregation-mode", role, "--enable-metrics", "--decode-log-interval", "5", *extra]
    if bootstrap_port:
        argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    p = procs.start(argv, name or role, {"SGLANG_HOST_IP": host, "SLURM_AB_EMU_TIME_SCALE": "0.002", **(env or {})})
    return p, f"http://{host}:{port}"


def pair(procs, model_dir, p_extra=(), d_extra=(), p_env=None, d_env=None):
    bport, = free_ports(1)
    p, purl = server(procs, model_dir, "prefill", extra=p_extra, env=p_env, bootstrap_port=bport)
    d, durl = server(procs, model_dir, "decode", extra=d_extra, env=d_env, bootstrap_port=bport)
    assert wait_healthy(purl, 30), p.text()
    assert wait_healthy(durl, 30), d.text()
    return (p, purl, bport), (d, durl)


def router(procs, prefill_url, bport, decode_url, name="router"):
    rport, mport = free_ports(2)
    procs.start([sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
                 "--prefill", prefill_url, str(bport), "--decode", decode_url,
                 "--prefill-policy", "round_robin", "--decode-policy", "round_robin",
                 "--host", "127.0.0.1", "--port", str(rport), "--prometheus-port", str(mport),
                 "--worker-startup-check-interval", "1"], name, module=False)
    url = f"http://127.0.0.1:{rport}"
    deadline, body = time.time() + 60, {}
    while time.time() < deadline:
        code, raw = http_get(url + "/readiness")
        if code == 200 and (body := json.loads(raw)).get("healthy_workers") == 2:
            return url, body
        time.sleep(0.1)
    raise AssertionError(f"PD router not ready: {body}")


def post(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def stream(url, body, timeout=60):
    """(seconds to the first data chunk, the chunks' JSON)."""
    t0, first, chunks = time.monotonic(), None, []
    with post(url, dict(body, stream=True), timeout) as r:
        for line in r:
            if line.startswith(b"data: {"):
                first = first if first is not None else time.monotonic() - t0
                chunks.append(json.loads(line[6:]))
    return first, chunks


def gen(n_in, n_out, **kw):
    return {"input_ids": [7] * n_in, "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True}, **kw}


def metrics(url) -> dict:
    """{(name, suffix, frozenset(labels)): value} of a /metrics body."""
    out = {}
    for line in http_get(url + "/metrics")[1].decode().splitlines():
        m = PD_METRIC.match(line)
        if m:
            labels = frozenset(kv.split("=", 1)[0] + "=" + kv.split("=", 1)[1].strip('"')
                               for kv in m[3].split(",") if kv)
            out[(m[1], m[2] or "", labels)] = float(m[4])
    return out


def value(ms: dict, name: str, suffix: str = "", **labels) -> float:
    want = {f"{k}={v}" for k, v in labels.items()}
    found = [v for (n, s, lab), v in ms.items() if n == name and s == suffix and want <= lab]
    return sum(found) if found else 0.0


def start_all(calls):
    """Start the callables at once; returns join(timeout) -> their results in order (None: still running)."""
    out = [None] * len(calls)
    threads = [threading.Thread(target=lambda i=i, f=f: out.__setitem__(i, f()), daemon=True)
               for i, f in enumerate(calls)]
    for t in threads:
        t.start()

    def join(timeout=60) -> list:
        for t in threads:
            t.join(timeout)
        return out
    return join


def in_parallel(calls, timeout=60) -> list:
    return start_all(calls)(timeout)


def dual_dispatch(purl, durl, body):
    """The same request to a prefill and a decode at once, as the PD router sends it (without its
    retries); returns join(timeout) -> [(prefill status, text), (decode status, text)]."""
    return start_all([lambda: failed_request(purl + "/generate", body),
                      lambda: failed_request(durl + "/generate", body)])


def lines(proc, needle):
    return [line for line in proc.text().splitlines() if needle in line]


# ---- a generation through the PD router ----------------------------------------------------------

def test_generation_through_the_pd_router(procs, model_dir):
    (p, purl, bport), (d, durl) = pair(procs, model_dir)
    rurl, ready = router(procs, purl, bport, durl)
    assert ready == {"status": "ready", "healthy_workers": 2, "total_workers": 2}
    workers = {w["worker_type"]: w for w in json.loads(http_get(rurl + "/workers")[1])["workers"]}
    assert workers["prefill"]["bootstrap_port"] == bport and workers["prefill"]["url"] == purl
    assert {w["metadata"]["disaggregation_mode"] for w in workers.values()} == {"prefill", "decode"}

    first, chunks = stream(rurl + "/generate", gen(3000, 40))
    metas = [c["meta_info"] for c in chunks]
    assert [m["completion_tokens"] for m in metas] == list(range(1, 41))
    assert metas[-1]["finish_reason"] == {"type": "length", "length": 40} and metas[0]["prompt_tokens"] == 3000
    r = json.loads(post(rurl + "/generate", gen(500, 12)).read())
    assert r["meta_info"]["completion_tokens"] == 12 == len(r["output_ids"])
    comp = json.loads(post(rurl + "/v1/completions", {"model": "m", "prompt": "w1 w2 w3", "max_tokens": 6}).read())
    assert comp["usage"]["completion_tokens"] == 6 and comp["usage"]["prompt_tokens"] == 3
    chat = json.loads(post(rurl + "/v1/chat/completions", {"model": "m", "max_tokens": 4,
                                                           "messages": [{"role": "user", "content": "w5"}]}).read())
    assert chat["usage"]["completion_tokens"] == 4

    # the prefill computed each prompt once, generated one token each and never decoded
    plog, dlog = p.text(), d.text()
    assert "CommonKVBootstrapServer started successfully on 127.0.0.2:%d" % bport in plog
    assert "Start of pd disaggregation warmup ..." in plog and "End of disaggregation warmup" in dlog
    assert "Radix cache is disabled for decode server" in dlog
    assert "Decode batch" not in plog and "Prefill batch" not in dlog
    prefill = [m for m in map(PREFILL_RE.search, plog.splitlines()) if m]
    # computed + prefix-cache hits (the radix cache is on: the 500 x [7] prompt finds 499 of its tokens)
    assert [int(m["new_token"]) + int(m["cached_token"]) for m in prefill
            if int(m["new_token"]) + int(m["cached_token"]) > 100] == [3000, 500]
    for line in lines(p, "Prefill batch"):
        assert PREFIX.match(line)["ranks"] == " TP0"
        assert re.search(r"#pending-token: \d+, #bootstrap-req: \d+, #inflight-req: \d+, #optimistic-req: 0, "
                         r"cuda graph: False, input throughput \(token/s\): [\d.]+$", line)
    decode = [(line, DECODE_RE.search(line)) for line in lines(d, "Decode batch")]
    assert decode and all(m and PREFIX.match(line) for line, m in decode)
    assert all(re.search(r"token usage: [\d.]+, pre-allocated usage: [\d.]+, #prealloc-req: \d+, #transfer-req: \d+, "
                         r"#retracted-req: 0, cuda graph: True", line) for line, _ in decode)

    # metrics: the transfer on the prefill, the queues on both, engine_type on every series
    pm, dm = metrics(purl), metrics(durl)
    assert value(pm, "sglang:kv_transfer_total_mb", "_count") == 4          # 3000, 500, 3 and chat prompt
    assert value(pm, "sglang:kv_transfer_latency_ms", "_count") == 4
    assert value(pm, "sglang:kv_transfer_latency_ms", "_sum") > 0
    assert value(dm, "sglang:kv_transfer_latency_ms", "_count") == 0         # observed on the prefill only
    for stage in ("prefill_bootstrap", "prefill_forward", "prefill_transfer_kv_cache"):
        assert value(pm, "sglang:per_stage_req_latency_seconds", "_count", stage=stage) >= 4, stage
    for stage in ("decode_bootstrap", "decode_transferred", "decode_waiting"):
        assert value(dm, "sglang:per_stage_req_latency_seconds", "_count", stage=stage) >= 4, stage
    # one queue-time sample per request on each side (the warm-up's included)
    assert value(pm, "sglang:queue_time_seconds", "_count") == value(pm, "sglang:per_stage_req_latency_seconds",
                                                                      "_count", stage="prefill_forward")
    assert value(dm, "sglang:queue_time_seconds", "_count") == value(dm, "sglang:per_stage_req_latency_seconds",
                                                                      "_count", stage="decode_waiting")
    assert value(dm, "sglang:queue_time_seconds", "_bucket", le="+Inf") == value(dm, "sglang:queue_time_seconds",
                                                                                  "_count")
    assert value(dm, "sglang:num_requests_total", is_streaming="true") == 1
    for ms, role in ((pm, "prefill"), (dm, "decode")):
        assert {x for (_, _, lab) in ms for x in lab if x.startswith("engine_type=")} == {f"engine_type={role}"}
    assert value(pm, "sglang:num_bootstrap_failed_reqs_total") == 0
    assert value(dm, "sglang:num_transfer_failed_reqs_total") == 0


def test_bench_serving_through_the_pd_router(procs, model_dir, tmp_path):
    """The real client (sglang.bench_serving 0.5.2) against the PD router: every request succeeds
    with its token counts and the prefill prefilled each prompt once. Backend vllm (/v1/completions):
    with the sglang backend the client dies after the run on router 0.3.2's own /get_server_info
    summary (KeyError 'internal_states'), in PD mode as in regular mode (test_emulator_bench)."""
    (p, purl, bport), (d, durl) = pair(procs, model_dir)
    rurl, _ = router(procs, purl, bport, durl)
    out = tmp_path / "b.jsonl"
    prefix, env = client_cmd(old=True)
    r = subprocess.run([*prefix, "--backend", "vllm", "--base-url", rurl,
                        "--dataset-name", "random-ids", "--random-input-len", "2048", "--random-output-len", "32",
                        "--random-range-ratio", "1.0", "--num-prompts", "8", "--max-concurrency", "4",
                        "--tokenizer", model_dir, "--output-file", str(out), "--output-details", "--disable-tqdm"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert re.search(r"^Successful requests:\s+8\s*$", r.stdout, re.M), r.stdout[-2000:] + r.stderr[-2000:]
    rec = json.loads(out.read_text().splitlines()[-1])
    assert rec["completed"] == 8 and rec["total_output_tokens"] == 256 and rec["errors"] == [""] * 8
    assert [len(x) for x in rec["itls"]] == [31] * 8
    prefill = [int(m["new_token"]) + int(m["cached_token"]) for m in map(PREFILL_RE.search, p.text().splitlines()) if m]
    assert sum(t for t in prefill if t >= 100) == 9 * 2048                # 8 + bench's own warm-up (computed or cached)


# ---- failure modes, as SGLang 0.5.23 reports them ------------------------------------------------

def failed_request(url, body, timeout=60):
    """(HTTP status, text) of a request that should fail; a stream's error chunk counts as its text."""
    try:
        with post(url, body, timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:                       # the server went away (connection reset or refused)
        return 0, str(e)


def test_bootstrap_timeout(procs, model_dir):
    """The decode's KV metadata never reaches the prefill (fault pd_bootstrap_timeout): the prefill
    gives the request up after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, the decode after
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT; both count it, the client gets an error."""
    env = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "1", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "2"}
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_env=env,
                                       d_env={**env, "SLURM_AB_EMU_FAULT": "pd_bootstrap_timeout"})
    rurl, _ = router(procs, purl, bport, durl)
    t0 = time.monotonic()
    code, text = failed_request(rurl + "/generate", gen(1000, 8))
    elapsed = time.monotonic() - t0
    # the router retries the 500 with a new room (retry_max_retries 5): one failure per attempt and role
    assert code == 500 and '"code":"decode_internal_error"' in text and "in KVPoll.WaitingForInput" in text, text
    assert p.wait_log("in KVPoll.Bootstrapping", 10) and d.wait_log("in KVPoll.WaitingForInput", 10)
    plog = p.text()
    assert plog.count("Some requests timed out when bootstrapping, which means prefill instances fail to receive "
                      "the KV indices from the decode instance of this request. If a greater mean TTFT is "
                      "acceptable, you can 'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to "
                      "relax the timeout condition.") == 1
    boot = re.findall(r"^\[\S+ \S+ TP(\d)\] Prefill bootstrap failed for request rank=(\d) req\.rid='[0-9a-f]+' "
                      r"req\.bootstrap_room=(\d+) with exception KVTransferError\(bootstrap_room=(\d+)\): "
                      r"Request (\d+) timed out after (1\.\d)s in KVPoll\.Bootstrapping$", plog, re.M)
    rooms = {room for _, _, room, *_ in boot}
    assert boot and all(a == b and r1 == r2 == r3 for a, b, r1, r2, r3, _ in boot)
    assert sorted(a for a, *_ in boot) == sorted(str(i) for i in range(8) for _ in rooms)   # every local rank
    dlog = d.text()
    assert dlog.count("Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a "
                      "greater mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' "
                      "(10 minutes) to relax the timeout condition.") == 1
    waits = re.findall(r"Decode transfer failed for request rank=0 decode_req\.req\.rid='[0-9a-f]+' "
                       r"decode_req\.req\.bootstrap_room=(\d+) with exception KVTransferError\(bootstrap_room=\1\): "
                       r"Request \1 timed out after 2\.\ds in KVPoll\.WaitingForInput$", dlog, re.M)
    assert set(waits) == rooms
    print(f"MEASURE bootstrap timeout: HTTP {code} after {elapsed:.1f} s, {len(rooms)} attempts by the router")
    assert value(metrics(purl), "sglang:num_bootstrap_failed_reqs_total") == len(rooms)
    assert value(metrics(durl), "sglang:num_transfer_failed_reqs_total") == len(rooms)
    # both still answer health checks (fake bootstrap host): healthy while no transfer works
    assert http_get(purl + "/health")[0] == 200 == http_get(durl + "/health")[0]


@pytest.mark.parametrize("backend, fault, last_line", [
    ("mooncake", "pd_engine_init_fail", "RuntimeError: Mooncake Transfer Engine initialization failed."),
    ("mooncake_tcp", "pd_engine_init_fail", "RuntimeError: Mooncake Transfer Engine initialization failed."),
    ("mooncake", "pd_no_transfer_module",
     "ImportError: Please install mooncake by following the instructions at "
     "https://kvcache-ai.github.io/Mooncake/getting_started/build.html to run SGLang with MooncakeTransferEngine."),
    ("nixl", "pd_no_transfer_module",
     "ImportError: Please install NIXL by following the instructions at "
     "https://github.com/ai-dynamo/nixl/blob/main/README.md to run SGLang with NixlTransferEngine."),
    ("nixl", "pd_engine_init_fail", "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND"),
])
def test_transfer_engine_cannot_start(procs, model_dir, backend, fault, last_line):
    """Every GPU rank initialises the KV transfer engine before its process groups: a missing module
    or a failing engine (RDMA stack, IB device) kills the server at start-up, never healthy."""
    p, url = server(procs, model_dir, "decode", extra=["--disaggregation-transfer-backend", backend],
                    env={"SLURM_AB_EMU_FAULT": fault})
    code = p.wait_exit(20)
    assert code not in (None, 0)
    log = p.text()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert log.index("Scheduler hit an exception") < log.index(last_line) < log.index(
        "Received sigquit from a child process. It usually means the child failed.")
    if fault == "pd_engine_init_fail" and backend.startswith("mooncake"):
        assert len(re.findall(r"^\[\S+ \S+ TP\d\] Mooncake Transfer Engine initialization failed\.$", log, re.M)) == 8
    assert "Load weight begin" not in log and "fired up" not in log


def slow_prefill(tmp_path) -> dict:
    """Emulator env whose prefill takes ~3 s for 16K tokens at the tests' time scale."""
    cfg = tmp_path / "slow-prefill.toml"
    cfg.write_text("[prefill]\ncompute_ms_per_token = 800.0\n")
    return {"SLURM_AB_EMU_CONFIG": str(cfg)}


def test_decode_loses_its_prefill(procs, model_dir, tmp_path):
    """The prefill dies while a request's KV is on its way (SIGKILL, as a crashed node): the decode's
    heartbeat misses its bootstrap server SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE times and fails
    the request; the decode itself stays up and healthy."""
    beat = {"SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL": "2", "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE": "2"}
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_env=slow_prefill(tmp_path), d_env=beat)
    join = dual_dispatch(purl, durl, gen(16384, 8, bootstrap_host=P_HOST, bootstrap_port=bport, bootstrap_room=77))
    assert p.wait_log("#new-token: 16384", 10)
    p.p.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    assert d.wait_log("requests affected", 15), d.text()[-3000:]
    lost = time.monotonic() - killed
    _, (code, text) = join(30)
    addr = f"{P_HOST}:{bport}"
    dlog = d.text()
    assert len(re.findall(rf"^\[\S+ \S+ TP\d\] Attempting to reconnect to {addr}\.\.\.$", dlog, re.M)) >= 16
    affected = re.findall(rf"^\[\S+ \S+ TP(\d)\] Lost connection with prefill instance \(bootstrap_addr: {addr}\), "
                          rf"(\d+) requests affected$", dlog, re.M)
    assert sorted(x for x, _ in affected[:8]) == [str(i) for i in range(8)] and affected[0][1] == "1"
    assert re.search(rf"Decode transfer failed for request rank=0 decode_req\.req\.rid='[0-9a-f]+' "
                     rf"decode_req\.req\.bootstrap_room=(\d+) with exception KVTransferError\(bootstrap_room=\1\): "
                     rf"Lost connection with prefill instance \(bootstrap_addr: {addr}\)$", dlog, re.M)
    print(f"MEASURE prefill lost: the decode declared it lost {lost:.1f} s after the kill")
    # 2 missed heartbeats 2 s apart: the kill falls anywhere in a period, so the second miss comes
    # 2-4 s after it (3.47 s seen with three jobs beside it), later under load
    assert 2.0 < lost < 8.0
    assert code == 500 and json.loads(text)["detail"].startswith("Decode transfer failed for request rank=0 ")
    assert d.p.poll() is None and http_get(durl + "/health")[0] == 200
    assert value(metrics(durl), "sglang:num_transfer_failed_reqs_total") == 1


def test_transfer_hang_mid_run_holds_requests_in_the_pd_queues(procs, model_dir, tmp_path):
    """The prefill's KV transfer engine hangs after its first request (fault pd_transfer_hang_after=1):
    later requests are neither done nor failed, so they wait in the prefill's inflight queue and the
    decode's transfer queue; SGLang 0.5.23 counts them in neither num_running_reqs nor num_queue_reqs
    but in its PD queue gauges, refreshed at each statistics report (a Decode batch line while the
    decode still runs A), and publishes nothing while its requests wait only in a PD queue (on_idle:
    not fully idle), so A's last report stands until the decode's waiting timeout fails them."""
    cfg = tmp_path / "slow-decode.toml"
    cfg.write_text("[decode]\ncompute_ms_per_step = 28000.0\n")      # ~56 ms a step: A decodes ~11 s
    # (long enough for B and C to reach the decode's transfer queue while A decodes on a loaded host)
    (p, purl, bport), (d, durl) = pair(procs, model_dir, d_extra=["--decode-log-interval", "1"],
                                       p_env={"SLURM_AB_EMU_FAULT": "pd_transfer_hang_after=1"},
                                       d_env={"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "20",
                                              "SLURM_AB_EMU_CONFIG": str(cfg)})
    boot = dict(bootstrap_host=P_HOST, bootstrap_port=bport)
    done = value(metrics(purl), "sglang:num_requests_total")        # the health check's
    join_a = dual_dispatch(purl, durl, gen(1000, 200, bootstrap_room=1, **boot))
    deadline = time.monotonic() + 20
    while value(metrics(purl), "sglang:num_requests_total") < done + 1 and time.monotonic() < deadline:
        time.sleep(0.05)                          # A's KV arrived: the prefill answered it
    hung = time.monotonic()
    # B and C, each to both roles at once (as the router sends them)
    join_d = start_all([lambda r=r: failed_request(durl + "/generate", gen(1000, 8, bootstrap_room=r, **boot), 45)
                        for r in (2, 3)])
    join_p = start_all([lambda r=r: failed_request(purl + "/generate", gen(1000, 8, bootstrap_room=r, **boot), 45)
                        for r in (2, 3)])
    assert d.wait_log("#transfer-req: 2, ", 10), d.text()[-2000:]   # while A decodes: a Decode batch line
    time.sleep(0.3)
    dm, pm = metrics(durl), metrics(purl)
    assert value(dm, "sglang:num_decode_transfer_queue_reqs") == 2 and value(dm, "sglang:num_running_reqs") == 1
    assert value(dm, "sglang:num_queue_reqs") == 0
    # the prefill's last report (its last prefill batch): B and C in its batch or inflight queue
    assert value(pm, "sglang:num_running_reqs") + value(pm, "sglang:num_prefill_inflight_queue_reqs") == 2
    assert value(pm, "sglang:num_queue_reqs") == value(pm, "sglang:num_prefill_bootstrap_queue_reqs") == 0
    (pa, _), (da, ta) = join_a(40)
    assert pa == da == 200 and json.loads(ta)["meta_info"]["completion_tokens"] == 200
    assert time.monotonic() - hung < 18           # A finished before the decode gives B and C up
    time.sleep(0.5)                               # idle of batches, not of queues: nothing is published
    dm = metrics(durl)
    assert value(dm, "sglang:num_decode_transfer_queue_reqs") == 2 and value(dm, "sglang:num_running_reqs") == 1
    assert value(metrics(purl), "sglang:num_requests_total") == done + 1
    failed = re.compile(r"Decode transfer failed for request rank=0 decode_req\.req\.rid='[0-9a-f]+' "
                        r"decode_req\.req\.bootstrap_room=([23]) with exception KVTransferError\(bootstrap_room=\1\): "
                        r"Request \1 timed out after 2\d\.\ds in KVPoll\.WaitingForInput$", re.M)
    deadline = time.monotonic() + 25
    while len(failed.findall(d.text())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(failed.findall(d.text())) == ["2", "3"]
    assert [code for code, _ in join_d(5)] == [500, 500]
    assert join_p(0.1) == [None, None]                                 # the prefill never answers
    deadline = time.monotonic() + 5               # fully idle now: the decode publishes its idle values
    while value(metrics(durl), "sglang:num_running_reqs") and time.monotonic() < deadline:
        time.sleep(0.1)
    dm = metrics(durl)
    assert value(dm, "sglang:num_running_reqs") == value(dm, "sglang:num_decode_transfer_queue_reqs") == 0
    assert value(dm, "sglang:num_transfer_failed_reqs_total") == 2
    assert "Prefill transfer failed" not in p.text()     # a hang, not a failure: the prefill says nothing


def test_role_mismatch(procs, model_dir):
    """Servers whose role is not the router's: the router registers them anyway (its /workers shows
    the server's own disaggregation_mode beside the slot's worker_type) and both are healthy; a
    request then fails on both sides: the decode-role server in the prefill slot finds no bootstrap
    server at its own address, the prefill-role server in the decode slot waits for metadata that
    never comes."""
    env = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "3"}
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_env={**env, "SLURM_AB_EMU_FAULT": "pd_role=decode"},
                                       d_env={**env, "SLURM_AB_EMU_FAULT": "pd_role=prefill"})
    rurl, ready = router(procs, purl, bport, durl)
    assert ready["healthy_workers"] == 2
    workers = json.loads(http_get(rurl + "/workers")[1])["workers"]
    assert sorted((w["worker_type"], w["metadata"]["disaggregation_mode"]) for w in workers) == \
        [("decode", "prefill"), ("prefill", "decode")]
    t0 = time.monotonic()
    on_p, on_d = dual_dispatch(purl, durl, gen(500, 8, bootstrap_host=P_HOST, bootstrap_port=bport,
                                                bootstrap_room=5))(40)
    print(f"MEASURE role mismatch: both sides failed within {time.monotonic() - t0:.1f} s")
    addr = f"{P_HOST}:{bport}"
    plog = p.text()                                   # the decode-role server in the prefill slot
    assert len(re.findall(rf"Error fetching prefill server info from bootstrap: HTTPConnectionPool\(host='{P_HOST}', "
                          rf"port={bport}\): Max retries exceeded with url: /route\?prefill_dp_rank=-1&"
                          r"prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1 \(Caused by NewConnectionError\("
                          r"'<urllib3\.connection\.HTTPConnection object at 0x[0-9a-f]+>: Failed to establish a new "
                          r"connection: \[Errno 111\] Connection refused'\)\)$", plog, re.M)) == 15
    assert f"Could not fetch prefill parallel info from {addr} after 15 attempts" in plog
    assert re.search(r"Decode handshake failed for request rank=0 decode_req\.req\.rid='[0-9a-f]+' "
                     r"decode_req\.req\.bootstrap_room=5 with exception KVTransferError\(bootstrap_room=5\): "
                     r"Aborted by AbortReq\.$", plog, re.M)
    assert re.search(r"Prefill bootstrap failed for request rank=0 req\.rid='[0-9a-f]+' req\.bootstrap_room=5 with "
                     r"exception KVTransferError\(bootstrap_room=5\): Request 5 timed out after 3\.\ds in "
                     r"KVPoll\.Bootstrapping$", d.text(), re.M)
    assert on_p[0] == 500 == on_d[0]
    assert value(metrics(purl), "sglang:num_bootstrap_failed_reqs_total") == 1
    assert http_get(purl + "/health")[0] == 200 == http_get(durl + "/health")[0]


def test_decode_kv_exhaustion(procs, model_dir, tmp_path):
    """A decode whose KV pool is too small (fault kv_pool_tokens): requests wait in the prealloc queue
    for room and get retracted when their growth no longer fits, and still finish with their tokens;
    an oversized request is refused with 400, which the client sees only once the prefill gave up
    waiting for its decode (the router waits for both halves)."""
    cfg = tmp_path / "slow-decode.toml"
    cfg.write_text("[decode]\ncompute_ms_per_step = 28000.0\n")
    (p, purl, bport), (d, durl) = pair(procs, model_dir, d_extra=["--num-reserved-decode-tokens", "16",
                                                                  "--decode-log-interval", "1"],
                                       p_env={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "8"},
                                       d_env={"SLURM_AB_EMU_FAULT": "kv_pool_tokens=4300",
                                              "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "20",
                                              "SLURM_AB_EMU_CONFIG": str(cfg)})
    rurl, _ = router(procs, purl, bport, durl)
    assert "max_total_num_tokens=4300," in d.text()
    results = in_parallel([lambda: stream(rurl + "/generate", gen(1000, 200))] * 5)
    assert sorted(len(chunks) for _, chunks in results) == [200] * 5
    assert all(c[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 200} for _, c in results)
    dlog = d.text()
    retract = re.findall(r"^\[\S+ \S+ TP0\] KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+), "
                         r"#new_tokens_gained: (\d+), #new_token_ratio: (\d\.\d{4}) -> (\d\.\d{4})$", dlog, re.M)
    assert retract and all(int(n) >= 1 and int(g) >= 1000 for n, g, *_ in retract)
    fields = [re.search(r"pre-allocated usage: ([\d.]+), #prealloc-req: (\d+), #transfer-req: (\d+), "
                        r"#retracted-req: (\d+), ", line) for line in lines(d, "Decode batch")]
    assert max(int(m[2]) for m in fields) >= 1 and max(int(m[4]) for m in fields) >= 1
    assert all(int(m[3]) == 0 for m in fields[-3:])                 # nothing left in transfer
    dm = metrics(durl)
    assert value(dm, "sglang:num_retracted_requests_total") == sum(int(n) for n, *_ in retract)
    assert value(dm, "sglang:num_retracted_input_tokens_total") == 1000 * sum(int(n) for n, *_ in retract)

    # on the clock the prefill's bootstrap timeout runs on (time.time(), as SGLang's CommonKVSender):
    # this VM's wall clock gets corrected under load (once the prefill's 8.1 s of wall clock were
    # 7.4 s of time.monotonic()), so another clock would measure the correction too
    t0 = time.time()
    code, text = failed_request(rurl + "/generate", gen(5000, 4))
    waited = time.time() - t0
    print(f"MEASURE oversized request: HTTP {code} after {waited:.1f} s: {text[:300]}")
    assert code == 400 and "exceeds the maximum number of tokens: 5000 > 4300" in text, (code, text)
    assert 7.5 < waited < 15
    assert re.search(r"^\[\S+ \S+ TP0\] Request [0-9a-f]+ exceeds the maximum number of tokens: 5000 > 4300$",
                     d.text(), re.M)


def test_transfer_grows_with_the_prompt(procs, model_dir, tmp_path):
    """KV really crosses between the two servers: the model's KV per token and rank (its config.json:
    61 MLA layers x (512 + 64) x 2 bytes = 70272 B, as transformers fills in a deepseek_v3 config)
    for every prompt token; the prefill's sglang:kv_transfer_total_mb is what its TP0 rank sent (one
    decode rank's share, TP8 to TP8), and the transfer latency grows with it (kv_wire_fraction 1/128
    of it on the wire here)."""
    cfg = tmp_path / "kv.toml"
    cfg.write_text("[pd]\nkv_wire_fraction = 0.0078125\n")
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_env={"SLURM_AB_EMU_CONFIG": str(cfg)})
    rurl, _ = router(procs, purl, bport, durl)
    seen = []
    for n in (1000, 8000, 32000):
        before = metrics(purl)
        assert len(stream(rurl + "/generate", gen(n, 4))[1]) == 4
        after = metrics(purl)
        mb, ms, count = (value(after, "sglang:kv_transfer_" + k, s) - value(before, "sglang:kv_transfer_" + k, s)
                         for k, s in (("total_mb", "_sum"), ("latency_ms", "_sum"), ("latency_ms", "_count")))
        assert count == 1
        seen.append((n, mb, ms))
    print("MEASURE transfer on loopback (tokens, MB, ms):", [(n, round(mb, 2), round(ms, 1)) for n, mb, ms in seen])
    assert [mb for _, mb, _ in seen] == [pytest.approx(n * 70272 / 2 ** 20) for n, _, _ in seen]
    assert seen[0][2] < seen[2][2]


def test_kv_moves_on_every_node_pair_to_the_requests_dp_rank(procs, model_dir):
    """A 2-node prefill (TP16) and a 2-node decode (TP16, DP attention 2: DP rank 0 on its first
    node, DP rank 1 on its second). The decode's second node has no GPUDirect RDMA
    (SLURM_AB_EMU_GPUDIRECT=none: Mooncake cannot register its GPU memory and says so at start-up,
    then starts anyway): a request routed to DP rank 0 (routed_dp_rank) moves its KV on the node
    pairs of that rank and succeeds; one routed to DP rank 1 fails naming the second node's endpoint
    (the KV goes there, not head to head), and Mooncake then blacklists that session."""
    dport, pport, pboot, ddport, dhport = free_ports(5)
    common = ["--model-path", model_dir, "--tp-size", "16", "--nnodes", "2", "--enable-metrics"]
    env = {"SLURM_AB_EMU_TIME_SCALE": "0.002"}
    pre = common + ["--dist-init-addr", f"{P_HOST}:{dport}", "--port", str(pport), "--disaggregation-mode",
                    "prefill", "--disaggregation-bootstrap-port", str(pboot)]
    p0 = procs.start(pre + ["--node-rank", "0", "--host", P_HOST], "p0", {**env, "SGLANG_HOST_IP": P_HOST})
    procs.start(pre + ["--node-rank", "1", "--host", "127.0.0.4"], "p1", {**env, "SGLANG_HOST_IP": "127.0.0.4"})
    dec = common + ["--dist-init-addr", f"{D_HOST}:{ddport}", "--port", str(dhport), "--disaggregation-mode",
                    "decode", "--disaggregation-bootstrap-port", str(pboot), "--dp-size", "2", "--enable-dp-attention"]
    d0 = procs.start(dec + ["--node-rank", "0", "--host", D_HOST], "d0", {**env, "SGLANG_HOST_IP": D_HOST})
    d1 = procs.start(dec + ["--node-rank", "1", "--host", "127.0.0.5"], "d1",
                     {**env, "SGLANG_HOST_IP": "127.0.0.5", "SLURM_AB_EMU_GPUDIRECT": "none"})
    purl, durl = f"http://{P_HOST}:{pport}", f"http://{D_HOST}:{dhport}"
    assert wait_healthy(purl, 30), p0.text()
    assert wait_healthy(durl, 30), d0.text()
    assert len(re.findall(r"^E\d{4} [\d:.]+ \d+ rdma_context\.cpp:203\] Failed to register memory 0x[0-9a-f]+: "
                          r"Invalid argument \[22\]$", d1.text(), re.M)) == 8
    before = metrics(purl)

    def one(room, dp_rank):
        body = gen(2000, 4, bootstrap_host=P_HOST, bootstrap_port=pboot, bootstrap_room=room)
        return dual_dispatch(purl, durl, dict(body, routed_dp_rank=dp_rank))(30)

    (pc, _), (dc, _) = one(11, 0)
    assert (pc, dc) == (200, 200)
    mb = value(metrics(purl), "sglang:kv_transfer_total_mb", "_sum") - value(before, "sglang:kv_transfer_total_mb", "_sum")
    assert mb == pytest.approx(2000 * 70272 / 2 ** 20)      # TP0 serves one decode rank of the group
    (pc, ptext), (dc, dtext) = one(12, 1)
    assert pc == 500 and dc == 500, (ptext, dtext)
    d1_kv = re.search(r"Session (127\.0\.0\.5:\d+) failed\.", p0.text())
    assert d1_kv, p0.text()[-2000:]
    ep = d1_kv[1]
    assert re.search(rf"Prefill transfer failed for request rank=0 req\.rid='[0-9a-f]+' req\.bootstrap_room=12 "
                     rf"with exception KVTransferError\(bootstrap_room=12\): Failed to send kv chunk of 12 to "
                     rf"{re.escape(ep)}$", p0.text(), re.M)
    assert ("Decode transfer failed for request rank=0 decode_req.req.rid=" in dtext
            and "Failed to get kvcache from prefill instance, it might be dead" in dtext), dtext
    (pc, ptext), _ = one(13, 1)               # the session is blacklisted until a probe reaches it
    assert pc == 500 and f"Decode instance could be dead, remote mooncake session {ep} is not alive" in ptext
    assert one(14, 0)[1][0] == 200            # DP rank 0's nodes are fine
    assert value(metrics(purl), "sglang:num_transfer_failed_reqs_total") == 2


def test_kv_checksum_mismatch_aborts_the_request(procs, model_dir):
    """--disaggregation-enable-kv-checksum on both roles: the decode verifies the prefill's checksum
    as the request enters its first batch; SGLang's own test hook
    (SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB=1) corrupts it: SGLang's error line, HTTP 500
    "KV checksum mismatch", a failed transfer counted; without the hook the same request passes."""
    flag = ["--disaggregation-enable-kv-checksum"]
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_extra=flag, d_extra=flag)
    body = gen(1000, 4, bootstrap_host=P_HOST, bootstrap_port=bport, bootstrap_room=5)
    (pc, _), (dc, _) = dual_dispatch(purl, durl, body)(30)
    assert (pc, dc) == (200, 200)
    (p2, purl2, bport2), (d2, durl2) = pair(procs, model_dir, p_extra=flag, d_extra=flag,
                                            d_env={"SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB": "1"})
    body = gen(1000, 4, bootstrap_host=P_HOST, bootstrap_port=bport2, bootstrap_room=6)
    _, (dc, dtext) = dual_dispatch(purl2, durl2, body)(30)
    assert dc == 500 and "KV checksum mismatch" in dtext, dtext
    assert re.search(r"KV checksum mismatch req=[0-9a-f]+ bootstrap_room=6 expected=0x[0-9a-f]+ got=0x[0-9a-f]+$",
                     d2.text(), re.M)
    assert value(metrics(durl2), "sglang:num_transfer_failed_reqs_total") == 1


@pytest.fixture
def veth_ns():
    """A network namespace joined to this host by a veth pair (10.78.N.2 inside, 10.78.N.1 here),
    removed afterwards; the prefill runs inside so tbf on its side limits the KV's way out."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("this test needs root (ip netns, tc)")
        pytest.skip("needs root (ip netns, tc)")
    taken = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    n = next(k for k in range(100, 250) if f" 10.78.{k}." not in taken)   # a subnet no interface uses
    ns, host_if = f"sabpd{os.getpid()}", f"sabpd{os.getpid()}h"
    inner, outer = f"10.78.{n}.2", f"10.78.{n}.1"
    cmds = [["ip", "netns", "add", ns], ["ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0",
                                         "netns", ns],
            ["ip", "addr", "add", f"{outer}/30", "dev", host_if], ["ip", "link", "set", host_if, "up"],
            ["ip", "-n", ns, "addr", "add", f"{inner}/30", "dev", "eth0"],
            ["ip", "-n", ns, "link", "set", "eth0", "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"]]
    try:
        for c in cmds:
            subprocess.run(c, check=True, capture_output=True, text=True)
        yield ns, inner, outer
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)


def test_rate_limited_link_slows_ttft(procs, model_dir, veth_ns):
    """A slow link between the prefill and the decode (tc tbf on the prefill's side, as
    `cluster.sh rate NODE ...` does on the netns testbed) shows up in TTFT and in the prefill's
    sglang:kv_transfer_latency_ms, as a slow fabric does; decode speed is untouched."""
    ns, inner, outer = veth_ns
    port, bport = free_ports(2)
    p = procs.start(["ip", "netns", "exec", ns, sys.executable, "-m", "slurm_ab_testbed.emulator",
                     "--model-path", model_dir, "--tp-size", "8", "--host", inner, "--port", str(port),
                     "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport),
                     "--enable-metrics"], "prefill", {"SGLANG_HOST_IP": inner, "SLURM_AB_EMU_TIME_SCALE": "0.002"},
                    module=False)
    d, durl = server(procs, model_dir, "decode", host=outer, bootstrap_port=bport)
    purl = f"http://{inner}:{port}"
    assert wait_healthy(purl, 30), p.text()
    assert wait_healthy(durl, 30), d.text()
    rurl, _ = router(procs, purl, bport, durl)

    def ttft_and_transfer():
        before = value(metrics(purl), "sglang:kv_transfer_latency_ms", "_sum")
        first, chunks = stream(rurl + "/generate", gen(16384, 8))
        assert len(chunks) == 8
        return first, value(metrics(purl), "sglang:kv_transfer_latency_ms", "_sum") - before
    fast = [ttft_and_transfer() for _ in range(2)]
    subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "8mbit",
                    "burst", "4kb", "latency", "2s"], check=True)
    slow = [ttft_and_transfer() for _ in range(2)]
    print("MEASURE 16K prompt, 275 KiB of KV on the wire: TTFT / transfer (s) unlimited",
          [(round(a, 3), round(b / 1000, 3)) for a, b in fast],
          "at 8mbit", [(round(a, 3), round(b / 1000, 3)) for a, b in slow])
    # 16384 tokens x 70272 B x 8 decode ranks x kv_wire_fraction 1/32768 = 281088 B: 0.28 s at 8 Mbit/s
    assert all(b / 1000 > 0.25 for _, b in slow) and all(b / 1000 < 0.1 for _, b in fast)
    assert min(a for a, _ in slow) > min(a for a, _ in fast) + 0.2     # the first fast request may be a cold one


# ---- flags, rules and line formats (no processes) -------------------------------------------------

BASE = ["--model-path", "/m", "--tp-size", "8"]


def test_pd_flags_defaults_choices_and_abbreviations(capsys):
    a = parse(BASE).args
    assert (a.disaggregation_mode, a.disaggregation_transfer_backend, a.disaggregation_bootstrap_port,
            a.disaggregation_decode_allocation_policy, a.num_reserved_decode_tokens, a.load_balance_method,
            a.page_size) == ("null", "mooncake", 8998, "early", 512, "round_robin", 1)
    for bad, msg in ((["--disaggregation-mode", "both"], "invalid choice: 'both'"),
                     (["--disaggregation-transfer-backend", "ucx"], "invalid choice: 'ucx'"),
                     (["--decode-only"], "unrecognized arguments: --decode-only"),
                     (["--cuda-graph-max-bs", "8"], "ambiguous option: --cuda-graph-max-bs could match")):
        with pytest.raises(SystemExit) as e:
            parse(BASE + bad)
        assert e.value.code == 2 and msg in capsys.readouterr().err
    # --prefill-only is a prefix of --prefill-only-disable-kv-cache: accepted, and not PD at all
    a = parse(BASE + ["--prefill-only"]).args
    assert a.disaggregation_mode == "null" and a.extra["prefill_only_disable_kv_cache"] is True


def test_pd_resolution_rules():
    r = parse(BASE + ["--disaggregation-mode", "decode", "--max-running-requests", "16"])
    assert r.args.disable_radix_cache and r.args.disaggregation_decode_extra_slots == 32
    assert r.args.load_balance_method == "round_robin"
    assert r.warnings[:2] == ("Radix cache is disabled for decode server",
                              "No IB devices specified for Mooncake backend, falling back to auto discovery.")
    assert parse(BASE + ["--disaggregation-mode", "decode", "--max-running-requests", "64"]).args \
        .disaggregation_decode_extra_slots == 0
    p = parse(BASE + ["--disaggregation-mode", "prefill"]).args
    assert p.load_balance_method == "follow_bootstrap_room" and not p.disable_radix_cache
    t = parse(BASE + ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake_tcp"]).args
    assert t.disaggregation_transfer_backend == "mooncake" and t.disaggregation_ib_device is None
    assert parse(["--model-path", "/m", "--tp-size", "4", "--pp-size", "2", "--disaggregation-mode", "prefill",
                  "--speculative-algorithm", "EAGLE"]).args.pp_size == 2
    for argv, exc, msg in (
            (["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "fake"], "AssertionError",
             "Prefill server does not support 'fake' as the transfer backend"),
            (["--disaggregation-mode", "decode", "--disaggregation-decode-allocation-policy", "prefill_complete",
              "--disaggregation-transfer-backend", "nixl"], "ValueError",
             "--disaggregation-decode-allocation-policy prefill_complete does not yet support transfer backends "
             "other than Mooncake, attention tensor parallelism greater than one"),
            (["--disaggregation-decode-host-receive-threshold", "1.5"], "ValueError",
             "--disaggregation-decode-host-receive-threshold must be between 0 and 1")):
        with pytest.raises(ServerArgsError) as e:
            parse(BASE + argv)
        assert (e.value.exc_type, str(e.value)) == (exc, msg)
    with pytest.raises(ServerArgsError, match=r"PP \+ speculative decoding \(MTP\) is only supported on prefill nodes"):
        parse(["--model-path", "/m", "--tp-size", "4", "--pp-size", "2", "--disaggregation-mode", "decode",
               "--speculative-algorithm", "EAGLE"])


def test_ib_devices_are_checked_against_sysfs(tmp_path):
    base = parse(BASE + ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl",
                         "--disaggregation-ib-device", "mlx5_0"]).args
    assert base.disaggregation_ib_device == "mlx5_0"                  # NIXL: not checked at start-up
    a = __import__("dataclasses").replace(base, disaggregation_transfer_backend="mooncake")
    with pytest.raises(ValueError, match=r"InfiniBand sysfs path not found: .*/nosys\. Please ensure InfiniBand "
                                         r"drivers are installed\."):
        resolve_pd(a, [], str(tmp_path / "nosys"))
    (tmp_path / "ib" / "mlx5_0").mkdir(parents=True)
    assert resolve_pd(a, [], str(tmp_path / "ib"))["disaggregation_ib_device"] == "mlx5_0"
    with pytest.raises(ValueError, match=r"Invalid IB devices specified for all GPUs: \['mlx5_9'\]\. "
                                         r"Available devices: \['mlx5_0'\]"):
        resolve_pd(__import__("dataclasses").replace(a, disaggregation_ib_device="mlx5_0,mlx5_9"), [],
                   str(tmp_path / "ib"))


def test_refusal_exits_1_with_sglangs_exception(tmp_path):
    r = subprocess.run([sys.executable, "-m", "slurm_ab_testbed.emulator", *BASE, "--disaggregation-mode", "prefill",
                        "--disaggregation-transfer-backend", "fake"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.rstrip().endswith("AssertionError: Prefill server does not support 'fake' as the transfer backend")


@pytest.mark.parametrize("version, prefill, decode", [
    ("0.5.23",
     "Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.05, #running-req: 0, "
     "#queue-req: 2, #pending-token: 8192, #bootstrap-req: 3, #inflight-req: 1, #optimistic-req: 0, "
     "cuda graph: False, input throughput (token/s): 1234.50",
     "Decode batch, #running-req: 4, #token: 66000, token usage: 0.31, accept len: 3.76, accept rate: 0.18, "
     "pre-allocated usage: 0.12, #prealloc-req: 2, #transfer-req: 1, #retracted-req: 0, cuda graph: True, "
     "gen throughput (token/s): 41.30, #queue-req: 0"),
    ("0.5.6",
     "Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.05, #running-req: 0, "
     "#queue-req: 2, #prealloc-req: 3, #inflight-req: 1, input throughput (token/s): 1234.50, ",
     "Decode batch, #running-req: 4, #token: 66000, token usage: 0.31, accept len: 3.76, accept rate: 0.23, "
     "pre-allocated usage: 0.12, #prealloc-req: 2, #transfer-req: 1, #retracted-req: 0, cuda graph: True, "
     "gen throughput (token/s): 41.30, #queue-req: 0, "),
    ("0.4.10",
     "Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.05, #unbootstrapped-req: 3, "
     "#queue-req: 2, #transferring-req: 1, input throughput (token/s): 1234.50, ",
     "Decode batch. #running-req: 4, #token: 66000, token usage: 0.31, accept len: 3.76, pre-allocated usage: 0.12, "
     "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 41.30, #queue-req: 0, "),
])
def test_pd_line_formats_per_version(version, prefill, decode):
    """The PD fields of 0.5.23 metrics_reporter and of the 0.5.6 / 0.4.10 scheduler_metrics_mixin,
    character for character (0.4.10's PD prefill line has no #running-req, so PREFILL_RE misses it)."""
    ps = PrefillStats(1, 8192, 0, 0.05, 0, 2, 8192, False, 1234.5, PrefillPD(3, 1, 0))
    ds = DecodeStats(4, 66000, 0.31, True, 41.3, 0, accepted_tokens=376, verify_ct=100, num_draft_tokens=16,
                     pd=DecodePD(0.12, 2, 1, 0))
    assert prefill_line(version, ps) == prefill
    assert decode_line(version, ds) == decode
    assert DECODE_RE.search(decode)["accept_len"] == "3.76"
    assert bool(PREFILL_RE.search(prefill)) is (version != "0.4.10")


def test_two_node_prefill_registers_every_rank(procs, model_dir):
    """A 2-node prefill instance: the leader's bootstrap server answers 503 until all 16 ranks
    registered (each node registers its own 8, with its own address), then serves the layout."""
    port, dport, bport = free_ports(3)
    common = ["--model-path", model_dir, "--tp-size", "16", "--nnodes", "2", "--dist-init-addr", f"{P_HOST}:{dport}",
              "--port", str(port), "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)]
    lead = procs.start(common + ["--node-rank", "0", "--host", P_HOST], "p0",
                       {"SGLANG_HOST_IP": P_HOST, "SLURM_AB_EMU_TIME_SCALE": "0.002"})
    assert lead.wait_log("CommonKVBootstrapServer started successfully", 10)
    route = f"http://{P_HOST}:{bport}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
    assert http_get(route) == (503, b"Prefill server not fully registered yet (0 workers registered).")
    procs.start(common + ["--node-rank", "1", "--host", "127.0.0.4"], "p1",
                {"SGLANG_HOST_IP": "127.0.0.4", "SLURM_AB_EMU_TIME_SCALE": "0.002"})
    purl = f"http://{P_HOST}:{port}"
    assert wait_healthy(purl, 30), lead.text()
    deadline = time.time() + 10
    while http_get(route)[0] != 200 and time.time() < deadline:
        time.sleep(0.1)
    info = json.loads(http_get(route)[1])
    assert (info["attn_tp_size"], info["pp_size"], info["dp_size"], info["page_size"], info["kv_cache_dtype"],
            info["follow_bootstrap_room"], info["decode_allocation_policy"]) == (16, 1, 1, 1, "auto", True, "early")
    rank = f"http://{P_HOST}:{bport}/route?prefill_dp_rank=0&prefill_cp_rank=0&target_pp_rank=0&target_tp_rank="
    assert json.loads(http_get(rank + "15")[1])["rank_ip"] == "127.0.0.4"
    assert json.loads(http_get(rank + "0")[1])["rank_ip"] == P_HOST
    assert http_get(rank + "16") == (404, b"Bootstrap info not found for dp_rank=0 cp_rank=0 tp_rank=16 pp_rank=0")
    d, durl = server(procs, model_dir, "decode", extra=["--tp-size", "8"], bootstrap_port=bport)
    assert wait_healthy(durl, 30)
    rurl, _ = router(procs, purl, bport, durl)
    assert len(stream(rurl + "/generate", gen(2000, 10))[1]) == 10
    assert "Performance is NOT guaranteed when using different TP sizes for non-MLA models." in d.text()


def test_speculative_decoding_on_both_roles(procs, model_dir):
    """PD + DFLASH (speculative flags on both roles, as SGLang requires): the decode verifies and
    logs accept len / rate with its PD fields, the prefill only prefills."""
    spec = SPEC + ["--mem-fraction-static", "0.83"]
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_extra=spec, d_extra=spec)
    rurl, _ = router(procs, purl, bport, durl)
    _, chunks = stream(rurl + "/generate", gen(16384, 120))
    meta = chunks[-1]["meta_info"]
    assert meta["completion_tokens"] == 120 and 0 < meta["spec_verify_ct"] < 119
    decode = [(line, DECODE_RE.search(line)) for line in lines(d, "Decode batch") if "#running-req: 1," in line]
    assert decode and all(m["accept_len"] and m["accept_rate"] for _, m in decode)
    assert all("pre-allocated usage: " in line and line.index("accept rate") < line.index("pre-allocated usage")
               for line, _ in decode)
    assert "Max running requests is reset to 48 for speculative decoding." in p.text()
    assert "Decode batch" not in p.text()
    assert value(metrics(durl), "sglang:spec_verify_calls_total") >= meta["spec_verify_ct"] > 0
    assert value(metrics(purl), "sglang:spec_verify_calls_total") == 0       # the prefill never verifies


def test_page_size_mismatch_takes_the_decode_down(procs, model_dir):
    """SGLang checks the two roles' page size and KV dtype only at the first handshake, in the decode's
    scheduler: a mismatch is a RuntimeError there and the decode server dies."""
    (p, purl, bport), (d, durl) = pair(procs, model_dir, p_extra=["--page-size", "16"])
    dual_dispatch(purl, durl, gen(500, 4, bootstrap_host=P_HOST, bootstrap_port=bport, bootstrap_room=9))(10)
    assert d.wait_exit(10) not in (None, 0)
    log = d.text()
    assert log.index("Scheduler hit an exception: Traceback (most recent call last):") < log.index(
        "RuntimeError: Page size mismatch: prefill server has page_size=16, but decode server has page_size=1. "
        "Both servers must use the same --page-size value.") < log.index("Received sigquit from a child process.")
    assert p.p.poll() is None


def test_direct_requests_without_bootstrap_fields_wait_then_fail(procs, model_dir):
    """Sent to a prefill directly (no router, no bootstrap fields) a request waits for a decode
    that never comes, until the bootstrap timeout, as in SGLang: each one on its own."""
    p, purl = server(procs, model_dir, "prefill", env={"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "1"})
    assert wait_healthy(purl, 30), p.text()
    results = in_parallel([lambda: failed_request(purl + "/generate", gen(100, 4))] * 2, 20)
    assert [code for code, _ in results] == [500, 500]
    assert all("req.bootstrap_room=None with exception KVTransferError(bootstrap_room=None): Request None timed "
               "out after 1." in text for _, text in results)


def test_every_node_of_a_role_labels_its_metrics_with_the_role(procs, model_dir):
    """A 2-node decode instance: node rank 1 serves its schedulers' series on its own /metrics
    (issue 19) with engine_type="decode", as SGLang labels every series of a PD server."""
    port, dport = free_ports(2)
    common = ["--model-path", model_dir, "--tp-size", "16", "--nnodes", "2", "--dist-init-addr", f"{D_HOST}:{dport}",
              "--port", str(port), "--disaggregation-mode", "decode", "--enable-metrics"]
    for rank, host in ((1, "127.0.0.5"), (0, D_HOST)):
        procs.start(common + ["--node-rank", str(rank), "--host", host], f"d{rank}",
                    {"SGLANG_HOST_IP": host, "SLURM_AB_EMU_TIME_SCALE": "0.002"})
    assert wait_healthy(f"http://{D_HOST}:{port}", 30)
    for host in (D_HOST, "127.0.0.5"):
        roles = {x for (_, _, lab) in metrics(f"http://{host}:{port}") for x in lab if x.startswith("engine_type=")}
        assert roles == {"engine_type=decode"}, host
