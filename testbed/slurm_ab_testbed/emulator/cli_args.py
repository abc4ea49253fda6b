"""SGLang ``launch_server`` flags, parsed the way SGLang 0.5.23 parses them.

The emulator must reject exactly what SGLang rejects, because the job script renders one command
for both: names, aliases, defaults and choices follow sglang.md §1/§2, the parser is a plain
``argparse.ArgumentParser(prog="sglang serve")`` with ``allow_abbrev`` on (so ``--tp`` works and
``--pp`` is ambiguous, as in SGLang), and the post-parse rules mirror ``ServerArgs.__post_init__``
(DFLASH needs pp_size == 1 and a draft model; any speculative algorithm resets
max_running_requests to 48). Abbreviations are resolved against the flags declared here, which
include SGLang's siblings of the rendered flags so that the ambiguities we know of are real.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Optional

from .pd_args import PdArgsError, add_pd_flags, resolve_pd

KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
DRAFT_KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16")
MOE_RUNNER_BACKENDS = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl",
    "flashinfer_megamoe", "cutlass", "aiter", "marlin", "humming", "experimental_sgl_marlin",
    "lora_cutedsl", "lora_triton", "lora_marlin", "hpc_ops", "megamoe", "intel_xpu")
MOE_A2A_BACKENDS = ("none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe",
                    "deepep_v2", "pplx", "ascend_tp", "flashinfer_megamoe")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
SPEC_RESET_MAX_RUNNING = 48
SPEC_RESET_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override this "
                      "by explicitly setting --max-running-requests.")
DFLASH_PP_ERROR = "Currently DFLASH speculative decoding only supports pp_size == 1."
DFLASH_DRAFT_ERROR = "DFLASH speculative decoding requires --speculative-draft-model-path."
DFLASH_DEFAULT_BLOCK_WARNING = "speculative_num_draft_tokens is not set; defaulting to 16 for DFLASH."


class ServerArgsError(ValueError):
    """A rule of ServerArgs.__post_init__ failed (SGLang raises ValueError, exit status 1; ``exc_type``
    names the exception a PD rule raises instead)."""

    def __init__(self, message: str, exc_type: str = "ValueError"):
        super().__init__(message)
        self.exc_type = exc_type


@dataclass(frozen=True)
class ServerArgs:
    """The resolved launch_server arguments (field names as in SGLang's ServerArgs)."""
    model_path: str
    tokenizer_path: Optional[str] = None
    served_model_name: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    pp_size: int = 1
    pp_max_micro_batch_size: Optional[int] = None
    pp_async_batch_depth: int = 0
    ep_size: int = 1
    dp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: Optional[str] = None
    nccl_port: Optional[int] = None
    dist_timeout: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    kv_cache_dtype: str = "auto"
    moe_runner_backend: str = "auto"
    moe_a2a_backend: str = "none"
    disable_radix_cache: bool = False
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    trust_remote_code: bool = False
    enable_metrics: bool = False
    enable_cache_report: bool = False
    log_level: str = "info"
    decode_log_interval: int = 40
    context_length: Optional[int] = None
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_dflash_block_size: Optional[int] = None
    speculative_draft_kv_cache_dtype: Optional[str] = None
    speculative_draft_attention_backend: Optional[str] = None
    attention_backend: Optional[str] = None
    cuda_graph_max_bs_decode: Optional[int] = None
    cuda_graph_max_bs_prefill: Optional[int] = None
    disable_cuda_graph: bool = False
    skip_server_warmup: bool = False
    watchdog_timeout: float = 300.0
    random_seed: Optional[int] = None
    dtype: str = "auto"
    quantization: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    enable_dp_attention: bool = False
    enable_dp_lm_head: bool = False
    stream_interval: int = 1
    api_key: Optional[str] = None
    # PD disaggregation (pd_args.py): role, transfer, bootstrap, decode admission
    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_ib_device: Optional[str] = None
    disaggregation_decode_allocation_policy: str = "early"
    disaggregation_decode_enable_radix_cache: bool = False
    disaggregation_decode_extra_slots: Optional[int] = None
    disaggregation_decode_host_receive_threshold: float = 1.0
    disaggregation_enable_kv_checksum: bool = False
    num_reserved_decode_tokens: int = 512
    optimistic_prefill_attempts: int = 0
    page_size: Optional[int] = None
    load_balance_method: str = "auto"
    extra: dict = field(default_factory=dict)  # accepted SGLang flags the emulator does not model

    @property
    def speculative(self) -> bool:
        return bool(self.speculative_algorithm)

    @property
    def world_size(self) -> int:
        dp = 1 if self.enable_dp_attention else self.dp_size
        return self.tp_size * self.pp_size * dp

    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def to_json_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(d.pop("extra"))
        return d


def _add(p: argparse.ArgumentParser, *names, **kw) -> None:
    p.add_argument(*names, **kw)


def build_parser() -> argparse.ArgumentParser:
    """The emulated subset of SGLang 0.5.23's parser (same prog, names, aliases, choices)."""
    p = argparse.ArgumentParser(prog="sglang serve")
    # model / tokenizer
    _add(p, "--model-path", "--model", type=str, required=True, dest="model_path")
    _add(p, "--tokenizer-path", type=str)
    _add(p, "--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"])
    _add(p, "--tokenizer-worker-num", type=int, default=1)
    _add(p, "--served-model-name", type=str)
    _add(p, "--trust-remote-code", action="store_true")
    _add(p, "--context-length", type=int)
    _add(p, "--dtype", type=str, default="auto", choices=DTYPES)
    _add(p, "--quantization", type=str)
    _add(p, "--load-format", type=str, default="auto")
    # HTTP
    _add(p, "--host", type=str, default="127.0.0.1")
    _add(p, "--port", type=int, default=30000)
    _add(p, "--api-key", type=str)
    _add(p, "--skip-server-warmup", action="store_true")
    _add(p, "--warmups", type=str)
    # parallelism
    _add(p, "--tp-size", "--tensor-parallel-size", type=int, default=1, dest="tp_size")
    _add(p, "--pp-size", "--pipeline-parallel-size", type=int, default=1, dest="pp_size")
    _add(p, "--pp-max-micro-batch-size", type=int)
    _add(p, "--pp-async-batch-depth", type=int, default=0)
    _add(p, "--ep-size", "--expert-parallel-size", "--ep", type=int, default=1, dest="ep_size")
    _add(p, "--dp-size", "--data-parallel-size", type=int, default=1, dest="dp_size")
    _add(p, "--enable-dp-attention", action="store_true")
    _add(p, "--enable-dp-lm-head", action="store_true")
    _add(p, "--nnodes", type=int, default=1)
    _add(p, "--node-rank", type=int, default=0)
    _add(p, "--dist-init-addr", "--nccl-init-addr", type=str, dest="dist_init_addr")
    _add(p, "--nccl-port", type=int)
    _add(p, "--dist-timeout", type=int)
    _add(p, "--moe-runner-backend", type=str, default="auto", choices=MOE_RUNNER_BACKENDS)
    _add(p, "--moe-a2a-backend", type=str, default="none", choices=MOE_A2A_BACKENDS)
    # scheduling / memory
    _add(p, "--chunked-prefill-size", type=int)
    _add(p, "--max-prefill-tokens", type=int, default=16384)
    _add(p, "--max-running-requests", type=int)
    _add(p, "--mem-fraction-static", type=float)
    _add(p, "--kv-cache-dtype", type=str, default="auto", choices=KV_CACHE_DTYPES)
    _add(p, "--disable-radix-cache", action="store_true")
    _add(p, "--stream-interval", type=int, default=1)
    _add(p, "--attention-backend", type=str)
    _add(p, "--cuda-graph-max-bs-decode", type=int)
    _add(p, "--cuda-graph-max-bs-prefill", type=int)
    _add(p, "--disable-cuda-graph", action="store_true")
    _add(p, "--watchdog-timeout", type=float, default=300.0)
    _add(p, "--random-seed", type=int)
    # observability
    _add(p, "--log-level", type=str, default="info")
    _add(p, "--enable-metrics", action="store_true")
    _add(p, "--enable-cache-report", action="store_true")
    _add(p, "--decode-log-interval", type=int, default=40)
    # parsers
    _add(p, "--tool-call-parser", type=str)
    _add(p, "--reasoning-parser", type=str)
    # speculative decoding (sglang.md §2)
    _add(p, "--speculative-algorithm", type=str)
    _add(p, "--speculative-draft-model-path", "--speculative-draft-model", type=str,
         dest="speculative_draft_model_path")
    _add(p, "--speculative-num-steps", type=int)
    _add(p, "--speculative-eagle-topk", type=int)
    _add(p, "--speculative-num-draft-tokens", type=int)
    _add(p, "--speculative-dflash-block-size", type=int)
    _add(p, "--speculative-draft-kv-cache-dtype", type=str, choices=DRAFT_KV_CACHE_DTYPES)
    _add(p, "--speculative-draft-attention-backend", type=str)
    _add(p, "--speculative-moe-runner-backend", type=str)
    _add(p, "--speculative-moe-a2a-backend", type=str)
    _add(p, "--speculative-draft-window-size", type=int)
    _add(p, "--speculative-draft-model-quantization", type=str)
    _add(p, "--speculative-attention-mode", type=str, choices=["prefill", "decode"])
    add_pd_flags(p)
    return p


