"""Failure signatures: kind, file, line, excerpt, phase and memory fraction."""
from __future__ import annotations

from slurm_ab.parse.diagnose import (NO_KV_MEMORY, ROOT_CAUSE_KINDS, diagnose,
                                     server_log_identity)

SERVER_ARGS = ("[2026-09-02 14:10:03] server_args=ServerArgs(model_path='/m', tp_size=32, "
               "mem_fraction_static=0.86, chunked_prefill_size=8192)")
PREFILL = ("[2026-09-02 14:12:30 TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, "
           "#cached-token: 0, token usage: 0.20, #running-req: 0, #queue-req: 0")
DECODE = ("[2026-09-02 14:13:30 TP0 EP0] Decode batch, #running-req: 1, #token: 9, "
          "token usage: 0.20, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0")
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. GPU 0 has a "
       "total capacity of 178.35 GiB")


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n")
    return p


def test_oom_first_prefill_in_the_same_file(tmp_path):
    p = _write(tmp_path, "logs/server-r1-n0.log", [
        SERVER_ARGS, "[2026-09-02 14:11:00] The server is fired up and ready to roll!", PREFILL,
        "[2026-09-02 14:12:31 TP0 EP0] Scheduler hit an exception: Traceback (most recent "
        "call last):", '  File "scheduler.py", line 1', OOM, OOM])
    found = diagnose([p], root=tmp_path)
    oom = next(f for f in found if f.kind == "oom")
    assert oom.file == "logs/server-r1-n0.log" and oom.line == 6
    assert oom.details["phase"] == "first prefill"
    assert oom.details["mem_fraction_static"] == 0.86
    assert oom.details["replica"] == 1 and oom.details["node_rank"] == 0
    assert oom.details["count"] == 2 and oom.details["ts"] == "2026-09-02 14:12:31"
    assert "CUDA out of memory" in oom.excerpt
    assert {f.kind for f in found} == {"oom", "scheduler_exception"}


def test_oom_phase_and_time_from_the_file_itself(tmp_path):
    """Without a server log's name (no replica to borrow a phase from) the file's own batches say
    the phase: a prefill and no decode is the first prefill, also when the batch line is the file's
    first byte (a site's format without stamps); a traceback line's time is the stamped line above
    it, also when that line follows an empty first line."""
    own = _write(tmp_path, "c.log", [PREFILL, "[2026-09-02 14:12:31] x", OOM])
    assert diagnose([own])[0].details["phase"] == "first prefill"
    bare = _write(tmp_path, "d.log", ["Prefill batch, #new-seq: 1, #new-token: 8192", OOM])
    assert diagnose([bare])[0].details["phase"] == "first prefill"
    blank = _write(tmp_path, "e.log", ["", "[2026-09-02 14:12:31 TP0] Scheduler hit an exception:", OOM])
    oom = next(f for f in diagnose([blank]) if f.kind == "oom")
    assert oom.details["ts"] == "2026-09-02 14:12:31"


def test_oom_phase_startup_decode_and_cross_file(tmp_path):
    start = _write(tmp_path, "a.log", ["[2026-09-02 14:10:00] loading", OOM])
    dec = _write(tmp_path, "b.log", [PREFILL, DECODE, "[2026-09-02 14:13:31] x", OOM])
    assert diagnose([start])[0].details["phase"] == "startup"
    assert diagnose([start])[0].details["mem_fraction_static"] is None
    assert diagnose([dec])[0].details["phase"] == "decode"
    # node rank 2 has no batch lines: its OOM takes the phase from node rank 0 by time
    n0 = _write(tmp_path, "logs/server-r0-n0.log", [SERVER_ARGS, PREFILL])
    n2 = _write(tmp_path, "logs/server-r0-n2.log",
                [SERVER_ARGS, "[2026-09-02 14:12:31 TP16] Scheduler hit an exception:", OOM])
    found = diagnose([n0, n2])
    oom = next(f for f in found if f.kind == "oom")
    assert (oom.details["replica"], oom.details["node_rank"]) == (0, 2)
    assert oom.details["phase"] == "first prefill" and oom.details["mem_fraction_static"] == 0.86
    early = _write(tmp_path, "logs/server-r0-n3.log", ["[2026-09-02 14:10:10 TP24] x", OOM])
    assert next(f for f in diagnose([n0, early]) if f.kind == "oom").details["phase"] == \
        "startup"


