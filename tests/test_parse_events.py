"""events.log parsing: the job script's record of what happened when."""
from __future__ import annotations

from datetime import datetime

from slurm_ab.parse.events import parse_event_line, read_events

LOG = """\
1756816251.000 2026-09-02 12:30:51.000 job_start job_id=4242 run_id=dp2-tp32-20260902-123051 mode=tp32 batch_host=n1
1756816251.010 2026-09-02 12:30:51.010 hosts replica=0 head=n1 nodes=n1,n2,n3,n4 port=30000 dist_port=20000
1756816251.020 2026-09-02 12:30:51.020 hosts replica=1 head=n5 nodes=n5,n6,n7,n8 port=30010 dist_port=20010
1756816371.000 2026-09-02 12:32:51.000 ready replica=0 seconds=120
1756816376.000 2026-09-02 12:32:56.000 warmup_start replica=0
1756816385.500 2026-09-02 12:33:05.500 warmup_done replica=0 ok=1 http=200 prompt_tokens=16384
1756816386.000 2026-09-02 12:33:06.000 warmup_start replica=1
1756816390.000 2026-09-02 12:33:10.000 warmup_done replica=1 ok=0 http=500 curl_rc=0
this line is not an event
1756816400.000 2026-09-02 12:33:20.000 bench_start
1756816500.000 2026-09-02 12:35:00.000 bench_end rc=0
1756816600.000 2026-09-02 12:36:40.000 bench_start
1756816700.250 2026-09-02 12:38:20.250 bench_end rc=3
1756816701.000 2026-09-02 12:38:21.000 fail kind=client_failed reason="client exited, badly" replica=1
1756816702.000 2026-09-02 12:38:22.000 job_end rc=1
"""


def test_read_events(tmp_path):
    p = tmp_path / "events.log"
    p.write_text(LOG)
    log = read_events(p)
    assert log.exists and log.bad_lines == (9,)
    assert [e.name for e in log.events][:3] == ["job_start", "hosts", "hosts"]
    assert log.first["bench_start"].local == datetime(2026, 9, 2, 12, 33, 20)
    assert log.last["bench_start"].local == datetime(2026, 9, 2, 12, 36, 40)
    # the window is the last benchmark, ended by the bench_end that follows it
    assert log.bench_window() == (datetime(2026, 9, 2, 12, 36, 40),
                                  datetime(2026, 9, 2, 12, 38, 20, 250000))
    assert log.bench_rc() == 3 and log.job_rc() == 1
    w = log.warmups()
    assert w[0].ok is True and w[0].prompt_tokens == 16384
    assert w[0].start == datetime(2026, 9, 2, 12, 32, 56)
    assert w[0].done == datetime(2026, 9, 2, 12, 33, 5, 500000)
    assert w[1].ok is False and w[1].prompt_tokens is None
    assert log.hosts() == {0: ["n1", "n2", "n3", "n4"], 1: ["n5", "n6", "n7", "n8"]}
    assert log.replicas() == {0, 1}
    fail = log.failures()[0]
    assert fail.fields == {"kind": "client_failed", "reason": "client exited, badly",
                           "replica": "1"}


def test_a_blank_line_is_skipped_not_the_end(tmp_path):
    """A blank line (an interrupted write, an editor) is neither an event nor a bad line, and the
    events after it are read."""
    p = tmp_path / "events.log"
    lines = LOG.splitlines()
    p.write_text("\n".join(lines[:3] + ["", "   "] + lines[3:]) + "\n")
    log = read_events(p)
    assert len(log.events) == len(lines) - 1 and log.bad_lines == (11,) and log.job_rc() == 1


def test_open_window_and_free_text_values():
    e = parse_event_line("1.5 2026-09-02 12:00:00.5 fail kind=not_ready "
                         "reason=replica 1 not healthy after 30 s replicas=1")
    assert e.fields == {"kind": "not_ready", "reason": "replica 1 not healthy after 30 s",
                        "replicas": "1"}
    assert e.epoch == 1.5 and e.local == datetime(2026, 9, 2, 12, 0, 0, 500000)
    assert parse_event_line("garbage") is None


def test_missing_and_unfinished(tmp_path):
    assert not read_events(tmp_path / "none.log").exists
    p = tmp_path / "events.log"
    p.write_text("1 2026-09-02 12:00:00.000 bench_start\n1 2026-09-02 12:00:0")
    log = read_events(p)
    assert log.bench_window() == (datetime(2026, 9, 2, 12), None)
    assert log.job_rc() is None and log.bad_lines == (2,)
