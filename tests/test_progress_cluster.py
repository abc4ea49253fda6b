"""Live progress on the local cluster, one job seen two ways: `slurm-ab watch` under a
pseudo-terminal draws a bar that ends at 40/40; `submit --wait` into a pipe prints plain progress
lines."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from helpers.jobs import events
from slurm_ab.model.rundir import Layout

from helpers import CLIENT_052
from helpers.jobs import slurm_env, wait_no_processes
from slurm_ab.model.rundir import job_id_of

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("progress")


def run_in_pty(args: list[str], cwd, timeout: float = 600, cols: int = 160) -> tuple[int, str]:
    """Run a command with a pseudo-terminal as stdin/stdout/stderr; everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    p = subprocess.Popen(args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=slurm_env(),
                         close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1.0)
            if r:
                try:
                    data = os.read(master, 65536)
                except OSError:          # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif p.poll() is not None:
                break
        rc = p.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    return rc, b"".join(chunks).decode("utf-8", "replace")


def _bar_states(text: str) -> list[str]:
    """Every state the bar was drawn in (tqdm redraws its line after a carriage return)."""
    states = []
    for piece in re.split(r"[\r\n]", text):
        piece = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", piece).strip()
        if re.search(r"\d+%\|.*\| *\d+/\d+", piece):
            states.append(piece)
    return states


@pytest.fixture(scope="module")
def one_job(workdir):
    """One job seen both ways at once, as two terminals of one user would: `submit --wait` with its
    output into a pipe, and `slurm-ab watch` of the same run under a pseudo-terminal, started as
    soon as the job is submitted. Both follow the job to its end and collect it (atomic writes)."""
    run_id = f"prog-{int(time.time())}"
    submit = subprocess.Popen([sys.executable, "-m", "slurm_ab", "submit", "tp32", "--site", "local", "--run-id",
                               run_id, "--wait", *CLIENT_052], cwd=workdir, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=slurm_env())
    run_dir = workdir / "results" / run_id
    deadline = time.monotonic() + 120      # the manifest is written before sbatch, then with the job id
    while not job_id_of(run_dir) and submit.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    job_id = job_id_of(run_dir)
    assert job_id, submit.communicate(timeout=60)
    tty = run_in_pty([sys.executable, "-m", "slurm_ab", "watch", run_id], cwd=workdir)
    out, err = submit.communicate(timeout=600)
    return dict(run_dir=run_dir, job_id=str(job_id), tty=tty,
                pipe=subprocess.CompletedProcess(submit.args, submit.returncode, out, err))


def test_watch_in_a_terminal_draws_a_bar_that_reaches_40_of_40(one_job):
    rc, out = one_job["tty"]
    assert rc == 0, out[-3000:]
    states = _bar_states(out)
    assert states, out[-3000:]
    final = states[-1]
    assert "40/40" in final and "100%" in final and "collecting" in final, final
    seen = " ".join(states)
    assert "benchmark pass 1 of 1" in seen
    # the counter rose during the benchmark (the job is ~15 s of benchmark, polled every 2 s)
    counts = [int(m.group(1)) for s in states if "benchmark pass" in s
              for m in [re.search(r"(\d+)/40", s)] if m]
    assert counts == sorted(counts) and len(set(counts)) >= 3, counts
    assert "verdict: ok" in out
    assert Layout(one_job["run_dir"]).report_html.exists()
    assert wait_no_processes(one_job["job_id"], 30) == []


def test_submit_wait_into_a_pipe_prints_plain_progress_lines(one_job):
    r = one_job["pipe"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "\r" not in r.stdout and "\x1b" not in r.stdout
    lines = [ln for ln in r.stdout.splitlines() if re.match(r"^\[\d\d:\d\d\] ", ln)]
    phases = [ln.split("] ", 1)[1].split(":")[0] for ln in lines]
    for p in ("loading replica 0,1", "benchmark pass 1 of 1", "collecting"):
        assert p in phases, lines
    assert lines[-1].startswith("[") and "collecting: 40/40 requests" in lines[-1], lines
    assert Layout(one_job["run_dir"]).report_html.exists()
    # the progress is not buried under the job's events: no scrape lines (they need -v)
    assert "metrics_scrape" not in r.stdout and "bench_start" not in r.stdout
    assert sum(1 for _, k, _ in events(one_job["run_dir"]) if k == "metrics_scrape") >= 9   # the job did scrape
