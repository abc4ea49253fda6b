"""Where a PD server's start-up differs from an aggregated one's (called from node.Node).

In SGLang 0.5.23 the prefill leader's tokenizer manager starts the bootstrap server first
(``managers/disagg_service.start_disagg_service``); every scheduler initialises the transfer engine
before building its process groups (``distributed/bootstrap.init_parallel_runtime``) and, once its
KV pool exists, the prefill ranks register with the bootstrap server (on the leader: the
dist-init host, or ``--host`` on one node) while the decode ranks start their heartbeat; warm-up
and /health then use the fake bootstrap host.
"""
from __future__ import annotations

import threading
from typing import Optional

from .pd import RoleContext, local_ip, scheduler_traceback, transfer_engine_failure
from .pd_bootstrap import register_ranks
from .pd_core import core_class
from .pd_decode import DecodeRole
from .pd_prefill import PrefillRole, rank_payloads, start_bootstrap_server
from .pd_transfer import LineServer

__all__ = ["core_class", "is_pd", "start_bootstrap", "check_transfer_engine", "start_role", "register_worker"]


def is_pd(args) -> bool:
    return args.disaggregation_mode in ("prefill", "decode")


def start_bootstrap(node):
    """The prefill leader's bootstrap server (None elsewhere, or when its port is taken)."""
    a = node.args
    if a.disaggregation_mode != "prefill" or node.rank != 0:
        return None
    return start_bootstrap_server(a.host, a.disaggregation_bootstrap_port, node.sink.log)


def check_transfer_engine(node) -> None:
    """Every GPU rank initialises the transfer engine; the faults make it fail as SGLang reports it."""
    a, f = node.args, node.knobs.faults
    if not is_pd(a) or not (f.pd_engine_init_fail or f.pd_no_transfer_module):
        return
    if a.disaggregation_transfer_backend not in ("mooncake", "nixl"):
        return
    error, tb = transfer_engine_failure(a.disaggregation_transfer_backend, f.pd_no_transfer_module)
    if error:
        node.log_gpus(error)
    node.die(tb)


def _ip(node) -> str:
    try:
        return local_ip()
    except ValueError as e:
        node.die(scheduler_traceback([("utils/network.py", 431, "get_local_ip_auto",
                                       'raise ValueError("Can not get local ip")')], f"ValueError: {e}"))
        raise


def _registry_url(a) -> str:
    if a.nnodes > 1 and a.dist_init_addr:
        host = a.dist_init_addr.rpartition(":")[0].strip("[]")
    else:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(a.host, a.host)
    return f"http://{host}:{a.disaggregation_bootstrap_port}/route"


def start_role(node, core, engine):
    """The leader's PD role on top of its engine; its metrics join /metrics (engine_type label)."""
    a = node.args
    ctx = RoleContext(a, node.knobs, node.costs, node.sink, [(r.tp_rank, node.topo.prefix(r)) for r in node.local],
                      lambda tb: node.die(tb))
    core.metrics.engine_type = a.disaggregation_mode
    core.metrics.extra = ctx.metrics.render
    ip = _ip(node)
    if a.disaggregation_mode == "prefill":
        role = PrefillRole(ctx)
        role.register(_registry_url(a), rank_payloads(a, [(r.tp_rank, r.pp_rank) for r in node.local], ip,
                                                      role.side.port))
    else:
        slots = node.replica.max_running_requests + (a.disaggregation_decode_extra_slots or 0)
        role = DecodeRole(ctx, ip, node.replica.memory.max_total_num_tokens, slots)
    role.engine = engine
    core.pd = role
    return role


def register_worker(node) -> Optional[LineServer]:
    """A prefill node of rank >= 1 registers its GPU ranks with the leader's bootstrap server."""
    a = node.args
    if a.disaggregation_mode != "prefill":
        return None
    side = LineServer("0.0.0.0", lambda msg, conn, rfile: None, "pd-side")
    payloads = rank_payloads(a, [(r.tp_rank, r.pp_rank) for r in node.local], _ip(node), side.port)
    prefix = node.topo.prefix(node.local[0])
    threading.Thread(target=register_ranks, args=(_registry_url(a), payloads, lambda m: node.sink.log(m, prefix),
                                                  node.stop), daemon=True).start()
    return side
