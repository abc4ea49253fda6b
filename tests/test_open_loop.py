"""Open-loop passes (issue 33 item 2): request rates as pass parameters, the rate the servers saw
against the offered one, saturation from the backlog's growth (collect.load)."""
from __future__ import annotations

import random

import pytest

from slurm_ab.collect.load import arrival_times, check_load
from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
from slurm_ab.model.campaign import Pass, parse_rates
from slurm_ab.model.errors import ConfigErrors
from slurm_ab.model.sources import Sources

SETS = ("paths.results=/r",)


def _poisson(rate: float, n: int, seed: int = 1) -> list[float]:
    rnd, t, out = random.Random(seed), 1000.0, []
    for _ in range(n):
        out.append(t)
        t += rnd.expovariate(rate)
    return out


def _served(arrivals, service_s: float, servers: int) -> list[float]:
    """E2E of each request through `servers` FIFO servers of a fixed service time."""
    free = [arrivals[0]] * servers
    out = []
    for a in arrivals:
        i = min(range(servers), key=lambda k: free[k])
        start = max(a, free[i])
        free[i] = start + service_s
        out.append(free[i] - a)
    return out


def test_rate_passes_are_planned_beside_or_instead_of_concurrency():
    plan = plan_job(Sources("example", (), SETS), ["tp32"], "R", CampaignOptions(rates="2,4.5"))
    (launch,) = plan.campaign.launches
    assert [p.key for p in launch.passes] == ["q2-r1", "q4.5-r1"]
    assert launch.passes[1].spec.endswith(":bench-q4.5-r1.jsonl:logs/client-q4.5-r1.log:4.5")
    both = plan_job(Sources("example", (), SETS), ["tp32"], "R", CampaignOptions(rates="2", concurrencies="8"))
    assert [p.key for p in both.campaign.launches[0].passes] == ["c8-r1", "q2-r1"]
    assert Pass(1, "m", 40, 1, 40, 0.25).load == "0.25 req/s" and Pass(1, "m", 8, 1, 40).load == "C=8"
    step = plan.campaign.launches[0].passes[0]
    assert "--request-rate 2" in " ".join(str(w) for line in plan.client_of(step).lines for w in line)
    # the time model prices an open-loop pass by its arrivals' span
    est = plan.duration
    assert est.pass_seconds("tp32", 40, 40, 2.0) == pytest.approx(20 + 4 * 60 + 30)


@pytest.mark.parametrize("text", ["0", "-1", "x", "inf", ""])
def test_bad_rates_are_named(text):
    with pytest.raises(ValueError):
        parse_rates(text)
    if text:
        with pytest.raises(ConfigErrors) as e:
            plan_job(Sources("example", (), SETS), ["tp32"], "R", CampaignOptions(rates=text))
        assert e.value.errors[0].key == "--request-rate"


def test_a_server_that_keeps_up_is_not_saturated():
    arr = _poisson(4.0, 200)
    ld = check_load(4.0, arr, _served(arr, 1.0, 8), 0.1)     # capacity 8 req/s at 4 offered
    assert not ld.saturated and not ld.under_offered
    assert ld.achieved_rps == pytest.approx(4.0, rel=0.15) and abs(ld.growth) < 0.1


def test_a_server_that_cannot_keep_up_is_saturated_with_the_evidence():
    arr = _poisson(16.0, 120)
    ld = check_load(16.0, arr, _served(arr, 1.0, 8), 0.1)    # capacity 8 req/s at 16 offered
    assert ld.saturated and ld.growth == pytest.approx(0.5, abs=0.2)
    assert ld.served_rps == pytest.approx(8, rel=0.25)
    assert ld.backlog_end > ld.backlog_mid + 10
    assert "offered 16 req/s, achieved" in ld.evidence and "in flight" in ld.evidence


def test_false_alarms_are_rare_and_gross_overload_is_found_in_short_passes():
    """200 seeded passes each: no server that keeps up (up to 7/8 of its capacity) is called
    saturated; 80 prompts at 2.5 x capacity mostly are, 100 at 2 x nearly always (40 at 2.5 x last
    2 s, hardly longer than a 1 s request: mostly too short to tell)."""
    def share(rate, n):
        return sum(check_load(rate, a := _poisson(rate, n, s), _served(a, 1.0, 8), 0.1).saturated
                   for s in range(200)) / 200
    assert share(4, 40) == 0 and share(7, 40) == 0 and share(7, 100) == 0
    assert share(20, 80) > 0.75 and share(16, 100) > 0.85


