"""The TTFT breakdown of a PD pass from its servers' /metrics (issue 31): the chain's KV transfer is
the one on TTFT's path for every backend (the decode's wait for its KV less the prefill's queue
and forward), not the prefill's sglang:kv_transfer_latency_ms, which SGLang 0.5.23 stamps at the
prefill's poll after its next forward; that one is kept with the volume, labelled per backend."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ab.collect.pd import collect_pd
from slurm_ab.parse.events import read_events
from slurm_ab.tables.pd import pd_lines

E = 'engine_type="{role}",model_name="m"'


def _hist(name: str, role: str, total: float, count: float, stage: str = "") -> str:
    lab = E.format(role=role) + (f',stage="{stage}"' if stage else "")
    return (f"# TYPE {name} histogram\n{name}_sum{{{lab}}} {total}\n{name}_count{{{lab}}} {count}\n"
            f'{name}_bucket{{{lab},le="+Inf"}} {count}\n')


def _write(run: Path, n: float) -> None:
    """Window of n requests: prefill bootstrap 10 ms, queue 50 ms, forward 200 ms, its latency
    histogram 180 ms (a forward of the next request included), decode transferred 300 ms (queue +
    forward + 50 ms of transfer), decode waiting 5 ms, 40 MB of KV."""
    (run / "metrics").mkdir(parents=True)
    files = {"r0n0-start": "", "r1n0-start": "",
             "r0n0-end": (_hist("sglang:per_stage_req_latency_seconds", "prefill", 0.010 * n, n, "prefill_bootstrap")
                          .replace("# TYPE sglang:per_stage_req_latency_seconds histogram\n", "")
                          + _hist("sglang:per_stage_req_latency_seconds", "prefill", 0.200 * n, n, "prefill_forward")
                          .replace("# TYPE sglang:per_stage_req_latency_seconds histogram\n", "")
                          + _hist("sglang:queue_time_seconds", "prefill", 0.050 * n, n)
                          + _hist("sglang:kv_transfer_latency_ms", "prefill", 180.0 * n, n)
                          + _hist("sglang:kv_transfer_total_mb", "prefill", 40.0 * n, n)
                          + _hist("sglang:kv_transfer_speed_gb_s", "prefill", 0.2 * n, n)),
             "r1n0-end": "".join(_hist("sglang:per_stage_req_latency_seconds", "decode", v * n, n, st)
                                 .replace("# TYPE sglang:per_stage_req_latency_seconds histogram\n", "")
                                 for st, v in (("decode_bootstrap", 0.002), ("decode_transferred", 0.300),
                                               ("decode_waiting", 0.005)))}
    for name, text in files.items():
        (run / "metrics" / f"{name}.prom").write_text(text)
    lines = ["1800000000.000 2027-01-15 08:00:00.000 bench_start pass=c8-r1"]
    for t, phase in ((1, "start"), (60, "end")):
        for g in (0, 1):
            lines.append(f"{1800000000 + t}.000 2027-01-15 08:00:00.000 metrics_scrape target=r{g}n0 phase={phase} "
                         f"round={phase} node=n{g} ok=1 http=200 file=metrics/r{g}n0-{phase}.prom")
    lines.append("1800000059.000 2027-01-15 08:00:59.000 bench_end pass=c8-r1 rc=0")
    (run / "events.log").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("backend,meaning", [("mooncake", "the prefill's transfer-queue entry"),
                                             ("nixl", "the prefill's first KV send")])
def test_the_chains_transfer_is_the_one_on_ttfts_path(tmp_path, backend, meaning):
    _write(tmp_path, 40)
    names = {0: ("prefill", 0), 1: ("decode", 0)}
    pd = collect_pd(tmp_path, read_events(tmp_path / "events.log"), names, {}, 300.0, backend=backend)
    chain = {s.key: s for s in pd.breakdown.chain}
    assert [s.key for s in pd.breakdown.chain] == ["prefill_bootstrap", "prefill_queue", "prefill_forward",
                                                   "kv_transfer", "decode_waiting"]
    assert chain["kv_transfer"].mean_ms == pytest.approx(300 - 50 - 200)        # not the histogram's 180
    assert chain["kv_transfer"].count == 40 and "TTFT's path" in chain["kv_transfer"].label
    assert pd.breakdown.kv_share == pytest.approx(50 / 300)
    assert pd.breakdown.other_ms == pytest.approx(300 - (10 + 50 + 200 + 50 + 5))
    t = pd.transfer
    assert t.latency_ms == pytest.approx(180) and t.mb_per_request == pytest.approx(40)
    assert t.latency_label.startswith(meaning) and "after its next forward" in t.latency_label
    text = "\n".join(pd_lines(type("S", (), {"pd": pd})()))
    assert "KV transfer on TTFT's path" in text and f"180.0 ms per request ({meaning}" in text


def test_the_path_is_unknown_without_the_decodes_view(tmp_path):
    _write(tmp_path, 40)
    (tmp_path / "metrics" / "r1n0-end.prom").write_text("")
    pd = collect_pd(tmp_path, read_events(tmp_path / "events.log"), {0: ("prefill", 0), 1: ("decode", 0)}, {},
                    300.0, backend="mooncake")
    kv = next(s for s in pd.breakdown.chain if s.key == "kv_transfer")
    assert kv.mean_ms is None and pd.breakdown.other_ms is None and pd.breakdown.kv_share is None


def test_a_failed_canary_names_its_dp_ranks_and_a_checksum_mismatch(tmp_path):
    """pd.sh's fail event of a pair's DP canary (prefill_dp, decode_dp) and of a decode that answered
    'KV checksum mismatch' (kv_checksum=mismatch) in the verdict's words."""
    from slurm_ab.collect.pd import pd_fail_reasons
    (tmp_path / "events.log").write_text(
        "1800000000.000 2027-01-15 08:00:00.000 fail kind=pd_canary prefill=0 decode=1 prefill_node=n1 decode_node=n5 "
        "prefill_dp=0 decode_dp=1 http_prefill=500 http_decode=500 curl_prefill=0 curl_decode=0 seconds=2\n"
        "1800000001.000 2027-01-15 08:00:01.000 fail kind=pd_canary prefill=0 decode=1 prefill_node=n1 decode_node=n5 "
        "http_prefill=200 http_decode=500 curl_prefill=0 curl_decode=0 seconds=1 kv_checksum=mismatch\n")
    a, b = pd_fail_reasons(read_events(tmp_path / "events.log"), {0: ("prefill", 0), 1: ("decode", 0)})
    assert a == ("the KV canary (2 tokens) between prefill 0 (n1) and decode 0 (n5), prefill DP rank 0 and decode DP "
                 "rank 1 failed after 2 s (prefill HTTP 500, decode HTTP 500): KV transfer between them does not work "
                 "although both servers were healthy; the job stopped before the benchmark")
    assert b.endswith("(prefill HTTP 200, decode HTTP 500): the decode's KV checksum did not match what the prefill "
                      "sent (pd.kv_checksum): the KV arrived corrupted; the job stopped before the benchmark")
