"""The emulator's prefix (radix) cache as SGLang 0.5.23's RadixCache: page-granular matches of at
most input_len - 1 tokens, locked paths and LRU eviction under KV pressure, hits skipping prefill
time, and the hits where SGLang shows them: meta_info.cached_tokens(_details), '#cached-token' of
the Prefill batch line, /metrics (cache_hit_rate, prefill_effective_tokens_total{device_hit},
realtime_tokens_total, cached_tokens_total: names and labels as SGLang 0.5.23's own collector
renders them, tests/data/sglang-0.5.23-metrics/cache.prom); /flush_cache empties it."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from slurm_ab.parse.prometheus import parse_scrape
from slurm_ab_testbed.emulator.build import build_core, plan_replica, with_kv_pool
from slurm_ab_testbed.emulator.cli_args import parse
from slurm_ab_testbed.emulator.costs import load_costs
from slurm_ab_testbed.emulator.metrics import MetricsState, render
from slurm_ab_testbed.emulator.radix import RadixCache
from slurm_ab_testbed.emulator.scheduler import Req
from slurm_ab_testbed.testing import PREFILL_RE, free_ports, http_get, wait_healthy

from test_emulator_metrics import shape

DATA = Path(__file__).parent / "data" / "sglang-0.5.23-metrics"


# ---- the tree ------------------------------------------------------------------------------------

def test_match_is_page_granular_and_splits_nodes():
    t = RadixCache(page_size=4)
    assert t.insert(list(range(10)))[0] == 0 and t.insert(list(range(10)))[0] == 8
    assert t.total == 8                                   # 10 tokens -> two whole pages
    assert t.match(list(range(10)))[0] == 8
    assert t.match(list(range(6)) + [99] * 6)[0] == 4     # diverges inside page 2: page 1 only
    assert t.match(list(range(10)), limit=7)[0] == 4      # limit rounds down to whole pages
    assert t.total == 8                                   # a split keeps every token
    t1 = RadixCache()
    t1.insert([1, 2, 3, 4, 5])
    assert t1.match([1, 2, 3, 9])[0] == 3 and t1.match([7])[0] == 0


def test_locked_paths_are_used_and_lru_leaves_are_evicted_first():
    t = RadixCache()
    _, old = t.insert([1] * 100)
    _, new = t.insert([2] * 50)
    _, mid = t.insert([1] * 60 + [3] * 40)                # shares 60 with the first
    assert t.total == 190 and t.evictable == 190
    t.lock(mid)
    assert t.protected == 100 and t.evictable == 90       # [1]*60 and [3]*40 in use
    # LRU unlocked leaf: [2]*50 (the tail of [1]*100 was touched when the third insert split it,
    # as _insert_helper stamps a node before _split_node)
    assert t.evict(10) == 50
    assert t.match([2] * 50)[0] == 0 and t.match([1] * 100)[0] == 100
    assert t.evict(1000) == 40 and t.total == 100         # only the locked path is left
    t.unlock(mid)
    assert t.evict(1000) == 100 and t.total == 0 and t.protected == 0


# ---- the scheduler: hits skip prefill, show in the line and the gauges ----------------------------

def _core(extra, lines, pool=None):
    argv = ["--model-path", "m", "--tp-size", "8", "--nnodes", "1", "--dist-init-addr", "127.0.0.1:1",
            "--chunked-prefill-size", "8192", *extra]
    rep = plan_replica(parse(argv).args, load_costs(), 8, "0.5.23")
    if pool:
        rep = with_kv_pool(rep, pool)
    return build_core(rep, lambda rng, n: [7] * n, lines.append, 1)


def _serve(core, reqs, now=0.0):
    """Run requests one after the other; returns (ttft, end) per request (virtual seconds)."""
    out = []
    for r in reqs:
        core.add(r, now)
        start = now
        while not r.finished:
            fwd = core.plan(now)
            now += fwd.duration
            core.complete(fwd, now)
        out.append((r.first_token_time - start, now))
    return out


def _req(name, ids, out=8):
    return Req(name, len(ids), out, input_ids=list(ids))


def test_shared_prefix_is_cached_and_costs_no_prefill():
    system = [11] * 6000
    on, off = [], []
    for extra, lines in (([], on), (["--disable-radix-cache"], off)):
        core = _core(extra, lines)
        times = _serve(core, [_req("a", system + [1] * 2000), _req("b", system + [2] * 2000),
                              _req("c", system + [2] * 2000)])
        prefill = [PREFILL_RE.search(x) for x in lines if x.startswith("Prefill")]
        got = [(int(m["new_token"]), int(m["cached_token"])) for m in prefill]
        if extra:
            assert got == [(8000, 0), (8000, 0), (8000, 0)]
            ttft_off = [t for t, _ in times]
        else:
            # b shares the system prompt; c is b again, all but the last token (max prefix input_len - 1)
            assert got == [(8000, 0), (2000, 6000), (1, 7999)]
            assert core.tree.total == 8000 + 2000 + 2 * 7          # prompts + outputs but their last token
            ttft_on = [t for t, _ in times]
            m = core.metrics
            assert m.prefill_input_tokens == 10001 and m.prefill_device_hit_tokens == 13999
            assert m.realtime == {"prefill_compute": 10001, "prefill_cache": 13999, "decode": 21}
            assert m.gauges["cache_hit_rate"] == pytest.approx(7999 / 8000)
            # the last report (c's Prefill batch) saw all but c's locked 7999 tokens evictable
            assert m.gauges["kv_evictable_tokens"] == core.tree.total - 7999 and m.cached_device == 13999
    assert ttft_on[0] == pytest.approx(ttft_off[0], rel=0.05)
    assert ttft_on[1] < 0.4 * ttft_off[1] and ttft_on[2] < 0.05 * ttft_off[2]


def test_running_requests_lock_their_prefix_and_new_kv_evicts_the_oldest():
    lines = []
    core = _core([], lines, pool=12000)
    _serve(core, [_req("a", [1] * 5000, 4), _req("b", [2] * 5000, 4)])
    assert core.tree.total == 2 * 5003 and core.tree.protected == 0
    # c needs 5000 new slots + 4: the pool holds 12000, so the LRU prefix (a's) goes
    _serve(core, [_req("c", [3] * 5000, 4)])
    assert core.tree.match([1] * 5000)[0] == 0 and core.tree.match([2] * 5000)[0] == 5000
    assert core.tree.total <= 12000
    # while a request runs its path is locked: token usage counts it, eviction spares it
    d = _req("d", [2] * 5000 + [4] * 100, 50)
    core.add(d, 100.0)
    fwd = core.plan(100.0)
    assert d.cached_tokens == 5000 and core.tree.protected == 5000 and core.used_tokens == 5000
    core.complete(fwd, 100.1)          # its prompt is in the tree, locked; its first token its own
    assert core.tree.protected == 5100 and core.used_tokens == 5101
    core.tree.evict(10 ** 9)
    assert core.tree.total == 5100 and core.tree.match([2] * 5000 + [4] * 100)[0] == 5100


def test_metrics_render_like_sglang_0_5_23_with_cache_hits():
    st = MetricsState()
    for i in range(20):
        st.on_finish(True, 16384, 512, 136, 58.4, 0.098, cached=8192 if i % 2 else 0)
    st.prefill_input_tokens, st.prefill_device_hit_tokens = 100, 50
    st.add_realtime(prefill_compute=100, prefill_cache=50, decode=10)
    text = render(st, "/shared/models/Kimi-K3", [0])
    assert shape(text) == shape((DATA / "cache.prom").read_text())
    sc = parse_scrape(text)
    assert sc.total("sglang:cached_tokens_total") == 81920
    assert sc.total("sglang:uncached_prompt_tokens_histogram_sum") == 20 * 16384 - 81920
    # before any hit SGLang has no sample of either counter, as start.prom and end.prom show
    assert "cached_tokens_total{" not in render(MetricsState(), "m", [0])
    assert "realtime_tokens_total{" not in render(MetricsState(), "m", [0])


# ---- over HTTP -----------------------------------------------------------------------------------

def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_hits_in_meta_info_log_metrics_and_flush(procs, model_dir):
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--port", str(port), "--enable-metrics",
                     "--enable-cache-report"], "node", {"SLURM_AB_EMU_TIME_SCALE": "0.002"})
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url), p.text()
    prompt = [5 + i % 900 for i in range(3000)]
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    first, second = _post(url + "/generate", body), _post(url + "/generate", body)
    assert first["meta_info"]["cached_tokens"] == 0 and first["meta_info"]["cached_tokens_details"] is None
    assert second["meta_info"]["cached_tokens"] == 2999
    assert second["meta_info"]["cached_tokens_details"] == {"device": 2999, "host": 0}
    assert second["output_ids"] == first["output_ids"]                 # temperature 0
    comp = _post(url + "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 4, "temperature": 0,
                                           "return_cached_tokens_details": True})
    assert comp["usage"]["prompt_tokens_details"] == {"cached_tokens": 2999}   # --enable-cache-report
    assert comp["sglext"]["cached_tokens_details"] == {"device": 2999, "host": 0}
    sc = parse_scrape(http_get(url + "/metrics")[1].decode())
    assert sc.total("sglang:cached_tokens_total") == 2 * 2999
    assert sc.total("sglang:prefill_effective_tokens_total", lambda s: s.label("mode") == "device_hit") == 2 * 2999
    assert sc.total("sglang:realtime_tokens_total", lambda s: s.label("mode") == "prefill_cache") >= 2 * 2999
    hits = [int(m["cached_token"]) for m in map(PREFILL_RE.search, p.text().splitlines()) if m]
    assert hits.count(2999) == 2
    assert http_get(url + "/flush_cache")[0] == 200
    assert _post(url + "/generate", body)["meta_info"]["cached_tokens"] == 0
    assert "Cache flushed successfully!" in p.text()


def test_disable_radix_cache_never_hits(procs, model_dir):
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--port", str(port), "--disable-radix-cache"],
                    "node", {"SLURM_AB_EMU_TIME_SCALE": "0.002"})
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url), p.text()
    body = {"input_ids": [9] * 2000, "sampling_params": {"max_new_tokens": 4}}
    assert [_post(url + "/generate", body)["meta_info"]["cached_tokens"] for _ in range(2)] == [0, 0]
    assert {int(m["cached_token"]) for m in map(PREFILL_RE.search, p.text().splitlines()) if m} == {0}
