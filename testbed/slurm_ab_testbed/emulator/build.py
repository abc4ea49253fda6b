"""Assemble one replica's scheduler from resolved ServerArgs, the cost TOML and the knobs.

Shared by the real server (``node``) and the offline estimator (``simulate``) so both run the
same model with the same defaults (auto values of SGLang flags come from costs.toml [memory]).
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Callable, Optional

from .cli_args import ServerArgs
from .costs import CostModel, Costs, Layout
from .memory import MemoryPlan, plan_memory
from .noise import Noise
from .scheduler import SchedConfig, SchedulerCore


@dataclass(frozen=True)
class Replica:
    config: SchedConfig
    model: CostModel
    memory: MemoryPlan
    chunked_prefill_size: int
    max_running_requests: int


def plan_replica(args: ServerArgs, costs: Costs, gpus_per_node: int, log_version: str) -> Replica:
    m = costs.memory
    memory = plan_memory(args, m)
    chunk = args.chunked_prefill_size if args.chunked_prefill_size is not None else m.auto_chunked_prefill_size
    max_running = args.max_running_requests or m.auto_max_running_requests
    graph_bs = 0 if args.disable_cuda_graph else (args.cuda_graph_max_bs_decode or m.auto_cuda_graph_max_bs)
    n_draft = (args.speculative_num_draft_tokens or 1) if args.speculative else 1
    cfg = SchedConfig(
        max_running_requests=max_running, chunked_prefill_size=chunk,
        max_prefill_tokens=args.max_prefill_tokens, max_total_num_tokens=memory.max_total_num_tokens,
        decode_log_interval=args.decode_log_interval, cuda_graph_max_bs=graph_bs,
        num_draft_tokens=n_draft, log_version=log_version,
        pp_micro_batches=args.pp_size + args.pp_async_batch_depth if args.pp_size > 1 else 1,
        radix_cache=not args.disable_radix_cache, page_size=args.page_size or 1)
    model = CostModel(costs, Layout(args.tp_size, args.pp_size, gpus_per_node),
                      args.speculative_algorithm, n_draft)
    return Replica(cfg, model, memory, chunk, max_running)


def with_kv_pool(rep: Replica, tokens: int) -> Replica:
    """The replica with a KV pool of ``tokens`` tokens whatever memory allows (fault kv_pool_tokens)."""
    return dataclasses.replace(rep, memory=dataclasses.replace(rep.memory, max_total_num_tokens=tokens),
                               config=dataclasses.replace(rep.config, max_total_num_tokens=tokens))


def build_core(rep: Replica, sample_ids: Callable[[random.Random, int], list[int]],
               emit: Callable[[str], None], seed: int, oom_first_user_prefill: bool = False,
               noise: Optional[Noise] = None, core_cls: type = SchedulerCore) -> SchedulerCore:
    """core_cls: SchedulerCore, or a PD role's core (pd_core)."""
    return core_cls(rep.config, rep.model, rep.memory, sample_ids, emit, seed, oom_first_user_prefill, noise)
