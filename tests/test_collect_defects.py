"""Collector defects found by feeding real SGLang lines and runs to it (issue 12, items 9-15).

Each test starts from the healthy run directory of helpers.rundir_builder and rewrites its raw
files into the shape a real run had: pipeline stages that all log, Python-logging layouts,
retraction warnings, a client that left no JSONL, a start-up that found no room for the KV cache.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.rundir_builder import KEY, TP32, TP32_DFLASH, RunSpec, build_oom_run, build_run, launch_layout
from slurm_ab.model.rundir import Layout

from helpers.rundir_builder import collect_one as collect_run
from slurm_ab.tables.paired import compare_rows
from slurm_ab.tables.runs import main_row, run_md, runs_text

DONE = {"state": "COMPLETED"}
BATCH = re.compile(r"^\[(?P<ts>[\d-]+ [\d:]+) TP0 EP0\] (?P<body>(?:Decode|Prefill) batch.*)$")


def _rewrite(run: Path, replica: int, rank: int, fn) -> None:
    p = launch_layout(run).server_log(replica, rank)
    p.write_text("\n".join(fn(p.read_text().splitlines())) + "\n")


# ---- 9: every pipeline stage logs the batch; count one ---------------------------------------

def _pipeline(run: Path, drop_second_warmup_chunk: bool = False) -> None:
    """Node rank 0 hosts stage PP0's TP0, node rank 1 stage PP1's: both log every batch, as the
    emulator's pp8 mode and SGLang with --pp-size > 1 do ('[ts PP1 TP0 EP0] Prefill batch...')."""
    for g in range(2):
        head = launch_layout(run).server_log(g, 0).read_text().splitlines()
        warm = [i for i, ln in enumerate(head) if "#new-token: 8192" in ln][:2]
        if drop_second_warmup_chunk:
            head = [ln for i, ln in enumerate(head) if i != warm[1]]
        stage0, stage1 = [], []
        for ln in head:
            m = BATCH.match(ln)
            if m:
                stage0.append(f"[{m['ts']} PP0 TP0 EP0] {m['body']}")
                stage1.append(f"[{m['ts']} PP1 TP0 EP0] {m['body']}")
            else:
                stage0.append(ln)
        launch_layout(run).server_log(g, 0).write_text("\n".join(stage0) + "\n")
        _rewrite(run, g, 1, lambda lines: lines + stage1)


def test_pipeline_warmup_counts_one_stage(tmp_path):
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    _pipeline(run)
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "ok"
    assert [r.warmup for r in s.replicas] == \
        ["events.log ok=1; server log prefilled 16384 tokens in the warm-up"] * 2
    assert s.accept.samples == 37 and f"{s.accept.accept_len:.2f}" == "3.76"


def test_pipeline_warmup_missing_a_chunk_fails(tmp_path):
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    _pipeline(run, drop_second_warmup_chunk=True)
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "invalid"
    assert "replica 0 was not warmed up: events.log says ok=1 but the server log prefilled only " \
           "8192 of 16384 tokens during the warm-up" in s.reasons


def test_pipeline_requests_from_prefill_count_one_stage(tmp_path):
    """Without access lines the served count comes from '#new-seq' of one stage only."""
    run = build_run(tmp_path, RunSpec(target=TP32))
    _pipeline(run)
    for g in range(2):
        _rewrite(run, g, 0, lambda lines: [ln for ln in lines
                                                            if '"POST ' not in ln])
    s = collect_run(run, sacct=DONE)
    # each request is two 8K chunks, each a new sequence: 2 x 21 and 2 x 20, not twice that
    assert [(r.requests_served, r.requests_source) for r in s.replicas] == \
        [(42, "prefill_new_seq"), (40, "prefill_new_seq")]


# ---- 10: Python-logging layouts keep their time ----------------------------------------------

