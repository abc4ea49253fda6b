"""The emulator's cost model: how long a prefill chunk or a decode step takes, and acceptance.

Defaults live in ``costs.toml`` next to this file (documented there, key by key); a TOML file named
by ``SLURM_AB_EMU_CONFIG`` overrides any subset. All durations are at time scale 1: the runner
multiplies them by ``SLURM_AB_EMU_TIME_SCALE`` when it sleeps.
"""
from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from .noise import NoiseConfig

DEFAULTS_PATH = Path(__file__).with_name("costs.toml")


class CostConfigError(ValueError):
    """The cost TOML has an unknown section or key, or a value of the wrong type."""


@dataclass(frozen=True)
class Startup:
    dist_init_s: float
    load_weights_s: float
    memory_pool_s: float
    cuda_graph_s: float


@dataclass(frozen=True)
class Prefill:
    compute_ms_per_token: float
    tp_intra_node_ms_per_token: float
    tp_inter_node_ms_per_token: float
    pp_hop_ms: float
    batch_overhead_ms: float
    spec_overhead: float


@dataclass(frozen=True)
class Decode:
    compute_ms_per_step: float
    tp_intra_node_ms: float
    tp_inter_node_ms: float
    per_seq_ms: float
    kv_ms_per_1k_ctx_tokens: float
    pp_hop_ms: float
    jitter: float


@dataclass(frozen=True)
class Speculative:
    draft_ms_per_step: float
    verify_overhead_per_draft_token: float
    accept_len_request_cv: float
    accept_len_mean: Mapping[str, float]

    def mean_for(self, algorithm: str) -> float:
        return float(self.accept_len_mean.get(algorithm.upper(), self.accept_len_mean.get("default", 2.5)))


@dataclass(frozen=True)
class Memory:
    gpu_total_gib: float
    cuda_context_gib: float
    weights_gib_total: float
    draft_weights_gib: float
    kv_bytes_per_token: float
    draft_kv_bytes_per_token: float
    cuda_graph_gib: float
    reserved_gib: float
    moe_workspace_gib: float
    spec_workspace_gib: float
    workspace_min_prefill_tokens: int
    auto_mem_fraction_static: float
    auto_chunked_prefill_size: int
    auto_max_running_requests: int
    auto_cuda_graph_max_bs: int
    context_length: int


@dataclass(frozen=True)
class Pd:
    kv_wire_fraction: float
    mla_model_types: tuple
    mla_kv_lora_rank: int
    mla_rope_head_dim: int


@dataclass(frozen=True)
class Costs:
    startup: Startup
    prefill: Prefill
    decode: Decode
    speculative: Speculative
    memory: Memory
    noise: NoiseConfig
    pd: Pd


_SECTIONS = {"startup": Startup, "prefill": Prefill, "decode": Decode, "speculative": Speculative,
             "memory": Memory, "noise": NoiseConfig, "pd": Pd}


def _merge(base: dict, override: dict, where: str = "") -> dict:
    out = dict(base)
    for key, value in override.items():
        if key not in base and where != "speculative.accept_len_mean.":
            raise CostConfigError(f"unknown cost key {where}{key}")
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merge(base[key], value, f"{where}{key}.")
        else:
            out[key] = value
    return out


def _build(cls, section: str, data: dict):
    kwargs = {}
    for f in dataclasses.fields(cls):
        value = data[f.name]
        if f.type in ("float", "int") and not isinstance(value, (int, float)):
            raise CostConfigError(f"{section}.{f.name} must be a number, got {value!r}")
        if isinstance(value, list):
            kwargs[f.name] = tuple(value)
            continue
        kwargs[f.name] = int(value) if f.type == "int" else (dict(value) if isinstance(value, dict) else float(value))
    return cls(**kwargs)


def load_costs(override_path: Optional[str] = None) -> Costs:
    """Defaults from costs.toml, overridden by the TOML at override_path (if any)."""
    with open(DEFAULTS_PATH, "rb") as f:
        data = tomllib.load(f)
    if override_path:
        with open(override_path, "rb") as f:
            data = _merge(data, tomllib.load(f))
    return Costs(**{name: _build(cls, name, data[name]) for name, cls in _SECTIONS.items()})


