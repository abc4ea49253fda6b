"""The real clients against the emulator: sglang.bench_serving 0.5.2 and sglang-router 0.3.2."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from slurm_ab_testbed.make_model import make_model
from slurm_ab_testbed.testing import EmuProcs, free_ports, http_get, wait_healthy

pytest.importorskip("sglang.bench_serving")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
GENERATE_200 = re.compile(r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK')


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(make_model(tmp_path_factory.mktemp("model") / "m"))


@pytest.fixture
def procs(tmp_path):
    ep = EmuProcs(str(tmp_path / "logs"))
    yield ep
    ep.close()


def bench(base_url, model_dir, out, backend="sglang", timeout=120):
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", backend, "--base-url", base_url,
           "--dataset-name", "random-ids", "--random-input-len", "2048", "--random-output-len", "32",
           "--random-range-ratio", "1.0", "--num-prompts", "8", "--max-concurrency", "4", "--tokenizer", model_dir,
           "--output-file", str(out), "--output-details", "--disable-tqdm"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def server(procs, model_dir, name, env=None):
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--host", "0.0.0.0", "--port", str(port),
                     "--chunked-prefill-size", "8192", "--disable-radix-cache"], name,
                    {"SLURM_AB_EMU_TIME_SCALE": "0.002", **(env or {})})
    return p, f"http://127.0.0.1:{port}"


def test_bench_serving_against_one_node(procs, model_dir, tmp_path):
    p, url = server(procs, model_dir, "node")
    assert wait_healthy(url, 30)
    r = bench(url, model_dir, tmp_path / "b.jsonl")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"^Successful requests:\s+8\s*$", r.stdout, re.M)
    assert re.search(r"^Total input tokens:\s+16384\s*$", r.stdout, re.M)
    rec = json.loads((tmp_path / "b.jsonl").read_text().splitlines()[-1])
    assert rec["completed"] == 8 and rec["total_output_tokens"] == 256 == rec["total_output_tokens_retokenized"]
    assert len(rec["ttfts"]) == 8 and all(t > 0 for t in rec["ttfts"])
    assert [len(x) for x in rec["itls"]] == [31] * 8 and rec["errors"] == [""] * 8
    prefill = [int(m) for m in re.findall(r"#new-token: (\d+)", p.text())]
    assert sum(t for t in prefill if t >= 100) == 9 * 2048             # 8 + bench's own warm-up


def test_router_round_robin_in_front_of_two_nodes(procs, model_dir, tmp_path):
    (a, url_a), (b, url_b) = server(procs, model_dir, "w1"), server(procs, model_dir, "w2")
    rport, mport = free_ports(2)
    procs.start([sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", url_a, url_b,
                 "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(rport),
                 "--prometheus-port", str(mport), "--model-path", model_dir], "router", module=False)
    assert wait_healthy(url_a, 30) and wait_healthy(url_b, 30)
    router = f"http://127.0.0.1:{rport}"
    deadline, ready = time.time() + 20, {}
    while time.time() < deadline:
        code, body = http_get(router + "/readiness")
        if code == 200 and (ready := json.loads(body)).get("healthy_workers") == 2:
            break
        time.sleep(0.1)
    assert ready == {"status": "ready", "healthy_workers": 2, "total_workers": 2}
    workers = json.loads(http_get(router + "/workers")[1])["workers"]
    assert sorted(w["url"] for w in workers) == sorted([url_a, url_b])
    assert all(w["is_healthy"] and w["connection_mode"] == "HTTP" and w["model_id"] == model_dir for w in workers)

    before = [len(GENERATE_200.findall(p.text())) for p in (a, b)]       # the nodes' own warm-ups
    r = bench(router, model_dir, tmp_path / "sglang.jsonl")
    # bench_serving 0.5.2 reads GET /get_server_info after the run; router 0.3.2 answers with its own
    # summary ({"router_manager": ..., "workers_count": ...}), so the client dies on 'internal_states'
    # before writing its result (a property of the real pair, not of the emulator).
    assert r.returncode == 0 or "KeyError: 'internal_states'" in r.stderr, r.stderr[-3000:]
    time.sleep(0.2)
    served = [len(GENERATE_200.findall(p.text())) - n for p, n in zip((a, b), before)]
    assert sorted(served) == [4, 5]                                     # 8 + 1 warm-up, alternating
    r = bench(router, model_dir, tmp_path / "vllm.jsonl", backend="vllm")   # /v1/completions, no server_info
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "vllm.jsonl").read_text().splitlines()[-1])["completed"] == 8
