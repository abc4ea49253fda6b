"""Token counting and detokenization with the served model's ``tokenizer.json``.

Only the ``tokenizers`` library is used (no transformers import: startup must stay fast). Prompt
lengths must match what the client counted, so text is encoded exactly as SGLang's tokenizer
manager does (``add_special_tokens=True``).
"""
from __future__ import annotations

import json
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
        self.eos_id = self._eos_id(file, special)

    @property
    def plain_ids(self) -> list[int]:
        """Ids the emulated model generates (no special tokens): outputs.py's vocabulary."""
        return self._plain

    def _eos_id(self, file: str, special: set) -> int:
        """The model's EOS (config.json eos_token_id, else tokenizer_config.json's eos_token)."""
        folder = os.path.dirname(file)
        for name, key in (("config.json", "eos_token_id"), ("tokenizer_config.json", "eos_token")):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    value = json.load(f).get(key)
            except (OSError, ValueError):
                continue
            if isinstance(value, list) and value:
                value = value[0]
            if isinstance(value, int):
                return value
            if isinstance(value, str) and self.tok.token_to_id(value) is not None:
                return self.tok.token_to_id(value)
        return min(special) if special else 0

    def encode(self, text: str) -> list[int]:
        # encode_batch_fast (tokenizers >= 0.21) skips the offsets nobody reads here: the same
        # ids in half the time of encode() on a 16K-token prompt
        fast = getattr(self.tok, "encode_batch_fast", None)
        if fast is not None:
            return fast([text], add_special_tokens=True)[0].ids
        return self.tok.encode(text, add_special_tokens=True).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def output_ids(self, rng: random.Random, n: int) -> list[int]:
        """n deterministic non-special token ids (the emulated generation)."""
        return [self._plain[rng.randrange(len(self._plain))] for _ in range(n)]


class StreamText:
    """One request's output text as it streams, detokenized incrementally as SGLang's
    DetokenizerManager does: decode from the surrogate offset, emit what follows the text already
    read unless it ends in an incomplete character (U+FFFD), then move both offsets. Each token
    costs a decode of a few ids, not of the whole output so far (quadratic on long outputs)."""

    def __init__(self, tok: EmuTokenizer):
        self.tok = tok
        self.ids: list[int] = []
        self.text = ""
        self._surr = self._read = 0

    def add(self, new_ids: list[int]) -> str:
        """Append the step's ids; returns the text they add (possibly empty)."""
        self.ids.extend(new_ids)
        surr_text = self.tok.decode(self.ids[self._surr:self._read])
        read_text = self.tok.decode(self.ids[self._surr:])
        if len(read_text) <= len(surr_text) or read_text.endswith("\ufffd"):
            return ""
        delta = read_text[len(surr_text):]
        self._surr, self._read = self._read, len(self.ids)
        self.text += delta
        return delta