@dataclass(frozen=True)
class Layout:
    """The parallel layout that the cost formulas depend on."""
    tp: int
    pp: int
    gpus_per_node: int

    @property
    def tp_nodes(self) -> int:
        """Nodes spanned by one TP group (1 when the group fits in a node)."""
        return max(1, math.ceil(self.tp / self.gpus_per_node))


class CostModel:
    """Durations in seconds (time scale 1) for one replica's forwards."""

    def __init__(self, costs: Costs, layout: Layout, spec_algorithm: Optional[str] = None,
                 num_draft_tokens: int = 1):
        self.c = costs
        self.layout = layout
        self.spec = spec_algorithm.upper() if spec_algorithm else None
        self.num_draft_tokens = max(1, num_draft_tokens)

    # ---- prefill -------------------------------------------------------------------------------
    def prefill_ms_per_token(self) -> float:
        p, lay = self.c.prefill, self.layout
        ms = p.compute_ms_per_token / lay.tp
        if lay.tp > 1:
            ms += p.tp_intra_node_ms_per_token
        return ms + (lay.tp_nodes - 1) * p.tp_inter_node_ms_per_token

    def prefill_time(self, tokens: int, pipeline_warm: bool) -> float:
        """One prefill batch of `tokens` new tokens; `pipeline_warm` = the previous forward was a
        prefill still flowing through the PP stages (chunks overlap, one stage each)."""
        p, pp = self.c.prefill, self.layout.pp
        full = tokens * self.prefill_ms_per_token()
        if self.spec:
            full *= 1.0 + p.spec_overhead
        if pp == 1:
            ms = full
        else:
            stage = full / pp + p.pp_hop_ms
            ms = stage if pipeline_warm else pp * stage
        return (ms + p.batch_overhead_ms) / 1000.0

    # ---- decode --------------------------------------------------------------------------------
    def decode_pass_ms(self, micro_batch: int, ctx_tokens: int) -> float:
        d, lay = self.c.decode, self.layout
        ms = d.compute_ms_per_step / lay.tp
        if lay.tp > 1:
            ms += d.tp_intra_node_ms
        ms += (lay.tp_nodes - 1) * d.tp_inter_node_ms
        ms += d.per_seq_ms * micro_batch + d.kv_ms_per_1k_ctx_tokens * ctx_tokens / 1000.0
        return ms + (lay.pp - 1) * d.pp_hop_ms

    def decode_time(self, batch: int, ctx_tokens: int, rng: Optional[random.Random] = None) -> float:
        """One decode (or verify) step for `batch` running requests holding `ctx_tokens` tokens."""
        pp = self.layout.pp
        n_micro = max(1, min(batch, pp))
        micro = math.ceil(batch / n_micro)
        ms = self.decode_pass_ms(micro, ctx_tokens // n_micro)
        if self.spec:
            s = self.c.speculative
            ms = ms * (1.0 + s.verify_overhead_per_draft_token * (self.num_draft_tokens - 1)) + s.draft_ms_per_step
        if rng is not None and self.c.decode.jitter > 0:
            ms *= max(0.5, rng.gauss(1.0, self.c.decode.jitter))
        return ms / 1000.0

    # ---- speculative acceptance ----------------------------------------------------------------
    def request_accept_mean(self, rng: random.Random) -> float:
        """Per-request mean acceptance length (lognormal around the algorithm's mean)."""
        s = self.c.speculative
        mean = s.mean_for(self.spec or "default")
        cv = s.accept_len_request_cv
        if cv <= 0:
            return mean
        sigma = math.sqrt(math.log(1 + cv * cv))
        value = mean * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
        return min(float(self.num_draft_tokens), max(1.0, value))

    def draw_accept(self, rng: random.Random, mean: float) -> int:
        """Accepted tokens of one verify step (bonus included): 1 + truncated geometric."""
        n = self.num_draft_tokens
        if n <= 1 or mean <= 1.0:
            return 1
        a = (mean - 1.0) / mean  # P(next draft accepted); E[1 + Geom] = mean before truncation
        k = 0
        while k < n - 1 and rng.random() < a:
            k += 1
        return 1 + k
