"""Emulator-only knobs, read from the environment (never from flags: see the package docstring)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from .faults import Faults, parse_faults

LOG_VERSIONS = ("0.5.23", "0.5.6", "0.4.10")


class KnobError(ValueError):
    """An emulator environment variable has an invalid value."""


@dataclass(frozen=True)
class Knobs:
    config_path: Optional[str] = None     # SLURM_AB_EMU_CONFIG
    time_scale: float = 1.0               # SLURM_AB_EMU_TIME_SCALE
    log_version: str = "0.5.23"           # SLURM_AB_EMU_LOG_VERSION
    faults: Faults = Faults()             # SLURM_AB_EMU_FAULT
    seed: Optional[int] = None            # SLURM_AB_EMU_SEED
    gpus_per_node: int = 8                # SLURM_AB_EMU_GPUS_PER_NODE
    log_ms: bool = False                  # SGLANG_LOG_MS (SGLang's own variable)
    collective_bytes: int = 4096          # SLURM_AB_EMU_COLLECTIVE_BYTES (0: no per-forward exchange)


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def read_knobs(env: Mapping[str, str] = os.environ) -> Knobs:
    """Read and validate every knob; raise KnobError with the variable's name on a bad value."""
    def number(name, cast, default, minimum):
        raw = env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = cast(raw)
        except ValueError:
            raise KnobError(f"{name}={raw!r} is not a valid {cast.__name__}") from None
        if value < minimum:
            raise KnobError(f"{name}={raw!r} must be >= {minimum}")
        return value

    version = env.get("SLURM_AB_EMU_LOG_VERSION", "").strip() or "0.5.23"
    if version not in LOG_VERSIONS:
        raise KnobError(f"SLURM_AB_EMU_LOG_VERSION={version!r}: choose one of {', '.join(LOG_VERSIONS)}")
    scale = number("SLURM_AB_EMU_TIME_SCALE", float, 1.0, 0.0)
    if scale <= 0:
        raise KnobError("SLURM_AB_EMU_TIME_SCALE must be > 0")
    try:
        faults = parse_faults(env.get("SLURM_AB_EMU_FAULT"))
    except ValueError as e:
        raise KnobError(str(e)) from None
    # SLURM_AB_EMU_FAULT_NODES=node05,node06 limits the faults to the processes on those Slurm
    # nodes (SLURMD_NODENAME), so a test can break one replica of a job.
    only = [n.strip() for n in env.get("SLURM_AB_EMU_FAULT_NODES", "").split(",") if n.strip()]
    if only and env.get("SLURMD_NODENAME", "") not in only:
        faults = parse_faults(None)
    return Knobs(
        # an image's own build (SLURM_AB_EMU_IMAGE_CONFIG, set by a testbed image), then the run's
        config_path=":".join(p for p in (env.get("SLURM_AB_EMU_IMAGE_CONFIG"), env.get("SLURM_AB_EMU_CONFIG")) if p)
        or None,
        time_scale=scale,
        log_version=version,
        faults=faults,
        seed=number("SLURM_AB_EMU_SEED", int, None, 0),
        gpus_per_node=number("SLURM_AB_EMU_GPUS_PER_NODE", int, 8, 1),
        log_ms=_truthy(env.get("SGLANG_LOG_MS")),
        collective_bytes=number("SLURM_AB_EMU_COLLECTIVE_BYTES", int, 4096, 0),
    )
