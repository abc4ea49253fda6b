"""Helpers for tests that run real jobs on the local cluster."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ab.model.slurm import is_active, sacct


def processes_of_job(job_id: str) -> list[tuple[int, str]]:
    """Processes on this machine started by the job: their environment carries its SLURM_JOB_ID
    (the job's own marker; never a broad name match)."""
    marker = f"SLURM_JOB_ID={job_id}".encode()
    return [(p.pid, p.cmd) for p in all_procs().values() if marker in p.env and "slurmstepd" not in p.cmd]


def wait_no_processes(job_id: str, timeout_s: float = 30) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = processes_of_job(job_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def final_sacct(job_id: str, timeout_s: float = 20) -> dict:
    """sacct lags the end of a het job by about a second (one merged row first), and a step's end
    can reach slurmdbd after its component's (CI saw ID+0 COMPLETED beside ID+0.batch RUNNING):
    poll until every component and step has ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = sacct(job_id)
        if info and f"{job_id}+0" in info["components"] and not any(is_active(r["state"]) for r in (
                info, *info["components"].values(), *info["steps"])):
            return info
        if time.monotonic() > deadline:
            return info or {}
        time.sleep(0.5)


def slurm_env() -> dict:
    """This environment without the user's own slurm-ab defaults (site, run id)."""
    e = dict(os.environ)
    e.pop("SLURM_AB_SITE", None)
    e.pop("RUN_ID", None)
    return e


def slurm_ab(*args: str, cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_ab", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**slurm_env(), **(env or {})})


def event_files(run_dir: Path) -> list[Path]:
    """The job's events file and each of its launches' (rundir.open_run: the manifest's campaign,
    or what the job recorded)."""
    from slurm_ab.model.rundir import open_run

    run = open_run(run_dir)
    files = [run.layout.events] + [run.launch_layout(la).events for la in run.campaign.launches]
    return [f for f in dict.fromkeys(files) if f.is_file()]


def events(run_dir: Path) -> list[tuple[float, str, dict]]:
    """Every event of a job, its own and its launches', in time order (a job of one launch reads as
    the one log a run had before launch directories)."""
    out = []
    for f in event_files(run_dir):
        for line in f.read_text().splitlines():
            parts = line.split()
            if len(parts) < 4 or not re.fullmatch(r"\d+\.\d+", parts[0]):
                continue                          # a torn line: parse/events.py counts it as bad
            kv = dict(p.split("=", 1) for p in parts[4:] if "=" in p)
            out.append((float(parts[0]), parts[3], kv))
    return sorted(out, key=lambda e: e[0])


# ---- tracking every process of a job, including those that rename themselves ----------------
# processes_of_job finds a job's processes by the SLURM_JOB_ID marker in their environment.
# Programs that rename themselves (setproctitle: sglang-router shows up as ``sglang::router``)
# overwrite that environment block, so the marker alone misses them. A Tracker also takes the
# descendants of the job's own ``slurmstepd: [<component id>.<step>]`` daemons at each snapshot,
# and remembers each process as (pid, start time): leftovers() says which of them still run.

_STEPD = re.compile(r"^slurmstepd: \[(\d+)[.\]]")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int          # clock ticks since boot: (pid, start) never names two processes
    cmd: str
    env: tuple[bytes, ...]

    def envvar(self, name: str) -> str | None:
        prefix = f"{name}=".encode()
        for e in self.env:
            if e.startswith(prefix):
                return e[len(prefix):].decode(errors="replace")
        return None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# (pid, start, cmdline) -> environment: a process's environment block is read once per command
# line it shows (an exec, or a rename that overwrites the block, changes it and the block is read
# again), not at every snapshot (a third of a snapshot's CPU).
_ENV: dict[tuple[int, int, bytes], tuple[bytes, ...]] = {}


def all_procs() -> dict[int, Proc]:
    global _ENV
    out, envs = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = _read(f"/proc/{d}/stat")
            raw = _read(f"/proc/{d}/cmdline")
        except OSError:
            continue
        rest = stat[stat.rindex(b")") + 2:].split()
        if rest[0] == b"Z":
            continue
        key = (int(d), int(rest[19]), raw)
        env = _ENV.get(key)
        if env is None:
            try:
                env = tuple(_read(f"/proc/{d}/environ").split(b"\0"))
            except OSError:
                env = ()
        envs[key] = env
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        out[int(d)] = Proc(int(d), int(rest[1]), key[1], cmd, env)
    _ENV = envs                   # the processes of this snapshot only
    return out


def alive(pid: int, start: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    rest = stat[stat.rindex(")") + 2:].split()
    return rest[0] != "Z" and int(rest[19]) == start


def component_ids(job_id: str) -> set[str]:
    """Job ids of a het job's components (the leader's id, +1, ...), from squeue while known."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%A"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    ids = {line.strip() for line in out.splitlines() if line.strip().isdigit()}
    return ids | {job_id}


@dataclass
class Tracker:
    """Every process of one job seen in any snapshot."""

    job_id: str
    comps: set = field(default_factory=set)
    seen: dict = field(default_factory=dict)      # (pid, start) -> cmd

    def snapshot(self) -> list[Proc]:
        if len(self.comps) < 2:
            self.comps |= component_ids(self.job_id)
        procs = all_procs()
        marker = f"SLURM_JOB_ID={self.job_id}".encode()
        mine = {p.pid for p in procs.values() if marker in p.env and not p.cmd.startswith("slurmstepd")}
        stepds = {p.pid for p in procs.values() if (m := _STEPD.match(p.cmd)) and m.group(1) in self.comps}
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        todo = list(stepds)
        while todo:
            for c in children.get(todo.pop(), []):
                if c not in mine and not procs[c].cmd.startswith("slurmstepd"):
                    mine.add(c)
                    todo.append(c)
        for pid in mine:
            self.seen.setdefault((pid, procs[pid].start), procs[pid].cmd)
        return [procs[p] for p in mine]

    def leftovers(self) -> list[tuple[int, str]]:
        left = [(pid, cmd) for (pid, start), cmd in self.seen.items() if alive(pid, start)]
        left += [x for x in processes_of_job(self.job_id) if x not in left]
        return left

    def wait_gone(self, timeout_s: float = 30) -> list[tuple[int, str]]:
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.leftovers()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)




def run_tracked(args: list[str], cwd: Path, timeout: float = 600) -> tuple[subprocess.CompletedProcess, "Tracker | None"]:
    """Run `slurm-ab submit ... --wait`, snapshotting the job's processes every 0.5 s while it runs."""
    p = subprocess.Popen([sys.executable, "-m", "slurm_ab", *args], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=slurm_env())
    out: list[str] = []
    err: list[str] = []
    threads = [threading.Thread(target=lambda s=s, b=b: b.extend(s), daemon=True) for s, b in ((p.stdout, out), (p.stderr, err))]
    for t in threads:
        t.start()
    tracker = None
    deadline = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < deadline:
        if tracker is None:
            m = re.search(r"submitted job (\d+)", "".join(out))
            if m:
                tracker = Tracker(m.group(1))
        if tracker is not None:
            tracker.snapshot()
        time.sleep(0.5)
    if p.poll() is None:
        p.kill()
    p.wait()
    for t in threads:
        t.join(5)
    return subprocess.CompletedProcess(p.args, p.returncode, "".join(out), "".join(err)), tracker
