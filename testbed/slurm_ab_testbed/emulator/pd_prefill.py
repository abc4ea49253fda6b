"""The prefill role (``--disaggregation-mode prefill``): bootstrap queue, forward, KV push, answer.

As SGLang 0.5.23's ``disaggregation/prefill.py`` with the default ``early`` allocation policy and
no optimistic prefill: a request waits in the bootstrap queue until its decode announced where the
KV goes (or fails after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT: "Prefill bootstrap failed ...
timed out after ...s in KVPoll.Bootstrapping"), is computed (max_new_tokens = 1), waits in the
inflight queue while its KV crosses to the decode, and is answered (one token) when the decode
acknowledged it; a transfer that cannot reach the decode fails the request ("Prefill transfer
failed ... Decode instance could be dead, remote mooncake session ... is not alive"). Each failure
is an HTTP 500 to the router, logged by every local GPU rank and counted in /metrics.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

from .logfmt import PrefillPD
from .pd import Bootstrap, RoleContext, kv_error
from .pd_bootstrap import BootstrapServer, register_ranks
from .pd_transfer import LineServer, push_kv
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
    bootstrap_done: Optional[float] = None
    forward_entry: Optional[float] = None
    prefilled: Optional[float] = None
    aborted: Optional[str] = None

    @property
    def room(self):
        return self.boot.room

    @property
    def key(self):
        """Its queue key: the room, or itself for a request sent without one (not through a PD router)."""
        return self.room if self.room is not None else id(self)


class PrefillRole:
    mode = "prefill"

    def __init__(self, ctx: RoleContext):
        self.ctx = ctx
        self.engine = None                   # engine.Engine, attached once built
        self.lock = threading.Lock()
        self.queue: dict = {}                # room -> Sender waiting for the decode's metadata
        self.inflight: dict = {}             # room -> Sender whose KV is on its way
        self.early: dict = {}                # room -> (endpoint, time) of metadata ahead of its request
        self.stop = threading.Event()
        self.side = LineServer("0.0.0.0", self._on_side, "pd-side")
        threading.Thread(target=self._watch, name="pd-bootstrap-timeout", daemon=True).start()

    def register(self, url: str, payloads: list[dict]) -> None:
        threading.Thread(target=register_ranks, args=(url, payloads, self.ctx.log, self.stop),
                         name="pd-register", daemon=True).start()

    # ---- intake --------------------------------------------------------------------------------
    def submit(self, req: Req, boot: Bootstrap) -> None:
        now = time.time()
        s = Sender(req, boot, now)
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
        if self.ctx.knobs.faults.pd_bootstrap_timeout:
            return                           # the decode's metadata is lost on the way
        room = msg.get("room")
        with self.lock:
            s = self.queue.pop(room, None)
            if s is None and msg.get("t") == "meta":
                self.early[room] = (msg.get("endpoint"), time.time())
        if s is None:
            return
        if msg.get("t") == "meta":
            self._bootstrapped(s, msg.get("endpoint"))
        else:                                # the decode gave up on this room
            self._fail_bootstrap(s, "Aborted by AbortReq.")

    def _bootstrapped(self, s: Sender, endpoint: str) -> None:
        s.endpoint, s.bootstrap_done = endpoint, time.time()
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

    def _transfer(self, s: Sender) -> None:
        if self._hung():
            self.stop.wait()                 # neither done nor failed: it stays in the inflight queue
            return
        nbytes = int(self.ctx.costs.pd.kv_transfer_bytes_per_token * s.req.input_len)
        err, secs = push_kv(s.endpoint, {"room": s.room, "first_ids": s.req.output_ids}, nbytes)
        now = time.time()
        with self.lock:
            self.inflight.pop(s.key, None)
        if err is not None:
            self._fail_transfer(s, err)
            return
        m = self.ctx.metrics
        total_mb = nbytes / (1024 * 1024)
        m.observe("sglang:kv_transfer_latency_ms", secs * 1000)
        m.observe("sglang:kv_transfer_total_mb", total_mb)
        m.observe("sglang:kv_transfer_speed_gb_s", (total_mb / 1024) / secs if secs > 0 else 0.0)
        m.observe("sglang:kv_transfer_bootstrap_ms", (s.bootstrap_done - s.created) * 1000)
        m.observe("sglang:kv_transfer_alloc_ms", 0.0)
        m.stage("prefill_transfer_kv_cache", now - s.prefilled)
        self.engine.snapshot(lambda core: core.finish_prefilled(s.req, now))

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

    def _fail_transfer(self, s: Sender, err: str) -> None:
        if self.ctx.args.disaggregation_transfer_backend == "mooncake":
            reason = f"Decode instance could be dead, remote mooncake session {s.endpoint} is not alive"
        else:
            reason = f"KV transfer to {s.endpoint} failed: {err}"
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
