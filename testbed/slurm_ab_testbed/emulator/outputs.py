"""What the emulated model generates: at temperature 0, a deterministic function of the prompt.

SGLang at temperature 0 (greedy sampling, ``sampling/sampling_params.py``: temperature 0 or
top_k 1) returns the same tokens for the same prompt whatever the parallel layout, PD split or
speculative algorithm (speculative verification is lossless). The emulator makes that exact:
output token i of a prompt is ``token_at(prompt_seed(ids), i)``, a function of the prompt's token
ids and the position only, so TP/PP/DP layouts, a PD prefill/decode pair (the prefill's first
token travels with the KV, the decode continues at position 1) and EAGLE/DFLASH modes (which
take 1..N tokens per verify step) all produce the same ids. Sampled requests (temperature > 0,
SGLang's default 1.0) keep the per-request random stream of the scheduler.

Correctness faults (``SLURM_AB_EMU_FAULT``, faults.py), for the correctness gate to catch:

- ``divergence=K``: a broken draft model. On a server with a speculative algorithm, prompts for
  which :func:`diverges` is true get different tokens from output position K on (0-based);
  the others are unchanged. Silent, as a real numerics bug would be. Servers without a
  speculative algorithm ignore it.
- ``empty_output``: every request returns no text: its first token is the model's EOS and the
  request stops there (``finish_reason {"type": "stop", "matched": EOS}``, ``output_ids [EOS]``,
  ``completion_tokens 1``, ``text ""``; SGLang's shape for a model that emits EOS at once,
  ``managers/schedule_batch.py`` FINISH_MATCHED_TOKEN), even with ``ignore_eos``.

Pure and cheap: one blake2b of the prompt per request and a few integer operations per token.
"""
from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from typing import Optional, Sequence

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_DIVERGED = 0x5DEECE66D5A5A5A5          # salt of the diverged stream


def prompt_seed(ids: Sequence[int]) -> int:
    """64-bit seed of a prompt (its token ids)."""
    data = array("q", ids).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _mix(x: int) -> int:
    """splitmix64's finaliser."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def token_at(seed: int, pos: int, vocab: Sequence[int]) -> int:
    """The output token at position ``pos`` (0 = first generated token) for a prompt seed."""
    return vocab[_mix((seed + pos * _GOLDEN) & _MASK) % len(vocab)]


def diverges(ids: Sequence[int]) -> bool:
    """Whether the ``divergence`` fault changes this prompt's output (about half of all prompts:
    those whose seed is odd)."""
    return bool(prompt_seed(ids) & 1)


def expected_output(ids: Sequence[int], n: int, vocab: Sequence[int], diverge_at: Optional[int] = None) -> list[int]:
    """The first n output ids of a prompt at temperature 0 (tests and the correctness gate's
    own checks); ``diverge_at``: the ``divergence=K`` fault's K for a speculative server."""
    return Outputs.for_prompt(ids, vocab, diverge_at).ids(0, n)


@dataclass(frozen=True)
class Outputs:
    """One request's deterministic output stream (attached to the scheduler's Req)."""
    seed: int
    vocab: Sequence[int]
    diverge_at: Optional[int] = None     # divergence fault: other tokens from this position on
    eos: Optional[int] = None            # empty_output fault: the first token is this EOS, then stop

    @classmethod
    def for_prompt(cls, ids: Sequence[int], vocab: Sequence[int], diverge_at: Optional[int] = None,
                   eos: Optional[int] = None) -> "Outputs":
        seed = prompt_seed(ids)
        return cls(seed, vocab, diverge_at if diverge_at is not None and seed & 1 else None, eos)

    def ids(self, start: int, n: int) -> list[int]:
        """Tokens at positions start .. start + n - 1."""
        if self.eos is not None:
            return [self.eos] * n
        out = []
        for pos in range(start, start + n):
            seed = self.seed if self.diverge_at is None or pos < self.diverge_at else self.seed ^ _DIVERGED
            out.append(token_at(seed, pos, self.vocab))
        return out
