"""Server metrics from every node of a replica, SGLang 0.5.23's label semantics and round pairing:
PP stages on other nodes (their KV usage; num_running_reqs is a micro-batch, the replica's running
requests come from its HTTP in-flight gauge minus its queue), DP ranks summed and a missing one
flagged, the priority total read (not the first per-priority series), pooled peaks summed over
scrapes of the same round (a failed scrape leaves its round out instead of halving the peak), one
TPOT histogram for every replica.

Texts: tests/data/sglang-0.5.23-metrics (SGLang 0.5.23's own collector classes); other states
change sample values or add series with SGLang's label sets (metrics_collector.py: a scheduler
series carries tp_rank, pp_rank, moe_ep_rank, + dp_rank with DP attention, + priority with
priority scheduling; http_request_metrics.py: sglang:http_requests_active{endpoint,method}).
"""
from __future__ import annotations

import re

import pytest

from slurm_ab.collect.server_metrics import choose_tpot
from test_replica_speed import with_tpot
from test_server_metrics import END, START, Run, rep, set_value

SCHED = 'engine_type="unified",model_name="/shared/models/Kimi-K3",moe_ep_rank="0"'


def series(name: str, value: float, **labels) -> str:
    extra = "".join(f',{k}="{v}"' for k, v in sorted(labels.items()))
    return f"sglang:{name}{{{SCHED}{extra}}} {float(value)}\n"


def gauges_only(text: str) -> str:
    """A non-head node's /metrics: its schedulers' families only (no tokenizer side)."""
    keep, out = False, []
    for ln in text.splitlines():
        if ln.startswith("# HELP "):
            keep = 'tp_rank="' in text.split(ln, 1)[1].split("# HELP", 1)[0]
        if keep:
            out.append(ln)
    return "\n".join(out) + "\n"


def http_active(n: float) -> str:
    return ("# HELP sglang:http_requests_active Number of currently active HTTP requests\n"
            "# TYPE sglang:http_requests_active gauge\n"
            f'sglang:http_requests_active{{endpoint="/generate",method="POST"}} {float(n)}\n'
            'sglang:http_requests_active{endpoint="/metrics",method="GET"} 1.0\n')


def stage_text(base: str, stages: dict[int, tuple[float, float, float]]) -> str:
    """base with num_running_reqs / num_queue_reqs / token_usage series for each pp stage
    (running micro-batch, queued, usage) instead of stage 0's."""
    text = base
    for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "full_token_usage"):
        text = re.sub(rf"^sglang:{name}\{{.*\n", "", text, flags=re.M)
    add = "".join(series("num_running_reqs", r, pp_rank=pp, tp_rank=0)
                  + series("num_queue_reqs", q, pp_rank=pp, tp_rank=0)
                  + series("token_usage", u, pp_rank=pp, tp_rank=0)
                  for pp, (r, q, u) in stages.items())
    return text + "# TYPE sglang:num_running_reqs gauge\n" + add


class NodeRun(Run):
    """Scrapes as the current job writes them: one target per node, with round and node."""

    def scrape(self, target: str, phase: str, text: str | None, http: str = "200",
               round: str | None = None) -> None:
        rnd = round or phase
        node = f"node{target}"
        if text is None:
            self.event("metrics_scrape", f"target={target}", f"phase={phase}", f"round={rnd}",
                       f"node={node}", "ok=0", f"http={http}", "curl_rc=7")
            return
        rel = f"metrics/{target}-{len(self.lines):04d}.prom"
        (self.root / rel).write_text(text)
        self.event("metrics_scrape", f"target={target}", f"phase={phase}", f"round={rnd}",
                   f"node={node}", "ok=1", "http=200", f"file={rel}")


PP8 = {"mode": {"pp": 8, "args": []}}


def _pp8_run(tmp_path, head_stop_at=None):
    """One pp8 replica over 4 nodes (two stages per node); 4 requests in flight, none queued,
    spread over the micro-batches (each stage reports a micro-batch of 1)."""
    run = NodeRun(tmp_path)
    run.lines[0] = run.lines[0] + " nodes=n01,n02,n03,n04"
    run.event("bench_start")
    for phase, rnd, flight in (("start", "start", 0), ("during", "1", 4), ("during", "2", 4),
                               ("end", "end", 0)):
        usage = 0.0 if flight == 0 else 0.5
        mb = 0 if flight == 0 else 1
        for r in range(4):
            st = {2 * r: (mb, 0, usage + r / 100), 2 * r + 1: (mb, 0, usage + r / 100 + 0.005)}
            text = stage_text(START if phase == "start" else END, st)
            text = text + http_active(flight) if r == 0 else gauges_only(text)
            run.scrape(f"r0n{r}", phase, text, round=rnd)
    run.event("bench_end", "rc=0")
    return run


