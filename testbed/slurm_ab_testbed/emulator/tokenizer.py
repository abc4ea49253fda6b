"""Token counting and detokenization with the served model's ``tokenizer.json``.

Only the ``tokenizers`` library is used (no transformers import: startup must stay fast). Prompt
lengths must match what the client counted, so text is encoded exactly as SGLang's tokenizer
manager does (``add_special_tokens=True``).
"""
from __future__ import annotations

import os
import random

from tokenizers import Tokenizer


class TokenizerNotFound(OSError):
    """Neither --tokenizer-path nor --model-path holds a tokenizer.json."""


class EmuTokenizer:
    def __init__(self, path: str):
        file = path if path.endswith(".json") else os.path.join(path, "tokenizer.json")
        if not os.path.isfile(file):
            raise TokenizerNotFound(f"Can't load tokenizer for '{path}': no tokenizer.json found "
                                    "(the emulator needs a local tokenizer; see "
                                    "`python3 -m slurm_ab_testbed.make_model`).")
        self.tok = Tokenizer.from_file(file)
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        special = {i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}
        self._plain = [i for i in range(self.vocab_size) if i not in special] or [0]

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=True).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def output_ids(self, rng: random.Random, n: int) -> list[int]:
        """n deterministic non-special token ids (the emulated generation)."""
        return [self._plain[rng.randrange(len(self._plain))] for _ in range(n)]
