"""Server metrics from /metrics scrapes: parsing real SGLang 0.5.23 text, window deltas, exact
acceptance, resets, failed scrapes, the router cross-check and the agreement check.

Data: tests/data/sglang-0.5.23-metrics/ (rendered by SGLang 0.5.23's own collector classes; see
PROVENANCE.md there). Other states are derived by changing sample values only.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_ab.collect.records import Pooled, ReplicaSummary
from slurm_ab.model.experiment import Experiment
from slurm_ab.collect.server_metrics import (collect_server_metrics, draft_tokens_of, gauge,
                                             increase)
from slurm_ab.parse.events import read_events
from slurm_ab.parse.prometheus import ScrapeError, parse_scrape, read_scrape

DATA = Path(__file__).parent / "data" / "sglang-0.5.23-metrics"
START = (DATA / "start.prom").read_text()
END = (DATA / "end.prom").read_text()
CONFIG = Experiment.from_dict({"mode": {"pp": 1, "args": [["speculative-num-draft-tokens", 16]]}})


def set_value(text: str, name: str, value: float) -> str:
    """Change the value of every sample of one metric (names, labels, HELP untouched)."""
    out, n = re.subn(rf"^({re.escape(name)}(?:\{{[^}}]*\}})?) \S+$", rf"\g<1> {value!r}", text,
                     flags=re.M)
    assert n, name
    return out


def scale_counters(text: str, k: float) -> str:
    for name, v in (("sglang:generation_tokens_total", 10240), ("sglang:spec_verify_calls_total",
                                                                 2720),
                    ("sglang:num_requests_total", 20)):
        text = set_value(text, name, float(v * k))
    return text


def router_text(counts: dict[str, float]) -> str:
    lines = ["# HELP smg_worker_cb_outcomes_total Circuit breaker outcomes per worker",
             "# TYPE smg_worker_cb_outcomes_total counter"]
    lines += [f'smg_worker_cb_outcomes_total{{outcome="success",worker="{w}"}} {v}'
              for w, v in counts.items()]
    return "\n".join(lines) + "\n"


class Run:
    """A run directory holding events.log and metrics/*.prom as the job writes them."""

    def __init__(self, root: Path):
        self.root = root
        (root / "metrics").mkdir(parents=True)
        self.lines: list[str] = []
        self.t = 1764514800.0
        self.event("hosts", "replica=0", "head=node01", "port=30000")
        self.event("hosts", "replica=1", "head=node05", "port=30010")

    def event(self, name: str, *kv: str) -> None:
        self.t += 1.0
        import time
        local = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.t)) + ".000"
        self.lines.append(f"{self.t:.3f} {local} {name} {' '.join(kv)}".rstrip())

    def scrape(self, target: str, phase: str, text: str | None, http: str = "200") -> None:
        stamp = f"{len(self.lines):04d}"
        if text is None:
            self.event("metrics_scrape", f"target={target}", f"phase={phase}", "ok=0",
                       f"http={http}", "curl_rc=22")
            return
        rel = f"metrics/{target}-{stamp}.prom"
        (self.root / rel).write_text(text)
        self.event("metrics_scrape", f"target={target}", f"phase={phase}", "ok=1", "http=200",
                   f"file={rel}")

    def collect(self, replicas, pooled=None, config=CONFIG):
        (self.root / "events.log").write_text("\n".join(self.lines) + "\n")
        return collect_server_metrics(self.root, read_events(self.root / "events.log"), replicas,
                                      pooled or Pooled(), config)


def rep(g: int, accept: float | None = 3.76, samples: int = 18, served: int | None = 20):
    return ReplicaSummary(replica=g, accept_samples=samples, accept_len=accept,
                          accept_rate=None if accept is None else (accept - 1) / 15,
                          requests_served=served, requests_source="access_log")


# ---- the parser on real text -------------------------------------------------------------------

def test_parses_real_0_5_23_text():
    end = parse_scrape(END)
    assert end.total("sglang:generation_tokens_total") == 10240
    assert end.total("sglang:spec_verify_calls_total") == 2720
    assert end.total("sglang:num_requests_total") == 20
    assert end.types["sglang:generation_tokens"] == "counter"      # family name: no _total
    assert end.types["sglang:spec_accept_length"] == "gauge"
    assert gauge(end, "sglang:num_running_reqs") == 4
    assert gauge(end, "sglang:token_usage") == pytest.approx(0.31)
    assert end.label_values("tp_rank", ["sglang:num_running_reqs"]) == {"0"}
    # fwd_occupancy is NaN in the real text: kept as a sample, ignored by totals
    assert end.total("sglang:fwd_occupancy") is None


def test_fresh_server_has_no_counter_samples():
    start = parse_scrape(START)
    assert "sglang:generation_tokens_total" not in start
    assert start.prefixed("sglang:")


def test_garbage_is_a_scrape_error(tmp_path):
    with pytest.raises(ScrapeError):
        parse_scrape("<html><body>502 Bad Gateway</body></html>\n")
    p = tmp_path / "x.prom"
    p.write_text(END)
    assert read_scrape(p).total("sglang:num_requests_total") == 20
    # comments and blank lines only (a server with nothing registered yet): an empty scrape
    empty = parse_scrape("# no metrics yet\n\n")
    assert empty.samples == {} and empty.types == {}


def test_increase_counts_resets_from_zero():
    assert increase([("a", 5), ("b", 9)]) == (4, [])
    total, resets = increase([("a", 100), ("b", 130), ("c", 10), ("d", 40)])
    assert total == 30 + 10 + 30
    assert resets == ["between b and c: 130 -> 10"]
    assert increase([("a", 1)]) == (None, [])


def test_gauge_reads_lowest_pp_stage_and_sums_dp_ranks():
    lbl = 'engine_type="unified",model_name="m",moe_ep_rank="0"'
    text = ("# HELP sglang:num_running_reqs The number of running requests.\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            f'sglang:num_running_reqs{{{lbl},pp_rank="0",tp_rank="0"}} 8.0\n'
            f'sglang:num_running_reqs{{{lbl},pp_rank="1",tp_rank="0"}} 8.0\n')
    assert gauge(parse_scrape(text), "sglang:num_running_reqs") == 8
    dp = text.replace('pp_rank="1",tp_rank="0"', 'dp_rank="1",pp_rank="0",tp_rank="0"') \
        .replace('pp_rank="0",tp_rank="0"} 8.0\nsglang', 'dp_rank="0",pp_rank="0",tp_rank="0"} 8.0\nsglang', 1)
    assert gauge(parse_scrape(dp), "sglang:num_running_reqs") == 16


def test_draft_tokens_from_resolved_config():
    assert draft_tokens_of(CONFIG) == 16
    assert draft_tokens_of(Experiment.from_dict({"server_args": [["speculative-dflash-block-size", 8]],
                                                 "mode": {"args": []}})) == 8
    assert draft_tokens_of(None) is None


# ---- window deltas and acceptance --------------------------------------------------------------

def test_exact_acceptance_from_counter_deltas(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    for g in (0, 1):
        run.scrape(f"r{g}", "start", START)
    run.scrape("router", "start", router_text({}))
    mid = set_value(scale_counters(END, 0.5), "sglang:num_running_reqs", 8.0)
    mid = set_value(mid, "sglang:num_queue_reqs", 2.0)
    for g in (0, 1):
        run.scrape(f"r{g}", "during", set_value(mid, "sglang:token_usage", 0.4 + g / 10))
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", END)
    run.scrape("r1", "end", scale_counters(END, 1.5))
    run.scrape("router", "end", router_text({"http://node01:30000": 20, "http://node05:30010": 30}))
    sm = run.collect([rep(0), rep(1, served=30)], Pooled(samples=36, accept_len=3.76,
                                                          accept_rate=0.184))
    r0, r1 = sm.replicas
    assert sm.available and r0.exposed and r1.exposed
    assert (r0.gen_tokens, r0.verify_calls, r0.requests) == (10240, 2720, 20)
    assert r0.accept_len == pytest.approx(10240 / 2720)        # 3.7647
    assert r0.accept_rate == pytest.approx((10240 / 2720 - 1) / 15)
    assert r0.num_draft_tokens == 16
    assert (r0.running_peak, r0.running_mean, r0.queued_peak) == (8, 8, 2)
    assert r0.kv_usage_peak == pytest.approx(0.4) and r1.kv_usage_peak == pytest.approx(0.5)
    assert r0.retracted_peak == 0
    assert r0.diff_pct == pytest.approx((10240 / 2720 / 3.76 - 1) * 100)
    p = sm.pooled
    assert (p.gen_tokens, p.verify_calls) == (10240 * 2.5, 2720 * 2.5)
    assert p.accept_len == pytest.approx(10240 / 2720)
    assert p.running_peak == 16                    # both replicas in the same scrape round
    assert (r0.router_requests, r1.router_requests) == (20, 30)
    assert sm.router_metric == "smg_worker_cb_outcomes_total"
    assert sm.checks == ()                         # counters agree with the log within 5%
    assert any("coverage" in n and "tp_rank 0, pp_rank 0" in n for n in sm.notes)


def test_disagreement_is_flagged_with_both_numbers(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", START)
    run.scrape("r0", "during", set_value(scale_counters(END, 0.5), "sglang:num_running_reqs", 1.0))
    run.scrape("r0", "during", set_value(scale_counters(END, 0.7), "sglang:num_running_reqs", 8.0))
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", set_value(END, "sglang:num_running_reqs", 0.0))
    sm = run.collect([rep(0, accept=3.2, samples=9)], Pooled(samples=9, accept_len=3.2))
    (check_r0, check_pooled) = sm.checks
    assert "replica 0: accept length from counters 3.765 vs decode log 3.200 (+17.6%" in check_r0
    assert "batch sizes varied (running requests peak 8, mean 4.5)" in check_r0
    assert check_pooled.startswith("pooled: accept length from counters 3.765")


def test_counter_reset_is_reported_not_negative(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", scale_counters(END, 1.0))       # 10240 before the benchmark
    run.scrape("r0", "during", scale_counters(END, 1.5))      # +5120
    run.scrape("r0", "during", START)                         # restarted: counters gone
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", scale_counters(END, 0.25))        # +2560 after the restart
    sm = run.collect([rep(0)])
    r0 = sm.replicas[0]
    assert r0.gen_tokens == 10240 * 0.5 + 10240 * 0.25 and r0.gen_tokens > 0
    assert r0.verify_calls == 2720 * 0.75
    assert r0.resets and "sglang:generation_tokens_total between" in r0.resets[0]
    assert any("counter reset in the window (server restarted?)" in n for n in sm.notes)


def test_failed_scrapes_are_recorded_not_fatal(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", START)
    run.scrape("r1", "start", START)
    run.scrape("r0", "during", None, http="000")
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", END)
    run.scrape("r1", "end", None, http="503")
    sm = run.collect([rep(0), rep(1)])
    r0, r1 = sm.replicas
    assert r0.exposed and r0.failed_scrapes == 1 and r0.gen_tokens == 10240
    assert not r1.exposed and r1.accept_len is None and r1.gen_tokens is None
    assert any("replica 1 /metrics: 1 of 2 scrapes failed (end at" in n and "http 503" in n
               for n in sm.notes)
    assert any("no usable end scrape" in n for n in sm.notes)
    assert sm.pooled.gen_tokens == 10240          # pooled over the replicas with both ends


def test_metrics_disabled_server(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", None, http="404")
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", None, http="404")
    sm = run.collect([rep(0)])
    assert not sm.available
    assert "no replica exposed usable /metrics" in sm.notes[0]


def test_no_spec_server_has_no_acceptance(tmp_path):
    nospec = re.sub(r"^sglang:spec_verify_calls_total.*\n", "", END, flags=re.M)
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", START)
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", nospec)
    sm = run.collect([rep(0, accept=None, samples=0)], config={"mode": {"pp": 1, "args": []}})
    r0 = sm.replicas[0]
    assert r0.exposed and r0.verify_calls == 0 and r0.accept_len is None
    assert r0.accept_rate is None and r0.gen_tokens == 10240 and r0.running_peak == 4
    assert sm.pooled.accept_len is None and sm.checks == ()


def test_request_count_mismatch_is_a_check(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", START)
    run.scrape("router", "start", router_text({"http://node01:30000": 3}))
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", END)
    run.scrape("router", "end", router_text({"http://node01:30000": 22}))
    sm = run.collect([rep(0, served=21)])
    assert sm.replicas[0].router_requests == 19
    assert sm.checks == ("replica 0: requests in the window differ: router 19, server access "
                         "log 21, server counter 20 (smg_worker_cb_outcomes_total)",)


def test_run_without_scrapes_gets_a_note(tmp_path):
    run = Run(tmp_path)
    run.event("bench_start")
    run.event("bench_end", "rc=0")
    sm = run.collect([rep(0)])
    assert not sm.available and sm.replicas == ()
    assert sm.notes == ("server metrics: none; the job took no /metrics scrapes (older job "
                        "script, or metrics scraping off); figures from the logs only",)


def test_pp_coverage_names_uncovered_stages(tmp_path):
    two = END.replace('pp_rank="0"', 'pp_rank="1"')
    text = END + "".join(ln + "\n" for ln in two.splitlines()
                         if ln.startswith("sglang:num_running_reqs{"))
    run = Run(tmp_path)
    run.event("bench_start")
    run.scrape("r0", "start", START)
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", text)
    sm = run.collect([rep(0, accept=None)], config={"mode": {"pp": 8, "args": []}})
    cov = sm.replicas[0].ranks
    assert "pp_rank 0,1" in cov and "pp stages 2,3,4,5,6,7 of 8" in cov


def test_router_workers_by_address(tmp_path):
    run = Run(tmp_path)
    run.event("addresses", "mode=nodeaddr", "replica0=10.0.0.1", "replica1=10.0.0.5")
    run.event("bench_start")
    run.scrape("r0", "start", START)
    run.scrape("router", "start", router_text({}))
    run.event("bench_end", "rc=0")
    run.scrape("r0", "end", END)
    run.scrape("router", "end", router_text({"http://10.0.0.1:30000": 20, "http://10.0.0.5:30010": 20}))
    sm = run.collect([rep(0), rep(1)])
    assert [r.router_requests for r in sm.replicas] == [20, 20]
    assert not any("not a replica head" in n for n in sm.notes)


def test_real_router_0_3_2_counts_per_worker(tmp_path):
    """Real sglang-router 0.3.2 text (tests/data/sglang-router-0.3.2-metrics/PROVENANCE.md)."""
    router = Path(__file__).parent / "data" / "sglang-router-0.3.2-metrics"
    run = Run(tmp_path)
    run.lines.clear()
    run.event("hosts", "replica=0", "head=node01", "port=30420")
    run.event("hosts", "replica=1", "head=node05", "port=30430")
    run.event("bench_start")
    for g in (0, 1):
        run.scrape(f"r{g}", "start", START)
    run.scrape("router", "start", (router / "start.prom").read_text())
    run.event("bench_end", "rc=0")
    for g in (0, 1):
        run.scrape(f"r{g}", "end", END)
    run.scrape("router", "end", (router / "end.prom").read_text())
    sm = run.collect([rep(0), rep(1)])
    assert sm.router_metric == "smg_worker_cb_outcomes_total"
    assert [r.router_requests for r in sm.replicas] == [20, 20]
    assert sm.checks == ()


def test_compare_shows_the_counter_acceptance_when_a_side_has_it():
    from slurm_ab.collect.records import PassSummary
    from slurm_ab.collect.server_metrics import PooledMetrics, ServerMetrics
    from slurm_ab.tables.paired import compare_rows
    a = PassSummary(run_id="a", verdict="ok")
    b = PassSummary(run_id="b", verdict="ok",
                   server_metrics=ServerMetrics(True, pooled=PooledMetrics(accept_len=4.12)))
    rows, _ = compare_rows(a, b)
    assert rows[-1] == ["Accept length (counters)", "-", "4.12", "n/a"]
    rows, _ = compare_rows(a, a)
    assert rows[-1][0] == "Accept length"          # neither side has counters: no row