def test_pp8_every_stage_read_and_running_from_in_flight(tmp_path):
    sm = _pp8_run(tmp_path).collect([rep(0, accept=None)], config=PP8)
    r0 = sm.replicas[0]
    assert r0.nodes_scraped == (0, 1, 2, 3) and r0.nodes_missing == ()
    assert [st for st, _ in r0.kv_stage_peaks] == list(range(8))
    assert dict(r0.kv_stage_peaks)[7] == pytest.approx(0.535)
    assert r0.kv_usage_peak == pytest.approx(0.535)
    assert r0.micro_batch_peak == 1                     # what each stage's gauge says
    assert r0.running_peak == 4 and r0.in_flight_peak == 4 and r0.queued_peak == 0
    assert "in flight (HTTP, node rank 0) minus queued" in r0.running_source
    assert "pp_rank 0,1,2,3,4,5,6,7" in r0.ranks and "not seen" not in r0.ranks
    # counters come from node rank 0 only (the others have no tokenizer)
    assert r0.gen_tokens == 10240 and r0.requests == 20
    assert [p.round for p in r0.series] == ["start", "1", "2", "end"]
    assert [p.running for p in r0.series] == [0, 4, 4, 0]


def test_pp8_a_node_never_answering_is_named_with_its_stages(tmp_path):
    run = NodeRun(tmp_path)
    run.lines[0] = run.lines[0] + " nodes=n01,n02,n03,n04"
    run.event("bench_start")
    for phase in ("start", "end"):
        for r in range(4):
            text = stage_text(START if phase == "start" else END,
                              {2 * r: (1, 0, 0.3), 2 * r + 1: (1, 0, 0.3)})
            run.scrape(f"r0n{r}", phase, None if r == 2 else
                       (text + http_active(4) if r == 0 else gauges_only(text)))
    run.event("bench_end", "rc=0")
    sm = run.collect([rep(0, accept=None)], config=PP8)
    r0 = sm.replicas[0]
    assert r0.nodes_missing == (2,) and r0.exposed
    assert "not scraped: node rank 2 (n03)" in r0.ranks
    assert "pp stages 4,5 of 8 not seen" in r0.ranks
    assert any("node rank 2 start at" in n for n in sm.notes)


def test_dp_ranks_are_summed_and_a_missing_one_is_flagged(tmp_path):
    run = NodeRun(tmp_path)
    run.event("bench_start")
    cfg = {"mode": {"pp": 1, "args": [["dp-size", 4], ["enable-dp-attention", True]]}}
    for phase in ("start", "end"):
        base = re.sub(r"^sglang:num_running_reqs\{.*\n", "", START if phase == "start" else END,
                      flags=re.M)
        head = base + "".join(series("num_running_reqs", 2 + dp, dp_rank=dp, pp_rank=0,
                                     tp_rank=8 * dp) for dp in (0, 1))
        other = gauges_only(base) + series("num_running_reqs", 5, dp_rank=2, pp_rank=0, tp_rank=16)
        run.scrape("r0n0", phase, head)
        run.scrape("r0n1", phase, other)
    run.event("bench_end", "rc=0")
    r0 = run.collect([rep(0, accept=None)], config=cfg).replicas[0]
    assert r0.running_peak == 2 + 3 + 5
    assert "dp_rank 0,1,2" in r0.ranks and "dp ranks 3 of 4 not seen" in r0.ranks


def test_priority_total_not_the_first_per_priority_series(tmp_path):
    """With priority scheduling SGLang writes the total under priority="" and each priority's
    count beside it (metrics_collector._log_gauge_queue_count): 8 running, 3 + 5 by priority."""
    run = NodeRun(tmp_path)
    run.event("bench_start")
    for phase in ("start", "end"):
        base = re.sub(r"^sglang:num_running_reqs\{.*\n", "", START if phase == "start" else END,
                      flags=re.M)
        run.scrape("r0n0", phase, base + series("num_running_reqs", 3, pp_rank=0, priority="1", tp_rank=0)
                   + series("num_running_reqs", 8, pp_rank=0, priority="", tp_rank=0)
                   + series("num_running_reqs", 5, pp_rank=0, priority="2", tp_rank=0))
    run.event("bench_end", "rc=0")
    assert run.collect([rep(0, accept=None)]).replicas[0].running_peak == 8


