"""Where a PD server's start-up differs from an aggregated one's (called from node.Node).

In SGLang 0.5.23 the prefill leader's tokenizer manager starts the bootstrap server first
(``managers/disagg_service.start_disagg_service``); every scheduler initialises the transfer engine
before building its process groups (``distributed/bootstrap.init_parallel_runtime``) and, once its
KV pool exists, the prefill ranks register with the bootstrap server (on the leader: the
dist-init host, or ``--host`` on one node) while the decode ranks start their heartbeat; warm-up
and /health then use the fake bootstrap host.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

from .pd import RoleContext, local_ip, scheduler_traceback, transfer_engine_failure
from .pd_bootstrap import register_ranks
from .pd_core import core_class
from .pd_decode import DecodeRole, receive_share
from .pd_prefill import PrefillRole, push_share, rank_payloads, start_bootstrap_server
from .pd_transfer import LineServer

__all__ = ["core_class", "is_pd", "start_bootstrap", "check_transfer_engine", "start_role", "register_worker",
           "start_kv_receiver"]


def is_pd(args) -> bool:
    return args.disaggregation_mode in ("prefill", "decode")


def start_bootstrap(node):
    """The prefill leader's bootstrap server (None elsewhere, or when its port is taken)."""
    a = node.args
    if a.disaggregation_mode != "prefill" or node.rank != 0:
        return None
    return start_bootstrap_server(a.host, a.disaggregation_bootstrap_port, node.sink.log)


def check_transfer_engine(node) -> None:
    """Every GPU rank initialises the transfer engine; the faults make it fail as SGLang reports it.
    Without GPUDirect RDMA (no nvidia_peermem, no dma-buf) Mooncake's registration of every GPU
    rank's KV buffers fails (its glog error line; SGLang 0.5.23 logs batch_register's failure at
    debug level only and starts anyway): every transfer from or to the node fails later."""
    a, f = node.args, node.knobs.faults
    if is_pd(a) and a.disaggregation_transfer_backend == "mooncake" and os.environ.get("MC_FORCE_TCP") != "1":
        from ..fabric import gpudirect
        if gpudirect() == "none":
            import time as _t
            for i, _ in enumerate(node.local):
                stamp = _t.strftime("%m%d %H:%M:%S", _t.localtime()) + f".{int(_t.time() * 1e6) % 1000000:06d}"
                node.sink.write(f"E{stamp} {os.getpid() + 1 + i} rdma_context.cpp:203] Failed to register memory "
                                f"0x7b{(0x375b400000 + i * 0x4000000):010x}: Invalid argument [22]")
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
                      lambda tb: node.die(tb), model_config=node.config)
    core.metrics.engine_type = a.disaggregation_mode
    core.metrics.extra = ctx.metrics.render
    ip = _ip(node)
    if a.disaggregation_mode == "prefill":
        registry = next((x.registry for x in node.pd_servers if hasattr(x, "registry")), None)
        role = PrefillRole(ctx, lambda n: _rank_endpoint(registry, n * node.knobs.gpus_per_node))
        role.register(_registry_url(a), rank_payloads(a, [(r.tp_rank, r.pp_rank) for r in node.local], ip,
                                                      role.side.port))
    else:
        slots = node.replica.max_running_requests + (a.disaggregation_decode_extra_slots or 0)
        role = DecodeRole(ctx, ip, node.replica.memory.max_total_num_tokens, slots, node.kv_endpoints)
    role.start(engine)
    core.pd = role
    return role


def _rank_endpoint(registry, tp_rank: int) -> Optional[str]:
    """rank_ip:rank_port that prefill rank tp_rank registered (the leader's bootstrap registry)."""
    if registry is None:
        return None
    with registry.lock:
        entry = registry.table.get((0, 0, tp_rank, 0))
    return f"{entry['rank_ip']}:{entry['rank_port']}" if entry else None


def register_worker(node) -> Optional[LineServer]:
    """A prefill node of rank >= 1 registers its GPU ranks with the leader's bootstrap server; its
    side channel pushes its share of a request's KV when the leader says so."""
    a = node.args
    if a.disaggregation_mode != "prefill":
        return None
    side = LineServer("0.0.0.0", push_share, "pd-side")
    payloads = rank_payloads(a, [(r.tp_rank, r.pp_rank) for r in node.local], _ip(node), side.port)
    prefix = node.topo.prefix(node.local[0])
    threading.Thread(target=register_ranks, args=(_registry_url(a), payloads, lambda m: node.sink.log(m, prefix),
                                                  node.stop), daemon=True).start()
    return side


def start_kv_receiver(node) -> Optional[LineServer]:
    """A decode node of rank >= 1 listens for its share of every request's KV and tells its leader
    where (the leader announces every node's endpoint to the prefill)."""
    if node.args.disaggregation_mode != "decode" or node.link is None:
        return None
    kv = LineServer("0.0.0.0", lambda msg, conn, rfile: receive_share(msg, conn, rfile), "pd-kv")
    node.link.send({"t": "kv_endpoint", "endpoint": f"{_ip(node)}:{kv.port}"})
    return kv
