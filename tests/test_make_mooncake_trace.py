"""The testbed's Mooncake-format trace: the fields SGLang 0.5.23's mooncake loader reads, sessions
sharing leading hash blocks, and a local tokenizer with a word for every block, so replayed
prompts that share hash ids share token prefixes (the real client runs it against the emulator in
test_testbed_workloads_cluster.py)."""
from __future__ import annotations

import json

import pytest

from slurm_ab_testbed.emulator.tokenizer import EmuTokenizer
from slurm_ab_testbed.make_model import MOONCAKE_HASH_IDS, make_model
from slurm_ab_testbed.make_mooncake_trace import make_mooncake_trace


def loader_prompt(record: dict, round_no: int = 1) -> str:
    """The user turn sglang/benchmark/datasets/mooncake.py (0.5.23) builds from a record, rendered
    with make_model's chat template ("{role}: {content} </s> ... assistant: ")."""
    base = "".join(f"{h}" + " ".join(["hi"] * 128) for h in record["hash_ids"])
    base += "Tell me a story based on this context."
    return f"user: Round {round_no}: {base} </s> assistant: "


def test_trace_fields_order_and_sharing(tmp_path):
    path = make_mooncake_trace(tmp_path / "t.jsonl", sessions=40, groups=3, prefix_blocks=4, unique_blocks=2,
                               rate=5.0, output_len=32, seed=3)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 40 and all(set(r) == {"timestamp", "input_length", "output_length", "hash_ids"} for r in rows)
    stamps = [r["timestamp"] for r in rows]
    assert stamps[0] == 0 and stamps == sorted(stamps) and 4000 < stamps[-1] < 16000     # ~39 / 5 s
    assert all(r["input_length"] == 512 * len(r["hash_ids"]) == 512 * 6 and r["output_length"] == 32 for r in rows)
    prefixes = {tuple(r["hash_ids"][:4]) for r in rows}
    assert len(prefixes) == 3 and all(p[0] % 4 == 0 for p in prefixes)
    own = [tuple(r["hash_ids"][4:]) for r in rows]
    assert len(set(own)) == 40
    before = path.stat().st_mtime_ns
    make_mooncake_trace(tmp_path / "t.jsonl", sessions=40, groups=3, prefix_blocks=4, unique_blocks=2,
                        rate=5.0, output_len=32, seed=3)
    assert path.stat().st_mtime_ns == before                            # unchanged, not rewritten
    with pytest.raises(ValueError, match="hash ids"):
        make_mooncake_trace(tmp_path / "big.jsonl", sessions=MOONCAKE_HASH_IDS, unique_blocks=2)


def test_replayed_prompts_are_real_tokens_and_share_prefixes(tmp_path):
    tok = EmuTokenizer(str(make_model(tmp_path / "m", vocab_size=4000)))
    rows = [json.loads(x) for x in make_mooncake_trace(tmp_path / "t.jsonl", sessions=6, groups=2).read_text().splitlines()]
    texts = [loader_prompt(r) for r in rows]
    enc = [tok.encode(t) for t in texts]
    assert all(0 not in ids for ids in enc)                             # no <unk>
    assert all(len(ids) == len(t.split()) for ids, t in zip(enc, texts))  # a word each, as the client counts
    for a, ra in zip(enc, rows):
        for b, rb in zip(enc, rows):
            common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
            same = next((i for i, (x, y) in enumerate(zip(ra["hash_ids"], rb["hash_ids"])) if x != y), 8)
            # "user: Round 1:", then 127 words per shared block (its last "hi" is glued to the next id)
            assert common == (len(a) if ra is rb else 3 + 127 * same)