def test_specific_oom_messages(tmp_path):
    p = _write(tmp_path, "x.log", [
        "[2026-09-02 14:10:00] RuntimeError: Not enough memory. Please try to increase "
        "--mem-fraction-static. Current value: mem_fraction_static=0.95"])
    f = diagnose([p])[0]
    assert f.details["phase"] == "startup (KV cache pool)"
    assert f.details["mem_fraction_static"] == 0.95
    q = _write(tmp_path, "y.log", ["[2026-09-02 14:10:00] Capture cuda graph failed: boom"])
    assert diagnose([q])[0].details["phase"] == "cuda graph capture (startup)"


def test_memory_fraction_from_the_launch_command_and_a_long_excerpt(tmp_path):
    """--mem-fraction-static as the launch command gives it (an OOM before ServerArgs is
    printed); the excerpt of a long line is cut to 300 characters."""
    p = _write(tmp_path, "x.log", [
        "+ python3 -m sglang.launch_server --model-path /m --tp-size 32 --mem-fraction-static 0.83",
        "[2026-09-02 14:10:00] loading", OOM + " and more" * 50])
    f = next(f for f in diagnose([p]) if f.kind == "oom")
    assert f.details["mem_fraction_static"] == 0.83 and f.details["phase"] == "startup"
    assert len(f.excerpt) == 300 and f.excerpt.startswith("torch.OutOfMemoryError") and f.excerpt.endswith("...")


def test_job_slurm_and_router_lines(tmp_path):
    out = _write(tmp_path, "slurm-7.out", [
        "2026-09-02 12:00:00 slurm-ab: replica 0: starting",
        "2026-09-02 12:30:00 slurm-ab: FATAL: replica 1 not healthy after 30 s",
        "srun: error: node07: task 2: Exited with exit code 1",
        "slurmstepd: error: *** JOB 7 ON node01 CANCELLED AT 2026-09-02T12:31:00 DUE TO TIME "
        "LIMIT ***",
        "slurmstepd: error: *** STEP 7.3 ON node01 CANCELLED AT 2026-09-02T12:31:00 ***",
    ])
    router = _write(tmp_path, "logs/router.log", [
        "2026-09-02T12:20:00.1Z ERROR sglang_router: No available workers for request",
        "2026-09-02T12:19:00.0Z ERROR Failed to load tokenizer from /shared/models/Kimi-K3: "
        "No such file or directory",
        "2026-09-02T12:19:00.0Z WARN connect error: Connection refused (os error 111)",
    ])
    found = diagnose([out, router], root=tmp_path)
    by = {f.kind: f for f in found}
    assert by["job_fatal"].details["message"] == "replica 1 not healthy after 30 s"
    assert by["job_fatal"].line == 2 and by["job_fatal"].file == "slurm-7.out"
    assert by["srun_error"].details["message"] == "node07: task 2: Exited with exit code 1"
    assert by["srun_error"].details["teardown"] is True           # printed after the FATAL line
    assert by["slurm_timeout"].line == 4 and by["slurm_cancelled"].line == 5
    assert by["router"].file == "logs/router.log" and by["router"].line == 1
    assert by["tokenizer"].line == 2 and by["connection_refused"].line == 3


