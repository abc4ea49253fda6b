"""bench_serving output: JSONL records, result blocks of 0.5.2 and 0.5.23, latency statistics."""
from __future__ import annotations

import math
import textwrap
from types import SimpleNamespace

import pytest

from slurm_ab.parse.bench import (ABS_TOL_MS, agreement, latency_stats, parse_result_block,
                                  read_last_record)
from slurm_ab.parse.stats import Dist, percentile

from helpers.clients import old_client_dir


def real_052_block(**values) -> str:
    """Run sglang 0.5.2's own print statements (the client installed beside 0.5.23) on made-up
    metrics."""
    src = (old_client_dir() / "sglang" / "bench_serving.py").read_text()
    start = src.index('    print("\\n{s:{c}^{n}}".format(s=" Serving Benchmark Result "')
    end = src.index('    print("=" * 50)', start) + len('    print("=" * 50)')
    code = textwrap.dedent(src[start:end])
    metrics = SimpleNamespace(**values)
    out: list[str] = []
    env = {"print": lambda *a, **k: out.append(" ".join(map(str, a))), "metrics": metrics,
           "backend": "sglang", "request_rate": float("inf"), "max_concurrency": 8,
           "use_trace_timestamps": False, "benchmark_duration": values["duration"],
           "accept_length": values.get("accept_length")}
    exec(code, env)
    return "\n".join(out) + "\n"


METRICS_052 = dict(
    duration=238.1812, completed=40, total_input=666342, total_output=20480,
    total_output_retokenized=20480, request_throughput=0.168, input_throughput=2797.64,
    output_throughput=85.99, total_throughput=2883.63, concurrency=7.92,
    mean_e2e_latency_ms=47152.5, median_e2e_latency_ms=46000.1, mean_ttft_ms=8351.0,
    median_ttft_ms=7000.0, p99_ttft_ms=21900.0, mean_itl_ms=75.9, median_itl_ms=75.0,
    p95_itl_ms=88.0, p99_itl_ms=90.0, max_itl_ms=120.0, accept_length=3.5)


def test_052_block_from_the_052_client(tmp_path):
    text = real_052_block(**METRICS_052)
    assert "Serving Benchmark Result" in text and "P95 TTFT" not in text   # 0.5.2 has no p95
    p = tmp_path / "client.log"
    p.write_text("#Input tokens: 666342\nStarting warmup with 1 sequences...\n" + text
                 + "\x1b[0mtrailing noise\n")
    b = parse_result_block(p)
    assert b.complete and b.blocks == 1
    v = b.values
    assert v["completed"] == 40 and v["duration"] == 238.18
    assert v["total_input_tokens"] == 666342 and v["total_output_tokens"] == 20480
    assert v["input_throughput"] == 2797.64 and v["output_throughput"] == 85.99
    assert v["mean_ttft_ms"] == 8351.0 and v["p99_ttft_ms"] == 21900.0
    assert v["mean_e2e_latency_ms"] == 47152.5 and v["p95_itl_ms"] == 88.0
    assert v["accept_length"] == 3.5 and v["max_concurrency"] == 8
    assert v["request_rate"] == math.inf and v["backend"] == "sglang"
    assert "p95_ttft_ms" not in v and "mean_tpot_ms" not in v


