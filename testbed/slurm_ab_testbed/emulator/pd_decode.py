"""The decode role (``--disaggregation-mode decode``): handshake, preallocation, KV receipt, heartbeat.

As SGLang 0.5.23's ``disaggregation/decode.py`` and ``common/conn.py`` (``early`` policy): a request
enters the prealloc queue; the decode fetches the prefill's layout from its bootstrap server once
per address (one attempt a second; after 15 failed attempts "Could not fetch prefill parallel info
from ADDR after 15 attempts" and the waiting requests fail the handshake; a different page size or
KV dtype is a RuntimeError that takes the scheduler down), looks up the prefill rank's endpoint,
reserves the prompt's KV when the pool allows (input + num_reserved_decode_tokens per request,
request slots = max_running_requests + extra slots), announces the destination to the prefill and
waits in the transfer queue for the KV (SGLANG_DISAGGREGATION_WAITING_TIMEOUT: "... in
KVPoll.WaitingForInput"). A heartbeat thread GETs each known bootstrap server's /health every
SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL (>= 2 s); after HEARTBEAT_MAX_FAILURE misses the prefill
is declared lost and its requests fail ("Lost connection with prefill instance ...").

Every node of the decode receives its share of a request's KV (its own KV listener; the leader
announces all of them in its metadata, with the request's attention-DP rank: ``routed_dp_rank``
when the request names one, else round robin); the prefill leader's status message concludes the
transfer ("Failed to get kvcache from prefill instance, it might be dead" when it failed). With
--disaggregation-enable-kv-checksum the status carries the prefill's checksum, verified as the
request enters its first batch (SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB flips it as SGLang's
test hook does): a mismatch is logged ("KV checksum mismatch req=... bootstrap_room=... expected=...
got=..."), the request aborted with HTTP 500 "KV checksum mismatch" and counted as a failed transfer.
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Optional

from .logfmt import DecodePD
from .pd import Bootstrap, RoleContext, kv_error, scheduler_traceback
from .pd_bootstrap import ROUTE_ALL, http
from .pd_transfer import LineServer, ack, receive_kv, send_message
from .scheduler import Req

DEFAULT_PREFILL_FAILURE_REASON = "Failed to get kvcache from prefill instance, it might be dead"
MAX_ENSURE_RETRIES = 15
ENSURE_RETRY_INTERVAL = 1.0
WAITING_TIMEOUT_WARNING = (
    "Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a greater mean TTFT "
    "is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to relax the "
    "timeout condition. ")


@dataclass
class Receiver:
    """One request's KV receiver (CommonKVReceiver) and its time stamps (time.time())."""
    req: Req
    boot: Bootstrap
    created: float
    bootstrapped: bool = False
    bootstrap_done: Optional[float] = None
    transfer_entry: Optional[float] = None
    received: Optional[float] = None
    tokens: int = 0                          # KV reserved for it while in transfer
    dp_rank: int = 0                         # the attention-DP rank it runs on
    checksum: Optional[int] = None           # the prefill's KV checksum (kv checksum on)

    @property
    def room(self):
        return self.boot.room


