"""The prefill role (``--disaggregation-mode prefill``): bootstrap queue, forward, KV push, answer.

As SGLang 0.5.23's ``disaggregation/prefill.py`` with the default ``early`` allocation policy and
no optimistic prefill: a request waits in the bootstrap queue until its decode announced where the
KV goes (or fails after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT: "Prefill bootstrap failed ...
timed out after ...s in KVPoll.Bootstrapping"), is computed (max_new_tokens = 1), waits in the
inflight queue while its KV crosses to the decode, and is answered (one token) when the decode
acknowledged it; a transfer that cannot reach the decode fails the request ("Prefill transfer
failed ... Decode instance could be dead, remote mooncake session ... is not alive"). Each failure
is an HTTP 500 to the router, logged by every local GPU rank and counted in /metrics.

KV moves on every node pair of the request (pd_kv): the leader pushes its own node's share and tells
each other prefill node (through its registered side channel) to push its share to its decode node,
all at once; when every share is acknowledged it sends the decode leader the transfer's status (the
first token, the KV checksum) and marks the request done, which the scheduler concludes at its next
loop iteration, after the forward in flight (process_disagg_prefill_inflight_queue): so the
prefill's kv_transfer_latency_ms (its transfer-queue entry to that poll) includes the next forward,
while the decode already has its KV. The wire carries costs.pd.kv_wire_fraction of the model's real
KV bytes; /metrics reports the real bytes (what TP0 sent). With Mooncake a failed share ("Failed to
send kv chunk of R to HOST:PORT") blacklists the decode session until a probe reaches it again
(SGLANG_FAILED_SESSION_PROBE_INTERVAL_S, 30 s): meanwhile its transfers fail at once ("Decode
instance could be dead, remote mooncake session ... is not alive").
"""
from __future__ import annotations

import os
import random
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

from .logfmt import PrefillPD
from .pd import Bootstrap, RoleContext, kv_error
from . import pd_kv
from .pd_bootstrap import BootstrapServer, register_ranks
from .pd_transfer import LineServer, push_kv, request_push, send_final
from .scheduler import Req

BOOTSTRAP_TIMEOUT_WARNING = (
    "Some requests timed out when bootstrapping, which means prefill instances fail to receive the KV indices "
    "from the decode instance of this request. If a greater mean TTFT is acceptable, you can "
    "'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition. ")


@dataclass
class Sender:
    """One request's KV sender (CommonKVSender) and its time stamps (time.time())."""
    req: Req
    boot: Bootstrap
    created: float
    endpoint: Optional[str] = None          # the decode's KV destination, from its metadata
    meta: dict = field(default_factory=dict)   # the decode's metadata: its nodes' endpoints, layout
    bootstrap_done: Optional[float] = None
    forward_entry: Optional[float] = None
    prefilled: Optional[float] = None
    aborted: Optional[str] = None
    transfer_s: Optional[float] = None      # every node pair's share sent and acknowledged
    tp0_bytes: float = 0.0                  # real KV bytes the prefill's TP0 rank sent (its metrics')
    dp_rank: Optional[int] = None           # routed_dp_rank; else follow_bootstrap_room (room % dp)

    @property
    def room(self):
        return self.boot.room

    @property
    def key(self):
        """Its queue key: the room, or itself for a request sent without one (not through a PD router)."""
        return self.room if self.room is not None else id(self)


