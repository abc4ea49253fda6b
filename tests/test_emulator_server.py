"""One emulated node over HTTP: stream formats, token counts, logs, speculative fields, OOM, faults."""
import json
import re
import signal
import urllib.error
import urllib.request

import pytest

from slurm_ab_testbed.testing import DECODE_RE, PREFILL_RE, PREFIX, SPEC, free_ports, http_get, wait_healthy

ACCESS_RE = re.compile(r'^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?\] INFO:     127\.0\.0\.1:\d+ - '
                       r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.1" (?P<code>\d{3}) ')




def start(procs, model_dir, extra=(), env=None, name="node"):
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--ep-size", "4", "--port", str(port),
                     "--chunked-prefill-size", "8192", *extra], name, env)
    return p, f"http://127.0.0.1:{port}"


def post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def sse(resp):
    """The payloads of 'data: ...' events, asserting SGLang's framing."""
    raw = resp.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events[:-1])
    return [json.loads(e[6:]) for e in events[:-2]]


def test_generate_stream_counts_and_logs(procs, model_dir):
    p, url = start(procs, model_dir, ["--decode-log-interval", "10"], {"SGLANG_LOG_MS": "1"})
    assert wait_healthy(url), p.text()
    text = " ".join(f"w{10 + i % 3000}" for i in range(16384))
    chunks = sse(post(url + "/generate", {"text": text, "sampling_params": {"max_new_tokens": 25, "temperature": 0,
                                                                            "ignore_eos": True}, "stream": True}))
    assert len(chunks) == 25
    metas = [c["meta_info"] for c in chunks]
    assert [m["completion_tokens"] for m in metas] == list(range(1, 26))
    assert all(m["prompt_tokens"] == 16384 and m["cached_tokens"] == 0 for m in metas)
    assert all(m["finish_reason"] is None for m in metas[:-1])
    assert metas[-1]["finish_reason"] == {"type": "length", "length": 25} and metas[-1]["e2e_latency"] > 0
    assert "spec_verify_ct" not in metas[-1] and len({m["id"] for m in metas}) == 1
    # 0.5.23 (tokenizer_manager._handle_batch_output, no --incremental-streaming-output): every
    # chunk carries the whole output so far, like the text
    assert [len(c["output_ids"]) for c in chunks] == list(range(1, 26))
    assert all(c["output_ids"][:i + 1] == chunks[-1]["output_ids"][:i + 1] for i, c in enumerate(chunks))
    assert len(chunks[-1]["text"].split()) == 25 and chunks[-1]["text"].startswith(chunks[10]["text"])

    r = json.loads(post(url + "/generate", {"input_ids": [7] * 300, "sampling_params": {"max_new_tokens": 4}}).read())
    assert r["meta_info"]["prompt_tokens"] == 300 and len(r["output_ids"]) == 4 and len(r["text"].split()) == 4

    comp = post(url + "/v1/completions", {"model": "x", "prompt": "w1 w2 w3", "max_tokens": 5, "stream": True,
                                          "stream_options": {"include_usage": True}})
    events = sse(comp)
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]).split() and \
        events[-1]["usage"]["completion_tokens"] == 5
    chat = json.loads(post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "w5 w6"}],
                                                          "max_tokens": 3}).read())
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 3
    models = json.loads(http_get(url + "/v1/models")[1])
    assert models["data"][0]["id"] == model_dir
    info = json.loads(http_get(url + "/server_info")[1])
    assert info["tp_size"] == 8 and info["version"] == "0.5.23" and "avg_spec_accept_length" not in info["internal_states"][0]
    assert json.loads(http_get(url + "/model_info")[1])["is_generation"] is True
    assert http_get(url + "/metrics")[0] == 404          # no --enable-metrics
    assert http_get(url + "/flush_cache")[0] == 200

    p.p.send_signal(signal.SIGTERM)
    assert p.wait_exit(10) == 0
    log = p.text()
    assert log.count("The server is fired up and ready to roll!") == 1
    assert re.search(r"^\[\S+ \S+\] server_args=ServerArgs\(model_path=", log, re.M)
    assert re.search(r"max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                     r"max_running_requests=\d+, context_len=262144", log)
    assert re.search(r"Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)", log)
    stats = [PREFIX.match(line) for line in log.splitlines()]
    stats = [m for m in stats if m]
    assert stats and all(m["ranks"] == " TP0 EP0" and re.fullmatch(r"\S+ \d\d:\d\d:\d\d\.\d{3}", m["ts"]) for m in stats)
    prefill = [PREFILL_RE.search(line) for line in log.splitlines() if "Prefill batch" in line]
    assert [m["new_token"] for m in prefill].count("8192") == 2          # 16K prompt = two 8K chunks
    decode = [DECODE_RE.search(line) for line in log.splitlines() if "Decode batch" in line]
    assert decode and all(m and m["accept_len"] is None and m["graph"] == "True" for m in decode)
    access = [ACCESS_RE.match(line) for line in log.splitlines()]
    assert sum(1 for m in access if m and m["path"] == "/generate" and m["code"] == "200") == 3  # warmup + 2


def test_speculative_server_fields(procs, model_dir):
    p, url = start(procs, model_dir, SPEC + ["--mem-fraction-static", "0.83", "--decode-log-interval", "5",
                                             "--enable-metrics"])
    assert wait_healthy(url), p.text()
    assert "Max running requests is reset to 48 for speculative decoding." in p.text()
    r = json.loads(post(url + "/generate", {"input_ids": [9] * 16384, "sampling_params": {"max_new_tokens": 60}}).read())
    m = r["meta_info"]
    assert m["completion_tokens"] == 60 and m["spec_verify_ct"] < 60
    assert m["spec_accept_length"] == pytest.approx(60 / m["spec_verify_ct"])
    info = json.loads(http_get(url + "/get_server_info")[1])
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0
    assert info["speculative_algorithm"] == "DFLASH" and info["max_running_requests"] == 48
    metrics = http_get(url + "/metrics")[1].decode()
    assert re.search(r"^sglang:spec_accept_length\{[^}]*\} [\d.]+$", metrics, re.M)
    assert re.search(r"^sglang:num_requests_total\{[^}]*\} [2-9]", metrics, re.M)
    decode = [DECODE_RE.search(line) for line in p.text().splitlines() if "Decode batch" in line]
    assert decode and all(m["accept_len"] and m["accept_rate"] for m in decode)
    for m in decode:
        assert float(m["accept_rate"]) == pytest.approx((float(m["accept_len"]) - 1) / 15, abs=0.011)


@pytest.mark.parametrize("fraction, ooms", [("0.86", True), ("0.83", False)])
def test_first_16k_prefill_oom(procs, model_dir, fraction, ooms):
    p, url = start(procs, model_dir, SPEC + ["--mem-fraction-static", fraction])
    assert wait_healthy(url), p.text()
    body = {"input_ids": [100] * 16384, "sampling_params": {"max_new_tokens": 1, "temperature": 0, "ignore_eos": True}}
    if not ooms:
        assert json.loads(post(url + "/generate", body).read())["meta_info"]["prompt_tokens"] == 16384
        assert p.p.poll() is None
        return
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        post(url + "/generate", body)
    code = p.wait_exit(10)
    assert code is not None and code != 0
    log = p.text()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "flashinfer/fused_moe/core.py" in log and "_allocate_workspace" in log
    assert re.search(r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate [\d.]+ GiB\. GPU 0 has a total "
                     r"capacity of [\d.]+ GiB of which [\d.]+ GiB is free", log)
    assert log.index("torch.OutOfMemoryError") < log.index("Received sigquit from a child process. It usually means "
                                                           "the child failed.")
    assert [m["new_token"] for m in map(PREFILL_RE.search, log.splitlines()) if m][-2:] == ["8192", "8192"]


def test_die_after_requests_fault(procs, model_dir):
    p, url = start(procs, model_dir, env={"SLURM_AB_EMU_FAULT": "die_after_requests=2"})
    assert wait_healthy(url)
    for _ in range(2):
        post(url + "/generate", {"input_ids": [3] * 50, "sampling_params": {"max_new_tokens": 2}}).read()
    assert p.wait_exit(10) not in (None, 0)
    assert "CUDA error: an illegal memory access was encountered" in p.text()


def test_hang_startup_never_healthy_and_sigterm_is_clean(procs, model_dir):
    p, url = start(procs, model_dir, env={"SLURM_AB_EMU_FAULT": "hang_startup"})
    assert p.wait_log("Load weight begin", 10)
    assert not wait_healthy(url, timeout=2.0)
    p.p.send_signal(signal.SIGINT)
    assert p.wait_exit(10) == 0


def test_old_log_version(procs, model_dir):
    p, url = start(procs, model_dir, ["--decode-log-interval", "4"], {"SLURM_AB_EMU_LOG_VERSION": "0.4.10"})
    assert wait_healthy(url)
    post(url + "/generate", {"input_ids": [3] * 50, "sampling_params": {"max_new_tokens": 9}}).read()
    assert http_get(url + "/server_info")[0] == 404 and http_get(url + "/get_server_info")[0] == 200
    lines = [line for line in p.text().splitlines() if "Decode batch" in line]
    assert lines and all("Decode batch. #running-req" in line and line.endswith(", ") for line in lines)
