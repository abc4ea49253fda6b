"""Deterministic outputs at temperature 0 (identical across layouts, PD and speculative modes, as
greedy SGLang's are) and the two correctness faults, divergence=K and empty_output, in the shapes
SGLang 0.5.23's /generate and OpenAI endpoints return."""
from __future__ import annotations

import json
import urllib.request

import pytest

from slurm_ab_testbed.emulator.build import build_core, plan_replica
from slurm_ab_testbed.emulator.cli_args import parse
from slurm_ab_testbed.emulator.costs import load_costs
from slurm_ab_testbed.emulator.faults import FaultSpecError, parse_faults
from slurm_ab_testbed.emulator.outputs import Outputs, diverges, expected_output
from slurm_ab_testbed.emulator.scheduler import Req
from slurm_ab_testbed.emulator.tokenizer import EmuTokenizer
from slurm_ab_testbed.testing import SPEC, free_ports, wait_healthy

VOCAB = list(range(4, 32000))
PROMPTS = [[5 + (i * 7 + k) % 3000 for i in range(400 + 50 * k)] for k in range(8)]


def _run(argv, prompt, n=40, diverge_at=None):
    """One request through a scheduler of this layout (8 GPUs), in virtual time."""
    base = ["--model-path", "m", "--nnodes", "1", "--dist-init-addr", "127.0.0.1:1"]
    rep = plan_replica(parse(base + argv).args, load_costs(), 8, "0.5.23")
    core = build_core(rep, lambda rng, k: [0] * k, lambda line: None, 3)
    r = Req("r", len(prompt), n, input_ids=list(prompt), outputs=Outputs.for_prompt(prompt, VOCAB, diverge_at))
    core.add(r, 0.0)
    now = 0.0
    while not r.finished:
        fwd = core.plan(now)
        now += fwd.duration
        core.complete(fwd, now)
    return r.output_ids


LAYOUTS = [["--tp-size", "8"], ["--tp-size", "4", "--pp-size", "2"], ["--tp-size", "8", "--ep-size", "4"],
           ["--tp-size", "8", *SPEC], ["--tp-size", "8", "--speculative-algorithm", "EAGLE",
                                        "--speculative-draft-model-path", "/d"]]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda a: " ".join(a))
def test_same_tokens_in_every_layout_and_speculative_mode(layout):
    for prompt in PROMPTS[:3]:
        assert _run(layout, prompt) == expected_output(prompt, 40, VOCAB)


def test_different_prompts_different_tokens_and_a_pure_function():
    outs = [tuple(expected_output(p, 20, VOCAB)) for p in PROMPTS]
    assert len(set(outs)) == len(outs)
    assert expected_output(PROMPTS[0], 20, VOCAB) == expected_output(list(PROMPTS[0]), 20, VOCAB)
    o = Outputs.for_prompt(PROMPTS[0], VOCAB)
    assert o.ids(0, 5) + o.ids(5, 15) == o.ids(0, 20)          # 1..N tokens per step give the same stream


def test_divergence_changes_half_the_prompts_from_position_k():
    flags = [diverges(p) for p in PROMPTS]
    assert 0 < sum(flags) < len(flags)
    for p, d in zip(PROMPTS, flags):
        good, bad = expected_output(p, 30, VOCAB), _run(["--tp-size", "8", *SPEC], p, 30, diverge_at=5)
        assert bad[:5] == good[:5]
        assert (bad[5:] != good[5:]) if d else (bad == good)
        assert sum(a != b for a, b in zip(bad[5:], good[5:])) > 20 if d else True


def test_fault_syntax():
    assert parse_faults("divergence=8,empty_output") == parse_faults("empty_output;divergence=8")
    assert parse_faults("divergence=0").divergence == 0 and parse_faults("empty_output").empty_output
    for bad in ("divergence", "divergence=x", "empty_output=1"):
        with pytest.raises(FaultSpecError):
            parse_faults(bad)


# ---- over HTTP: what /generate and the OpenAI endpoints return -----------------------------------

def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read().decode()
    if raw.startswith("data: "):
        return [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: {")]
    return json.loads(raw)


def _server(procs, model_dir, name, extra=(), fault=None):
    port, = free_ports(1)
    env = {"SLURM_AB_EMU_TIME_SCALE": "0.002", **({"SLURM_AB_EMU_FAULT": fault} if fault else {})}
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--port", str(port), *extra], name, env)
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url), p.text()
    return url


def test_greedy_outputs_over_http_in_every_endpoint_and_mode(procs, model_dir):
    plain, spec = _server(procs, model_dir, "plain"), _server(procs, model_dir, "spec", SPEC)
    broken = _server(procs, model_dir, "broken", SPEC, fault="divergence=3")
    vocab = EmuTokenizer(model_dir).plain_ids
    prompts = PROMPTS[:4]
    for p in prompts:
        want = expected_output(p, 12, vocab)
        body = {"input_ids": p, "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
        a, b, c = (_post(u + "/generate", body) for u in (plain, spec, broken))
        assert a["output_ids"] == b["output_ids"] == want and a["text"] == b["text"] != ""
        assert (c["output_ids"][:3] == want[:3]) and ((c["output_ids"] != want) == diverges(p))
        chunks = _post(spec + "/generate", {**body, "stream": True})
        assert chunks[-1]["output_ids"] == want and chunks[-1]["text"] == a["text"]
        comp = _post(plain + "/v1/completions", {"model": "m", "prompt": p, "max_tokens": 12, "temperature": 0})
        assert comp["choices"][0]["text"] == a["text"] and comp["choices"][0]["finish_reason"] == "length"
    # sampled requests (SGLang's default temperature 1.0) are not the greedy tokens
    sampled = _post(plain + "/generate", {"input_ids": prompts[0], "sampling_params": {"max_new_tokens": 12}})
    assert sampled["output_ids"] != expected_output(prompts[0], 12, vocab)


def test_empty_output_fault(procs, model_dir):
    url = _server(procs, model_dir, "empty", fault="empty_output")
    eos = EmuTokenizer(model_dir).eos_id
    r = _post(url + "/generate", {"input_ids": PROMPTS[0], "sampling_params": {"max_new_tokens": 16,
                                                                              "temperature": 0, "ignore_eos": True}})
    assert r["text"] == "" and r["output_ids"] == [eos] and eos == 2
    assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    assert r["meta_info"]["completion_tokens"] == 1
    chunks = _post(url + "/generate", {"text": "w5 w6 w7", "sampling_params": {"max_new_tokens": 16}, "stream": True})
    assert len(chunks) == 1 and chunks[0]["text"] == "" and chunks[0]["meta_info"]["finish_reason"]["type"] == "stop"
    chat = _post(url + "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "w5"}],
                                                 "max_tokens": 8})
    assert chat["choices"][0]["message"]["content"] == "" and chat["choices"][0]["finish_reason"] == "stop"


def test_a_pd_pair_returns_the_same_tokens(procs, model_dir):
    """The prefill's first token travels with the KV; the decode continues at position 1."""
    from test_emulator_pd import pair, router
    (p, purl, bport), (d, durl) = pair(procs, model_dir)
    rurl, _ = router(procs, purl, bport, durl)
    vocab = EmuTokenizer(model_dir).plain_ids
    for prompt in PROMPTS[:2]:
        r = _post(rurl + "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 10,
                                                                                 "temperature": 0}})
        assert r["output_ids"] == expected_output(prompt, 10, vocab)
