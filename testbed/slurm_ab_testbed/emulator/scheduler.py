"""The emulated SGLang scheduler: batching, chunked prefill, decode steps, speculative acceptance
and the statistics lines, as a pure state machine driven by ``plan(now)`` / ``complete(fwd, now)``.

Pure so the same code runs in real time (``engine.Engine`` sleeps each forward's duration) and in
virtual time (``simulate`` estimates a whole benchmark in milliseconds). Policy as SGLang's
``get_next_batch_to_run``: a pending prefill (a chunked request's next chunk first, then new
requests up to ``--chunked-prefill-size`` tokens / ``--max-prefill-tokens`` /
``--max-running-requests``) always runs before the next decode step; "Prefill batch" is logged
when a batch is formed, "Decode batch" every ``--decode-log-interval`` decode steps.

Prefix cache (``radix.py``, on unless ``--disable-radix-cache``): a new request first matches its
prompt in the tree (``Req.init_next_round_input``); the matched tokens are its ``cached_tokens``
(``meta_info``, ``#cached-token`` of its Prefill batch line, ``sglang:cache_hit_rate``,
``sglang:prefill_effective_tokens_total{mode="device_hit"}``, ``sglang:realtime_tokens_total
{mode="prefill_cache"}``, ``sglang:cached_tokens_total``) and cost no prefill time; only the rest
is computed and charged to the chunk budget. KV accounting follows SGLang's pools: tokens locked
by running requests are used, the rest of the tree is evictable (free for admission, evicted LRU
when new KV needs the room); ``token usage`` = used / max_total_num_tokens.

Outputs (``outputs.py``): a request with ``outputs`` set (temperature 0) gets the deterministic
tokens of its prompt; others the per-request random stream. A request stops at the EOS of the
``empty_output`` fault (finish_reason ``stop``).
"""
from __future__ import annotations

import random
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from .costs import CostModel
from .logfmt import DecodeStats, PrefillStats, decode_line, prefill_line
from .memory import MemoryPlan
from .metrics import MetricsState
from .noise import Noise
from .outputs import Outputs
from .radix import RadixCache


