"""Batch/access/ready line parsing on real-format lines of every SGLang version (0.4.10's
'Decode batch.' with a trailing ', ', 0.5.6's 'Decode batch,', 0.5.10+ without the trailing
comma, 0.5.23's [iter] and hybrid pools), plus the stamp layouts other logging configs print."""
from __future__ import annotations

from datetime import datetime

import pytest

from slurm_ab.parse.server_log import (iter_batch_samples, is_ready_line, parse_access_line,
                                       parse_batch_line)
from slurm_ab.parse.text import iter_blocks, iter_lines, line_timestamp

# (id, line, expected kind, ts, ranks, {property: value})
CASES = [
    # 0.4.10: 'Decode batch.' with a period, spec adds only 'accept len', trailing ', '
    ("0.4.10-decode-spec",
     "[2025-08-03 10:00:00 TP0] Decode batch. #running-req: 3, #token: 1234, token usage: 0.05, "
     "accept len: 2.50, cuda graph: True, gen throughput (token/s): 88.10, #queue-req: 0, ",
     "Decode", datetime(2025, 8, 3, 10, 0, 0), {"TP": 0},
     {"accept_len": 2.5, "accept_rate": None, "gen_throughput": 88.1, "running_req": 3,
      "queue_req": 0, "token_usage": 0.05}),
    ("0.4.10-prefill",
     "[2025-08-03 10:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, "
     "token usage: 0.05, #running-req: 0, #queue-req: 0, ",
     "Prefill", datetime(2025, 8, 3, 10, 0, 1), {"TP": 0},
     {"new_seq": 1, "new_token": 8192, "cached_token": 0, "running_req": 0}),
    # 0.5.6 real example (sglang PR #13023): comma after 'batch', trailing ', '
    ("0.5.6-decode-real",
     "[2025-11-11 04:06:27] Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, "
     "cuda graph: False, gen throughput (token/s): 1447.08, #queue-req: 0, ",
     "Decode", datetime(2025, 11, 11, 4, 6, 27), {},
     {"accept_len": None, "gen_throughput": 1447.08, "running_req": 46, "token_usage": 0.19}),
    ("0.5.6-decode-spec",
     "[2025-12-11 09:00:00 TP0] Decode batch, #running-req: 8, #token: 9000, token usage: 0.10, "
     "accept len: 3.05, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 239.06, "
     "#queue-req: 2, ",
     "Decode", datetime(2025, 12, 11, 9, 0, 0), {"TP": 0},
     {"accept_len": 3.05, "accept_rate": 0.68, "gen_throughput": 239.06, "queue_req": 2}),
    ("0.5.6-prefill",
     "[2025-12-11 09:00:01 TP0] Prefill batch, #new-seq: 2, #new-token: 16384, "
     "#cached-token: 128, token usage: 0.12, #running-req: 6, #queue-req: 0, ",
     "Prefill", datetime(2025, 12, 11, 9, 0, 1), {"TP": 0},
     {"new_seq": 2, "new_token": 16384, "cached_token": 128, "running_req": 6}),
    # 0.5.10 real examples (sglang PR #22331): no trailing comma; prefill gains graph + throughput
    ("0.5.10-decode-real",
     "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
     "cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
     "Decode", datetime(2026, 4, 8, 14, 5, 21), {"TP": 0},
     {"gen_throughput": 144.95, "running_req": 5, "queue_req": 0}),
    ("0.5.10-prefill-real",
     "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, "
     "token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True, "
     "input throughput (token/s): 559.53",
     "Prefill", datetime(2026, 4, 5, 20, 2, 51), {},
     {"new_seq": 1, "new_token": 158, "input_throughput": 559.53, "running_req": 31}),
    # 0.5.16 / 0.5.23 real NPU examples (sgl-kernel-npu PR #608)
    ("0.5.16-npu-decode",
     "[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, "
     "token usage: 0.66, accept len: 3.05, accept rate: 0.68, npu graph: True, "
     "gen throughput (token/s): 239.06, #queue-req: 2",
     "Decode", datetime(2026, 7, 21, 15, 0, 13), {"TP": 0, "EP": 0},
     {"accept_len": 3.05, "accept_rate": 0.68, "gen_throughput": 239.06, "running_req": 24}),
    ("0.5.16-npu-prefill",
     "[2026-07-21 15:00:13 TP0 EP0] Prefill batch, #new-seq: 8, #new-token: 54400, "
     "#cached-token: 482304, token usage: 0.66, #running-req: 16, #queue-req: 2, "
     "#pending-token: 0, npu graph: False, input throughput (token/s): 2793.64",
     "Prefill", datetime(2026, 7, 21, 15, 0, 13), {"TP": 0, "EP": 0},
     {"new_seq": 8, "new_token": 54400, "cached_token": 482304, "input_throughput": 2793.64}),
    # PD-decode server (sglang PR #30393)
    ("pd-decode-real",
     "[2026-08-14 14:02:47 TP0] Decode batch, #running-req: 3, #token: 266624, "
     "token usage: 0.43, accept len: 1.67, accept rate: 0.13, pre-allocated usage: 0.22, "
     "#prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: True, "
     "gen throughput (token/s): 183.10, #queue-req: 0",
     "Decode", datetime(2026, 8, 14, 14, 2, 47), {"TP": 0},
     {"accept_len": 1.67, "accept_rate": 0.13, "gen_throughput": 183.1, "running_req": 3}),
    # 0.5.23 format string: [iter], hybrid SWA pool, block accept len, MFU tail, all ranks
    ("0.5.23-hybrid-swa-iter",
     "[2026-10-30 08:00:00 DP1 PP0 TP3 EP3] Decode batch [1200], #running-req: 12, "
     "#full token: 5000, full token usage: 0.41, #swa token: 900, swa token usage: 0.12, "
     "accept len: 4.50, accept rate: 0.23, block accept len: 9.10, cuda graph: True, "
     "gen throughput (token/s): 604.01, #queue-req: 1, est. decode TFLOPS/s (per GPU): 12.30",
     "Decode", datetime(2026, 10, 30, 8, 0, 0), {"DP": 1, "PP": 0, "TP": 3, "EP": 3},
     {"accept_len": 4.5, "accept_rate": 0.23, "gen_throughput": 604.01, "token_usage": 0.41}),
    ("0.5.23-hybrid-mamba",
     "[2026-10-30 08:00:01 TP0 EP0] Decode batch, #running-req: 4, #full token: 300, "
     "full token usage: 0.02, mamba num: 4, mamba usage: 0.01, cuda graph: True, "
     "gen throughput (token/s): 50.00, #queue-req: 0",
     "Decode", datetime(2026, 10, 30, 8, 0, 1), {"TP": 0, "EP": 0},
     {"token_usage": 0.02, "gen_throughput": 50.0, "accept_len": None}),
    ("0.5.23-prefill-swa",
     "[2026-10-30 08:00:02 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, "
     "#cached-token: 0, full token usage: 0.30, swa token usage: 0.10, #running-req: 0, "
     "#queue-req: 0, #pending-token: 8192, cuda graph: False, input throughput (token/s): 1.50",
     "Prefill", datetime(2026, 10, 30, 8, 0, 2), {"TP": 0},
     {"new_token": 8192, "token_usage": 0.30, "input_throughput": 1.5}),
    # field order swapped (llama-benchy issue #15)
    ("swapped-order",
     "[2026-05-01 00:00:00] Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0, "
     "token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 46.36, "
     "cuda graph: False",
     "Prefill", datetime(2026, 5, 1), {}, {"input_throughput": 46.36, "new_token": 10}),
    # SGLANG_LOG_MS timestamps and a PP stage
    ("ms-timestamp",
     "[2026-07-21 15:00:13.123 PP1 TP0 EP0] Decode batch, #running-req: 2, #token: 10, "
     "token usage: 0.00, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0",
     "Decode", datetime(2026, 7, 21, 15, 0, 13, 123000), {"PP": 1, "TP": 0, "EP": 0},
     {"gen_throughput": 10.0}),
    # Ray actor prefix, with and without colour codes
    ("ray-prefix",
     "(SGLangEngine pid=4242, ip=10.0.0.7) [2026-07-21 15:00:14 TP0] Decode batch, "
     "#running-req: 1, #token: 5, token usage: 0.00, cuda graph: True, "
     "gen throughput (token/s): 7.00, #queue-req: 0",
     "Decode", datetime(2026, 7, 21, 15, 0, 14), {"TP": 0}, {"gen_throughput": 7.0}),
    ("ray-ansi",
     "\x1b[36m(Actor pid=77)\x1b[0m [2026-07-21 15:00:15 TP0 EP0] Decode batch, "
     "#running-req: 1, #token: 5, token usage: 0.00, accept len: 2.00, accept rate: 0.10, "
     "cuda graph: True, gen throughput (token/s): 7.00, #queue-req: 0",
     "Decode", datetime(2026, 7, 21, 15, 0, 15), {"TP": 0, "EP": 0},
     {"accept_len": 2.0, "accept_rate": 0.1}),
    # Python logging instead of SGLang's own prefix (a SGLANG_LOGGING_CONFIG_PATH config, an
    # embedding framework's root logger): the stamp leads, '[file:line]' or '[INFO]' follow
    ("python-logging-file-line",
     "2025-12-04 20:34:02 INFO sglang.srt.managers.scheduler [scheduler.py:1734] Decode batch. "
     "#running-req: 3, #token: 1234, token usage: 0.05, gen throughput (token/s): 88.10, "
     "#queue-req: 0, ",
     "Decode", datetime(2025, 12, 4, 20, 34, 2), {}, {"gen_throughput": 88.1}),
    ("python-logging-default-asctime",
     "2026-06-07 10:59:31,659 [INFO] sglang.srt.managers.scheduler: Decode batch, "
     "#running-req: 5, #token: 20800, token usage: 0.29, accept len: 2.10, accept rate: 0.55, "
     "cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
     "Decode", datetime(2026, 6, 7, 10, 59, 31, 659000), {},
     {"accept_len": 2.1, "accept_rate": 0.55}),
    ("python-logging-ray-rank-tags",
     "(SGLangEngine pid=4242, ip=10.0.0.7) 2026-06-07 10:59:32,001 INFO [PP1 TP0] "
     "[scheduler.py:1734] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
     "token usage: 0.05, #running-req: 0, #queue-req: 0",
     "Prefill", datetime(2026, 6, 7, 10, 59, 32, 1000), {"PP": 1, "TP": 0},
     {"new_token": 8192}),
    ("python-logging-trailing-rank-tags",
     "2026-06-07 10:59:33 INFO [DP1 TP0] Decode batch, #running-req: 1, #token: 5, "
     "token usage: 0.00, cuda graph: True, gen throughput (token/s): 7.00, #queue-req: 0",
     "Decode", datetime(2026, 6, 7, 10, 59, 33), {"DP": 1, "TP": 0}, {"gen_throughput": 7.0}),
    ("sglang-brackets-with-a-stamp-that-is-not-one",
     "[uptime 12.5s TP3 EP1] Decode batch, #running-req: 1, #token: 5, "
     "token usage: 0.00, cuda graph: True, gen throughput (token/s): 7.00, #queue-req: 0",
     "Decode", None, {"TP": 3, "EP": 1}, {"gen_throughput": 7.0}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_batch_line(case):
    _, line, kind, ts, ranks, props = case
    for variant in (line, line.encode()):
        s = parse_batch_line(variant)
        assert s is not None
        assert s.kind == kind
        assert s.ts == ts
        assert dict(s.ranks) == ranks
        for name, value in props.items():
            assert (s._num(*RAW[name]) if name in RAW else getattr(s, name)) == value, name


def test_ms_flag_and_stream():
    s = parse_batch_line(CASES[14][1])
    assert s.ts_has_ms and s.stream == (0, 1)
    assert not parse_batch_line(CASES[7][1]).ts_has_ms
    assert parse_batch_line(CASES[10][1]).stream == (1, 0)
    assert parse_batch_line(CASES[10][1]).fields["iter"] == 1200


# Fields the collector reads from /metrics, not from these lines: checked through the raw fields
# (a hybrid pool prints 'full token usage' for the full-attention pool).
RAW = {"token_usage": ("token usage", "full token usage"), "input_throughput": ("input throughput (token/s)",)}


def test_token_usage_is_not_confused_with_full_token_usage():
    s = parse_batch_line(CASES[10][1])
    assert s.fields["full token usage"] == 0.41
    assert s.fields["swa token usage"] == 0.12
    assert "token usage" not in s.fields
    assert s.fields["block accept len"] == 9.10 and s.accept_len == 4.5


@pytest.mark.parametrize("line", [
    "", "garbage \x00\xff", "[2026-01-01 00:00:00] INFO: batch size 8",
    "[2026-01-01 00:00:00 TP0] Load weight end. elapsed=3 s",
    "the batch, was fine",
])
def test_not_a_batch_line(line):
    assert parse_batch_line(line) is None


def test_truncated_line_keeps_complete_fields_only():
    line = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, "
            "token usage: 0.29, cuda graph: True, gen throughput (token/s): 14")
    whole = parse_batch_line(line)
    cut = parse_batch_line(line, complete=False)
    assert whole.gen_throughput == 14
    assert cut.gen_throughput is None and cut.running_req == 5
    cut2 = parse_batch_line("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, tok")
    assert cut2.running_req == 5 and "token usage" not in cut2.fields


def test_garbage_values_are_not_numbers():
    s = parse_batch_line("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5\x00x, "
                         "accept len: n/a, gen throughput (token/s): 1.0")
    assert s.running_req is None and s.accept_len is None and s.gen_throughput == 1.0


def test_access_lines():
    a = parse_access_line('[2026-07-21 15:00:15] INFO:     127.0.0.1:45678 - '
                          '"POST /generate HTTP/1.1" 200 OK')
    assert a.ts == datetime(2026, 7, 21, 15, 0, 15)
    assert (a.client, a.method, a.path, a.status) == ("127.0.0.1:45678", "POST", "/generate", 200)
    assert a.is_generation
    bare = parse_access_line('INFO:     10.1.2.3:5 - "GET /health HTTP/1.1" 503 Service '
                             'Unavailable')
    assert bare.ts is None and bare.status == 503 and not bare.is_generation
    coloured = parse_access_line('\x1b[32mINFO\x1b[0m:     10.1.2.3:5 - '
                                 '"POST /v1/chat/completions?x=1 HTTP/1.1" \x1b[32m200 OK\x1b[0m')
    assert coloured.is_generation and coloured.status == 200
    assert parse_access_line("[2026-07-21 15:00:15] INFO: nothing here") is None


def test_ready_line_and_timestamps():
    line = "[2026-07-21 15:00:20] The server is fired up and ready to roll!"
    assert is_ready_line(line) and is_ready_line(line.encode())
    assert not is_ready_line("[2026-07-21 15:00:20] The server is starting")
    assert line_timestamp(line) == datetime(2026, 7, 21, 15, 0, 20)
    assert line_timestamp("(Actor pid=1) [2026-07-21 15:00:20.5 TP0] x") == \
        datetime(2026, 7, 21, 15, 0, 20, 500000)
    assert line_timestamp("2026-09-02 12:00:00 slurm-ab: FATAL: x") == datetime(2026, 9, 2, 12)
    assert line_timestamp("2026-09-02T12:00:00.123456Z  INFO router") == \
        datetime(2026, 9, 2, 12, 0, 0, 123456)
    assert line_timestamp("no stamp [here]") is None


def test_iter_batch_samples_streams_a_messy_file(tmp_path):
    p = tmp_path / "server.log"
    good = [c[1] for c in CASES]
    with open(p, "wb") as f:
        f.write(b"\x00\xff\xfe binary garbage \x89PNG\r\n")
        for line in good:
            f.write(line.encode() + b"\n")
            f.write(b"[2026-01-01 00:00:00 TP0] unrelated line with the word batch in it\n")
        f.write(good[7].encode()[:60])                # truncated last line, no newline
    samples = list(iter_batch_samples(p))
    assert len(samples) == len(good) + 1
    assert [s.kind for s in samples[:-1]] == [c[2] for c in CASES]
    assert samples[-1].gen_throughput is None         # cut line: no invented numbers
    decodes = list(iter_batch_samples(p, kinds=("Decode",)))
    assert all(s.kind == "Decode" for s in decodes) and decodes


def test_readers_bound_line_length_and_keep_line_numbers(tmp_path):
    p = tmp_path / "x.log"
    p.write_bytes(b"a\n" + b"x" * 5000 + b"\nlast")
    lines = list(iter_lines(p, max_line=1000))
    assert lines[0] == (1, "a")
    assert {no for no, _ in lines[1:-1]} == {2} and sum(len(t) for _, t in lines[1:-1]) == 5000
    assert lines[-1] == (3, "last")
    pieces = b"".join(buf[lo:hi] for buf, lo, hi in iter_blocks(p, size=64))
    assert pieces == p.read_bytes()


@pytest.mark.parametrize("line", [
    # no stamp at all (a custom format without asctime) and sglang diffusion's year-less datefmt
    "Decode batch, #running-req: 1, #token: 5, token usage: 0.00, gen throughput (token/s): 7.00",
    "[11-30 14:56:23 TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
    "gen throughput (token/s): 7.00",
])
def test_batch_line_without_a_readable_time(line):
    s = parse_batch_line(line)
    assert s is not None and s.ts is None and s.gen_throughput == 7.0


def test_python_logging_line_stamps():
    assert line_timestamp("2026-06-07 10:59:31,659 [INFO] x") == \
        datetime(2026, 6, 7, 10, 59, 31, 659000)
    assert line_timestamp("(Actor pid=3) 2026-06-07 10:59:31 INFO: x") == \
        datetime(2026, 6, 7, 10, 59, 31)