class PrefillRole:
    mode = "prefill"

    def __init__(self, ctx: RoleContext, worker_endpoint: Callable[[int], Optional[str]] = lambda node: None):
        self.ctx = ctx
        self.worker_endpoint = worker_endpoint   # prefill node rank -> its side channel (the registry's)
        self.engine = None                   # engine.Engine, attached by start()
        self.lock = threading.Lock()
        self.queue: dict = {}                # room -> Sender waiting for the decode's metadata
        self.inflight: dict = {}             # room -> Sender whose KV is on its way
        self.early: dict = {}                # room -> (endpoint, time) of metadata ahead of its request
        self.stop = threading.Event()
        self.side = LineServer("0.0.0.0", self._on_side, "pd-side")
        self.failed_sessions: set = set()    # Mooncake: decode sessions blacklisted after a failure
        faults = ctx.knobs.faults
        self.fail_prob = faults.pd_transfer_fail_prob or 0.0
        self.rng = random.Random(ctx.knobs.seed if ctx.knobs.seed is not None else os.getpid())
        self.probe_s = _env_float("SGLANG_FAILED_SESSION_PROBE_INTERVAL_S", 30.0)

    def start(self, engine) -> None:
        """Attach the engine, then start the bootstrap-timeout watch and the session probe (as
        DecodeRole.start: no thread of the role runs before its engine is there)."""
        self.engine = engine
        threading.Thread(target=self._watch, name="pd-bootstrap-timeout", daemon=True).start()
        if self.ctx.args.disaggregation_transfer_backend == "mooncake":
            threading.Thread(target=self._probe, name="pd-session-probe", daemon=True).start()

    def register(self, url: str, payloads: list[dict]) -> None:
        threading.Thread(target=register_ranks, args=(url, payloads, self.ctx.log, self.stop),
                         name="pd-register", daemon=True).start()

    # ---- intake --------------------------------------------------------------------------------
    def submit(self, req: Req, boot: Bootstrap, dp_rank: Optional[int] = None) -> None:
        now = time.time()
        s = Sender(req, boot, now, dp_rank=dp_rank)
        req.pd = s
        self.ctx.metrics.stage("prefill_prepare", 0.0)
        if boot.fake:                        # FakeKVSender: bootstrapped at once, nothing to send
            s.bootstrap_done = now
            self.engine.submit(req)
            return
        with self.lock:
            early = self.early.pop(boot.room, None)
            if early is None:
                self.queue[s.key] = s
        if early is not None:
            self._bootstrapped(s, early[0])

    def _on_side(self, msg: dict, conn, rfile) -> None:
        if msg.get("t") == "push":           # a share of another node's request (this is node 0)
            push_share(msg, conn)
            return
        if self.ctx.knobs.faults.pd_bootstrap_timeout:
            return                           # the decode's metadata is lost on the way
        room = msg.get("room")
        with self.lock:
            s = self.queue.pop(room, None)
            if s is None and msg.get("t") == "meta":
                self.early[room] = (msg, time.time())
        if s is None:
            return
        if msg.get("t") == "meta":
            self._bootstrapped(s, msg)
        else:                                # the decode gave up on this room
            self._fail_bootstrap(s, "Aborted by AbortReq.")

    def _bootstrapped(self, s: Sender, meta: dict) -> None:
        s.meta, s.endpoint, s.bootstrap_done = dict(meta), meta.get("endpoint"), time.time()
        self.ctx.metrics.stage("prefill_bootstrap", s.bootstrap_done - s.created)
        self.engine.submit(s.req)

    # ---- the forward (called by PrefillCore under the engine lock) -----------------------------
    def on_forward(self, req: Req, now: float) -> None:
        s: Sender = req.pd
        s.forward_entry = now
        self.ctx.metrics.observe("sglang:queue_time_seconds", now - (s.bootstrap_done or now))

    def on_prefilled(self, req: Req, now: float) -> None:
        s: Sender = req.pd
        s.prefilled = now
        self.ctx.metrics.stage("prefill_forward", now - (s.forward_entry or now))
        if s.boot.fake:
            self.engine.core.finish_prefilled(req, now)
            return
        with self.lock:
            self.inflight[s.key] = s
        threading.Thread(target=self._transfer, args=(s,), name="pd-transfer", daemon=True).start()

    def _hung(self) -> bool:
        """pd_transfer_hang_after=N: the transfer engine hangs once N user requests finished here."""
        n = self.ctx.knobs.faults.pd_transfer_hang_after
        return n is not None and self.engine is not None and self.engine.core.counters.finished_user >= n

    def _shares(self, s: Sender) -> tuple[list, float]:
        """([(prefill node, decode endpoint, real bytes)], real bytes TP0 sends) of one request."""
        a, meta, g = self.ctx.args, s.meta, self.ctx.knobs.gpus_per_node
        prefill = pd_kv.KvLayout(a.tp_size, a.dp_size if a.enable_dp_attention else 1, g)
        decode = pd_kv.KvLayout(int(meta.get("tp") or a.tp_size), int(meta.get("dp") or 1),
                                int(meta.get("gpus_per_node") or g))
        per_rank = pd_kv.kv_bytes_per_token(self.ctx.model_config, a.kv_cache_dtype, decode.attn_tp,
                                            self.ctx.costs.pd)
        p_dp = s.dp_rank if s.dp_rank is not None else (s.room or 0) % prefill.dp
        pairs = pd_kv.node_pairs(prefill, decode, p_dp, int(meta.get("dp_rank") or 0), per_rank)
        nodes = {int(k): v for k, v in (meta.get("nodes") or {}).items()} or {0: s.endpoint}
        n = s.req.input_len
        shares = [(src, nodes.get(dst, s.endpoint), b * n) for (src, dst), b in sorted(pairs.items())]
        tp0 = sum(1 for i in range(decode.attn_tp) if i * prefill.attn_tp // decode.attn_tp == 0) * per_rank * n
        return shares, float(tp0)

    def _send(self, s: Sender, src: int, endpoint: str, real_bytes: float) -> Optional[str]:
        """One node pair's share; the error as Mooncake records it, or None."""
        wire = int(real_bytes * self.ctx.costs.pd.kv_wire_fraction)
        header = {"room": s.room}
        if src == 0:
            if not gpudirect_ok():
                return "local memory is not registered"
            err, _ = push_kv(endpoint, header, wire)
            return err
        worker = self.worker_endpoint(src)
        if worker is None:
            return f"prefill node rank {src} has no registered rank"
        return request_push(worker, endpoint, header, wire)

    def _transfer(self, s: Sender) -> None:
        if self._hung():
            self.stop.wait()                 # neither done nor failed: it stays in the inflight queue
            return
        mooncake = self.ctx.args.disaggregation_transfer_backend == "mooncake"
        shares, tp0 = self._shares(s)
        dead = [ep for _, ep, _ in shares if ep in self.failed_sessions] if mooncake else []
        if dead:
            self._fail_transfer(s, f"Decode instance could be dead, remote mooncake session {dead[0]} is not alive")
            return
        t0 = time.time()
        errors: list = [None] * len(shares)

        def one(i: int) -> None:
            src, ep, nbytes = shares[i]
            errors[i] = self._send(s, src, ep, nbytes)
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(shares))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [(ep, e) for (_, ep, _), e in zip(shares, errors) if e is not None]
        if not failed and self.fail_prob and self.rng.random() < self.fail_prob:
            failed = [(self.rng.choice(shares)[1], "injected (pd_transfer_fail_prob)")]
        if failed:
            ep, err = failed[0]
            if mooncake:
                self.failed_sessions.add(ep)
                self.ctx.log(f"Session {ep} failed.")
                self._fail_transfer(s, f"Failed to send kv chunk of {s.room} to {ep}")
            else:
                self._fail_transfer(s, f"KV transfer to {ep} failed: {err}")
            return
        checksum = zlib.adler32(f"{s.room}:{s.req.input_len}".encode()) if self.ctx.args.disaggregation_enable_kv_checksum \
            else None
        err = send_final(s.endpoint, {"room": s.room, "first_ids": s.req.output_ids, "status": "ok",
                                      "checksum": checksum})
        if err is not None:
            if mooncake:
                self.failed_sessions.add(s.endpoint)
            self._fail_transfer(s, f"Failed to send aux data of {s.room}")
            return
        with self.lock:
            self.inflight.pop(s.key, None)
        s.transfer_s, s.tp0_bytes = time.time() - t0, tp0
        with self.engine.cond:               # concluded at the scheduler's next loop iteration
            self.engine.core.done.append(s.req)
            self.engine.cond.notify_all()

    def on_completed(self, req: Req, now: float) -> None:
        """process_disagg_prefill_inflight_queue saw the transfer done (PrefillCore.plan, under the
        engine lock): SGLang's KV metrics of the request, stamped now."""
        s: Sender = req.pd
        m = self.ctx.metrics
        total_mb = s.tp0_bytes / (1024 * 1024)
        if self.ctx.args.disaggregation_transfer_backend == "nixl":
            secs = now - (s.prefilled or now) + 0.0       # transfer_latency_s: first send -> poll
        else:
            secs = now - (s.prefilled or now)             # completion - transfer queue entry
        m.observe("sglang:kv_transfer_latency_ms", secs * 1000)
        m.observe("sglang:kv_transfer_total_mb", total_mb)
        m.observe("sglang:kv_transfer_speed_gb_s", (total_mb / 1024) / secs if secs > 0 else 0.0)
        m.observe("sglang:kv_transfer_bootstrap_ms", (s.bootstrap_done - s.created) * 1000)
        m.observe("sglang:kv_transfer_alloc_ms", 0.0)
        m.stage("prefill_transfer_kv_cache", now - s.prefilled)
        self.engine.core.finish_prefilled(req, now)

    def _probe(self) -> None:
        """_run_one_probe_pass: a blacklisted decode session that answers again is taken back."""
        while not self.stop.wait(self.probe_s):
            for ep in list(self.failed_sessions):
                if probe(ep):
                    self.failed_sessions.discard(ep)
                    self.ctx.log(f"Session {ep} recovered via probe; un-blacklisted")

    # ---- failures ------------------------------------------------------------------------------
    def _fail(self, s: Sender, what: str, reason: str, counter: str) -> None:
        def text(rank: int) -> str:
            return (f"Prefill {what} failed for request rank={rank} req.rid={s.req.rid!r} "
                    f"req.bootstrap_room={s.room} with exception {kv_error(s.room, reason)}")
        self.ctx.log_ranks(text)
        self.ctx.metrics.inc(counter)
        if s.req.listener is not None and hasattr(s.req.listener, "on_abort"):
            s.req.listener.on_abort(text(0), 500, time.time())

    def _fail_bootstrap(self, s: Sender, reason: str) -> None:
        self._fail(s, "bootstrap", reason, "sglang:num_bootstrap_failed_reqs_total")

    def _fail_transfer(self, s: Sender, reason: str) -> None:
        """conclude_failure: the request fails here and the decode is told (status Failed, no
        reason frame: it reports DEFAULT_PREFILL_FAILURE_REASON)."""
        with self.lock:
            self.inflight.pop(s.key, None)
        if s.endpoint:
            send_final(s.endpoint, {"room": s.room, "status": "failed"})
        self._fail(s, "transfer", reason, "sglang:num_transfer_failed_reqs_total")

    def _watch(self) -> None:
        """KVPoll.Bootstrapping timeouts (CommonKVSender._check_bootstrap_timeout)."""
        limit = self.ctx.env.bootstrap_timeout
        while not self.stop.wait(0.1):
            now = time.time()
            with self.lock:
                expired = [s for s in self.queue.values() if now - s.created >= limit]
                for s in expired:
                    del self.queue[s.key]
                self.early = {r: v for r, v in self.early.items() if now - v[1] < limit}
            for s in expired:
                self.ctx.warn_once(BOOTSTRAP_TIMEOUT_WARNING, self.ctx.log)
                self._fail_bootstrap(s, f"Request {s.room} timed out after {now - s.created:.1f}s "
                                        f"in KVPoll.Bootstrapping")

    # ---- statistics (under the engine lock) ----------------------------------------------------
    def stats(self) -> PrefillPD:
        with self.lock:
            return PrefillPD(len(self.queue), len(self.inflight), 0)

    def gauges(self) -> dict:
        with self.lock:
            return {"num_prefill_bootstrap_queue_reqs": len(self.queue),
                    "num_prefill_inflight_queue_reqs": len(self.inflight)}

    def idle(self) -> bool:
        """No request in its bootstrap or inflight queue (part of Scheduler.is_fully_idle)."""
        with self.lock:
            return not self.queue and not self.inflight

    def close(self) -> None:
        self.stop.set()
        self.side.close()


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def gpudirect_ok() -> bool:
    """This node's GPU memory can be registered for RDMA (nvidia_peermem or dma-buf): the
    testbed's fabric (SLURM_AB_EMU_GPUDIRECT) says."""
    from ..fabric import gpudirect
    return gpudirect() != "none"


