"""Write a small Mooncake-format trace for the local site (generated, no download).

``python3 -m slurm_ab_testbed.make_mooncake_trace OUT.jsonl`` writes JSON lines shaped like the
Mooncake traces (kvcache-ai/Mooncake ``FAST25-release``): ``{"timestamp": MS, "input_length": N,
"output_length": M, "hash_ids": [...]}``, one per session, in timestamp order. SGLang 0.5.23's
``bench_serving --dataset-name mooncake --dataset-path FILE`` (``benchmark/datasets/mooncake.py``)
reads them as they are:

- ``timestamp`` (ms) schedules each session (``--mooncake-slowdown-factor`` stretches it; with the
  sglang backend ``--request-rate`` is ignored); ``--num-prompts`` keeps the first N lines;
- ``hash_ids`` make the prompt: per id ``f"{id}"`` + 128 x ``"hi"``, then "Tell me a story based
  on this context.", chat-templated (``--mooncake-num-rounds`` sends that many growing rounds of a
  session at once); a shared leading run of ids is a shared prompt prefix, which is what the radix
  cache reuses;
- ``output_length`` is each round's max_new_tokens; ``input_length`` is the trace's own count (512
  tokens per hash block) and not read by 0.5.23.

Without an existing ``--dataset-path`` file the client downloads the public trace from GitHub
(``MOONCAKE_DATASET_URL``), so a site must provide the file. The sessions here: ``--groups``
groups sharing ``--prefix-blocks`` leading blocks each (a system prompt, a document), then
``--unique-blocks`` blocks of their own; arrivals are Poisson at ``--rate`` sessions/s. Every hash
id is below ``make_model.MOONCAKE_HASH_IDS``, so the local tokenizer has a word for each block.
Deterministic and idempotent (same arguments, same bytes; an unchanged file is not rewritten).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

from .make_model import MOONCAKE_HASH_IDS, write_if_changed

BLOCK_TOKENS = 512          # the Mooncake traces' block size (input_length = blocks x 512)


def rows(sessions: int, groups: int, prefix_blocks: int, unique_blocks: int, rate: float, output_len: int,
         seed: int) -> list[dict]:
    rng = random.Random(seed)
    next_id = groups * prefix_blocks
    out, t = [], 0.0
    for _ in range(sessions):
        g = rng.randrange(groups)
        ids = list(range(g * prefix_blocks, (g + 1) * prefix_blocks)) + list(range(next_id, next_id + unique_blocks))
        next_id += unique_blocks
        out.append({"timestamp": int(round(t * 1000)), "input_length": len(ids) * BLOCK_TOKENS,
                    "output_length": output_len, "hash_ids": ids})
        t += rng.expovariate(rate)
    if next_id > MOONCAKE_HASH_IDS:
        raise ValueError(f"{next_id} hash ids needed, the local tokenizer has words for {MOONCAKE_HASH_IDS} "
                         "(fewer --sessions, --groups or blocks)")
    return out


def make_mooncake_trace(out: str | os.PathLike, sessions: int = 64, groups: int = 4, prefix_blocks: int = 6,
                        unique_blocks: int = 2, rate: float = 2.0, output_len: int = 64, seed: int = 1) -> Path:
    """Write (or leave identical) the trace; returns its path."""
    if min(sessions, groups, output_len) < 1 or prefix_blocks < 0 or unique_blocks < 1 or rate <= 0:
        raise ValueError("need --sessions, --groups, --output-len, --unique-blocks >= 1, --prefix-blocks >= 0 "
                         "and --rate > 0")
    text = "".join(json.dumps(r) + "\n" for r in rows(sessions, groups, prefix_blocks, unique_blocks, rate,
                                                       output_len, seed))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_if_changed(path, text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m slurm_ab_testbed.make_mooncake_trace",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the JSONL to write, e.g. .../datasets/mooncake/mooncake_trace.jsonl")
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--groups", type=int, default=4, help="groups of sessions sharing a prefix")
    ap.add_argument("--prefix-blocks", type=int, default=6, help="hash blocks a group shares")
    ap.add_argument("--unique-blocks", type=int, default=2, help="hash blocks of each session's own")
    ap.add_argument("--rate", type=float, default=2.0, help="sessions per second (Poisson)")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        path = make_mooncake_trace(a.out, a.sessions, a.groups, a.prefix_blocks, a.unique_blocks, a.rate,
                                   a.output_len, a.seed)
    except (OSError, ValueError) as e:
        print(f"make_mooncake_trace: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