_MODELLED = {f.name for f in dataclasses.fields(ServerArgs)} - {"extra"}


@dataclass(frozen=True)
class Resolved:
    """Parsed arguments plus the warnings SGLang would log while resolving them."""
    args: ServerArgs
    warnings: tuple[str, ...]


def parse(argv: list[str], gpus_per_node: int = 8, draft_block_size: Optional[int] = None) -> Resolved:
    """Parse argv like ``sglang serve``; argparse errors exit 2, rule violations raise ServerArgsError."""
    ns = vars(build_parser().parse_args(argv))
    known = {k: v for k, v in ns.items() if k in _MODELLED}
    extra = {k: v for k, v in ns.items() if k not in _MODELLED}
    return resolve(ServerArgs(**known, extra=extra), gpus_per_node, draft_block_size)


def _draft_config_block_size(path: Optional[str]) -> Optional[int]:
    if not path:
        return None
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            value = json.load(f).get("block_size")
        return int(value) if value else None
    except (OSError, ValueError, TypeError):
        return None


def resolve(a: ServerArgs, gpus_per_node: int = 8, draft_block_size: Optional[int] = None) -> Resolved:
    """Apply SGLang's post-init rules; return the resolved args and the warnings to log."""
    warnings: list[str] = []
    changes: dict = {}
    if a.speculative_algorithm:
        algo = a.speculative_algorithm.upper()
        changes["speculative_algorithm"] = algo
        if a.max_running_requests is None:
            changes["max_running_requests"] = SPEC_RESET_MAX_RUNNING
            warnings.append(SPEC_RESET_WARNING)
        if algo == "DFLASH":
            if a.pp_size > 1:
                raise ServerArgsError(DFLASH_PP_ERROR)
            if not a.speculative_draft_model_path:
                raise ServerArgsError(DFLASH_DRAFT_ERROR)
            for name in ("speculative_num_steps", "speculative_eagle_topk"):
                if getattr(a, name) not in (None, 1):
                    warnings.append(f"DFLASH forces {name}=1 (got {getattr(a, name)}).")
            changes["speculative_num_steps"] = 1
            changes["speculative_eagle_topk"] = 1
            block = (a.speculative_dflash_block_size or a.speculative_num_draft_tokens
                     or draft_block_size or _draft_config_block_size(a.speculative_draft_model_path))
            if block is None:
                warnings.append(DFLASH_DEFAULT_BLOCK_WARNING)
                block = 16
            changes["speculative_num_draft_tokens"] = block
        else:
            steps = a.speculative_num_steps or 3
            topk = a.speculative_eagle_topk or 1
            changes["speculative_num_steps"] = steps
            changes["speculative_eagle_topk"] = topk
            changes["speculative_num_draft_tokens"] = a.speculative_num_draft_tokens or steps + 1
        if a.speculative_draft_kv_cache_dtype is None:
            changes["speculative_draft_kv_cache_dtype"] = a.kv_cache_dtype
    for name in ("tp_size", "pp_size", "ep_size", "dp_size", "nnodes"):
        if getattr(a, name) < 1:
            raise ServerArgsError(f"{name} must be >= 1, got {getattr(a, name)}.")
    if not 0 <= a.node_rank < a.nnodes:
        raise ServerArgsError(f"node_rank={a.node_rank} must be in [0, nnodes={a.nnodes}).")
    if a.tp_size % a.ep_size:
        raise ServerArgsError(f"tp_size={a.tp_size} must be divisible by ep_size={a.ep_size}.")
    if a.nnodes > 1 and not a.dist_init_addr:
        raise ServerArgsError("--dist-init-addr is required when --nnodes > 1.")
    if a.dist_init_addr and ":" not in a.dist_init_addr:
        raise ServerArgsError(f"--dist-init-addr must be HOST:PORT, got {a.dist_init_addr!r}.")
    if a.mem_fraction_static is not None and not 0 < a.mem_fraction_static < 1:
        raise ServerArgsError(f"mem_fraction_static must be in (0, 1), got {a.mem_fraction_static}.")
    try:
        changes.update(resolve_pd(dataclasses.replace(a, **changes), warnings))
    except PdArgsError as e:
        raise ServerArgsError(str(e), e.exc_type) from None
    resolved = dataclasses.replace(a, **changes)
    gpus = a.nnodes * gpus_per_node
    if resolved.world_size != gpus:
        raise ServerArgsError(
            f"tp_size * pp_size{' * dp_size' if resolved.world_size != a.tp_size * a.pp_size else ''} "
            f"= {resolved.world_size} must equal nnodes * GPUs per node = {a.nnodes} * {gpus_per_node} = {gpus} "
            f"(emulated GPUs per node: SLURM_AB_EMU_GPUS_PER_NODE).")
    if resolved.served_model_name is None:
        resolved = dataclasses.replace(resolved, served_model_name=resolved.model_path)
    if resolved.tokenizer_path is None:
        resolved = dataclasses.replace(resolved, tokenizer_path=resolved.model_path)
    return Resolved(resolved, tuple(warnings))
