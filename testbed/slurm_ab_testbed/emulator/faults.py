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

Correctness (outputs.py; a request at temperature 0 returns its prompt's deterministic tokens):

- ``divergence=K``          a broken draft model: on a server with a speculative algorithm, about
                            half of all prompts (``outputs.diverges``) get other tokens from output
                            position K (0-based) on; ignored without a speculative algorithm
- ``empty_output``          every request stops at its first token, the model's EOS: no text
                            (finish_reason ``{"type": "stop", "matched": EOS}``)

PD disaggregation (pd.py; each prints what SGLang 0.5.23 prints for the real failure):

- ``pd_role=ROLE``          the process serves as ``--disaggregation-mode ROLE`` (null, prefill or
                            decode) whatever the flag says: a role mismatch behind the PD router
- ``pd_engine_init_fail``   the KV transfer engine fails to initialise on every GPU rank at startup
                            (Mooncake: "Mooncake Transfer Engine initialization failed.")
- ``pd_no_transfer_module`` the transfer backend's Python module is missing (SGLang's ImportError)
- ``pd_bootstrap_timeout``  KV metadata between decode and prefill is lost (set on either role):
                            the prefill times out in KVPoll.Bootstrapping, the decode in
                            KVPoll.WaitingForInput (SGLANG_DISAGGREGATION_*_TIMEOUT, seconds)
- ``kv_pool_tokens=N``      the KV pool holds N tokens whatever the memory plan says (decode KV
                            exhaustion: preallocation waits, retraction, oversized requests refused)
- ``pd_transfer_hang_after=N`` (on a prefill) once N user requests have finished there, its KV
                            transfer engine hangs mid-run: every later transfer is neither done nor
                            failed, so the request waits in the prefill's inflight queue and in its
                            decode's transfer queue (SGLang 0.5.23 counts it in neither num_running_reqs
                            nor num_queue_reqs) until the decode's SGLANG_DISAGGREGATION_WAITING_TIMEOUT
                            fails it ("... in KVPoll.WaitingForInput"); nothing is logged when it hangs
- ``pd_transfer_fail_prob=P`` (on a prefill) each request's KV transfer fails with probability P, as
                            a flaky fabric's does (a Mooncake batch transfer returning an error:
                            "Session ... failed.", "Failed to send kv chunk of R to HOST:PORT"); the
                            decode session is blacklisted until the next probe
                            (SGLANG_FAILED_SESSION_PROBE_INTERVAL_S), so one failure fails that
                            decode's transfers for up to that long

GPUDirect RDMA missing on a node: SLURM_AB_EMU_GPUDIRECT=none (slurm_ab_testbed.fabric), not a fault
item: the preflight's stand-in reads it too. SGLang's own SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB
(with --disaggregation-enable-kv-checksum on the decode) corrupts received KV as SGLang's test hook does.

A decode that loses its prefill is ``die_after_requests=N`` on the prefill's nodes.

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
    pd_role: Optional[str] = None
    pd_engine_init_fail: bool = False
    pd_no_transfer_module: bool = False
    pd_bootstrap_timeout: bool = False
    kv_pool_tokens: Optional[int] = None
    pd_transfer_hang_after: Optional[int] = None
    pd_transfer_fail_prob: Optional[float] = None
    divergence: Optional[int] = None
    empty_output: bool = False


def parse_faults(spec: Optional[str]) -> Faults:
    """Parse e.g. ``"die_after_requests=3,oom_first_prefill"``; empty means no fault."""
    kw: dict = {}
    for item in (spec or "").replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        name = name.strip()
        if name in ("hang_startup", "oom_first_prefill", "bind_loopback", "pd_engine_init_fail",
                    "pd_no_transfer_module", "pd_bootstrap_timeout", "empty_output") and not value:
            kw[name] = True
        elif name in ("die_after_requests", "crash_rank", "kv_pool_tokens", "hang_after_requests",
                      "pd_transfer_hang_after", "divergence") \
                and value.strip().isdigit():
            kw[name] = int(value)
        elif name == "pd_role" and value.strip() in ("null", "prefill", "decode"):
            kw[name] = value.strip()
        elif name == "pd_transfer_fail_prob" and _probability(value):
            kw[name] = float(value)
        else:
            raise FaultSpecError(f"unknown SLURM_AB_EMU_FAULT item {item!r} (expected hang_startup, "
                                 "die_after_requests=N, crash_rank=R, oom_first_prefill, bind_loopback, "
                                 "pd_role=null|prefill|decode, pd_engine_init_fail, pd_no_transfer_module, "
                                 "pd_bootstrap_timeout, pd_transfer_hang_after=N, pd_transfer_fail_prob=P, "
                                 "kv_pool_tokens=N, hang_after_requests=N, divergence=K or empty_output)")
    return Faults(**kw)


def _probability(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False
