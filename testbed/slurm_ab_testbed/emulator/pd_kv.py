"""How much KV a PD request moves and between which nodes, as SGLang 0.5.23's transfer engines do.

Size: the model's KV per token and per rank, from its config.json (data, not code): an MLA model
(DeepSeek-V3, Kimi: `kv_lora_rank` + `qk_rope_head_dim` per layer, every attention-TP rank holding
the whole latent) or an MHA/GQA one (K and V of `num_key_value_heads` x `head_dim` per layer, split
over the attention-TP ranks, replicated when there are fewer heads than ranks), times the bytes of
the KV cache dtype (--kv-cache-dtype; "auto" is the model's dtype). A config without the MLA fields
of an MLA model type takes transformers' defaults for it (costs.toml [pd]).

Pairs: each decode rank of the request's attention-DP group receives its KV from one prefill rank
(`src = decode attn-TP rank x prefill attn-TP // decode attn-TP`, in the prefill's DP group), so a
4-node prefill and a 4-node decode move KV on four node pairs at once, not head to head; the bytes
of a node pair are the sum over its rank pairs. Ranks fill nodes in order (global rank
`dp x attn_tp + attn_tp_rank`, `gpus_per_node` per node; PP 1).
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4,
               "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "fp4_e2m1": 0.5}


@dataclass(frozen=True)
class KvLayout:
    """A role instance's KV layout: attention TP and DP, GPUs per node."""
    tp: int
    dp: int                       # attention DP ranks (1 without DP attention)
    gpus_per_node: int

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // max(1, self.dp))

    def node_of(self, dp_rank: int, attn_rank: int) -> int:
        return (dp_rank * self.attn_tp + attn_rank) // max(1, self.gpus_per_node)


def kv_bytes_per_token(config: dict, kv_cache_dtype: str, attn_tp: int, pd_costs) -> float:
    """KV bytes per token held by one attention-TP rank (the real model's, before any wire fraction)."""
    layers = int(config.get("num_hidden_layers") or 0) or 1
    dtype = kv_cache_dtype if kv_cache_dtype not in (None, "", "auto") else config.get("torch_dtype", "bfloat16")
    width = DTYPE_BYTES.get(str(dtype).lower(), 2)
    model_type = str(config.get("model_type", ""))
    if "kv_lora_rank" in config or model_type in pd_costs.mla_model_types:
        rank = int(config.get("kv_lora_rank") or pd_costs.mla_kv_lora_rank)
        rope = int(config.get("qk_rope_head_dim") or pd_costs.mla_rope_head_dim)
        return float(layers * (rank + rope) * width)
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or (int(config.get("hidden_size") or 128 * heads) // heads))
    per_rank = max(1, kv_heads // max(1, attn_tp))      # replicated when heads < ranks
    return float(layers * 2 * per_rank * head_dim * width)


def node_pairs(prefill: KvLayout, decode: KvLayout, prefill_dp_rank: int, decode_dp_rank: int,
               bytes_per_rank: float) -> dict[tuple[int, int], float]:
    """(prefill node, decode node) -> KV bytes per token that pair moves for one request."""
    out: dict[tuple[int, int], float] = {}
    for i in range(decode.attn_tp):
        src = i * prefill.attn_tp // decode.attn_tp
        key = (prefill.node_of(prefill_dp_rank, src), decode.node_of(decode_dp_rank, i))
        out[key] = out.get(key, 0.0) + bytes_per_rank
    return out
