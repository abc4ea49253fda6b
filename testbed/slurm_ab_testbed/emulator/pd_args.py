"""SGLang 0.5.23's prefill/decode (PD) disaggregation flags and the rules it applies to them.

Names, defaults and choices are those of ``srt/arg_groups/fields/disagg.py`` (choices:
``arg_groups/choices.py``), plus the neighbours a PD command line uses (``--page-size``,
``--load-balance-method``, ``--max-queued-requests``) and ``--prefill-only-disable-kv-cache``, whose
presence makes ``--prefill-only`` a silent prefix abbreviation as in SGLang (research note
pd-disaggregation.md §1.1). ``resolve_pd`` mirrors ``pd_disaggregation_hook.handle_pd_disaggregation``,
``serving_hook`` (load-balance ``auto``), ``validation_hook.validate_ib_devices`` and the PP +
speculative rule of ``validation_hook.check_pipeline_parallel_compat``; each refusal keeps SGLang's
exception type and text.
"""
from __future__ import annotations

import argparse
import os
from typing import Optional

TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")
LOAD_BALANCE_METHODS = ("auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens")
IB_SYSFS = "/sys/class/infiniband"

RADIX_OFF_WARNING = "Radix cache is disabled for decode server"
RADIX_ON_WARNING = "EXPERIMENTAL: Radix cache is enabled for decode server"
NO_IB_WARNING = "No IB devices specified for Mooncake backend, falling back to auto discovery."
FAKE_PREFILL_ERROR = "Prefill server does not support 'fake' as the transfer backend"
PP_SPEC_ERROR = "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)"
THRESHOLD_ERROR = "--disaggregation-decode-host-receive-threshold must be between 0 and 1"


def add_pd_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--disaggregation-mode", type=str, default="null", choices=["null", "prefill", "decode"])
    p.add_argument("--disaggregation-decode-allocation-policy", type=str, default="early",
                   choices=["early", "prefill_complete"])
    p.add_argument("--disaggregation-transfer-backend", type=str, default="mooncake", choices=TRANSFER_BACKENDS)
    p.add_argument("--disaggregation-enable-kv-checksum", action="store_true")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-ib-device", type=str)
    p.add_argument("--disaggregation-decode-enable-radix-cache", action="store_true")
    p.add_argument("--disaggregation-decode-enable-offload-kvcache", action="store_true")
    p.add_argument("--disaggregation-decode-retraction-backup", type=str, choices=["cpu_tensor", "host_pool", "none"])
    p.add_argument("--num-reserved-decode-tokens", type=int, default=512)
    p.add_argument("--disaggregation-decode-extra-slots", type=int)
    p.add_argument("--disaggregation-decode-polling-interval", type=int, default=1)
    p.add_argument("--enable-pd-role-switch", action="store_true")
    p.add_argument("--optimistic-prefill-attempts", type=int, default=0)
    p.add_argument("--disaggregation-decode-host-receive-threshold", type=float, default=1.0)
    p.add_argument("--page-size", type=int)
    p.add_argument("--load-balance-method", type=str, default="auto", choices=LOAD_BALANCE_METHODS)
    p.add_argument("--max-queued-requests", type=int)
    p.add_argument("--prefill-only-disable-kv-cache", action="store_true")


class PdArgsError(ValueError):
    """A PD rule refused the arguments; ``exc_type`` is the exception SGLang raises."""

    def __init__(self, message: str, exc_type: str = "ValueError"):
        super().__init__(message)
        self.exc_type = exc_type


