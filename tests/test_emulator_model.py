"""Emulator internals in virtual time: log formats (sglang.md §3 regexes), chunked prefill,
speculative acceptance, the memory rule, the cost model's direction, the local model dir."""
import json
import subprocess
import sys

import pytest

from slurm_ab_testbed.emulator.build import build_core, plan_replica
from slurm_ab_testbed.emulator.cli_args import parse
from slurm_ab_testbed.emulator.costs import load_costs
from slurm_ab_testbed.emulator.logfmt import DecodeStats, PrefillStats, decode_line, prefill_line
from slurm_ab_testbed.make_model import make_model
from slurm_ab_testbed.emulator.memory import plan_memory
from slurm_ab_testbed.emulator.scheduler import EngineFault, Req
from slurm_ab_testbed.emulator.simulate import simulate
from slurm_ab_testbed.make_model import mooncake_words
from slurm_ab_testbed.testing import DECODE_RE, PREFILL_RE, PREFIX, SPEC
from slurm_ab_testbed.emulator.topology import Rank, Topology



def _dstats(spec=True):
    return DecodeStats(running_req=4, num_token=66000, token_usage=0.03, cuda_graph=True, gen_throughput=52.5,
                       queue_req=0, accepted_tokens=150 if spec else None, verify_ct=40 if spec else None,
                       num_draft_tokens=16 if spec else None)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.6", "0.4.10"])
def test_line_formats_parse_with_the_research_regexes(version):
    d = decode_line(version, _dstats())
    p = prefill_line(version, PrefillStats(1, 8192, 0, 0.01, 3, 1, 8192, False, 2790.5))
    for body, rx in ((d, DECODE_RE), (p, PREFILL_RE)):
        line = f"[2026-09-02 12:31:05.123 TP0 EP0] {body}"
        assert PREFIX.match(line), line
        assert rx.search(line), line
    m = DECODE_RE.search(d)
    assert m["accept_len"] == "3.75"
    if version == "0.4.10":
        assert d.startswith("Decode batch. ") and "accept rate" not in d and d.endswith(", ")
    elif version == "0.5.6":
        assert d.startswith("Decode batch, ") and m["accept_rate"] == "0.23" and d.endswith(", ")  # 150/(40*16)
        assert p.endswith("#queue-req: 1, ")
    else:
        assert m["accept_rate"] == "0.18" and not d.endswith(" ")  # (150-40)/(40*15)
        assert p.endswith("#pending-token: 8192, cuda graph: False, input throughput (token/s): 2790.50")


def test_exact_0_5_23_decode_line_without_spec():
    assert decode_line("0.5.23", _dstats(spec=False)) == (
        "Decode batch, #running-req: 4, #token: 66000, token usage: 0.03, cuda graph: True, "
        "gen throughput (token/s): 52.50, #queue-req: 0")


