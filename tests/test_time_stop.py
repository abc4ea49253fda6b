"""A campaign that runs out of time stops at a block boundary (issue 31): the job's time_left
(squeue's %L less its own early stop) and block_fits in bash, with a stand-in squeue whose answer
the test sets; a block is not started when its expected time, or the longest block the job has
already run, is more than the time left, and events.log says why."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers.scripts import template_lib
from slurm_ab.model.rundir import job_formats
from slurm_ab.parse.events import read_events


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    return template_lib(tmp_path_factory.mktemp("timestop") / "lib.sh", "functions.sh", "pipeline.sh")


def run(lib: Path, tmp_path: Path, script: str, squeue: str):
    """SCRIPT after the job's functions, with squeue printing the lines of file tmp_path/left
    (one answer per call, the last one repeated; SQUEUE is its first content)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "left").write_text(squeue)
    sq = bindir / "squeue"
    sq.write_text(f"#!/bin/bash\necho \"squeue $*\" >>{tmp_path}/calls\nhead -n 1 {tmp_path}/left\n"
                  f"[ $(wc -l <{tmp_path}/left) -gt 1 ] && sed -i 1d {tmp_path}/left\nexit 0\n")
    sq.chmod(0o755)
    rd = tmp_path / "run"
    (rd / "logs").mkdir(parents=True, exist_ok=True)
    formats = "".join(f"{name}='{fmt}'\n" for name, fmt, _ in job_formats())    # the script's F_* (Layout)
    full = (f"RUN_DIR={rd}\nSLURM_JOB_ID=77\nTIME_RESERVE_S=180\nPOLL=0.1\n{formats}source {lib}\n" + script)
    e = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", LC_ALL="de_DE.UTF-8")
    r = subprocess.run(["bash", "-c", full], capture_output=True, text=True, cwd=tmp_path, env=e, timeout=60)
    return r, read_events(rd / "events.log"), (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""


@pytest.mark.parametrize("answer,left", [("1-02:03:04\n", 93784 - 180), ("2:03:04\n", 7384 - 180),
                                         ("09:08\n", 548 - 180), ("0:05\n", 5 - 180),
                                         ("UNLIMITED\n", ""), ("NOT_SET\n", ""), ("", "")])
def test_time_left_reads_squeue_and_keeps_the_early_stops_back(lib, tmp_path, answer, left):
    r, _, calls = run(lib, tmp_path, "echo \"[$(time_left)]\"\n", answer)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"[{left}]"
    assert "squeue -h -j 77 -o %L" in calls


LAUNCHES = ("LAUNCH_DIRS=(launch1-a launch2-b launch3-b launch4-a launch5-a launch6-b)\n"
            "LAUNCH_MODES=(a b b a a b)\n")


def test_a_block_that_cannot_finish_is_not_started(lib, tmp_path):
    """Blocks 1-4 and 5-6 (the remainder): block 1 fits (2 h left), block 2 needs 1000 s with 900 s
    left: launches 5 and 6 never start; the campaign ends balanced after launch 4."""
    script = LAUNCHES + """TIME_BLOCKS=(1:3000 5:1000)
run_launch() { echo "ran $(( $1 + 1 ))"; exit 0; }
run_launches; echo "status $?"
"""
    r, ev, _ = run(lib, tmp_path, script, "2:00:00\n18:00\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["ran 1", "ran 2", "ran 3", "ran 4", "status 0"]
    checks = [e.fields for e in ev.named("time_check")]
    assert checks == [{"block": "1", "launch": "1", "need_s": "3000", "left_s": str(7200 - 180)},
                      {"block": "2", "launch": "5", "need_s": "1000", "left_s": str(1080 - 180)}]
    (stop,) = ev.named("time_stop")
    assert stop.fields == {"block": "2", "blocks": "2", "launches_run": "4", "launches_planned": "6",
                           "need_s": "1000", "left_s": "900"}
    assert [e.get_int("launch") for e in ev.named("launch_end")] == [1, 2, 3, 4]
    assert "block 2 of 2 (launch 5 on) needs ~1000 s, the job has 900 s left" in r.stderr


def test_the_slowest_blocks_pace_counts_when_the_estimate_was_short(lib, tmp_path):
    """Block 1 (4 launches) was estimated at 1 s but took ~4 s (this job's own evidence: 1 s a
    launch): block 2 (2 launches, estimate 1 s) needs 2 s at that pace, which 1 s left cannot give;
    its own size counts, not block 1's."""
    script = LAUNCHES + """TIME_BLOCKS=(1:1 5:1)
run_launch() { sleep 0.9; exit 0; }
run_launches
"""
    r, ev, _ = run(lib, tmp_path, script, "10:00\n3:01\n")
    assert r.returncode == 0, r.stderr
    (stop,) = ev.named("time_stop")
    assert stop.get_int("launches_run") == 4 and stop.get_int("left_s") == 1
    assert stop.get_int("need_s") == 2               # ceil(3-4 s / 4 launches) x 2 launches


def test_no_answer_from_slurm_goes_on_and_says_so(lib, tmp_path):
    script = LAUNCHES + "TIME_BLOCKS=(1:3000 5:1000)\nrun_launch() { exit 0; }\nrun_launches\n"
    r, ev, _ = run(lib, tmp_path, script, "UNLIMITED\n")
    assert r.returncode == 0, r.stderr
    assert [e.fields["left_s"] for e in ev.named("time_check")] == ["unknown", "unknown"]
    assert not ev.named("time_stop") and len(ev.named("launch_end")) == 6


def test_a_job_of_one_launch_has_no_blocks(lib, tmp_path):
    """No boundary to stop at (duration.block_seconds gives none): the launch runs, Slurm is not asked."""
    script = "LAUNCH_DIRS=(launch1-a)\nLAUNCH_MODES=(a)\nTIME_BLOCKS=()\nrun_launch() { exit 0; }\nrun_launches\n"
    r, ev, calls = run(lib, tmp_path, script, "0:01\n")
    assert r.returncode == 0 and not ev.named("time_check") and calls == ""