def test_srun_errors_of_a_teardown_are_marked_and_give_way_to_one_outside(tmp_path):
    """srun's 'task N: Killed' lines as a launch (or the job) tears its steps down are routine: the
    finding is marked 'teardown' and replaced by the first srun error printed while a launch ran;
    the collector's reasons leave a marked one out (the no-client page led with one, issue 32)."""
    from slurm_ab.collect.verdict import diagnosis_reasons
    lines = ["2026-11-30 14:57:47 slurm-ab: client: python3 -m sglang.bench_serving ...",
             "2026-11-30 14:58:05 slurm-ab: launch 1 (tp32) done: tearing down",
             "srun: error: node07: task 2: Killed",
             "srun: error: node04: task 3: Killed",
             "2026-11-30 14:58:06 slurm-ab: teardown (launch-end) done",
             "srun: error: node05: task 0: Killed",
             "2026-11-30 14:58:07 slurm-ab: replica 0: starting SGLang on node01",
             "srun: error: node09: task 0: Exited with exit code 2",
             "2026-11-30 14:59:00 slurm-ab: benchmark done: results in /r (slurm-ab collect 7)",
             "srun: error: node01: task 0: Killed"]
    (f,) = [f for f in diagnose([_write(tmp_path, "slurm-7.out", lines[:7])], root=tmp_path)
            if f.kind == "srun_error"]
    assert (f.line, f.details["teardown"], f.details["count"]) == (3, True, 3)
    assert diagnosis_reasons([f], {}) == []
    (f,) = [f for f in diagnose([_write(tmp_path, "slurm-7.out", lines)], root=tmp_path)
            if f.kind == "srun_error"]
    assert (f.line, "teardown" in f.details, f.details["count"]) == (8, False, 5)
    assert diagnosis_reasons([f], {}) == ["srun: node09: task 0: Exited with exit code 2"]


def test_nccl_gloo_init_and_clean_logs(tmp_path):
    p = _write(tmp_path, "n.log", [
        "[2026-09-02 14:10:00 TP3] NCCL error in: ProcessGroupNCCL.cpp:1", "ok",
        "[2026-09-02 14:10:01] Gloo connectFullMesh failed with Connection closed by peer",
        "[2026-09-02 14:10:02] Initialization failed. warmup error: boom",
        "*** JOB 9 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***"])
    kinds = [f.kind for f in diagnose([p])]
    assert kinds == ["nccl", "gloo", "init_failed", "slurm_node_failure"]
    clean = _write(tmp_path, "c.log", [PREFILL, DECODE] * 100)
    assert diagnose([clean, tmp_path / "missing.log"]) == []


def test_line_numbers_across_blocks_and_garbage(tmp_path):
    p = tmp_path / "big.log"
    filler = [f"[2026-09-02 14:10:00 TP0] line {i} " + "x" * 50 for i in range(500)]
    p.write_bytes(b"\x00\xff\xfe garbage\n" + "\n".join(filler).encode() + b"\n"
                  + OOM.encode() + b"\n" + b"tail " * 10)
    for block in (100, 4096, 1 << 22):
        f = diagnose([p], block=block)[0]
        assert f.line == 502 and f.kind == "oom", block
        assert f.details["ts"] == "2026-09-02 14:10:00"


def test_server_log_identity():
    assert server_log_identity("results/x/logs/server-r1-n3.log") == (1, 3)
    assert server_log_identity("logs/router.log") is None


def test_retractions_are_warnings_in_every_wording(tmp_path):
    """Real lines: 0.4.3 (sglang issue #4184, logged by every TP rank), the later wording
    (with '#new_tokens_gained'), the 0.1-0.3 lowercase one; and the fatal message they must not
    be confused with."""
    p = _write(tmp_path, "logs/server-r0-n0.log", [
        SERVER_ARGS, PREFILL, DECODE,
        "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.1474 -> 0.1845",
        "[2025-03-07 21:49:33 TP12] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.1474 -> 0.1845",
        "[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487",
        "[2024-08-01 10:00:00 TP0] decode out of memory happened, #retracted_reqs: 2, "
        "#new_token_ratio: 0.4000 -> 0.5000"])
    found = diagnose([p], root=tmp_path)
    assert [f.kind for f in found] == ["kv_pressure"]
    assert found[0].details["count"] == 4 and "kv_pressure" not in ROOT_CAUSE_KINDS
    fatal = _write(tmp_path, "y.log", [
        PREFILL, DECODE, "[2026-09-02 14:13:31 TP0] Decode out of memory. Try to lower your "
        "batch size.", "Try to allocate 24 tokens."])
    oom = diagnose([fatal])[0]
    assert (oom.kind, oom.details["label"], oom.details["phase"]) == \
        ("oom", "Decode out of memory", "decode")


