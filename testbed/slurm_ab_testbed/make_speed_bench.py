"""Write a SPEED-Bench-format JSONL for the local site (generated, no download).

``python3 -m slurm_ab_testbed.make_speed_bench OUT.jsonl --model DIR`` writes rows shaped like
NVIDIA's ``nvidia/SPEED-Bench`` throughput splits (``question_id, category, sub_category, turns,
source, src_id, difficulty, multiturn``; ``category`` is ``low_entropy``, ``mixed`` or
``high_entropy``), whose single turn is text of the local tokenizer's words (``make_model``). The
prompt lengths are set so that each row comes to ``--tokens - --spread`` .. ``--tokens`` tokens
*after* the model's chat template, counted exactly as SGLang 0.5.23's speed-bench loader counts them
(``tokenizer.apply_chat_template([{"role": "user", "content": turns[0]}],
add_generation_prompt=True, tokenize=True)``, ``sglang/benchmark/datasets/speed_bench.py``), and
every row is checked that way before the file is written. Low-entropy rows repeat a short phrase,
high-entropy rows are uniform random words, mixed rows alternate blocks of both. Deterministic and
idempotent: the same arguments give the same bytes, and an unchanged file is not rewritten.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

from .make_model import write_if_changed

CATEGORIES = ("low_entropy", "mixed", "high_entropy")
SPECIALS = 4          # make_model's <unk> <s> </s> <pad>: never part of a prompt


def _words(rng: random.Random, category: str, n: int, vocab: int) -> list[str]:
    def word() -> str:
        return f"w{rng.randrange(SPECIALS, vocab)}"
    if category == "high_entropy":
        return [word() for _ in range(n)]
    phrase = [word() for _ in range(16)]
    if category == "low_entropy":
        return [phrase[i % len(phrase)] for i in range(n)]
    out: list[str] = []
    while len(out) < n:                      # mixed: 256 repeated, 256 random, ...
        block = len(out) // 256
        out += [phrase[i % len(phrase)] for i in range(256)] if block % 2 == 0 else \
            [word() for _ in range(256)]
    return out[:n]


def rows(tokenizer, count: int, tokens: int, spread: int, seed: int) -> list[dict]:
    """The rows, each checked to come to its target length after the chat template."""
    vocab = SPECIALS + sum(1 for t in tokenizer.get_vocab() if t[:1] == "w" and t[1:].isdigit())   # the w words

    def templated(text: str) -> int:
        return len(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 add_generation_prompt=True, tokenize=True,
                                                 return_dict=False))
    overhead = templated("w4") - 1
    rng = random.Random(seed)
    out = []
    for i in range(count):
        category = CATEGORIES[i % len(CATEGORIES)]
        target = tokens - rng.randrange(spread + 1) if spread else tokens
        text = " ".join(_words(rng, category, target - overhead, vocab))
        got = templated(text)
        if got != target:
            raise ValueError(f"row {i}: {got} tokens after the chat template, meant {target} "
                             "(the tokenizer does not split text on whitespace into one token per word?)")
        out.append({"question_id": f"local-{tokens // 1024}k-{i:04d}", "category": category,
                    "sub_category": category, "turns": [text], "source": "slurm-ab-testbed",
                    "src_id": str(i), "difficulty": "", "multiturn": False})
    return out


def make_speed_bench(out: str | os.PathLike, model: str, count: int = 48, tokens: int = 16384,
                     spread: int = 1024, seed: int = 1) -> Path:
    """Write (or leave identical) the JSONL; returns its path."""
    if count < 1 or tokens < 16 or not 0 <= spread < tokens - 8:
        raise ValueError("need --rows >= 1, --tokens >= 16 and 0 <= --spread < --tokens - 8")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{model} has no chat template (make_model writes one)")
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows(tok, count, tokens, spread, seed))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_if_changed(path, text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m slurm_ab_testbed.make_speed_bench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the JSONL to write, e.g. .../speed-bench/throughput_16k.jsonl")
    ap.add_argument("--model", required=True, help="a model directory written by make_model")
    ap.add_argument("--rows", type=int, default=48, help="rows, the categories in turn (default 48)")
    ap.add_argument("--tokens", type=int, default=16384, help="longest prompt after the chat template")
    ap.add_argument("--spread", type=int, default=1024, help="prompts are --tokens minus 0..spread tokens")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        path = make_speed_bench(a.out, a.model, a.rows, a.tokens, a.spread, a.seed)
    except (OSError, ValueError) as e:
        print(f"make_speed_bench: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
