"""Runs the scheduler core in real time on one thread: plan a forward, sleep its duration times
the time scale (and, on a multi-node replica, wait for the forward's exchange with the other
nodes), apply it. HTTP threads submit requests and wait on per-request queues. ``on_activity``
(node.py) hears each busy/idle transition: busy from the first forward planned after idle, idle
when the scheduler finds no work (the fake GPUs' utilisation, gpu_activity.py).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .scheduler import EngineFault, Req, SchedulerCore

DIE_DELAY = 0.5


@dataclass(frozen=True)
class TokenEvent:
    new_ids: list[int]
    now: float
    finished: bool
    abort: Optional[dict] = None       # SGLang's FINISH_ABORT json (message, status_code): the request failed


class RequestStream:
    """Listener that hands the scheduler's outputs of one request to the HTTP thread."""

    def __init__(self):
        self.q: "queue.Queue[TokenEvent]" = queue.Queue()

    def on_tokens(self, req: Req, new_ids: list[int], now: float, finished: bool) -> None:
        self.q.put(TokenEvent(list(new_ids), now, finished))

    def on_abort(self, message: str, status_code: int, now: float) -> None:
        """prepare_abort(req, message, status_code): the request ends with an error (PD failures)."""
        self.q.put(TokenEvent([], now, True, {"type": "abort", "message": message, "status_code": status_code,
                                              "err_type": None}))


class Exchange:
    """The per-forward exchange with the other nodes of the replica (rendezvous.Hub), overlapping
    the forward: started when the forward starts, waited for when its modelled time is over."""

    def __init__(self, hub, pad_bytes: int):
        self.hub = hub
        self.pad_bytes = pad_bytes

    def begin(self) -> int:
        return self.hub.exchange_begin(self.pad_bytes)

    def wait(self, seq: int, stop: threading.Event) -> bool:
        return self.hub.exchange_wait(seq, stop)


class Engine:
    def __init__(self, core: SchedulerCore, time_scale: float, on_fatal: Callable[[EngineFault], None],
                 die_after_requests: Optional[int] = None, exchange: Optional[Exchange] = None,
                 hang_after_requests: Optional[int] = None):
        self.core = core
        self.exchange = exchange
        self.scale = time_scale
        self.on_fatal = on_fatal
        self.die_after = die_after_requests
        self.cond = threading.Condition()
        self.stop_event = threading.Event()
        self.forwards_done = 0
        self.dead = False
        self._die_at: Optional[float] = None
        self.hang_after = hang_after_requests
        self.hung = False        # stuck (a collective that never completes): alive, no progress
        self.on_activity: Optional[Callable[[bool, float], None]] = None
        self.profiler = None     # profiler.Profiler (node rank 0): told of every forward before it runs
        self._active = False
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        with self.cond:
            self.cond.notify_all()

    def submit(self, req: Req) -> None:
        with self.cond:
            self.core.add(req, time.time())
            self.cond.notify_all()

    def abort(self, rid: str) -> None:
        if self.hung:            # the stuck scheduler never receives the abort
            return
        with self.cond:
            self.core.abort(rid)

    def request_ids(self) -> list[str]:
        """Requests the server still holds (queued, prefilling, decoding)."""
        def ids(core):
            reqs = list(core.waiting) + list(core.running) + ([core.chunked] if core.chunked else [])
            return [r.rid for r in reqs]
        return self.snapshot(ids)

    def snapshot(self, fn):
        """Run fn(core) under the scheduler lock (for /metrics, /server_info)."""
        with self.cond:
            return fn(self.core)

    def health_probe(self, make_req: Callable[[], Req], timeout: float) -> bool:
        """SGLang's /health: busy -> wait for the next forward; idle -> run a 1-token request."""
        deadline = time.time() + timeout
        with self.cond:
            if self.core.busy():
                target = self.forwards_done + 1
                while self.forwards_done < target and not self.dead and time.time() < deadline:
                    self.cond.wait(min(0.5, max(0.01, deadline - time.time())))
                return self.forwards_done >= target and not self.dead
        stream = RequestStream()
        req = make_req()
        req.listener = stream
        self.submit(req)
        try:
            stream.q.get(timeout=max(0.01, deadline - time.time()))
            return not self.dead
        except queue.Empty:
            self.abort(req.rid)
            return False

    def _crash_due(self) -> bool:
        """die_after_requests: crash shortly (DIE_DELAY) after the N-th user request finished, so
        its response still reaches the client."""
        if self.die_after is None or self.core.counters.finished_user < self.die_after:
            return False
        if self._die_at is None:
            self._die_at = time.time() + DIE_DELAY
        return time.time() >= self._die_at

    def _set_active(self, active: bool) -> None:
        if active != self._active:
            self._active = active
            if self.on_activity is not None:
                self.on_activity(active, time.time())

    def _loop(self) -> None:
        core = self.core
        while not self.stop_event.is_set():
            if self.hang_after is not None and core.counters.finished_user >= self.hang_after:
                # hang_after_requests: stuck for good, silently (a collective that never returns);
                # the process, its HTTP server and /metrics stay up, nothing finishes any more.
                self.hung = True
                self.stop_event.wait()
                return
            with self.cond:
                if self._crash_due():
                    self.dead = True
                    self.cond.notify_all()
                    self.on_fatal(EngineFault("crash", f"die_after_requests={self.die_after}"))
                    return
                fwd = core.plan(time.time()) if core.has_work() else None
                self._set_active(fwd is not None)
                if fwd is None:
                    core.note_idle()
                    self.cond.wait(0.1)
                    continue
                if self.profiler is not None:
                    self.profiler.on_forward(fwd.kind, time.time(), fwd.duration * self.scale,
                                             len(fwd.items) or len(fwd.reqs), sum(t for _, t in fwd.items) or len(fwd.reqs))
            seq = self.exchange.begin() if self.exchange is not None else None
            if self.stop_event.wait(fwd.duration * self.scale):
                return
            if seq is not None and not self.exchange.wait(seq, self.stop_event):
                return
            with self.cond:
                try:
                    core.complete(fwd, time.time())
                except EngineFault as fault:
                    self.dead = True
                    self.cond.notify_all()
                    self.on_fatal(fault)
                    return
                self.forwards_done += 1
                self.cond.notify_all()
