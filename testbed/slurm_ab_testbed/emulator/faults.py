"""Fault injection for tests, from ``SLURM_AB_EMU_FAULT`` (comma-separated items).

Faults live in the environment, never in flags, so the rendered SGLang command is the same
with and without them. Items:

- ``hang_startup``          rank 0 stops after ``Load weight begin`` and never becomes healthy
- ``die_after_requests=N``  rank 0's scheduler crashes when the N-th user request has finished
- ``crash_rank=R``          node rank R dies while loading weights
- ``oom_first_prefill``     the first user prefill OOMs whatever ``--mem-fraction-static`` is
- ``bind_loopback``         the HTTP servers bind 127.0.0.1 whatever ``--host`` says (a wrapper
                            that pins the host: reachable on its own node only)
- ``hang_after_requests=N`` rank 0's scheduler gets stuck for good once N user requests have
                            finished (a collective that never returns): the process stays alive,
                            its HTTP server and /metrics answer, nothing finishes any more and
                            /health times out

``SLURM_AB_EMU_FAULT_NODES=node05,...`` limits them to the processes on those Slurm nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


class FaultSpecError(ValueError):
    """SLURM_AB_EMU_FAULT could not be parsed."""


@dataclass(frozen=True)
class Faults:
    hang_startup: bool = False
    die_after_requests: Optional[int] = None
    crash_rank: Optional[int] = None
    oom_first_prefill: bool = False
    bind_loopback: bool = False
    hang_after_requests: Optional[int] = None


def parse_faults(spec: Optional[str]) -> Faults:
    """Parse e.g. ``"die_after_requests=3,oom_first_prefill"``; empty means no fault."""
    kw: dict = {}
    for item in (spec or "").replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        name = name.strip()
        if name in ("hang_startup", "oom_first_prefill", "bind_loopback") and not value:
            kw[name] = True
        elif name in ("die_after_requests", "crash_rank", "hang_after_requests") and value.strip().isdigit():
            kw[name] = int(value)
        else:
            raise FaultSpecError(f"unknown SLURM_AB_EMU_FAULT item {item!r} (expected hang_startup, "
                                 "die_after_requests=N, crash_rank=R, oom_first_prefill, bind_loopback or "
                                 "hang_after_requests=N)")
    return Faults(**kw)