# 0.5.23 block, written from the labels of 0.5.23's benchmark/serving.py result printout
# (P90/P95/P99 for E2E, TTFT, TPOT and ITL, 'Total input text tokens', 'Peak output token
# throughput', 'Peak concurrent requests') with the client's "{:<40} {:<10}" formatting (so
# lines carry trailing spaces).
def block_0523(ttft_p95: float, completed: int = 40) -> str:
    rows = [("Backend:", "sglang"), ("Traffic request rate:", "inf"),
            ("Max request concurrency:", 8), ("Successful requests:", completed),
            ("Benchmark duration (s):", "300.30"), ("Total input tokens:", 666348),
            ("Total input text tokens:", 666348), ("Total generated tokens:", 20480),
            ("Total generated tokens (retokenized):", 20480),
            ("Request throughput (req/s):", "0.13"), ("Input token throughput (tok/s):", "2218.94"),
            ("Output token throughput (tok/s):", "68.20"),
            ("Peak output token throughput (tok/s):", "96.00"), ("Peak concurrent requests:", 8),
            ("Total token throughput (tok/s):", "2287.14"), ("Concurrency:", "7.78"),
            ("Accept length:", "3.61")]
    lines = ["", "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines += ["{:<40} {:<10}".format(a, b) for a, b in rows]
    for title, metric in (("End-to-End Latency", "E2E Latency"), ("Time to First Token", "TTFT"),
                          ("Time per Output Token (excl. 1st token)", "TPOT"),
                          ("Inter-Token Latency", "ITL")):
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for stat, val in (("Mean", 1.0), ("Median", 2.0), ("P90", 3.0),
                          ("P95", ttft_p95 if metric == "TTFT" else 4.0), ("P99", 5.0)):
            lines.append("{:<40} {:<10.2f}".format(f"{stat} {metric} (ms):", val))
        if metric == "ITL":
            lines.append("{:<40} {:<10.2f}".format("Max ITL (ms):", 9.0))
    lines.append("=" * 50)
    return "\n".join(lines) + "\n"


def test_0523_block_last_one_wins(tmp_path):
    p = tmp_path / "client.log"
    p.write_text(block_0523(111.0, completed=39) + "some other output\n" + block_0523(21750.0))
    b = parse_result_block(p)
    assert b.blocks == 2 and b.complete
    assert b.values["p95_ttft_ms"] == 21750.0 and b.values["completed"] == 40
    assert b.values["p90_e2e_latency_ms"] == 3.0 and b.values["p95_tpot_ms"] == 4.0
    assert b.values["max_output_tokens_per_s"] == 96.0
    assert b.values["max_concurrent_requests"] == 8
    assert b.values["total_input_text_tokens"] == 666348
    assert b.values["max_itl_ms"] == 9.0
    assert all(not k.endswith(" ") for k in b.labels)


def test_block_cut_short_and_absent(tmp_path):
    p = tmp_path / "client.log"
    text = block_0523(5.0)
    p.write_text(text[: text.index("Mean TTFT")])
    b = parse_result_block(p)
    assert not b.complete and b.values["completed"] == 40 and "mean_ttft_ms" not in b.values
    p.write_text("Traceback (most recent call last):\n  boom\n")
    assert parse_result_block(p) is None
    assert parse_result_block(tmp_path / "missing.log") is None


def test_read_last_record(tmp_path):
    p = tmp_path / "bench.jsonl"
    r1 = '{"completed": 39, "request_rate": Infinity}'
    r2 = '{"completed": 40, "request_rate": Infinity, "duration": 1.5}'
    p.write_text(r1 + "\n" + r2 + "\n" + '{"completed": 41, "ttf')
    r = read_last_record(p)
    assert r.record["completed"] == 40 and r.record["request_rate"] == math.inf
    assert r.records == 2 and r.line == 2 and r.truncated and r.bad_lines == (3,)
    assert "truncated" in r.note and "line 2" in r.note
    p.write_text(r2 + "\n")
    ok = read_last_record(p)
    assert not ok.truncated and ok.records == 1 and ok.note == ""
    p.write_bytes(b"")
    assert read_last_record(p).record is None
    p.write_bytes(b"\x00\xff\xfe\x89garbage\n[1, 2]\n")
    bad = read_last_record(p)
    assert bad.record is None and bad.truncated and bad.bad_lines == (1, 2)
    assert read_last_record(tmp_path / "nope.jsonl").record is None


def test_percentile_matches_numpy():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 7, 40, 101):
        xs = sorted(rng.exponential(10.0, n).tolist())
        for q in (0, 1, 50, 90, 95, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_percentile_by_hand():
    xs = [float(i) for i in range(40)]
    assert percentile(xs, 95) == pytest.approx(37.05)
    assert percentile([1.0, 2.0], 50) == 1.5
    assert Dist.of([]) is None
    d = Dist.of(reversed(xs))                                 # sorted by Dist, percentiles as numpy's
    assert (d.n, d.mean, d.p50, d.p95, d.p99) == (40, 19.5, 19.5, pytest.approx(37.05), pytest.approx(38.61))


def test_details_without_lengths_or_errors_of_every_request():
    """Older or cut records: no output_lens (length = inter-token gaps + 1), an errors list shorter
    than the requests (the rest had none)."""
    s = latency_stats({"ttfts": [0.5, 1.0], "itls": [[0.1, 0.2], [0.3]], "errors": [""]})
    assert (s.requests, s.succeeded, s.errors) == (2, 2, ())
    assert s.tpot.n == 2 and s.tpot.mean == pytest.approx((150.0 + 300.0) / 2)


def _record():
    # three requests: ok (3 tokens), ok (1 token: no TPOT), failed
    return {"ttfts": [0.5, 1.0, 0.0], "itls": [[0.1, 0.2], [], []], "output_lens": [3, 1, 0],
            "errors": ["", "", "Internal Server Error"], "completed": 2}


def test_latency_stats_from_details():
    s = latency_stats(_record())
    assert (s.requests, s.succeeded) == (3, 2)
    assert s.errors == ("Internal Server Error",)
    assert s.ttft.mean == pytest.approx(750.0) and s.ttft.n == 2
    assert s.e2e.mean == pytest.approx((800.0 + 1000.0) / 2)
    assert s.tpot.n == 1 and s.tpot.mean == pytest.approx(150.0)   # (0.8-0.5)/(3-1) s
    assert latency_stats({"completed": 3}) is None and latency_stats(None) is None


def test_empty_error_with_no_output_is_a_failure():
    rec = {"ttfts": [0.0, 1.0], "itls": [[], [0.1]], "output_lens": [0, 2], "errors": ["", ""]}
    assert latency_stats(rec).succeeded == 1


def test_agreement_tolerance():
    rec = _record()
    s = latency_stats(rec)
    rec.update(mean_ttft_ms=750.0 + ABS_TOL_MS * 0.9, median_ttft_ms=750.0,
               p99_tpot_ms=150.0 * 1.019, mean_e2e_latency_ms=900.0 + 40.0,
               p99_e2e_latency_ms=float("inf"))
    bad = agreement(rec, s)
    assert [d.key for d in bad] == ["mean_e2e_latency_ms"]
    assert "client 940.00 vs details 900.00" in str(bad[0])
    assert agreement(rec, None) == ()
