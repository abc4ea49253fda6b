"""Live progress from a run's files: a real run (tests/fixtures/report) is replayed into a fresh
directory line by line up to a moment, as the job would have written it, and polled."""
from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path


from helpers import ROOT
from slurm_ab.parse.text import line_timestamp
from slurm_ab.job.progress import Display, Snapshot, Tracker, describe

FIX = ROOT / "tests" / "fixtures" / "report"


class Replay:
    """Writes the fixture's events.log and node rank 0 logs up to a local time (appending)."""

    def __init__(self, src: Path, dst: Path):
        self.src, self.dst = src, dst
        dst.mkdir(parents=True)
        for m in src.glob("**/manifest.json"):                 # a campaign's launches have one too
            (dst / m.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / m.relative_to(src)).write_text(m.read_text())
        self.files = {}
        rels = [str(p.relative_to(src)) for p in sorted(src.glob("**/events.log"))
                + sorted(src.glob("**/logs/server-r*-n0.log"))]
        for rel in rels:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            lines = (src / rel).read_text().splitlines(keepends=True)
            stamped, last = [], None
            for ln in lines:
                ts = _event_ts(ln) if rel.endswith("events.log") else line_timestamp(ln)
                last = ts or last
                stamped.append((last, ln))
            self.files[rel] = [stamped, 0, 0]     # lines, next line, chars of it already written
        first = (src / "events.log").read_text().split()
        self.offset = float(first[0]) - datetime.fromisoformat(f"{first[1]} {first[2]}").timestamp()

    def upto(self, t: datetime, partial_tail: bool = False) -> float:
        for rel, st in self.files.items():
            lines, pos, done = st
            with open(self.dst / rel, "a") as f:
                while pos < len(lines) and (lines[pos][0] is None or lines[pos][0] <= t):
                    f.write(lines[pos][1][done:])
                    pos, done = pos + 1, 0
                if partial_tail and pos < len(lines) and not done:
                    done = min(20, len(lines[pos][1]) - 1)
                    f.write(lines[pos][1][:done])     # a line being written: not consumed yet
            st[1], st[2] = pos, done
        return t.timestamp() + self.offset            # the epoch clock at t


def _event_ts(line: str):
    parts = line.split(" ", 3)
    return datetime.fromisoformat(f"{parts[1]} {parts[2]}") if len(parts) > 3 else None


def _events(src: Path) -> dict:
    out = {}
    for ln in (src / "events.log").read_text().splitlines():
        p = ln.split(" ", 4)
        out.setdefault(p[3], datetime.fromisoformat(f"{p[1]} {p[2]}"))
    return out


def test_phases_and_request_counter_of_a_replayed_run(tmp_path):
    src = FIX / "dev-tp32"
    ev = _events(src)
    rp = Replay(src, tmp_path / "run")
    now = {"t": 0.0}
    tr = Tracker(tmp_path / "run", clock=lambda: now["t"])
    assert (tr.total, tr.concurrency, tr.passes) == (40, 8, 1)
    assert tr.poll("PENDING").phase == "queued"
    seen = []
    t = ev["job_start"]
    end = ev["job_end"] + timedelta(seconds=1)
    while t <= end:
        now["t"] = rp.upto(t, partial_tail=True)
        s = tr.poll("RUNNING")
        seen.append((t, s))
        t += timedelta(milliseconds=250)
    phases = []
    for _, s in seen:
        if not phases or phases[-1] != s.phase:
            phases.append(s.phase)
    assert phases[:2] == ["preflight", "loading replica 0,1"] or phases[0] == "loading replica 0,1"
    for p in ("warm-up replica 0", "warm-up replica 1", "router", "benchmark pass 1 of 1", "collecting"):
        assert p in phases, phases
    assert phases.index("router") < phases.index("benchmark pass 1 of 1") < phases.index("collecting")
    bench = [s for _, s in seen if s.phase == "benchmark pass 1 of 1"]
    done = [s.done for s in bench]
    assert done == sorted(done) and done[0] == 0                    # never goes back
    # while requests remain to be sent, exactly C are in flight: done = arrived - 8
    mid = [s for s in bench if s.arrived is not None and 8 < s.arrived < 40]
    assert mid and all(s.done == s.arrived - 8 for s in mid)
    assert any(s.req_per_s and s.out_tok_per_s and s.eta_s is not None for s in mid)
    last = seen[-1][1]
    assert (last.done, last.total, last.finished) == (40, 40, True)
    assert describe(last).endswith("collecting: 40/40 requests, 2.22 req/s")


