"""Drive one real job on the local cluster and track every process it starts.

``helpers.jobs.processes_of_job`` finds a job's processes by the SLURM_JOB_ID marker in their
environment. Programs that rename themselves (setproctitle: sglang-router shows up as
``sglang::router``) overwrite that environment block, so the marker alone misses them. Here every
snapshot also takes the descendants of the job's own ``slurmstepd: [<component id>.<step>]``
daemons, and each process seen is remembered as (pid, start time): ``leftovers()`` then says which
of them still run, whatever they did to their environment or parent since.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from . import CLIENT_052, set_args
from .lanes import wait_idle as wait_cluster_idle  # noqa: F401  (tests import it from here)
from .jobs import Proc, Tracker, all_procs, alive, component_ids, event_files, events, final_sacct, processes_of_job, slurm_env  # noqa: F401
from slurm_ab.model.rundir import Layout, open_run

def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_ab", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**slurm_env(), **(env or {})})


class Job:
    """``slurm-ab submit MODE --site local --wait`` in the background, with its processes tracked."""

    def __init__(self, workdir: Path, run_id: str, *sets: str, mode: str = "tp32", env: dict | None = None,
                 site: str = "local", extra: tuple = (), client: tuple = CLIENT_052, report: bool = False,
                 client_import: bool = False):
        """CLIENT: config arguments of the client profile (0.5.2's unless the test is about the
        client: ``client=()`` keeps the site's). REPORT: draw report.html and its plots at the end
        (9-13 s of this machine's CPU per run; only tests that read the page ask for it).
        CLIENT_IMPORT: the preflight also imports the client's module on ROUTER_HOST (7-14 s of CPU
        here, and the client imports it again seconds later; test_preflight's node check and the
        seed-shaped runs of test_e2e keep it)."""
        self.workdir, self.run_id = workdir, run_id
        self.run_dir = workdir / "results" / run_id
        sets = (*(() if client_import else ("preflight.client_import=false",)), *sets)
        args = ["submit", mode, "--site", site, "--run-id", run_id, "--wait", "--no-collector", *client, *extra,
                *(() if report else ("--no-report",)), *set_args(*sets)]
        wait_cluster_idle()
        self.out_path = workdir / f"{run_id}.submit.out"
        self._out = open(self.out_path, "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "slurm_ab", *args], cwd=workdir, text=True,
                                     stdout=self._out, stderr=subprocess.STDOUT,
                                     env={**slurm_env(), **(env or {})})
        self.t_submit = time.time()
        self.job_id: str | None = None
        self.tracker: Tracker | None = None
        self._snapped = 0.0
        self.rc: int | None = None
        self.end_wall: float | None = None     # when the submit --wait command returned

    # ---- while it runs -----------------------------------------------------------------------
    def tick(self) -> None:
        if self.job_id is None:
            try:
                self.job_id = json.loads(Layout(self.run_dir).manifest.read_text()).get("job_id")
            except (OSError, ValueError):
                pass
            if self.job_id:
                self.tracker = Tracker(str(self.job_id))
        # A snapshot reads every process's stat, cmdline and environ (10-40 ms of CPU): once a
        # second is enough to see every process of a job that lives on (find() takes its own).
        if self.tracker is not None and time.monotonic() - self._snapped >= 1.0:
            self._snapped = time.monotonic()
            self.tracker.snapshot()

    def events(self):
        try:
            return events(self.run_dir)
        except (OSError, IndexError, ValueError):
            return []

    def event(self, name: str, **match):
        for t, k, kv in self.events():
            if k == name and all(kv.get(a) == str(b) for a, b in match.items()):
                return t, kv
        return None

    def wait_for(self, cond, timeout_s: float = 90, what: str = "condition"):
        """Poll cond() (snapshotting processes) until it returns something truthy."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.tick()
            got = cond()
            if got:
                return got
            if self.proc.poll() is not None:
                raise AssertionError(f"{what}: the submit command ended first:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"{what}: not within {timeout_s} s\n{self.output()[-4000:]}")

    def wait_event(self, name: str, timeout_s: float = 90, **match):
        return self.wait_for(lambda: self.event(name, **match), timeout_s, f"event {name} {match}")

    def hosts(self) -> dict[int, list[str]]:
        return {int(kv["replica"]): kv["nodes"].split(",") for _, k, kv in self.events() if k == "hosts"}

    def find(self, needle: str, node: str | None = None) -> list[Proc]:
        """The job's processes whose command line holds NEEDLE (on Slurm node NODE, if given:
        by SLURMD_NODENAME, so only processes that kept their environment)."""
        self.tick()
        procs = self.tracker.snapshot() if self.tracker else []
        return [p for p in procs if needle in p.cmd and (node is None or p.envvar("SLURMD_NODENAME") == node)]

    # ---- at the end --------------------------------------------------------------------------
    def finish(self, timeout_s: float = 180) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            self.tick()
            if time.monotonic() > deadline:
                self.proc.kill()
                if self.job_id:
                    subprocess.run(["scancel", str(self.job_id)])
                raise AssertionError(f"job did not end within {timeout_s} s:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        self.end_wall = time.time()
        self.tick()
        self.rc = self.proc.returncode
        return self.rc

    def output(self) -> str:
        self._out.flush()
        return self.out_path.read_text(errors="replace")

    def sacct(self) -> dict:
        return final_sacct(str(self.job_id))

    def job_end(self) -> float:
        """Epoch of the job script's job_end event (the last thing it does)."""
        ends = [t for t, k, _ in self.events() if k == "job_end"]
        assert ends, "no job_end in the events:\n" + "".join(f.read_text() for f in event_files(self.run_dir))
        return ends[-1]

    def summary(self) -> dict:
        """The record of the job's one pass, as summary.json holds it."""
        (one,) = json.loads(Layout(self.run_dir).summary("json").read_text())["passes"]
        return one

    def launch(self) -> Layout:
        """The layout of the job's (first) launch: its logs, scrapes and pass files."""
        return launch_of(self.run_dir)

    def assert_nothing_left(self, timeout_s: float = 30) -> None:
        assert self.tracker is not None, "job id never known"
        left = self.tracker.wait_gone(timeout_s)
        assert left == [], f"processes of job {self.job_id} still running: {left}"

    def cleanup(self) -> None:
        """After a failed assertion: never leave the job running."""
        if self.proc.poll() is None:
            self.proc.kill()
        if self.job_id:
            subprocess.run(["scancel", str(self.job_id)], capture_output=True)
        self._out.close()


def access_posts(run_dir: Path, path: str = "/v1/completions") -> int:
    """Successful generation requests in the replicas' uvicorn access logs (node rank 0 only)."""
    n = 0
    for f in launch_of(run_dir).head_logs().values():
        n += f.read_text(errors="replace").count(f'"POST {path} HTTP/1.1" 200')
    return n


def launch_of(run_dir: Path) -> Layout:
    """The layout of a job's first launch."""
    run = open_run(run_dir)
    return run.launch_layout(run.campaign.launches[0])


def job_starter(workdir: Path, made: list, *defaults: str):
    """start(name, *sets, **kw) -> Job, with DEFAULTS before the test's own sets; every job is
    appended to MADE for the fixture to clean up."""
    def start(name: str, *sets: str, **kw) -> Job:
        j = Job(workdir, f"{name}-{time.strftime('%H%M%S')}", *defaults, *sets, **kw)
        made.append(j)
        return j
    return start


def measure(scenario: str, seconds: float, verdict_line: str) -> None:
    """A measured time for the tables of docs/failures.md (pytest -rA shows the lines)."""
    print(f"MEASURE {scenario}: {seconds:.1f} s | {verdict_line}")

