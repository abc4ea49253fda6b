"""Helpers for tests that run real jobs on the local cluster."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from slurm_ab.slurm import sacct


def processes_of_job(job_id: str) -> list[tuple[int, str]]:
    """Processes on this machine started by the job: their environment carries its SLURM_JOB_ID
    (the job's own marker; never a broad name match)."""
    marker = f"SLURM_JOB_ID={job_id}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if marker in env and "State:\tZ" not in status and "slurmstepd" not in cmd:
            found.append((int(pid), cmd.strip()))
    return found


def wait_no_processes(job_id: str, timeout_s: float = 30) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = processes_of_job(job_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def final_sacct(job_id: str, timeout_s: float = 20) -> dict:
    """sacct lags the end of a het job by about a second (one merged row first): poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = sacct(job_id)
        if info and f"{job_id}+0" in info["components"] and info["state"] not in ("RUNNING", "PENDING", "COMPLETING"):
            return info
        if time.monotonic() > deadline:
            return info or {}
        time.sleep(0.5)


def slurm_ab(*args: str, cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("SLURM_AB_SITE", None)
    e.pop("RUN_ID", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "slurm_ab", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=e)


def events(run_dir: Path) -> list[tuple[float, str, dict]]:
    out = []
    for line in (run_dir / "events.log").read_text().splitlines():
        parts = line.split()
        kv = dict(p.split("=", 1) for p in parts[4:] if "=" in p)
        out.append((float(parts[0]), parts[3], kv))
    return out