def test_prefixes_follow_sglang_order():
    t = Topology(tp=4, pp=8, ep=4, dp=1, dp_attention=False, nnodes=4, gpus_per_node=8)
    assert t.prefix(Rank(1, 0)) == " PP1 TP0 EP0" and t.prefix(Rank(0, 3)) == " PP0 TP3 EP3"
    assert [t.stats_stages(n) for n in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    t32 = Topology(tp=32, pp=1, ep=4, dp=1, dp_attention=False, nnodes=4, gpus_per_node=8)
    assert t32.prefix(Rank(0, 8)) == " TP8 EP1" and [t32.stats_stages(n) for n in range(4)] == [[0], [], [], []]


def _core(argv, lines, version="0.5.23"):
    args = parse(["--model-path", "/m", "--tp-size", "8"] + argv).args
    rep = plan_replica(args, load_costs(), 8, version)
    return build_core(rep, lambda rng, n: [5] * n, lines.append, seed=1), rep


def _run(core, t=0.0, limit=100000):
    for _ in range(limit):
        fwd = core.plan(t) if core.has_work() else None
        if fwd is None:
            return t
        t += fwd.duration
        core.complete(fwd, t)
    raise AssertionError("did not finish")


def test_chunked_prefill_16k_is_two_prefill_lines():
    lines = []
    core, _ = _core(["--chunked-prefill-size", "8192", "--decode-log-interval", "10"], lines)
    core.add(Req("a", 16384, 21), 0.0)
    _run(core)
    prefills = [PREFILL_RE.search(x) for x in lines if x.startswith("Prefill")]
    assert [(m["new_seq"], m["new_token"]) for m in prefills] == [("1", "8192"), ("1", "8192")]
    decodes = [DECODE_RE.search(x) for x in lines if x.startswith("Decode")]
    assert len(decodes) == 2 and all(m["accept_len"] is None for m in decodes)  # 20 decode steps / 10


def test_batches_pack_up_to_the_chunk_budget():
    lines = []
    core, _ = _core(["--chunked-prefill-size", "8192"], lines)
    for i in range(3):
        core.add(Req(f"r{i}", 5000, 2), 0.0)
    _run(core)
    got = [(m["new_seq"], m["new_token"]) for m in map(PREFILL_RE.search, lines) if m]
    assert got == [("2", "8192"), ("2", "6808")]   # r0 + 3192 of r1; rest of r1 + r2


def test_speculative_accept_fields_and_meta():
    lines = []
    core, _ = _core(SPEC + ["--decode-log-interval", "20"], lines)
    for i in range(4):
        core.add(Req(f"r{i}", 2000, 400), 0.0)
    _run(core)
    acc = [float(m["accept_len"]) for m in map(DECODE_RE.search, lines) if m]
    rates = [float(m["accept_rate"]) for m in map(DECODE_RE.search, lines) if m]
    assert acc and all(1.0 <= a <= 16.0 for a in acc)
    assert 2.5 < sum(acc) / len(acc) < 5.0
    assert all(abs(r - (a - 1) / 15) < 0.011 for a, r in zip(acc, rates))
    assert 2.5 < core.avg_spec_accept_length < 5.0


def test_oom_threshold_of_the_seed():
    costs = load_costs()
    def plan(frac, spec=True):
        args = parse(["--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", frac] + (SPEC if spec else [])).args
        return plan_memory(args, costs.memory)
    assert plan("0.86").first_big_prefill_ooms
    assert not plan("0.85").first_big_prefill_ooms and not plan("0.83").first_big_prefill_ooms
    assert not plan("0.86", spec=False).first_big_prefill_ooms


def test_oom_happens_on_the_chunk_that_reaches_16k():
    lines = []
    core, _ = _core(SPEC + ["--mem-fraction-static", "0.86", "--chunked-prefill-size", "8192"], lines)
    core.add(Req("small", 100, 3), 0.0)
    t = _run(core)
    core.add(Req("big", 16384, 1), t)
    fwd = core.plan(t)
    core.complete(fwd, t + fwd.duration)          # first 8192: fine
    fwd = core.plan(t + 1)
    with pytest.raises(EngineFault) as e:
        core.complete(fwd, t + 2)                 # reaches 16384: workspace allocation fails
    assert e.value.kind == "oom"
    assert sum(1 for x in lines if "#new-token: 8192" in x) == 2


def test_cost_model_reproduces_the_seed_direction():
    base = ["--model-path", "/m", "--ep-size", "4", "--chunked-prefill-size", "8192", "--disable-radix-cache"]
    tp32 = simulate(base + ["--tp-size", "32"], num_prompts=16)
    pp8 = simulate(base + ["--tp-size", "4", "--pp-size", "8"], num_prompts=16)
    dfl = simulate(base + ["--tp-size", "32", "--mem-fraction-static", "0.83"] + SPEC, num_prompts=16)
    assert pp8.mean_tpot_ms > 1.3 * tp32.mean_tpot_ms and pp8.duration > tp32.duration
    assert dfl.mean_tpot_ms > 1.1 * tp32.mean_tpot_ms and dfl.duration > tp32.duration
    assert 3.3 < dfl.decode_log_accept_len < 4.2
    assert 60 < tp32.mean_tpot_ms < 95 and 100 < pp8.mean_tpot_ms < 150
    assert tp32.per_replica == (8, 8)


def test_cost_override_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[decode]\ncompute_ms_per_step = 560.0\n[speculative.accept_len_mean]\nDFLASH = 2.0\n")
    c = load_costs(str(cfg))
    assert c.decode.compute_ms_per_step == 560.0 and c.speculative.mean_for("dflash") == 2.0
    cfg.write_text("[decode]\nno_such_key = 1\n")
    with pytest.raises(ValueError, match="no_such_key"):
        load_costs(str(cfg))


def test_make_model_round_trips_and_loads_with_transformers(tmp_path):
    d = make_model(tmp_path / "m", vocab_size=5000)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    make_model(tmp_path / "m", vocab_size=5000)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before      # idempotent
    code = f"""
import json
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained({str(d)!r}, trust_remote_code=True)
ids = [(4990 + j) % tok.vocab_size for j in range(16384)]          # bench_serving random-ids style
text = tok.decode(ids)
print(json.dumps([tok.vocab_size, len(tok.encode(text)), tok.encode(text) == ids]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    # 4996 w words, the 4 specials and the words of SGLang's Mooncake prompts (make_model.mooncake_words)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [5000 + len(mooncake_words()), 16384, True]
    from slurm_ab_testbed.emulator.tokenizer import EmuTokenizer
    tok = EmuTokenizer(str(d))
    assert len(tok.encode("w10 w11 <s> w12")) == 4


def test_streamed_text_is_the_full_decode_and_each_token_a_small_decode(tmp_path):
    """StreamText (SGLang's incremental detokenization): the deltas of a stream concatenate to the
    decode of all its ids, whatever the steps' sizes (empty ones included), and each step decodes a
    window of a few ids, not the whole output."""
    import random

    from slurm_ab_testbed.emulator.tokenizer import EmuTokenizer, StreamText

    tok = EmuTokenizer(str(make_model(tmp_path / "m", vocab_size=4000)))
    decoded: list[int] = []
    real = tok.decode
    tok.decode = lambda ids: decoded.append(len(ids)) or real(ids)
    rng = random.Random(7)
    for _ in range(40):
        st, deltas = StreamText(tok), []
        for _ in range(rng.randrange(1, 80)):
            deltas.append(st.add(tok.output_ids(rng, rng.choice([0, 1, 1, 1, 2, 3]))))
        assert "".join(deltas) == st.text == real(st.ids) and st.text
    assert max(decoded) <= 6