class DecodeRole:
    mode = "decode"

    def __init__(self, ctx: RoleContext, ip: str, max_total_num_tokens: int, slots: int,
                 node_endpoints: Optional[dict] = None):
        self.ctx = ctx
        self.engine = None
        self.pool = max_total_num_tokens
        self.slots = slots
        self.cv = threading.Condition()
        self.prealloc: list[Receiver] = []
        self.transfer: dict = {}             # room -> Receiver
        self.reserved = 0
        self.info: dict[str, dict] = {}      # bootstrap addr -> prefill layout (prefill_info_table)
        self.endpoints: dict[str, Optional[str]] = {}   # bootstrap addr -> prefill rank side channel
        self.tries: dict[str, int] = {}
        self.last_try: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.stop = threading.Event()
        self.kv = LineServer("0.0.0.0", self._on_kv, "pd-kv")
        self.endpoint = f"{ip}:{self.kv.port}"
        self.nodes = node_endpoints if node_endpoints is not None else {}    # node rank -> KV endpoint
        a = ctx.args
        self.dp = a.dp_size if a.enable_dp_attention else 1
        self.next_dp = 0
        self.mismatch_prob = _env_float("SGLANG_TEST_DISAGG_KV_CHECKSUM_MISMATCH_PROB", 0.0)
        self.mismatch_rng = random.Random(hash((a.random_seed or 0, 0)))

    def start(self, engine) -> None:
        """Attach the engine, then start the scheduler's PD steps: started in __init__, the loop
        could read the budget before the engine was attached (AttributeError in its thread, and
        every request then waited in the prealloc queue for good: seen on a loaded host)."""
        self.engine = engine
        for target, name in ((self._loop, "pd-decode"), (self._heartbeat, "HeartbeatChecker")):
            threading.Thread(target=target, name=name, daemon=True).start()

    # ---- intake --------------------------------------------------------------------------------
    def submit(self, req: Req, boot: Bootstrap, dp_rank: Optional[int] = None) -> None:
        now = time.time()
        req.arrival = now
        r = Receiver(req, boot, now)
        if dp_rank is None:                  # round_robin over the DP workers (the decode's auto)
            dp_rank, self.next_dp = self.next_dp, (self.next_dp + 1) % self.dp
        r.dp_rank = dp_rank
        req.pd = r
        if boot.fake:                        # FakeKVReceiver: "transferred" at once, first token made up
            r.transfer_entry = r.received = now
            self.engine.submit(req)
            return
        if req.input_len > self.pool:
            msg = f"Request {req.rid} exceeds the maximum number of tokens: {req.input_len} > {self.pool}"
            self.ctx.sink.log(msg, self.ctx.ranks[0][1])
            req.listener.on_abort(msg, 400, now)
            return
        self.ctx.metrics.stage("decode_prepare", 0.0)
        with self.cv:
            self.prealloc.append(r)
            self.cv.notify_all()

    # ---- the scheduler's PD steps (a thread polling like the event loop) -----------------------
    def _loop(self) -> None:
        while not self.stop.is_set():
            with self.cv:
                self.cv.wait(0.05)
                pending = [r for r in self.prealloc if not r.bootstrapped]
            self._ensure(pending)
            self._preallocate()
            self._check_waiting_timeouts()

    def _ensure(self, pending: list[Receiver]) -> None:
        now = time.time()
        for addr in dict.fromkeys(r.boot.addr for r in pending):
            if addr not in self.info:
                if now - self.last_try.get(addr, 0.0) < ENSURE_RETRY_INTERVAL:
                    continue
                self.last_try[addr] = now
                if not self._fetch_info(addr):
                    self.tries[addr] = self.tries.get(addr, 0) + 1
                    if self.tries[addr] >= MAX_ENSURE_RETRIES:
                        self.ctx.log(f"Could not fetch prefill parallel info from {addr} after "
                                     f"{self.tries.pop(addr)} attempts")
                        for r in [r for r in pending if r.boot.addr == addr]:
                            self._fail(r, "handshake", "Aborted by AbortReq.")
                    continue
                self.tries.pop(addr, None)
            if self.endpoints.get(addr) is None:
                self.endpoints[addr] = self._rank_endpoint(addr)
            with self.cv:
                for r in self.prealloc:
                    if r.boot.addr == addr and not r.bootstrapped:
                        r.bootstrapped, r.bootstrap_done = True, now

    def _fetch_info(self, addr: str) -> bool:
        """try_ensure_parallel_info, with its sanity checks (a mismatch raises in the scheduler)."""
        code, text = http("GET", f"http://{addr}{ROUTE_ALL}")
        if code == 0:
            self.ctx.log(f"Error fetching prefill server info from bootstrap: {text}")
            return False
        if code != 200:
            self.ctx.log(f"Failed to get prefill server info: {code}, {text}")
            return False
        info = json.loads(text)
        a = self.ctx.args
        page, dtype = info.get("page_size"), info.get("kv_cache_dtype")
        if page is not None and page != a.page_size:
            self._mismatch(1321, f"Page size mismatch: prefill server has page_size={page}, but decode server has "
                                 f"page_size={a.page_size}. Both servers must use the same --page-size value.")
        if dtype is not None and dtype != a.kv_cache_dtype:
            self._mismatch(1331, f"KV cache dtype mismatch: prefill server has kv_cache_dtype={dtype}, but decode "
                                 f"server has kv_cache_dtype={a.kv_cache_dtype}. Both servers must use the same "
                                 f"--kv-cache-dtype value.")
        if info.get("attn_tp_size") != a.tp_size:
            self.ctx.warn_once("Performance is NOT guaranteed when using different TP sizes for non-MLA models. ",
                               self.ctx.log)
        self.info[addr] = info
        return True

    def _mismatch(self, line: int, message: str) -> None:
        self.ctx.fatal(scheduler_traceback(
            [("disaggregation/decode.py", 1201, "_ensure_prefill_info",
              "if self.kv_manager.try_ensure_parallel_info(bootstrap_addr):"),
             ("disaggregation/common/conn.py", line, "try_ensure_parallel_info", "raise RuntimeError(")],
            f"RuntimeError: {message}"))

    def _rank_endpoint(self, addr: str) -> Optional[str]:
        """_get_bootstrap_info_from_server for the prefill's TP0 / PP0 rank."""
        code, text = http("GET", f"http://{addr}/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0"
                                 f"&target_pp_rank=0")
        if code == 200:
            d = json.loads(text)
            return f"{d['rank_ip']}:{d['rank_port']}"
        if code == 0:
            self.ctx.log(f"Error fetching prefill info from bootstrap: {text}")
        else:
            self.ctx.log(f"Failed to get prefill server info: {code}, {text}")
        return None

    def _budget(self) -> tuple[int, int, int, int]:
        """(KV tokens the engine's requests hold, their count, retracted requests, KV reserved for
        transfers), read together under the engine lock (a request handed over moves atomically)."""
        def read(c):
            with self.cv:
                return (c.used_tokens + sum(r.input_len for r in c.waiting), len(c.running) + len(c.waiting),
                        len(c.retracted), self.reserved)
        return self.engine.snapshot(read)

    def _preallocate(self) -> None:
        """pop_preallocated: reserve KV for bootstrapped requests in order, then announce the destination."""
        used, active, retracted, reserved = self._budget()
        per = self.reserve_per_request()
        ready: list[Receiver] = []
        with self.cv:
            for r in list(self.prealloc):
                if not r.bootstrapped:
                    continue
                if retracted:                # retracted requests come back first
                    break
                n = active + len(self.transfer)
                if n >= self.slots or used + reserved + per * n + r.req.input_len + per > self.pool:
                    break
                self.prealloc.remove(r)
                r.tokens, r.transfer_entry = r.req.input_len, time.time()
                reserved += r.tokens
                self.reserved += r.tokens
                self.transfer[r.room] = r
                ready.append(r)
        for r in ready:
            m = self.ctx.metrics
            m.stage("decode_bootstrap", r.transfer_entry - r.created)
            m.observe("sglang:kv_transfer_bootstrap_ms", (r.bootstrap_done - r.created) * 1000)
            m.observe("sglang:kv_transfer_alloc_ms", (r.transfer_entry - r.bootstrap_done) * 1000)
            side = self.endpoints.get(r.boot.addr)
            if side is None:
                self._fail(r, "transfer", f"Could not fetch prefill parallel info from bootstrap_addr: {r.boot.addr}")
            elif not self.ctx.knobs.faults.pd_bootstrap_timeout:
                a = self.ctx.args
                meta = {"t": "meta", "room": r.room, "endpoint": self.endpoint, "dp_rank": r.dp_rank,
                        "nodes": {str(k): v for k, v in sorted({0: self.endpoint, **self.nodes}.items())},
                        "tp": a.tp_size, "dp": self.dp, "gpus_per_node": self.ctx.knobs.gpus_per_node}
                if send_message(side, meta) is not None:
                    self._fail(r, "transfer", f"send_metadata to prefill {side} failed")

    def _check_waiting_timeouts(self) -> None:
        limit, now = self.ctx.env.waiting_timeout, time.time()
        with self.cv:
            late = [r for r in self.transfer.values() if now - r.transfer_entry >= limit]
        for r in late:
            self.ctx.warn_once(WAITING_TIMEOUT_WARNING, self.ctx.log)
            side = self.endpoints.get(r.boot.addr)
            if side is not None:
                send_message(side, {"t": "abort", "room": r.room})
            self._fail(r, "transfer", f"Request {r.room} timed out after {now - r.transfer_entry:.1f}s "
                                      f"in KVPoll.WaitingForInput")

    # ---- KV arrives ----------------------------------------------------------------------------
    def _on_kv(self, header: dict, conn, rfile) -> None:
        if not header.get("final"):          # this node's share of a request's KV
            receive_share(header, conn, rfile)
            return
        room = header.get("room")
        with self.cv:
            r = self.transfer.get(room)
        ack(conn)
        if r is None:
            return
        if header.get("status") != "ok":     # the prefill concluded the transfer Failed
            self._fail(r, "transfer", DEFAULT_PREFILL_FAILURE_REASON)
            return
        with self.cv:
            if self.transfer.pop(room, None) is not r:
                return                       # failed meanwhile (timeout, lost prefill)
        r.received = time.time()
        r.checksum = header.get("checksum")
        self.ctx.metrics.stage("decode_transferred", r.received - r.transfer_entry)
        r.req.output_ids = [int(t) for t in header.get("first_ids", [])][:1]
        def hand_over(core) -> None:         # the reservation becomes the engine's, atomically
            self.engine.submit(r.req)        # (the engine's lock is re-entrant)
            with self.cv:
                self.reserved -= r.tokens
        self.engine.snapshot(hand_over)

    # ---- heartbeat -----------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        env = self.ctx.env
        while not self.stop.wait(env.heartbeat_interval):
            for addr in list(self.info):
                code, _ = http("GET", f"http://{addr}/health", timeout=3.0)
                if code == 200:
                    self.failures[addr] = 0
                    continue
                self.ctx.log_ranks(lambda rank: f"Attempting to reconnect to {addr}...")
                self.failures[addr] = self.failures.get(addr, 0) + 1
                if self.failures[addr] >= env.heartbeat_max_failure:
                    self._prefill_lost(addr)

    def _prefill_lost(self, addr: str) -> None:
        self.info.pop(addr, None)
        self.endpoints.pop(addr, None)
        self.failures.pop(addr, None)
        with self.cv:
            waiting = [r for r in self.prealloc if r.boot.addr == addr]
            moving = [r for r in self.transfer.values() if r.boot.addr == addr]
        reason = f"Lost connection with prefill instance (bootstrap_addr: {addr})"
        self.ctx.log_ranks(lambda rank: f"{reason}, {len(waiting) + len(moving)} requests affected")
        for r in waiting:
            self._fail(r, "handshake", reason)
        for r in moving:
            self._fail(r, "transfer", reason)

    # ---- failures ------------------------------------------------------------------------------
    def _fail(self, r: Receiver, what: str, reason: str) -> None:
        with self.cv:
            if r in self.prealloc:
                self.prealloc.remove(r)
            elif self.transfer.get(r.room) is r:
                del self.transfer[r.room]
                self.reserved -= r.tokens
            else:
                return                       # already concluded
        def text(rank: int) -> str:
            return (f"Decode {what} failed for request rank={rank} decode_req.req.rid={r.req.rid!r} "
                    f"decode_req.req.bootstrap_room={r.room} with exception {kv_error(r.room, reason)}")
        self.ctx.log_ranks(text)
        self.ctx.metrics.inc("sglang:num_bootstrap_failed_reqs_total" if what == "handshake"
                             else "sglang:num_transfer_failed_reqs_total")
        if r.req.listener is not None and hasattr(r.req.listener, "on_abort"):
            r.req.listener.on_abort(text(0), 500, time.time())

    # ---- for DecodeCore (under the engine lock) ------------------------------------------------
    def reserve_per_request(self) -> int:
        return self.ctx.args.num_reserved_decode_tokens

    def reserved_tokens(self) -> int:
        return self.reserved

    def checksum_ok(self, req: Req) -> bool:
        """_verify_kv_checksums as the request enters its first batch (kv checksum on, both roles)."""
        r: Receiver = req.pd
        if r is None or r.checksum is None or not self.ctx.args.disaggregation_enable_kv_checksum:
            return True
        got = r.checksum
        if self.mismatch_prob > 0 and self.mismatch_rng.random() < self.mismatch_prob:
            got ^= 1
        if got == r.checksum:
            return True
        msg = (f"KV checksum mismatch req={req.rid} bootstrap_room={r.room} expected={r.checksum:#x} "
               f"got={got:#x}")
        self.ctx.log(msg)
        self.ctx.metrics.inc("sglang:num_transfer_failed_reqs_total")
        if req.listener is not None and hasattr(req.listener, "on_abort"):
            req.listener.on_abort("KV checksum mismatch", 500, time.time())
        return False

    def on_admitted(self, req: Req, now: float) -> None:
        r: Receiver = req.pd
        self.ctx.metrics.stage("decode_waiting", now - (r.received or now))
        self.ctx.metrics.observe("sglang:queue_time_seconds", now - (r.received or now))

    def on_retracted(self, reqs: list[Req]) -> None:
        m = self.ctx.metrics
        m.inc("sglang:num_retracted_requests_total", len(reqs))
        m.inc("sglang:num_retracted_input_tokens_total", sum(r.input_len for r in reqs))
        m.inc("sglang:num_retracted_output_tokens_total", sum(len(r.output_ids) for r in reqs))

    def stats(self, retracted: int) -> DecodePD:
        with self.cv:
            return DecodePD(self.reserved / max(1, self.pool), len(self.prealloc), len(self.transfer), retracted)

    def gauges(self) -> dict:
        with self.cv:
            return {"num_decode_prealloc_queue_reqs": len(self.prealloc),
                    "num_decode_transfer_queue_reqs": len(self.transfer),
                    "prealloc_full_token_usage": self.reserved / max(1, self.pool)}

    def idle(self) -> bool:
        """No request in its prealloc or transfer queue (part of Scheduler.is_fully_idle)."""
        with self.cv:
            return not self.prealloc and not self.transfer

    def close(self) -> None:
        self.stop.set()
        self.kv.close()


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def receive_share(header: dict, conn, rfile) -> None:
    """A decode node receives its share of a request's KV and acknowledges it; a node whose GPU
    memory cannot be registered for RDMA (GPUDirect missing) takes none: the prefill's write fails."""
    from ..fabric import gpudirect
    if gpudirect() == "none":
        return
    if receive_kv(header, conn, rfile):
        ack(conn)