def _ib_devices(value: Optional[str], warnings: list[str], sysfs: str) -> Optional[str]:
    """validation_hook.validate_ib_devices for a plain comma list (the per-GPU JSON forms pass as given)."""
    if value is None:
        warnings.append(NO_IB_WARNING)
        return None
    if not value.strip():
        raise PdArgsError("No valid IB devices specified")
    if not os.path.isdir(sysfs):
        raise PdArgsError(f"InfiniBand sysfs path not found: {sysfs}. Please ensure InfiniBand drivers are installed.",
                          "RuntimeError")
    available = set(os.listdir(sysfs))
    if not available:
        raise PdArgsError(f"No IB devices found in {sysfs}", "RuntimeError")
    if value.strip().startswith("{") or value.strip().endswith(".json"):
        return value
    devices = list(dict.fromkeys(d.strip() for d in value.split(",") if d.strip()))
    invalid = [d for d in devices if d not in available]
    if invalid:
        raise PdArgsError(f"Invalid IB devices specified for all GPUs: {invalid}. "
                          f"Available devices: {sorted(available)}")
    return ",".join(devices)


def resolve_pd(a, warnings: list[str], sysfs: str = IB_SYSFS) -> dict:
    """The resolved PD fields of ServerArgs ``a`` (SGLang's hooks), as changes for dataclasses.replace."""
    mode = a.disaggregation_mode
    ch: dict = {}
    if a.disaggregation_transfer_backend == "mooncake_tcp":
        os.environ.setdefault("MC_FORCE_TCP", "1")
        ch.update(disaggregation_transfer_backend="mooncake", disaggregation_ib_device=None)
        warnings.append("disaggregation transfer backend 'mooncake_tcp' -> mooncake with MC_FORCE_TCP=1 "
                        "(TCP transport, no RDMA)")
    backend = ch.get("disaggregation_transfer_backend", a.disaggregation_transfer_backend)
    if a.disaggregation_decode_allocation_policy == "prefill_complete":
        unsupported = []
        if mode not in ("prefill", "decode"):
            unsupported.append("aggregated serving")
        if backend != "mooncake":
            unsupported.append("transfer backends other than Mooncake")
        if a.pp_size != 1:
            unsupported.append("pipeline or attention context parallelism")
        if a.tp_size != (a.dp_size if a.enable_dp_attention else 1):
            unsupported.append("attention tensor parallelism greater than one")
        if unsupported:
            raise PdArgsError("--disaggregation-decode-allocation-policy prefill_complete does not yet support "
                              + ", ".join(unsupported))
        if mode == "prefill" and a.optimistic_prefill_attempts == 0:
            ch["optimistic_prefill_attempts"] = 1
    if not 0 <= a.disaggregation_decode_host_receive_threshold <= 1:
        raise PdArgsError(THRESHOLD_ERROR)
    if mode == "decode":
        if a.disaggregation_decode_enable_radix_cache:
            if backend == "fake":
                raise PdArgsError("--disaggregation-decode-enable-radix-cache is incompatible with "
                                  "--disaggregation-transfer-backend fake")
            ch["disable_radix_cache"] = False
            warnings.append(RADIX_ON_WARNING)
        else:
            ch["disable_radix_cache"] = True
            warnings.append(RADIX_OFF_WARNING)
        if a.disaggregation_decode_extra_slots is None:
            extra = 0
            if a.max_running_requests is not None:
                per_worker = max(1, a.max_running_requests // max(1, a.dp_size))
                extra = per_worker * 2 if per_worker <= 32 else 0
            ch["disaggregation_decode_extra_slots"] = extra
    elif mode == "prefill" and backend == "fake":
        raise PdArgsError(FAKE_PREFILL_ERROR, "AssertionError")
    if a.load_balance_method == "auto":
        ch["load_balance_method"] = "follow_bootstrap_room" if mode == "prefill" else "round_robin"
    # 0.5.23 refuses PP + speculative on aggregated servers too; the emulator enforces it for PD
    # decode only, so aggregated commands resolve as before (tests/test_emulator_args.py)
    if a.pp_size > 1 and a.speculative_algorithm and mode == "decode":
        raise PdArgsError(PP_SPEC_ERROR, "AssertionError")
    if backend == "mooncake" and mode in ("prefill", "decode"):
        ib = ch["disaggregation_ib_device"] if "disaggregation_ib_device" in ch else a.disaggregation_ib_device
        ch["disaggregation_ib_device"] = _ib_devices(ib, warnings, sysfs)
    if a.page_size is None:
        ch["page_size"] = 1
    return ch
