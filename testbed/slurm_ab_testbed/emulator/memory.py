"""GPU memory arithmetic of one emulated GPU: startup numbers, KV capacity and the first-prefill OOM.

It mirrors how SGLang sizes the KV pool (what is left of ``mem_fraction_static * total`` after the
weights) and reproduces the seed's failure: with a speculative algorithm, the FlashInfer MXFP4 MoE
workspace of the first >= 16K-token prefill does not fit when mem_fraction_static is too high.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .cli_args import ServerArgs
from .costs import Memory


@dataclass(frozen=True)
class MemoryPlan:
    total_gib: float
    avail_before_load_gib: float
    weights_gib: float            # target (+ draft) weights on this GPU
    avail_after_load_gib: float
    kv_pool_gib: float
    avail_after_pool_gib: float
    cuda_graph_gib: float
    max_total_num_tokens: int
    mem_fraction_static: float
    free_for_workspace_gib: float  # what a later allocation outside the static pool can get
    workspace_gib: float           # what the first big prefill allocates
    workspace_min_prefill_tokens: int

    @property
    def first_big_prefill_ooms(self) -> bool:
        return self.workspace_gib > self.free_for_workspace_gib


def _fp8(dtype: Optional[str]) -> bool:
    return bool(dtype) and dtype.startswith("fp8")


def plan_memory(args: ServerArgs, m: Memory) -> MemoryPlan:
    frac = args.mem_fraction_static if args.mem_fraction_static is not None else m.auto_mem_fraction_static
    total = m.gpu_total_gib
    avail0 = total - m.cuda_context_gib
    weights = m.weights_gib_total / (args.tp_size * args.pp_size)
    kv_bytes = m.kv_bytes_per_token / args.pp_size
    if _fp8(args.kv_cache_dtype):
        kv_bytes /= 2
    if args.speculative:
        weights += m.draft_weights_gib
        draft_kv = m.draft_kv_bytes_per_token / (2 if _fp8(args.speculative_draft_kv_cache_dtype) else 1)
        kv_bytes += draft_kv
    avail1 = avail0 - weights
    pool = max(0.0, avail1 - total * (1.0 - frac))
    tokens = int(pool * (1 << 30) / kv_bytes) if kv_bytes > 0 else 0
    avail2 = avail1 - pool
    graph = 0.0 if args.disable_cuda_graph else m.cuda_graph_gib
    free = total * (1.0 - frac) - m.reserved_gib
    workspace = m.moe_workspace_gib + (m.spec_workspace_gib if args.speculative else 0.0)
    return MemoryPlan(total, avail0, weights, avail1, pool, avail2, graph, tokens, frac, free, workspace,
                      m.workspace_min_prefill_tokens)


def oom_message(plan: MemoryPlan) -> str:
    """torch's OutOfMemoryError text for the workspace allocation that does not fit."""
    free = max(0.01, plan.free_for_workspace_gib)
    in_use = plan.total_gib - free
    allocated = in_use - 2.37
    return (f"CUDA out of memory. Tried to allocate {plan.workspace_gib:.2f} GiB. GPU 0 has a total capacity of "
            f"{plan.total_gib:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, this "
            f"process has {in_use:.2f} GiB memory in use. Of the allocated memory {allocated:.2f} GiB is "
            f"allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. If reserved but "
            f"unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
            f"avoid fragmentation.  See documentation for Memory Management  "
            f"(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