def test_pooled_peaks_pair_scrapes_by_round_not_position(tmp_path):
    """Replica 1's scrape of round 1 failed. By position its round-2 scrape would be added to
    replica 0's round 1; by round, round 1 is left out and round 2 sums to 16."""
    run = NodeRun(tmp_path)
    run.event("bench_start")
    for g in (0, 1):
        run.scrape(f"r{g}n0", "start", START)
    run.scrape("r0n0", "during", set_value(END, "sglang:num_running_reqs", 8.0), round="1")
    run.scrape("r1n0", "during", None, http="000", round="1")
    for g in (0, 1):
        run.scrape(f"r{g}n0", "during", set_value(END, "sglang:num_running_reqs", 8.0), round="2")
    for g in (0, 1):
        run.scrape(f"r{g}n0", "during", set_value(END, "sglang:num_running_reqs", 1.0), round="3")
    run.event("bench_end", "rc=0")
    for g in (0, 1):
        run.scrape(f"r{g}n0", "end", set_value(END, "sglang:num_running_reqs", 0.0))
    sm = run.collect([rep(0), rep(1)])
    assert sm.pooled.running_peak == 16
    assert sm.pooled.rounds_skipped == ("1",) and sm.pooled.rounds == 4
    assert any("rounds left out" in n and ": 1" in n for n in sm.notes)


def test_one_tpot_histogram_for_every_replica(tmp_path):
    """Replica 1's server exports only the inter-token latency histogram: the run's TPOT metric
    is the one both have, never each replica's first."""
    tpot, itl = "sglang:request_time_per_output_token_seconds", "sglang:inter_token_latency_seconds"

    def itl_family(text):               # the TPOT family's lines, renamed
        return "".join(ln.replace(tpot, itl) + "\n" for ln in text.splitlines()
                       if ln.startswith((tpot, f"# HELP {tpot}", f"# TYPE {tpot}")))

    def without_tpot(text):
        return "".join(ln + "\n" for ln in text.splitlines()
                       if not ln.startswith((tpot, f"# HELP {tpot}", f"# TYPE {tpot}")))
    run = NodeRun(tmp_path)
    run.event("bench_start")
    for g in (0, 1):
        run.scrape(f"r{g}n0", "start", START)
    run.event("bench_end", "rc=0")
    run.scrape("r0n0", "end", with_tpot(END, 0.05) + itl_family(with_tpot(END, 0.002)))
    run.scrape("r1n0", "end", without_tpot(END) + itl_family(with_tpot(END, 0.02)))
    sm = run.collect([rep(0), rep(1)])
    assert sm.tpot_metric == itl
    assert [r.tpot.metric for r in sm.replicas] == [itl, itl]
    assert sm.replicas[0].tpot.mean_ms == pytest.approx(2.0)
    assert sm.replicas[1].tpot.mean_ms == pytest.approx(20.0)
    # no common histogram: not compared, and said so
    name, note = choose_tpot({0: {tpot: 1}, 1: {itl: 1}})
    assert name is None and "different TPOT histograms" in note


def test_old_head_only_targets_still_read(tmp_path):
    """Jobs of earlier versions scraped each head as r<G>, without rounds: node rank 0, rounds by
    position of the 'during' scrapes."""
    run = Run(tmp_path)
    run.event("bench_start")
    for g in (0, 1):
        run.scrape(f"r{g}", "start", START)
    for g in (0, 1):
        run.scrape(f"r{g}", "during", set_value(END, "sglang:num_running_reqs", 4.0))
    run.event("bench_end", "rc=0")
    for g in (0, 1):
        run.scrape(f"r{g}", "end", END)
    sm = run.collect([rep(0), rep(1)])
    assert [r.nodes_scraped for r in sm.replicas] == [(0,), (0,)]
    assert [p.round for p in sm.replicas[0].series] == ["start", "1", "end"]
    assert sm.pooled.running_peak == 8