def probe(endpoint: str) -> bool:
    import socket
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
            return True
    except (OSError, ValueError):
        return False


def push_share(msg: dict, conn, rfile=None) -> None:
    """A prefill node pushes its share of a request's KV to its decode node when its leader says
    so (the leader's side channel message), and answers "ok" or the error on the same connection."""
    err: Optional[str]
    if not gpudirect_ok():
        err = "local memory is not registered"
    else:
        err, _ = push_kv(msg["endpoint"], msg.get("header") or {}, int(msg.get("bytes") or 0))
    try:
        conn.sendall(b"ok\n" if err is None else f"err {err}\n".encode())
    except OSError:
        pass


def rank_payloads(a, ranks: list, ip: str, rank_port: int) -> list[dict]:
    """register_to_bootstrap payloads of a node's GPU ranks [(tp_rank, pp_rank)] (ServerArgs a)."""
    return [{"attn_tp_size": a.tp_size, "attn_tp_rank": tp, "attn_cp_size": 1, "attn_cp_rank": 0,
             "attn_dp_size": 1, "attn_dp_rank": 0, "pp_size": a.pp_size, "pp_rank": pp,
             "system_dp_size": 1, "system_dp_rank": 0, "rank_ip": ip, "rank_port": rank_port,
             "page_size": a.page_size, "kv_cache_dtype": a.kv_cache_dtype, "kv_layout": None,
             "dsv41_spec_layout": None, "load_balance_method": a.load_balance_method,
             "prefill_http_port": a.port, "decode_allocation_policy": a.disaggregation_decode_allocation_policy}
            for tp, pp in ranks]


def start_bootstrap_server(host: str, port: int, log) -> Optional[BootstrapServer]:
    """CommonKVBootstrapServer on the prefill leader; a bind error is logged, not fatal (as in SGLang)."""
    try:
        server = BootstrapServer(host, port)
    except OSError as e:
        log(f"Server error: [Errno {e.errno}] error while attempting to bind on address ({host!r}, {port}): "
            f"{(e.strerror or str(e)).lower()}")
        return None
    server.start()
    log(f"CommonKVBootstrapServer started successfully on {host}:{port}")
    return server