def test_failed_run_progress_names_the_failure(tmp_path):
    src = FIX / "dev-oom"
    rp = Replay(src, tmp_path / "run")
    tr = Tracker(tmp_path / "run", clock=lambda: 0.0)
    ev = _events(src)
    rp.upto(ev["warmup_start"])
    assert tr.poll("RUNNING").phase == "warm-up replica 0"
    rp.upto(ev["fail"])
    assert tr.poll("RUNNING").phase == "failing (step_exited): tearing down"
    rp.upto(ev["job_end"])
    assert tr.poll("FAILED").phase == "failed (step_exited), collecting"


def test_files_are_not_held_open(tmp_path):
    import os
    src = FIX / "dev-tp32"
    rp = Replay(src, tmp_path / "run")
    tr = Tracker(tmp_path / "run", clock=lambda: 0.0)
    rp.upto(_events(src)["bench_end"])
    tr.poll("RUNNING")
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [f for f in fds if str(tmp_path) in f]


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    clock = {"t": 0.0}
    d = Display(out, tty=False, every_s=10, clock=lambda: clock["t"])
    d.update(Snapshot("loading replica 0,1", total=40, done=0, elapsed_s=3))
    d.update(Snapshot("loading replica 0,1", total=40, done=0, elapsed_s=4))      # same phase, too soon
    clock["t"] = 2
    d.update(Snapshot("benchmark pass 1 of 1", total=40, done=5, elapsed_s=20, req_per_s=2.5,
                      out_tok_per_s=1500, eta_s=14))
    clock["t"] = 15
    d.update(Snapshot("benchmark pass 1 of 1", total=40, done=30, elapsed_s=33, req_per_s=3.0,
                      out_tok_per_s=1510, eta_s=3))
    d.write("  bench_end rc=0")
    assert out.getvalue().splitlines() == [
        "[00:03] loading replica 0,1: 0/40 requests",
        "[00:20] benchmark pass 1 of 1: 5/40 requests, 2.50 req/s, 1500 out tok/s, ETA 00:14",
        "[00:33] benchmark pass 1 of 1: 30/40 requests, 3.00 req/s, 1510 out tok/s, ETA 00:03",
        "  bench_end rc=0"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_a_bar_on_a_terminal():
    out = io.StringIO()
    d = Display(out, tty=True)
    d.update(Snapshot("benchmark pass 1 of 1", total=40, done=12, elapsed_s=20, req_per_s=2.5))
    d.update(Snapshot("collecting", total=40, done=40, elapsed_s=35, finished=True))
    d.close()
    text = out.getvalue()
    assert "\r" in text and "12/40" in text
    final = text.split("\r")[-1]
    assert "collecting" in final and "40/40" in final and "100%" in final


def test_a_campaign_is_followed_launch_by_launch(tmp_path):
    src = ROOT / "tests" / "fixtures" / "report-campaign" / "camp-ab"
    rp = Replay(src, tmp_path / "run")
    now = {"t": 0.0}
    tr = Tracker(tmp_path / "run", clock=lambda: now["t"])
    ev = _events(src)
    t, seen = ev["job_start"], []
    while t <= ev["job_end"] + timedelta(seconds=1):
        now["t"] = rp.upto(t)
        seen.append(tr.poll("RUNNING"))
        t += timedelta(milliseconds=500)
    phases = []
    for s in seen:
        if not phases or phases[-1] != s.phase:
            phases.append(s.phase)
    for p in ("launch 1 of 2 (tp32): loading replica 0,1", "launch 1 of 2 (tp32): benchmark pass 1 of 3",
              "launch 1 of 2 (tp32): benchmark pass 3 of 3", "launch 2 of 2 (tp32-dflash): benchmark pass 2 of 3",
              "collecting"):
        assert p in phases, phases
    mid = [s.done for s in seen if s.phase == "launch 2 of 2 (tp32-dflash): benchmark pass 2 of 3"]
    assert mid == sorted(mid) and 0 < max(mid) <= 40
    assert (seen[-1].done, seen[-1].total) == (40, 40)


def test_a_campaign_stopped_at_a_block_boundary_says_so(tmp_path):
    """After time_stop (pipeline.sh block_fits) the phase says which block was not started, and
    watch echoes the event without --verbose."""
    from slurm_ab.job.watch import shown
    (tmp_path / "launch1-a").mkdir()
    stop = ("1796126990.0 2026-12-01 12:09:50.000 time_stop block=2 blocks=2 launches_run=2 launches_planned=4 "
            "need_s=240 left_s=200")
    (tmp_path / "events.log").write_text(
        "1796126960.0 2026-12-01 12:09:20.000 job_start job_id=7 run_id=r\n"
        "1796126961.0 2026-12-01 12:09:21.000 launch_start launch=1 mode=a dir=launch1-a\n"
        "1796126980.0 2026-12-01 12:09:40.000 launch_end launch=1 mode=a status=ok rc=0\n" + stop + "\n")
    tr = Tracker(tmp_path, clock=lambda: 1796126991.0)
    assert tr.poll("RUNNING").phase == "stopped before block 2 of 2 (time)"
    with open(tmp_path / "events.log", "a") as f:
        f.write("1796126992.0 2026-12-01 12:09:52.000 job_end rc=0\n")
    assert Tracker(tmp_path, clock=lambda: 1796126993.0).poll("COMPLETED").phase == \
        "stopped before block 2 of 2 (time), collecting"
    assert shown(stop, verbose=False)


# ---- what submit --wait / watch print ----------------------------------------------------------

def test_scrape_events_are_shown_only_verbose():
    from slurm_ab.job.watch import shown
    scrape = ("1796126965.5 2026-12-01 12:09:25.500 metrics_scrape target=r0n0 phase=start "
              "round=start node=node01 ok=1 http=200 file=metrics/r0n0-x.prom")
    fail = "1796126966.0 2026-12-01 12:09:26.000 fail kind=step_exited step=router rc=1"
    hosts = "1796126960.0 2026-12-01 12:09:20.000 hosts replica=0 head=node01"
    assert not shown(scrape, verbose=False) and shown(scrape, verbose=True)
    assert shown(fail, verbose=False)
    assert not shown(hosts, verbose=False) and shown(hosts, verbose=True)


def test_pp_progress_counts_in_flight_from_the_scrape_not_the_micro_batch(tmp_path):
    """pp8: a Decode batch line's #running-req is the micro-batch just processed (1), not the
    replica's 4 running requests; the replica's latest /metrics scrape says 4 are in flight."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "metrics").mkdir()
    ev = ["1796126965.391 2026-12-01 12:09:25.391 bench_start prompts=8 concurrency=8"]
    access = [f'[2026-12-01 12:09:40.{100 + k}] INFO:     10.77.0.11:{36000 + k} - '
              f'"POST /v1/completions HTTP/1.1" 200 OK\n' for k in range(4)]
    for g in (0, 1):
        (tmp_path / "logs" / f"server-r{g}-n0.log").write_text(
            "".join(access) + "[2026-12-01 12:09:41.626 PP0 TP0 EP0] Decode batch, #running-req: 1, "
            "#token: 65672, token usage: 0.00, cuda graph: True, gen throughput (token/s): 5.03, "
            "#queue-req: 0\n")
        (tmp_path / "metrics" / f"r{g}n0-a.prom").write_text(
            "# TYPE sglang:http_requests_active gauge\n"
            'sglang:http_requests_active{endpoint="/v1/completions",method="POST"} 4.0\n'
            'sglang:http_requests_active{endpoint="/metrics",method="GET"} 1.0\n')
        ev.append(f"1796126981.0 2026-12-01 12:09:41.000 metrics_scrape target=r{g}n0 phase=during "
                  f"round=1 node=node0{1 + 4 * g} ok=1 http=200 file=metrics/r{g}n0-a.prom")
    (tmp_path / "events.log").write_text("\n".join(ev) + "\n")
    tr = Tracker(tmp_path, clock=lambda: 1796126983.0)
    tr.pp = 8
    assert tr.poll("RUNNING").done == 0            # 8 in flight of 8: none done yet
    tr2 = Tracker(tmp_path, clock=lambda: 1796126983.0)
    tr2.pp = 1                                    # without PP the newer sample is believed
    assert tr2.poll("RUNNING").done == 8 - 2
