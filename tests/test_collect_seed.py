"""The collector reproduces the seed's tables from raw run directories."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.rundir_builder import (TP32, TP32_DFLASH, RunSpec, build_run,
                            make_requests)

from helpers.rundir_builder import collect_one as collect_run  # noqa: E402
from slurm_ab.tables.paired import compare_rows, paired_text  # noqa: E402
from slurm_ab.tables.runs import main_row, runs_text  # noqa: E402
from slurm_ab.collect import collect, read_summary  # noqa: E402
from slurm_ab.collect.write import SUMMARY_FORMATS, write_summary  # noqa: E402
from slurm_ab.model.rundir import Layout  # noqa: E402
from slurm_ab.parse.stats import Dist  # noqa: E402

DONE = {"state": "COMPLETED", "elapsed": "00:05:12", "exit_code": "0:0"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    a = build_run(root)
    b = build_run(root, RunSpec(target=TP32_DFLASH))
    return a, b


@pytest.fixture(scope="module")
def summaries(runs):
    return tuple(collect_run(r, sacct=DONE) for r in runs)


def test_builder_hits_its_targets():
    for t in (TP32, TP32_DFLASH):
        ttfts, tpots = make_requests(t)
        assert len(ttfts) == 40
        assert Dist.of(ttfts).p95 == pytest.approx(t.ttft_p95, abs=1e-12)
        assert Dist.of(tpots).p95 == pytest.approx(t.tpot_p95, abs=1e-12)
        assert Dist.of(ttfts).mean == pytest.approx(t.ttft_mean, abs=1e-12)
        e2e = [a + 511 * b for a, b in zip(ttfts, tpots)]
        assert Dist.of(e2e).p95 == pytest.approx(t.e2e_p95, abs=1e-9)


def test_main_rows_reproduce_the_seed(summaries):
    a, b = (main_row(s) for s in summaries)
    assert a == {
        "Mode": "tp32", "Input TPS": "2797.64", "Output TPS": "85.99",
        "TTFT mean / p95": "8.35s / 20.79s", "TPOT mean / p95": "75.93ms / 88.06ms",
        "E2E mean / p95": "47.15s / 59.25s", "Duration": "238.18s",
        "Requests ok/total": "40/40", "Accept len / rate": "-", "Verdict": "ok"}
    assert b == {
        "Mode": "tp32-dflash", "Input TPS": "2218.94", "Output TPS": "68.20",
        "TTFT mean / p95": "8.12s / 21.75s", "TPOT mean / p95": "98.44ms / 154.58ms",
        "E2E mean / p95": "58.42s / 88.76s", "Duration": "300.30s",
        "Requests ok/total": "40/40", "Accept len / rate": "3.76 / 0.184", "Verdict": "ok"}


def test_compare_reproduces_the_seed(summaries):
    rows, warnings = compare_rows(*summaries)
    assert rows == [
        ["Benchmark duration", "238.18s", "300.30s", "+26.08%"],
        ["Input / Output TPS", "2797.64 / 85.99", "2218.94 / 68.20", "-20.69%"],
        ["TTFT mean / p95", "8.35s / 20.79s", "8.12s / 21.75s", "-2.73% / +4.62%"],
        ["TPOT mean / p95", "75.93ms / 88.06ms", "98.44ms / 154.58ms", "+29.64% / +75.54%"],
        ["E2E mean / p95", "47.15s / 59.25s", "58.42s / 88.76s", "+23.90% / +49.83%"],
        ["Accept length", "-", "3.76", "n/a"],
    ]
    assert warnings == []
    md = paired_text(*summaries)
    assert "| Benchmark duration |" in md and "+26.08%" in md and "warning" not in md


def test_acceptance_is_windowed_and_pooled(summaries):
    s = summaries[1]
    assert s.accept.samples == 37
    assert f"{s.accept.accept_len:.2f}" == "3.76" and f"{s.accept.accept_rate:.3f}" == "0.184"
    assert [r.decode_samples for r in s.replicas] == [19, 18]    # strays outside excluded
    assert [r.requests_served for r in s.replicas] == [21, 20]
    assert all(r.requests_source == "access_log" and r.warmup_seen for r in s.replicas)
    assert s.replicas[1].nodes == ("node05", "node06", "node07", "node08")
    assert s.bench.latency_source == "details" and s.bench.disagreements == ()
    assert summaries[0].accept.samples == 0 and summaries[0].accept.accept_len is None


def test_all_samples_counts_the_strays(runs):
    s = collect_run(runs[1], sacct=DONE, all_samples=True)
    assert s.accept.samples == 37 + 4 and s.all_samples
    assert f"{s.accept.accept_len:.2f}" != "3.76"


def test_parallel_scan_gives_the_same_summary(runs):
    one = collect_run(runs[1], sacct=DONE, workers=1)
    two = collect_run(runs[1], sacct=DONE, workers=2)
    assert one == two


def test_compare_warns_when_not_comparable(summaries, tmp_path):
    spec = RunSpec(target=TP32, errors={3: "Internal Server Error"})
    c = collect_run(build_run(tmp_path, spec), sacct=DONE)
    rows, warnings = compare_rows(summaries[0], c)
    assert "successful requests differ: 40/40 vs 39/40" in warnings
    assert any(w.startswith("run B") and "invalid" in w for w in warnings)
    assert "> warning:" in paired_text(summaries[0], c)


def test_tps_changes_shown_separately_when_they_diverge(summaries):
    import dataclasses
    a, b = summaries
    b2 = dataclasses.replace(b, bench=dataclasses.replace(b.bench, output_tps=80.0))
    rows, _ = compare_rows(a, b2)
    assert rows[1][3] == "-20.69% / -6.96%"     # 80 / (20480 / 238.18) - 1


def test_report_formats(summaries):
    md = runs_text(summaries)
    assert md.splitlines()[0].startswith("| Run ") and "| Mode " in md.splitlines()[0] and "3.76 / 0.184" in md
    csv = runs_text(summaries, "csv")
    header, first = csv.splitlines()[:2]
    assert header.startswith("run_id,mode,verdict") and ",tp32,ok," in first
    data = json.loads(runs_text(summaries, "json"))
    assert data[1]["accept_samples"] == 37 and data[0]["input_tps"] == pytest.approx(2797.64,
                                                                                       abs=5e-3)
    with pytest.raises(ValueError):
        runs_text(summaries, "xml")


def test_write_is_idempotent_and_leaves_raw_files(runs, tmp_path):
    import shutil
    run = Path(shutil.copytree(runs[1], tmp_path / runs[1].name))
    lay = Layout(run)
    raw = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    cs = collect(run, sacct=DONE)
    written = write_summary(cs, run)
    assert sorted(written) == sorted(lay.summary(f) for f in SUMMARY_FORMATS)
    first = {f: lay.summary(f).read_bytes() for f in SUMMARY_FORMATS}
    assert write_summary(collect(run, sacct=DONE), run) == []      # nothing changed
    assert {f: lay.summary(f).read_bytes() for f in SUMMARY_FORMATS} == first
    assert {p: p.read_bytes() for p in raw} == raw
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    data = json.loads(first["json"])
    (p,) = data["passes"]
    assert data["verdict"] == p["verdict"] == "ok" and p["accept"]["samples"] == 37
    assert p["spec"]["dataset"] == "speed-bench" and p["spec"]["request_rate"] == "inf"
    assert "3.76 / 0.184" in first["md"].decode()
    # summary.json reads back into the records it was written from
    assert read_summary(run).to_dict() == cs.to_dict()


def test_running_job_writes_nothing(runs, tmp_path):
    cs = collect(runs[0], sacct={"state": "RUNNING"})
    assert cs.verdict == "running" and write_summary(cs, tmp_path) == []
    assert list(tmp_path.iterdir()) == []