class EngineFault(Exception):
    """A fatal scheduler error (the runner prints it SGLang-style and the process dies)."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(kind, detail)
        self.kind = kind       # "oom" | "crash"
        self.detail = detail


class Listener(Protocol):
    def on_tokens(self, req: "Req", new_ids: list[int], now: float, finished: bool) -> None: ...


@dataclass
class Req:
    rid: str
    input_len: int
    max_new_tokens: int
    kind: str = "user"                 # "user" | "warmup" (SGLang's own) | "health"
    streaming: bool = False            # /metrics' is_streaming label
    arrival: float = 0.0
    listener: Optional[Listener] = None
    seed: int = 0
    prefilled: int = 0
    output_ids: list[int] = field(default_factory=list)
    verify_ct: int = 0
    accepted: int = 0                  # tokens produced by verify steps (bonus included)
    accept_mean: float = 1.0
    first_token_time: Optional[float] = None
    finish_time: Optional[float] = None
    rng: random.Random = field(default_factory=random.Random)
    pd: Optional[object] = None        # PD disaggregation state of the request (pd_prefill / pd_decode)
    input_ids: Optional[list[int]] = None   # the prompt: prefix cache key (None: no cache lookup)
    outputs: Optional[Outputs] = None  # temperature 0: the prompt's deterministic tokens (outputs.py)
    cached_tokens: int = 0             # prompt tokens found in the prefix cache (meta_info.cached_tokens)
    finish_reason: Optional[dict] = None    # set when it stops other than by length
    radix_node: Optional[object] = None     # the tree path it locks (radix.Node)
    shared: int = 0                    # its tokens held by that locked path

    @property
    def kv_tokens(self) -> int:
        return self.prefilled + len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.finish_time is not None


@dataclass(frozen=True)
class SchedConfig:
    max_running_requests: int
    chunked_prefill_size: Optional[int]    # None or <= 0: no chunking
    max_prefill_tokens: int
    max_total_num_tokens: int
    decode_log_interval: int
    cuda_graph_max_bs: int                 # 0: CUDA graphs disabled
    num_draft_tokens: int                  # 1 without speculative decoding
    log_version: str = "0.5.23"
    pp_micro_batches: int = 1              # PP: pp_size + pp_async_batch_depth running micro-batches
    radix_cache: bool = False              # the prefix cache (not --disable-radix-cache)
    page_size: int = 1                     # its matching granularity (--page-size)


@dataclass
class Forward:
    kind: str                                        # "prefill" | "decode"
    items: list[tuple[Req, int]]                     # (request, new tokens) for prefill
    reqs: list[Req]                                  # decode batch
    duration: float                                  # seconds at time scale 1


@dataclass
class Counters:
    """Lifetime counters behind /metrics and /server_info."""
    num_requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished_user: int = 0
    last_gen_throughput: float = 0.0
    last_accept_len: float = 0.0
    spec_total_accepted: int = 0
    spec_total_verify: int = 0


class SchedulerCore:
    def __init__(self, cfg: SchedConfig, model: CostModel, memory: MemoryPlan,
                 sample_ids: Callable[[random.Random, int], list[int]],
                 emit: Callable[[str], None], seed: int = 0, oom_first_user_prefill: bool = False,
                 noise: Optional[Noise] = None):
        self.cfg = cfg
        self.noise = noise
        self.model = model
        self.memory = memory
        self.sample_ids = sample_ids
        self.emit = emit
        self.rng = random.Random(seed)
        self.seed = seed
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.chunked: Optional[Req] = None
        self.counters = Counters()
        self.metrics = MetricsState()      # /metrics, fed by the same events as the log lines
        self.workspace_allocated = False
        self.force_oom = oom_first_user_prefill
        self._last_kind: Optional[str] = None
        self._drained = True
        self._forward_ct_decode = 0
        self._win_start: Optional[float] = None
        self._win_tokens = 0
        self._win_accepted = 0
        self._win_verify = 0
        self._last_prefill_tokens = 0
        self._last_prefill_log: Optional[float] = None
        self._n_added = 0
        self._mb: dict[str, int] = {}      # PP: request -> the micro-batch it runs in
        self._mb_next = 0
        self._mb_reports = 0
        self.tree = RadixCache(cfg.page_size) if cfg.radix_cache else None
        self._batch_hits = 0               # cached tokens of the requests a prefill batch admits

    # ---- intake --------------------------------------------------------------------------------
    def add(self, req: Req, now: float) -> None:
        self._n_added += 1
        req.arrival = req.arrival or now   # a PD decode request arrived before its KV did
        req.rng = random.Random(zlib.crc32(f"{self.seed}/{self._n_added}".encode()))
        if self.model.spec:
            req.accept_mean = self.model.request_accept_mean(req.rng)
        self.waiting.append(req)

    def abort(self, rid: str) -> bool:
        """Drop a request (client went away), wherever it is."""
        for r in list(self.waiting):
            if r.rid == rid:
                self.waiting.remove(r)
                return True
        if self.chunked is not None and self.chunked.rid == rid:
            self._release(self.chunked)
            self.chunked = None
            return True
        for r in self.running:
            if r.rid == rid:
                self.running.remove(r)
                self._release(r)
                return True
        return False

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def busy(self) -> bool:
        """SGLang answers a health check without a generation when something is running."""
        return bool(self.running or self.chunked)

    def note_idle(self) -> None:
        """Nothing to run. As SGLang's scheduler (on_idle): only when fully idle (a PD server's
        queues empty too: Scheduler.is_fully_idle) does metrics_reporter._maybe_log_idle_metrics
        run, and a running-requests gauge that disagrees with the running batch (the last report's,
        now stale) is published again with the idle values, a PD server's queue gauges with them.
        A server whose requests wait in a PD queue publishes nothing: its gauges stay the last
        report's."""
        self._drained = True
        if not self.fully_idle():
            return
        g = self.metrics.gauges
        if g.get("num_running_reqs", 0) != len(self.running) or g.get("num_queue_reqs", 0) != len(self.waiting):
            used = self.used_tokens
            self.metrics.on_report(num_running_reqs=len(self.running), num_queue_reqs=len(self.waiting),
                                   gen_throughput=0.0, token_usage=used / max(1, self.cfg.max_total_num_tokens),
                                   full_token_usage=used / max(1, self.cfg.max_total_num_tokens),
                                   num_used_tokens=used, kv_used_tokens=used,
                                   kv_available_tokens=max(0, self.cfg.max_total_num_tokens - used),
                                   **self.pd_gauges())

    def fully_idle(self) -> bool:
        """No PD queue holds a request (an ordinary server has none)."""
        return True

    def pd_gauges(self) -> dict:
        """A PD server's queue gauges (metrics_reporter: prefill bootstrap/inflight, decode
        prealloc/transfer); none for an ordinary server."""
        return {}

    @property
    def used_tokens(self) -> int:
        """KV slots in use: each request's own tokens plus the tree paths running requests lock
        (shared prefixes once); the tree's unlocked rest is evictable, not used."""
        used = sum(r.kv_tokens - r.shared for r in self.running)
        if self.chunked is not None:
            used += self.chunked.kv_tokens - self.chunked.shared
        return used + (self.tree.protected if self.tree is not None else 0)

    # ---- prefix cache --------------------------------------------------------------------------
    def _match(self, req: Req) -> int:
        """Look a new request's prompt up in the tree and lock what matched (its cached tokens)."""
        if self.tree is None or req.input_ids is None or req.prefilled or req.radix_node is not None:
            return 0
        hit, node = self.tree.match(req.input_ids, req.input_len - 1)
        self.tree.lock(node)
        req.radix_node, req.shared, req.prefilled, req.cached_tokens = node, hit, hit, hit
        return hit

    def _unmatch(self, req: Req) -> None:
        """A matched request that was not admitted after all (it matches again next time)."""
        if req.radix_node is not None and req.prefilled == req.cached_tokens:
            self.tree.unlock(req.radix_node)
            req.radix_node, req.shared, req.prefilled, req.cached_tokens = None, 0, 0, 0

    def _checkpoint(self, req: Req, ids: list[int]) -> None:
        """Insert what the request holds (its computed prompt, or prompt + output) and move its lock."""
        if self.tree is None or req.input_ids is None:
            return
        _, node = self.tree.insert(ids)
        self.tree.lock(node)
        if req.radix_node is not None:
            self.tree.unlock(req.radix_node)
        req.radix_node, req.shared = node, RadixCache.depth(node)

    def _release(self, req: Req) -> None:
        if self.tree is not None and req.radix_node is not None:
            self.tree.unlock(req.radix_node)
            req.radix_node, req.shared = None, 0

    def _make_room(self, used_after: int) -> None:
        """Evict LRU unlocked prefixes so that used + evictable fits the pool (SGLang evicts when
        an allocation finds too few free slots)."""
        if self.tree is not None:
            self.tree.evict(used_after + self.tree.evictable - self.cfg.max_total_num_tokens)

    def flush_cache(self) -> bool:
        """``/flush_cache``: empty the tree when nothing runs, waits or holds a prefix."""
        if self.has_work() or (self.tree is not None and self.tree.protected):
            return False
        if self.tree is not None:
            self.tree.reset()
        return True

    def _next_ids(self, req: Req, n: int) -> list[int]:
        if req.outputs is not None:
            return req.outputs.ids(len(req.output_ids), n)
        return self.sample_ids(req.rng, n)

    def _stops(self, req: Req) -> bool:
        """The request sampled its EOS (the empty_output fault's; no other stop is modelled)."""
        o = req.outputs
        if o is not None and o.eos is not None and req.output_ids and req.output_ids[-1] == o.eos:
            req.finish_reason = {"type": "stop", "matched": o.eos}
            return True
        return False

    # ---- planning ------------------------------------------------------------------------------
    def plan(self, now: float) -> Optional[Forward]:
        fwd = self._plan_prefill(now)
        if fwd is None and self.running:
            batch = list(self.running)
            ctx = sum(r.kv_tokens for r in batch)
            fwd = Forward("decode", [], batch, self.model.decode_time(len(batch), ctx, self.rng))
            if self.tree is not None:
                self._make_room(self.used_tokens + len(batch) * self.cfg.num_draft_tokens)
        if fwd is not None:
            self._drained = self._drained and fwd.kind != "prefill"
            if self.noise is not None:
                fwd.duration *= self.noise.forward_factor(now)
                if fwd.kind == "prefill":
                    fwd.duration += self.noise.prefill_stall_s(len(self.waiting) + len(self.running))
        return fwd

    def _plan_prefill(self, now: float) -> Optional[Forward]:
        cfg = self.cfg
        chunk_budget = cfg.chunked_prefill_size if cfg.chunked_prefill_size and cfg.chunked_prefill_size > 0 else None
        input_budget = cfg.max_prefill_tokens
        items: list[tuple[Req, int]] = []
        new_chunked: Optional[Req] = None
        if self.chunked is not None:
            req = self.chunked
            take = req.input_len - req.prefilled
            if chunk_budget is not None and take > chunk_budget:
                take, new_chunked = chunk_budget, req
            items.append((req, take))
            if chunk_budget is not None:
                chunk_budget -= take
            input_budget -= take
        used = self.used_tokens
        hits = 0
        while self.waiting and new_chunked is None:
            if len(self.running) + len(items) >= cfg.max_running_requests:
                break
            if (chunk_budget is not None and chunk_budget <= 0) or input_budget <= 0:
                break
            req = self.waiting[0]
            hit = self._match(req)
            if hit:
                used = self.used_tokens + sum(t for r, t in items if r is not self.chunked)   # its prefix is locked
            extend = req.input_len - req.prefilled
            if items and extend > input_budget and chunk_budget is None:
                self._unmatch(req)
                break
            if used + extend + req.max_new_tokens > cfg.max_total_num_tokens and (items or self.running):
                self._unmatch(req)
                break  # no KV room now: wait for running requests to finish
            self.waiting.popleft()
            hits += hit
            take = extend
            if chunk_budget is not None and take > chunk_budget:
                take, new_chunked = chunk_budget, req
            items.append((req, take))
            used += take
            input_budget -= take
            if chunk_budget is not None:
                chunk_budget -= take
        if not items:
            return None
        tokens = sum(t for _, t in items)
        self._make_room(self.used_tokens + tokens)
        self.chunked = new_chunked
        self._batch_hits = hits
        self._log_prefill(now, items, tokens)
        warm = self._last_kind == "prefill" and not self._drained
        return Forward("prefill", items, [], self.model.prefill_time(tokens, warm))

    def _log_prefill(self, now: float, items, tokens: int) -> None:
        if self._last_prefill_log is not None and now > self._last_prefill_log:
            throughput = self._last_prefill_tokens / (now - self._last_prefill_log)
        else:
            throughput = 0.0
        self._last_prefill_log, self._last_prefill_tokens = now, tokens
        pending = sum(r.input_len for r in self.waiting)
        if self.chunked is not None:
            pending += self.chunked.input_len - self.chunked.prefilled - next(
                t for r, t in items if r is self.chunked)
        used = sum(r.kv_tokens - r.shared for r in self.running) + sum(r.prefilled + t - r.shared for r, t in items)
        if self.tree is not None:
            used += self.tree.protected
        hits = self._batch_hits
        stats = PrefillStats(
            new_seq=len(items), new_token=tokens, cached_token=hits,
            token_usage=used / max(1, self.cfg.max_total_num_tokens),
            running_req=self._reported_running(self.running, [r for r, _ in items]),
            queue_req=len(self.waiting), pending_token=max(0, pending), cuda_graph=False,
            input_throughput=throughput, pd=self._prefill_pd())
        self.emit(prefill_line(self.cfg.log_version, stats))
        evictable = self.tree.evictable if self.tree is not None else 0
        self.metrics.add_realtime(prefill_compute=tokens, prefill_cache=hits)
        self.metrics.on_report(num_running_reqs=stats.running_req, num_queue_reqs=stats.queue_req,
                               token_usage=stats.token_usage, full_token_usage=stats.token_usage,
                               num_used_tokens=used, kv_used_tokens=used, kv_evictable_tokens=evictable,
                               cache_hit_rate=hits / (hits + tokens) if hits + tokens else 0.0,
                               kv_available_tokens=max(0, self.cfg.max_total_num_tokens - used - evictable))

    # ---- PP micro-batches -----------------------------------------------------------------------
    # SGLang's event_loop_pp (scheduler_pp_mixin.py) cycles pp_size + pp_async_batch_depth
    # micro-batches, each with its own running batch; a new request joins the micro-batch being
    # scheduled, and each report ("Prefill/Decode batch" line and its gauges) counts the micro-batch
    # just processed (report_decode_stats(running_batch=batch)), not the replica's running requests.
    # The emulator runs all micro-batches as one forward and reports one occupied micro-batch per
    # report, in turn.
    def _micro_batch(self, req: Req) -> int:
        if req.rid not in self._mb:
            self._mb[req.rid] = self._mb_next % self.cfg.pp_micro_batches
            self._mb_next += 1
        return self._mb[req.rid]

    def _reported_running(self, reqs, joining=()) -> int:
        """#running-req of a report: every running request without PP; with PP, the requests of
        the micro-batch the report is about (the one new requests join, else the next occupied)."""
        if self.cfg.pp_micro_batches <= 1:
            return len(reqs)
        mbs = [self._micro_batch(r) for r in reqs]
        if joining:
            mb = self._micro_batch(joining[0])
        else:
            occupied = sorted(set(mbs))
            if not occupied:
                return 0
            mb = occupied[self._mb_reports % len(occupied)]
            self._mb_reports += 1
        return sum(1 for m in mbs if m == mb)

    # ---- completion ----------------------------------------------------------------------------
    def complete(self, fwd: Forward, now: float) -> None:
        """Apply a finished forward: emit tokens to listeners, log stats. May raise EngineFault."""
        self._last_kind = fwd.kind
        if self.noise is not None:
            self.noise.forward_done(now)
        if fwd.kind == "prefill":
            self._complete_prefill(fwd, now)
        else:
            self._complete_decode(fwd, now)

    def _check_workspace(self, items) -> None:
        for req, take in items:
            if req.kind == "user" and self.force_oom:
                raise EngineFault("oom")
            if not self.workspace_allocated and req.prefilled + take >= self.memory.workspace_min_prefill_tokens:
                if self.memory.first_big_prefill_ooms:
                    raise EngineFault("oom")
                self.workspace_allocated = True

    def _complete_prefill(self, fwd: Forward, now: float) -> None:
        self._check_workspace(fwd.items)
        for req, take in fwd.items:
            req.prefilled += take
            if req.input_ids is not None and self.tree is not None:
                self._checkpoint(req, req.input_ids[:req.prefilled])
            if req.prefilled < req.input_len:
                continue
            if req.kind != "health":
                self.counters.prompt_tokens += req.input_len
                self.metrics.prefill_input_tokens += req.input_len - req.cached_tokens
                self.metrics.prefill_device_hit_tokens += req.cached_tokens
            if req.max_new_tokens <= 0:
                self._finish(req, [], now)
                continue
            ids = self._next_ids(req, 1)
            req.output_ids.extend(ids)
            req.first_token_time = now
            self._prefilled(req, ids, now)

    def _prefilled(self, req: Req, ids: list[int], now: float) -> None:
        """A prompt is computed and its first token sampled (a PD prefill server holds it here)."""
        if len(req.output_ids) >= req.max_new_tokens or self._stops(req):
            self._finish(req, ids, now)
        else:
            self.running.append(req)
            self._notify(req, ids, now)

    def _complete_decode(self, fwd: Forward, now: float) -> None:
        spec = self.model.spec is not None
        produced = 0
        for req in fwd.reqs:
            if req.finished or req not in self.running:
                continue  # aborted meanwhile
            n = self.model.draw_accept(req.rng, req.accept_mean) if spec else 1
            if spec:
                req.verify_ct += 1
                req.accepted += n
                self._win_verify += 1
                self._win_accepted += n
            n = min(n, req.max_new_tokens - len(req.output_ids))
            ids = self._next_ids(req, n)
            req.output_ids.extend(ids)
            produced += n
            if len(req.output_ids) >= req.max_new_tokens or self._stops(req):
                self.running.remove(req)
                self._finish(req, ids, now)
            else:
                self._notify(req, ids, now)
        self._forward_ct_decode += 1
        self._win_tokens += produced
        self.metrics.add_realtime(decode=produced)
        if self._win_start is None:
            self._win_start = now - fwd.duration
        if self._forward_ct_decode % max(1, self.cfg.decode_log_interval) == 0:
            self._log_decode(fwd, now)

    def _log_decode(self, fwd: Forward, now: float) -> None:
        elapsed = max(1e-9, now - (self._win_start if self._win_start is not None else now))
        c = self.counters
        c.last_gen_throughput = self._win_tokens / elapsed
        spec = self.model.spec is not None
        if spec and self._win_verify:
            c.spec_total_accepted += self._win_accepted
            c.spec_total_verify += self._win_verify
            c.last_accept_len = self._win_accepted / self._win_verify
        ctx = sum(r.kv_tokens for r in fwd.reqs)
        if self.tree is not None:
            ctx = self.used_tokens          # shared prefixes count once (SGLang's #token)
        stats = DecodeStats(
            running_req=self._reported_running(fwd.reqs), num_token=ctx, token_usage=ctx / max(1, self.cfg.max_total_num_tokens),
            cuda_graph=0 < len(fwd.reqs) <= self.cfg.cuda_graph_max_bs, gen_throughput=c.last_gen_throughput,
            queue_req=len(self.waiting),
            accepted_tokens=self._win_accepted if spec else None, verify_ct=self._win_verify if spec else None,
            num_draft_tokens=self.cfg.num_draft_tokens if spec else None, pd=self._decode_pd())
        self.emit(decode_line(self.cfg.log_version, stats))
        self._report_decode(stats, ctx)
        self._win_start, self._win_tokens, self._win_accepted, self._win_verify = now, 0, 0, 0

    def _report_decode(self, stats: DecodeStats, ctx: int) -> None:
        """The Decode batch line's figures as /metrics gauges (SGLang's log_stats)."""
        g = dict(num_running_reqs=stats.running_req, num_queue_reqs=stats.queue_req,
                 token_usage=stats.token_usage, full_token_usage=stats.token_usage,
                 gen_throughput=stats.gen_throughput, num_used_tokens=ctx, kv_used_tokens=ctx,
                 kv_available_tokens=max(0, self.cfg.max_total_num_tokens - ctx - self._evictable()),
                 kv_evictable_tokens=self._evictable(),
                 decode_sum_seq_lens=ctx, is_cuda_graph=1.0 if stats.cuda_graph else 0.0)
        if stats.verify_ct:
            n = stats.num_draft_tokens or 1
            g.update(spec_accept_length=stats.accepted_tokens / stats.verify_ct,
                     spec_accept_rate=(stats.accepted_tokens - stats.verify_ct)
                     / (stats.verify_ct * (n - 1)) if n > 1 else 0.0,
                     spec_num_draft_tokens=n, spec_num_steps=1)
        self.metrics.on_report(**g)

    def _evictable(self) -> int:
        return self.tree.evictable if self.tree is not None else 0

    def _prefill_pd(self):
        """The PD queue fields of a Prefill batch line (pd_core.PrefillCore); None when not PD."""
        return None

    def _decode_pd(self):
        """The PD queue fields of a Decode batch line (pd_core.DecodeCore); None when not PD."""
        return None

    def _notify(self, req: Req, ids: list[int], now: float) -> None:
        if req.listener is not None:
            req.listener.on_tokens(req, ids, now, False)

    def _finish(self, req: Req, ids: list[int], now: float) -> None:
        req.finish_time = now
        self._mb.pop(req.rid, None)
        if self.tree is not None and req.radix_node is not None:
            self._checkpoint(req, req.input_ids + req.output_ids[:-1])   # the last token has no KV yet
            self._release(req)
        if req.kind != "health":
            self.counters.num_requests += 1
            self.counters.generation_tokens += len(req.output_ids)
            n = len(req.output_ids)
            first = req.first_token_time
            self.metrics.on_finish(req.streaming, req.input_len, n, req.verify_ct, now - req.arrival,
                                   (now - first) / (n - 1) if first is not None and n > 1 else None,
                                   cached=req.cached_tokens)
        if req.kind == "user":
            self.counters.finished_user += 1
        if req.listener is not None:
            req.listener.on_tokens(req, ids, now, True)

    @property
    def avg_spec_accept_length(self) -> float:
        c = self.counters
        return c.spec_total_accepted / c.spec_total_verify if c.spec_total_verify else 0.0