def test_a_pass_shorter_than_its_requests_cannot_tell():
    arr = _poisson(20.0, 40)                                  # 2 s of arrivals, 8 s requests
    ld = check_load(20.0, arr, _served(arr, 8.0, 64), 0.1)
    assert not ld.saturated and "too short to tell" in ld.notes[-1]
    assert "no scrape of the servers' waiting queue in the second half of the arrivals" in ld.notes[-1]


def test_a_client_that_could_not_send_fast_enough_is_said():
    arr = _poisson(2.0, 60)
    ld = check_load(8.0, arr, _served(arr, 0.5, 8), 0.1)
    assert ld.under_offered and "did not send at the offered rate" in ld.notes[0]
    unpaired = check_load(2.0, arr, [1.0] * 10, 0.1)
    assert unpaired.backlog_end is None and "cannot be paired" in unpaired.notes[-1]


def test_arrivals_are_read_from_the_access_lines_in_the_window(tmp_path):
    from datetime import datetime
    log = tmp_path / "server-r0-n0.log"
    log.write_text(
        '[2026-12-03 12:00:00.100] INFO:     10.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK\n'    # warm-up
        '[2026-12-03 12:00:01.250] INFO:     10.0.0.1:2 - "POST /generate HTTP/1.1" 200 OK\n'
        '[2026-12-03 12:00:01.500] Prefill batch, #new-seq: 1, #new-token: 10\n'
        '[2026-12-03 12:00:01.750] INFO:     10.0.0.1:3 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        '[2026-12-03 12:00:02.000] INFO:     10.0.0.1:4 - "GET /metrics HTTP/1.1" 200 OK\n')
    got = arrival_times([log], (datetime(2026, 12, 3, 12, 0, 1), datetime(2026, 12, 3, 12, 0, 5)))
    assert [round(t - got[0], 3) for t in got] == [0.0, 0.5]


def test_answers_and_charts_keep_each_rate_apart():
    """Open-loop passes all run at concurrency num_prompts: the answer line, the pass strips and the
    load chart (issue 32's, against concurrency) must not pool their rates as one 'C=40'."""
    from slurm_ab.collect.rows import PassRow
    from slurm_ab.report.series import load_points, pass_strips
    from slurm_ab.tables.answer import mode_answer

    def row(q, r, tps, att):
        return PassRow("tp32", 40, r, 1, None, 40, "ok", "", {"output_tps": tps, "slo_attainment": att}, q)
    rows = [row(2.0, 1, 100, 0.95), row(2.0, 2, 102, 0.96), row(4.0, 1, 190, 0.92), row(4.0, 2, 185, 0.91),
            row(8.0, 1, 200, 0.5), row(8.0, 2, 210, 0.4)]
    a = mode_answer("R", "tp32", rows, "output_tps", 90.0)
    assert a.subject == "R (tp32, 2 req/s, 4 req/s, 8 req/s)"
    text = a.text(400)
    assert "highest request rate meeting the SLOs (>= 90% of requests): 4 req/s" in text
    assert "peak Output TPS 205.00 at 8 req/s" in text and "per load" in text and "C=40" not in text
    strips = pass_strips(rows, (("output_tps", "Output TPS"),))["output_tps"]
    assert [(s["label"], len(s["values"])) for s in strips] == \
        [("tp32 2 req/s", 2), ("tp32 4 req/s", 2), ("tp32 8 req/s", 2)]
    assert load_points(rows) == []                  # the chart is against concurrency
    closed = [PassRow("tp32", c, 1, 1, None, 40, "ok", "", {"output_tps": t, "slo_attainment": 1.0})
              for c, t in ((1, 10), (8, 50))]
    text = mode_answer("R", "tp32", closed, "output_tps", 90.0).text(400)
    assert "R (tp32, C=1,8)" in text and "highest C meeting the SLOs (>= 90% of requests): 8" in text
    from types import SimpleNamespace
    from slurm_ab.tables.answer import comparison_answer, job_answers
    delta = SimpleNamespace(change_pct=5.0, ci_low_pct=1.0, ci_high_pct=9.0, n_a=2, n_b=2, launches_a=1, launches_b=1)
    head = SimpleNamespace(delta=delta, verdict="better", label="Output TPS")
    assert comparison_answer("a", "b", 40, [head], rate=4.0).subject == "b vs a at 4 req/s"
    cmp = SimpleNamespace(a="a", b="b", concurrency=40, rate=4.0, rows=[head])
    cs = SimpleNamespace(campaign=SimpleNamespace(order="blocked"))
    assert [x.subject for x in job_answers(cs, rows, [cmp])] == ["b vs a at 4 req/s"]


def _overload_run(tmp_path, rate: float, n: int, e2e_of, queue_of, seed: int = 3):
    """A pass as the job records it: an access line per request in the head's log (uvicorn's real
    format), /metrics of two replicas (SGLang 0.5.23's text, sglang:num_queue_reqs set per round)
    every 2 s from bench_start to bench_end, the client's details (bench_serving's keys); returns
    the load check the collector makes of them. e2e_of(i, s), queue_of(s): s seconds since the
    first arrival."""
    import time
    from datetime import datetime

    from slurm_ab.collect.load import waiting_queue
    from slurm_ab.parse.bench import requests
    from test_server_metrics import END, START, Run, rep, set_value

    run = Run(tmp_path)
    t0 = run.t + 10.0
    arrivals = [a - 1000.0 + t0 + 0.5 for a in _poisson(rate, n, seed)]
    stop = arrivals[-1] + 30.0

    def at(t: float, name: str, *kv: str) -> None:
        run.t = t - 1.0                     # Run.event adds its 1 s step
        run.event(name, *kv)

    def scrape_at(t: float, target: str, phase: str, text: str) -> None:
        run.t = t - 1.0
        run.scrape(target, phase, text)
    at(t0, "bench_start")
    for g in (0, 1):
        scrape_at(t0, f"r{g}", "start", START)
    k = 1
    while t0 + 2 * k < stop:
        t = t0 + 2 * k
        for g in (0, 1):                    # each replica: half the servers' queue
            q = float(queue_of(max(0.0, t - arrivals[0])) // 2 + g * (queue_of(max(0.0, t - arrivals[0])) % 2))
            scrape_at(t + g * 0.01, f"r{g}", "during", set_value(END, "sglang:num_queue_reqs", q))
        k += 1
    for g in (0, 1):
        scrape_at(stop, f"r{g}", "end", END)
    at(stop + 0.5, "bench_end", "rc=0")
    sm = run.collect([rep(0), rep(1)])

    def stamp(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
    log = tmp_path / "server-r0-n0.log"
    log.write_text("".join(f'[{stamp(a)}] INFO:     10.0.0.1:{40000 + i} - "POST /generate HTTP/1.1" 200 OK\n'
                           for i, a in enumerate(arrivals)))
    e2e = [e2e_of(i, a - arrivals[0]) for i, a in enumerate(arrivals)]
    record = {"ttfts": [d - 63 * 0.02 for d in e2e], "itls": [[0.02] * 63 for _ in e2e], "output_lens": [64] * n,
              "input_lens": [16512] * n, "errors": [""] * n}
    window = (datetime.fromtimestamp(t0), datetime.fromtimestamp(stop + 0.5))
    return check_load(rate, arrival_times([log], window), [r.e2e for r in requests(record)], 0.1,
                      waiting_queue([r.series for r in sm.replicas]))


def test_the_waiting_queue_tells_an_overload_too_short_for_the_client(tmp_path):
    """Lane 3's sustained overload (16K-token shared prefix at 12 req/s, 1.55 x the emulator's
    capacity without the cache): a prefill-first server finishes nothing while its queue drains,
    so even the first quarter's requests take longer than the second half of the arrivals (the
    client's side: too short to tell); the servers' waiting queue (/metrics) grew with the arrivals."""
    def e2e(i, s):                          # the whole backlog drains before any request ends
        return 18.0 + 0.1 * i - s
    level = _overload_run(tmp_path / "level", 12.0, 120, e2e, lambda s: 0)
    assert not level.saturated and not level.told and "not growing beyond its noise" in level.notes[-1], level
    ld = _overload_run(tmp_path / "grew", 12.0, 120, e2e, lambda s: round(4.2 * s))     # 12 - 7.8 req/s
    assert ld.saturated and ld.told, ld
    assert ld.queue_scrapes >= 4 and ld.queue_first == 0 and ld.queue_last > 40 and ld.queue_growth > 0.1, ld
    assert "the servers' waiting queue tells instead" in ld.notes[-1]
    assert f"waiting queue (/metrics) {ld.queue_first:g} before the arrivals -> {ld.queue_last:g} at " in ld.evidence


def test_the_waiting_queue_of_a_light_pass_does_not_mark_it(tmp_path):
    """4 req/s, requests of 20 s (long outputs): the second half of the arrivals (15 s) is shorter
    than a request's own time, the client's side cannot tell, and the servers' waiting queue holds
    level (a few requests between prefills, Poisson bursts): never saturated."""
    ld = _overload_run(tmp_path, 4.0, 120, lambda i, s: 20.0 + 0.01 * (i % 7), lambda s: (0, 1, 3, 0, 2)[int(s) % 5])
    assert ld.achieved_rps == pytest.approx(4.0, rel=0.2)
    assert not ld.saturated and not ld.told and ld.queue_scrapes >= 10, ld
    assert "too short to tell" in ld.notes[-1] and "not growing beyond its noise" in ld.notes[-1]