def test_profiled_kv_size(tmp_path):
    """'max_total_tokens=%s is larger than the profiled value %s. Use the profiled value
    instead.': <= 0 leaves no KV cache (SGLang 2025-07, DeepSeek-V3 on 8 GPUs; a 2026-02 log
    shows -89624), > 0 only caps the pool."""
    none_left = _write(tmp_path, "logs/server-r1-n0.log", [
        SERVER_ARGS, "[2025-07-18 09:12:44 TP0] max_total_tokens=131072 is larger than the "
        "profiled value -561981. Use the profiled value instead."])
    f = diagnose([none_left], root=tmp_path)[0]
    assert (f.kind, f.details["label"], f.details["phase"]) == \
        ("oom", NO_KV_MEMORY, "startup (KV cache pool)")
    assert (f.details["max_total_tokens"], f.details["profiled_max_total_tokens"]) == \
        (131072, -561981)
    capped = _write(tmp_path, "z.log", [
        "[2026-02-11 06:45:01] max_total_tokens=131072 is larger than the profiled value 50756. "
        "Use the profiled value instead."])
    f = diagnose([capped])[0]
    assert f.kind == "kv_capped" and f.details["profiled_max_total_tokens"] == 50756
    assert "kv_capped" not in ROOT_CAUSE_KINDS


def test_pd_gpudirect_checksum_and_flaky_transfers(tmp_path):
    """Issue 31's PD failures, in SGLang 0.5.23's and Mooncake's words: GPU memory that cannot be
    registered for RDMA (no GPUDirect) outranks the transfers that then fail; a KV checksum mismatch
    is named as corruption; a flaky fabric's failed transfer is a KV transfer failure."""
    p = _write(tmp_path, "logs/server-r1-n1.log", [
        "E1203 12:00:00.123456 4242 rdma_context.cpp:203] Failed to register memory 0x7b375b400000: "
        "Invalid argument [22]",
        "[2026-12-03 12:01:00 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='a' "
        "decode_req.req.bootstrap_room=5 with exception KVTransferError(bootstrap_room=5): Failed to get "
        "kvcache from prefill instance, it might be dead"])
    q = _write(tmp_path, "logs/server-r1-n0.log", [
        "[2026-12-03 12:02:00 TP0] KV checksum mismatch req=ab12 bootstrap_room=7 expected=0x1f got=0x1e"])
    r = _write(tmp_path, "logs/server-r0-n0.log", [
        "[2026-12-03 12:03:00 TP0] Session 10.0.0.5:41234 failed.",
        "[2026-12-03 12:03:00 TP0] Prefill transfer failed for request rank=0 req.rid='c' req.bootstrap_room=9 "
        "with exception KVTransferError(bootstrap_room=9): Failed to send kv chunk of 9 to 10.0.0.5:41234"])
    found = {f.kind: f for f in diagnose([p, q, r], root=tmp_path)}
    assert found["pd_gpudirect"].line == 1 and found["pd_gpudirect"].file == "logs/server-r1-n1.log"
    assert found["pd_kv_checksum"].file == "logs/server-r1-n0.log"
    # The decode logged its side first (12:01, told by the prefill's conn.py before the prefill's
    # scheduler polled the failure: a race in SGLang too); the prefill's line, which says why, ranks first.
    assert "Failed to send kv chunk of 9" in found["pd_transfer_failed"].excerpt
    assert found["pd_transfer_failed"].file == "logs/server-r0-n0.log"
    assert found["pd_transfer_reported"].file == "logs/server-r1-n1.log"
    order = ROOT_CAUSE_KINDS
    assert order.index("pd_gpudirect") < order.index("pd_kv_checksum") < order.index("pd_transfer_failed") \
        < order.index("pd_transfer_reported")