LAYOUTS = {
    # SGLANG_LOGGING_CONFIG_PATH with '%(asctime)s %(levelname)s %(name)s [%(filename)s:%(lineno)d]'
    "asctime-file-line": lambda ts, body:
        f"{ts} INFO sglang.srt.managers.scheduler_metrics_mixin "
        f"[scheduler_metrics_mixin.py:198] {body}",
    # Python's default asctime ('...,fff') with '[%(levelname)s]'
    "asctime-ms-level": lambda ts, body: f"{ts},659 [INFO] sglang.srt.managers.scheduler: {body}",
    # Ray actor prefix in front of Python logging
    "ray-asctime": lambda ts, body: f"(SGLangEngine pid=4242, ip=10.0.0.7) {ts} INFO {body}",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_python_logging_layouts_are_windowed(tmp_path, layout):
    fmt = LAYOUTS[layout]
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    for g in range(2):
        _rewrite(run, g, 0, lambda lines: [
            fmt(m["ts"], m["body"]) if (m := BATCH.match(ln)) else ln for ln in lines])
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "ok"
    assert s.accept.samples == 37 and f"{s.accept.accept_len:.2f}" == "3.76"   # strays left out
    assert [r.decode_samples for r in s.replicas] == [19, 18]
    assert all(r.warmup_seen and r.untimed_batch_lines == 0 for r in s.replicas)


def test_batch_lines_without_a_time_are_counted_and_reported(tmp_path):
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    untimed = [  # no stamp at all, and sglang's diffusion runtime's year-less '%m-%d %H:%M:%S'
        "Decode batch, #running-req: 4, #token: 70000, token usage: 0.31, accept len: 9.00, "
        "accept rate: 0.90, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
        "[09-02 12:35:00 TP0 EP0] Decode batch, #running-req: 4, #token: 70000, token usage: "
        "0.31, accept len: 9.00, accept rate: 0.90, cuda graph: True, gen throughput "
        "(token/s): 1.00, #queue-req: 0"]
    _rewrite(run, 0, 0, lambda lines: lines[:-3] + untimed + lines[-3:])
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "ok" and s.accept.samples == 37          # not counted in the window
    assert s.replicas[0].untimed_batch_lines == 2
    assert f"replica 0: 2 batch line(s) without a readable timestamp in {Layout(run).rel(launch_layout(run).server_log(0, 0))}; " \
           "left out of the benchmark window and the warm-up check" in s.notes
    assert "without a readable timestamp" in run_md(s)
    every = collect_run(run, sacct=DONE, all_samples=True)
    assert every.accept.samples == 37 + 4 + 2


# ---- 11: what the pooled count counts --------------------------------------------------------

def test_summary_says_what_the_decode_sample_count_counts(tmp_path):
    s = collect_run(build_run(tmp_path, RunSpec(target=TP32)), sacct=DONE)
    assert s.accept.decode_samples == 37 and s.accept.samples == 0
    assert "Decode samples pooled over replicas (one PP stage): 37, of which with accept " \
           "figures: 0\n" in run_md(s)
    d = collect_run(build_run(tmp_path / "b", RunSpec(target=TP32_DFLASH)), sacct=DONE)
    assert "Decode samples pooled over replicas (one PP stage): 37, of which with accept " \
           "figures: 37; accept len 3.76, accept rate 0.184" in run_md(d)


# ---- 12: stdout only: the printed throughputs --------------------------------------------------

def test_stdout_only_uses_the_printed_throughputs(tmp_path):
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    rec = json.loads(launch_layout(run).bench(KEY).read_text())
    launch_layout(run).bench(KEY).unlink()
    # a 0.5.2 block: duration printed with 2 decimals, throughputs from the unrounded duration
    client = launch_layout(run).client_log(KEY).read_text()
    client = re.sub(r"(Benchmark duration \(s\):\s+)300\.30", r"\g<1>296.27", client)
    client = re.sub(r"(Input token throughput \(tok/s\):\s+)[\d.]+", r"\g<1>2249.22", client)
    client = re.sub(r"(Output token throughput \(tok/s\):\s+)[\d.]+", r"\g<1>69.13", client)
    launch_layout(run).client_log(KEY).write_text(client)
    s = collect_run(run, sacct=DONE)
    assert s.bench.source == "stdout" and s.bench.duration_s == 296.27
    assert rec["total_input_tokens"] / 296.27 == pytest.approx(2249.12, abs=0.01)  # not used
    row = main_row(s)
    assert (row["Input TPS"], row["Output TPS"]) == ("2249.22", "69.13")


# ---- 13: a retraction is a warning, counted -----------------------------------------------------

def _retractions(ts: str) -> list[str]:
    """Real lines (sglang issue #4184, 0.4.3): every TP rank logs the same retraction."""
    return [f"[{ts} TP{k}] Decode out of memory happened. #retracted_reqs: 1, "
            f"#new_token_ratio: 0.1474 -> 0.1845" for k in (0, 1, 2, 3)]


def test_retractions_are_counted_not_fatal(tmp_path):
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    newer = ["[2026-09-02 12:37:07 TP0] KV cache pool is full. Retract requests. "
             "#retracted_reqs: 2, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487"]
    _rewrite(run, 0, 0, lambda lines: sorted(
        lines + _retractions("2026-09-02 12:36:00") + _retractions("2026-09-02 12:36:30")
        + newer + _retractions("2026-09-02 12:31:00"),           # before the window: left out
        key=lambda ln: ln[1:20]))
    s = collect_run(run, sacct=DONE)
    assert s.verdict == "ok"
    assert (s.replicas[0].retractions, s.replicas[0].retracted_requests) == (3, 4)
    assert (s.replicas[1].retractions, s.replicas[1].retracted_requests) == (0, 0)
    assert "replica 0: 3 KV-cache retraction(s) (4 request(s) sent back to the queue and " \
           "recomputed) in the benchmark window" in s.notes
    assert "KV-cache retractions: 3 (4 requests recomputed)" in run_md(s)


def test_retraction_never_outranks_the_fatal_cause(tmp_path):
    run = build_oom_run(tmp_path)
    # replica 1 retracted requests before its node rank 2 died of a CUDA OOM
    _rewrite(run, 1, 0, lambda lines: lines + _retractions(
        next(ln for ln in reversed(lines) if ln.startswith("[2026"))[1:20]))
    s = collect_run(run, sacct={"state": "FAILED", "exit_code": "1:0"})
    assert s.verdict == "failed"
    assert s.reasons[0].startswith("replica 1 node rank 2 (node07): CUDA out of memory during "
                                   "first prefill")
    assert not any("Decode out of memory" in r for r in s.reasons)
    kinds = {f.kind: f for f in s.findings}
    assert kinds["kv_pressure"].file == Layout(run).rel(launch_layout(run).server_log(1, 0))


# ---- 14: the client's own accept length ----------------------------------------------------------

def test_client_accept_length_is_shown_beside_the_decode_log_figure(tmp_path):
    run = build_run(tmp_path, RunSpec(target=TP32_DFLASH))
    rec = json.loads(launch_layout(run).bench(KEY).read_text())
    rec["accept_length"] = 3.61
    launch_layout(run).bench(KEY).write_text(json.dumps(rec) + "\n")
    s = collect_run(run, sacct=DONE)
    assert s.bench.accept_length == 3.61
    assert main_row(s)["Accept len / rate"] == "3.76 / 0.184 (client 3.61)"
    assert json.loads(runs_text([s], "json"))[0]["client_accept_length"] == 3.61
    a = collect_run(build_run(tmp_path / "a", RunSpec(target=TP32)), sacct=DONE)
    rows, _ = compare_rows(a, s)
    assert rows[-1] == ["Accept length", "-", "3.76 (client 3.61)", "n/a"]
    assert "Client's accept length (first worker's lifetime average, warm-ups included): 3.61" \
        in run_md(s)
    # stdout only: the printed 'Accept length:' line
    launch_layout(run).bench(KEY).unlink()
    client = launch_layout(run).client_log(KEY).read_text().replace(
        "Concurrency:", "Accept length:                           3.61      \nConcurrency:")
    launch_layout(run).client_log(KEY).write_text(client)
    assert collect_run(run, sacct=DONE).bench.accept_length == 3.61


# ---- 15: no memory left for the KV cache -------------------------------------------------------

def test_negative_profiled_kv_size_is_the_root_cause(tmp_path):
    run = build_oom_run(tmp_path)
    for rank in range(4):
        def swap(lines, rank=rank):
            out = [ln for ln in lines if "OutOfMemoryError" not in ln
                   and "Scheduler hit an exception" not in ln and "File " not in ln]
            at = next(i for i, ln in enumerate(out) if "Load weight end" in ln)
            ts = out[at][1:20]
            # SGLang 2025-07, DeepSeek-V3 on 8 GPUs: every TP rank's model runner logs it
            return out[:at + 1] + [f"[{ts} TP{rank * 8} EP{rank * 8}] max_total_tokens=131072 "
                                   "is larger than the profiled value -561981. Use the profiled "
                                   "value instead."] + out[at + 1:]
        _rewrite(run, 1, rank, swap)
    s = collect_run(run, sacct={"state": "FAILED", "exit_code": "1:0"})
    assert s.verdict == "failed"
    assert s.reasons[0] == (
        "replica 1 node rank 0 (node05): no memory left for the KV cache after loading weights: "
        "profiled max_total_tokens -561981; lower the model's footprint or raise "
        f"mem_fraction_static [{Layout(run).rel(launch_layout(run).server_log(1, 0))}:4]")
