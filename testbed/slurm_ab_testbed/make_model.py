"""Write a tiny local "model directory" the whole stack can load offline.

``python3 -m slurm_ab_testbed.make_model DIR [--vocab-size N]`` writes a word-level tokenizer
(``w0 w1 ...``, whitespace pre-tokenizer, no normalizer) built with the ``tokenizers`` library,
so decode -> encode round-trips exactly: bench_serving's ``random-ids`` prompts of 16384 tokens
re-tokenize to 16384 on the server. It also writes ``tokenizer_config.json``
(``PreTrainedTokenizerFast``), ``special_tokens_map.json`` and ``config.json``, which is what
``transformers.AutoTokenizer.from_pretrained(DIR)`` (bench_serving) and the router's tokenizer
loader need. No weights: the emulator never loads any. Idempotent: same arguments, same bytes.

After the ``w`` words the vocabulary holds the words SGLang 0.5.23's Mooncake trace replay builds
its prompts from (:func:`mooncake_words`; ``benchmark/datasets/mooncake.py`` and the warm-up in
``benchmark/serving.py``: ``f"{hash_id}" + " ".join(["hi"] * 128)`` per hash id, glued to the
next block, then "Tell me a story based on this context."), so that a replayed trace's blocks are
distinct tokens and shared hash ids are shared prefixes, as with a real tokenizer. Hash ids below
``MOONCAKE_HASH_IDS`` have words of their own; larger ones become ``<unk>`` (``make_mooncake_trace``
stays below it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")
MOONCAKE_HASH_IDS = 2048       # hash ids whose Mooncake block words are in the vocabulary
MOONCAKE_ROUNDS = 16           # "Round N:" words for --mooncake-num-rounds up to this


def mooncake_words() -> list[str]:
    """The whitespace-split words of SGLang 0.5.23's Mooncake prompts (rounds, blocks, chat roles)."""
    words = ["user:", "assistant:", "Round", *(f"{r}:" for r in range(1, MOONCAKE_ROUNDS + 1)), "hi",
             "Tell", "me", "a", "story", "based", "on", "this", "context.", "hiTell",
             "Can", "you", "tell", "detailed", "in", "1000", "words?", "hiCan"]
    words += [f"{h}hi" for h in range(MOONCAKE_HASH_IDS)] + [f"hi{h}hi" for h in range(MOONCAKE_HASH_IDS)]
    return words
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }} </s> "
                 "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")


def tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    vocab.update({w: vocab_size + i for i, w in enumerate(mooncake_words())})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIALS))
    return tok.to_str(pretty=True)


def files(vocab_size: int, architecture: str, model_type: str, context_length: int) -> dict[str, str]:
    def dump(obj) -> str:
        return json.dumps(obj, indent=2, sort_keys=True) + "\n"

    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, t in enumerate(SPECIALS)}
    return {
        "tokenizer.json": tokenizer_json(vocab_size) + "\n",
        "tokenizer_config.json": dump({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "added_tokens_decoder": added,
            "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
            "add_bos_token": False, "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": context_length,
            "chat_template": CHAT_TEMPLATE,
        }),
        "special_tokens_map.json": dump({"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
                                         "pad_token": "<pad>"}),
        "config.json": dump({
            "architectures": [architecture],
            "model_type": model_type,
            "vocab_size": vocab_size + len(mooncake_words()),
            "max_position_embeddings": context_length,
            "hidden_size": 7168,
            "num_hidden_layers": 61,
            "num_attention_heads": 64,
            "torch_dtype": "bfloat16",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
            "slurm_ab_emulator": "tokenizer-only model directory written by slurm_ab_testbed.make_model",
        }),
    }


def make_model(directory: str | os.PathLike, vocab_size: int = 32000,
               architecture: str = "KimiK3ForConditionalGeneration", model_type: str = "deepseek_v3",
               context_length: int = 262144) -> Path:
    """Write (or rewrite identically) the model directory; returns its path."""
    if vocab_size < len(SPECIALS) + 1:
        raise ValueError(f"--vocab-size must be > {len(SPECIALS)}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files(vocab_size, architecture, model_type, context_length).items():
        write_if_changed(out / name, text)
    return out


def write_if_changed(path: Path, text: str) -> None:
    """Atomically (re)write a generated file, leaving an identical one untouched."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m slurm_ab_testbed.make_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--architecture", default="KimiK3ForConditionalGeneration",
                    help="config.json architectures[0] (shown as type= in the emulator's startup log)")
    # Kimi K2/K3 are DeepSeek-V3 models (SGLang serves them with models/deepseek_v2.py). A type
    # transformers knows keeps AutoConfig working offline; transformers 5's configuration_llama
    # imports its image utilities (torchvision, torch._dynamo: +3 s of CPU in every AutoTokenizer
    # load of a client), configuration_deepseek_v3 does not.
    ap.add_argument("--model-type", default="deepseek_v3",
                    help="config.json model_type; keep one transformers knows so AutoConfig works offline")
    ap.add_argument("--context-length", type=int, default=262144)
    a = ap.parse_args(argv)
    try:
        path = make_model(a.dir, a.vocab_size, a.architecture, a.model_type, a.context_length)
    except (OSError, ValueError) as e:
        print(f"make_model: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
