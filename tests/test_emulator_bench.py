"""The real clients against the emulator: SGLang 0.5.23's bench_serving (its steady-state entry
point, as the local site runs it) and 0.5.2's, and sglang-router 0.3.2."""
import json
import re
import subprocess
import sys
import time

import pytest

from slurm_ab_testbed.make_model import make_model
from slurm_ab_testbed.make_speed_bench import make_speed_bench
from slurm_ab_testbed.testing import PREFILL_RE, EmuProcs, free_ports, http_get, wait_healthy

from helpers.clients import client_cmd

GENERATE_200 = re.compile(r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK')


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(make_model(tmp_path_factory.mktemp("model") / "m"))


@pytest.fixture(scope="module")
def dataset(model_dir, tmp_path_factory):
    """A small SPEED-Bench JSONL in the model's words: 1792-2048 tokens after the chat template."""
    return make_speed_bench(tmp_path_factory.mktemp("data") / "speed_bench.jsonl", model_dir, count=6,
                            tokens=2048, spread=256)


@pytest.fixture
def procs(tmp_path):
    ep = EmuProcs(str(tmp_path / "logs"))
    yield ep
    ep.close()


def bench(base_url, model_dir, out, backend="sglang", timeout=300, old=False, dataset=None):
    """One client run of 8 prompts at C=4: 0.5.23 (speed-bench from `dataset`, or random-ids of 2048
    tokens) or 0.5.2 (random-ids)."""
    prefix, env = client_cmd(old)
    data = (["--dataset-name", "speed-bench", "--dataset-path", str(dataset), "--speed-bench-output-len", "32"]
            if dataset else ["--dataset-name", "random-ids", "--random-input-len", "2048",
                             "--random-output-len", "32", "--random-range-ratio", "1.0"])
    cmd = [*prefix, "--backend", backend, "--base-url", base_url, *data, "--num-prompts", "8",
           "--max-concurrency", "4", "--tokenizer", model_dir, "--output-file", str(out), "--output-details",
           "--disable-tqdm"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def server(procs, model_dir, name, env=None):
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--host", "0.0.0.0", "--port", str(port),
                     "--chunked-prefill-size", "8192", "--disable-radix-cache"], name,
                    {"SLURM_AB_EMU_TIME_SCALE": "0.002", **(env or {})})
    return p, f"http://127.0.0.1:{port}"


def test_router_round_robin_in_front_of_two_nodes(procs, model_dir, dataset, tmp_path):
    """Both clients through sglang-router 0.3.2: 0.5.23 with the speed-bench loader (the first turn
    of each row, chat-templated and decoded to text, sent to /generate; the nodes count exactly the
    tokens the client counted) and 0.5.2 with random-ids over /v1/completions."""
    (a, url_a), (b, url_b) = server(procs, model_dir, "w1"), server(procs, model_dir, "w2")
    rport, mport = free_ports(2)
    procs.start([sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", url_a, url_b,
                 "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(rport),
                 "--prometheus-port", str(mport), "--model-path", model_dir], "router", module=False)
    assert wait_healthy(url_a, 30) and wait_healthy(url_b, 30)
    router = f"http://127.0.0.1:{rport}"
    deadline, ready = time.time() + 60, {}
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
    prefilled = [_prefilled(p) for p in (a, b)]
    r = bench(router, model_dir, tmp_path / "sglang.jsonl", dataset=dataset)
    # bench_serving 0.5.23 reads GET /server_info after the run; router 0.3.2 answers 404 there,
    # which the client takes as "no accept length" and goes on (benchmark/serving.py).
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Steady-State Result" in r.stdout
    rec = json.loads((tmp_path / "sglang.jsonl").read_text().splitlines()[-1])
    assert rec["dataset_name"] == "speed-bench" and rec["completed"] == 8 and rec["errors"] == [""] * 8
    assert rec["server_info"] is None and rec["accept_length"] is None
    assert rec["total_output_tokens"] == 256 == rec["total_output_tokens_retokenized"]
    assert [len(x) for x in rec["itls"]] == [31] * 8
    time.sleep(0.2)
    served = [len(GENERATE_200.findall(p.text())) - n for p, n in zip((a, b), before)]
    assert sorted(served) == [4, 5]                                     # 8 + 1 warm-up, alternating
    # input_lens are the nodes' own prompt_tokens, total_input_tokens the client's count of its
    # prompts: one row's words + "user:", "</s>", "assistant:" of the chat template
    rows = [len(json.loads(line)["turns"][0].split()) + 3 for line in dataset.read_text().splitlines()]
    assert sum(rec["input_lens"]) == rec["total_input_tokens"] and set(rec["input_lens"]) <= set(rows)
    # ... and what the nodes prefilled: those, plus bench_serving's own warm-up (the first prompt again)
    new = sum(_prefilled(p) - n for p, n in zip((a, b), prefilled))
    assert new == sum(rec["input_lens"]) + rec["input_lens"][0]
    # bench_serving 0.5.2 reads GET /get_server_info after the run; router 0.3.2 answers with its own
    # summary ({"router_manager": ..., "workers_count": ...}), on which its sglang backend dies
    # ('internal_states'); its OpenAI backend (/v1/completions) makes no such call.
    r = bench(router, model_dir, tmp_path / "vllm.jsonl", backend="vllm", old=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"^Total input tokens:\s+16384\s*$", r.stdout, re.M)
    rec = json.loads((tmp_path / "vllm.jsonl").read_text().splitlines()[-1])
    assert rec["completed"] == 8 and "p95_ttft_ms" not in rec           # 0.5.2's record


def _prefilled(proc) -> int:
    """Prompt tokens a node prefilled (its own 1-token health checks left out)."""
    return sum(t for t in (int(m["new_token"]) for m in map(PREFILL_RE.search, proc.text().splitlines()) if m)
               if t >= 100)
