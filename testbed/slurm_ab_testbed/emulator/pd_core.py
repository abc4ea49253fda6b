"""The scheduler core of a PD prefill server and of a PD decode server.

Prefill (``disaggregation/prefill.py``): every request is computed with max_new_tokens = 1; a
request that came with bootstrap fields is held after its forward (SGLang's inflight queue) until
its KV reached the decode, and only then answered. Decode (``disaggregation/decode.py``): requests
enter with their KV already transferred and their first token from the prefill (SGLang's
"prebuilt" batch: no prefill forward, no "Prefill batch" line), then decode as usual; when the KV
pool cannot hold the next step, requests are retracted as ``Scheduler.update_running_batch`` does
("KV cache pool is full. Retract requests. ...") and resumed when room frees.
"""
from __future__ import annotations

from typing import Optional

from .scheduler import Req, SchedulerCore

# SGLang's new-token-ratio schedule (SGLANG_INIT_NEW_TOKEN_RATIO, ..._MIN_..._FACTOR, ..._DECAY_STEPS)
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20


class PrefillCore(SchedulerCore):
    """``pd`` is the PrefillRole (pd_prefill): it holds prefilled requests and reports its queues.
    Requests whose KV transfer is done wait in ``done`` until the next loop iteration concludes them
    (process_disagg_prefill_inflight_queue runs after each forward: a transfer that completes during
    a forward is concluded, and its metrics stamped, after it)."""
    pd = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.done: list[Req] = []

    def has_work(self) -> bool:
        return super().has_work() or bool(self.done)

    def plan(self, now: float):
        done, self.done = self.done, []
        for req in done:
            self.pd.on_completed(req, now)
        return super().plan(now)

    def _plan_prefill(self, now: float):
        fwd = super()._plan_prefill(now)
        for req, _ in (fwd.items if fwd is not None else ()):
            if req.pd is not None and req.pd.forward_entry is None and self.pd is not None:
                self.pd.on_forward(req, now)
        return fwd

    def _prefilled(self, req: Req, ids: list[int], now: float) -> None:
        if req.pd is not None and self.pd is not None:
            self.pd.on_prefilled(req, now)      # KV to the decode first; answered when it arrived
        else:
            super()._prefilled(req, ids, now)

    def finish_prefilled(self, req: Req, now: float) -> None:
        self._finish(req, list(req.output_ids), now)

    def _prefill_pd(self):
        return self.pd.stats() if self.pd is not None else None

    def _log_prefill(self, now: float, items, tokens: int) -> None:
        super()._log_prefill(now, items, tokens)
        if self.pd is not None:
            # metrics_reporter.report_prefill_stats: "running_batch is never populated in PD prefill,
            # so count the current forward batch instead" (the log line keeps its running batch's)
            self.metrics.on_report(num_running_reqs=len(items), **self.pd.gauges())

    def fully_idle(self) -> bool:
        return self.pd is None or self.pd.idle()

    def pd_gauges(self) -> dict:
        return self.pd.gauges() if self.pd is not None else {}


class DecodeCore(SchedulerCore):
    """``pd`` is the DecodeRole (pd_decode): KV reserved for requests still in transfer, its queues."""
    pd = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.retracted: list[Req] = []
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.retracted_since_report = 0

    def has_work(self) -> bool:
        return super().has_work() or bool(self.retracted)

    def _reserved(self) -> int:
        return self.pd.reserved_tokens() if self.pd is not None else 0

    def plan(self, now: float):
        self._resume()
        self._admit_prebuilt(now)
        self._maybe_retract()
        return super().plan(now)

    def _admit_prebuilt(self, now: float) -> None:
        """Transferred requests join the running batch; their first token (the prefill's) is sent now."""
        while self.waiting:
            req = self.waiting.popleft()
            if self.pd is not None and not self.pd.checksum_ok(req):
                continue                     # KV checksum mismatch: aborted, its KV released
            req.prefilled = req.input_len
            if not req.output_ids:           # fake transfer (warm-up, health check): the token is made up
                req.output_ids.extend(self.sample_ids(req.rng, 1))
            req.first_token_time = now
            if req.pd is not None and self.pd is not None:
                self.pd.on_admitted(req, now)
            if req.kind != "health":
                self.counters.prompt_tokens += req.input_len
            self._prefilled(req, list(req.output_ids), now)

    def _fits(self, extra_tokens: int, n_running: int) -> bool:
        step = self.cfg.num_draft_tokens
        return self.used_tokens + self._reserved() + extra_tokens + step * n_running <= self.cfg.max_total_num_tokens

    def _maybe_retract(self) -> None:
        if not self.running or self._fits(0, len(self.running)):
            self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - DECAY)
            return
        before, old_ratio = self.used_tokens, self.new_token_ratio
        out: list[Req] = []
        while len(self.running) > 1 and not self._fits(0, len(self.running)):
            victim = min(self.running, key=lambda r: (len(r.output_ids), -r.input_len))
            self.running.remove(victim)
            out.append(victim)
        if not out:
            return
        decoded = sum(len(r.output_ids) for r in self.running)
        max_new = sum(r.max_new_tokens for r in self.running) or 1
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / max_new)
        self.retracted.extend(out)
        self.retracted_since_report += len(out)
        if self.pd is not None:
            self.pd.on_retracted(out)
        self.emit(f"KV cache pool is full. Retract requests. #retracted_reqs: {len(out)}, "
                  f"#new_tokens_gained: {before - self.used_tokens}, "
                  f"#new_token_ratio: {old_ratio:.4f} -> {self.new_token_ratio:.4f}")

    def _resume(self) -> None:
        """Retracted requests come back (their KV restored from the host backup) once they fit again."""
        reserve = self.pd.reserve_per_request() if self.pd is not None else 0
        while self.retracted and self._fits(self.retracted[0].kv_tokens + reserve, len(self.running) + 1):
            self.running.append(self.retracted.pop(0))

    def _decode_pd(self):
        return self.pd.stats(len(self.retracted)) if self.pd is not None else None

    def _report_decode(self, stats, ctx: int) -> None:
        super()._report_decode(stats, ctx)
        if self.pd is not None:
            self.metrics.on_report(num_retracted_reqs=self.retracted_since_report, **self.pd.gauges())
            self.retracted_since_report = 0

    def fully_idle(self) -> bool:
        return self.pd is None or self.pd.idle()

    def pd_gauges(self) -> dict:
        return self.pd.gauges() if self.pd is not None else {}


def core_class(mode: Optional[str]):
    return {"prefill": PrefillCore, "decode": DecodeCore}.get(mode or "null", SchedulerCore)
