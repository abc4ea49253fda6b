#!/usr/bin/env python3
"""Where a command's CPU goes (`make test` by default), by kind of process.

The test suite's time on a 2-core machine is CPU (benchmarks/README.md): this says whose. Linux
BSD process accounting (acct(5), `accton` from Debian's `acct` package; root) records every process's user
+ system time when it exits, jobs' processes on the local cluster's nodes included (the nodes are
network namespaces, not PID namespaces). Its records name a process by its last `comm` only
("python3"), so a sampler reads /proc/<pid>/cmdline of every new process every 0.3 s and a record
takes the command line its pid had while it ran. Processes shorter than a sample are counted by
their comm; accounting rounds each process's time down to 10 ms, so the total is below the
machine's busy time (printed beside it, from /proc/stat).

Usage: sudo python3 benchmarks/suite_cpu.py [--out DIR] [-- COMMAND ...]   (default: make test)
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HZ = 100.0      # acct(5): times in AHZ units
# First match wins: (kind, what the command line contains).
KINDS = (
    ("emulator (SGLang stand-in)", "slurm_ab_testbed.emulator"),
    ("preflight stand-ins (fake_gpus, fake_ib)", "slurm_ab_testbed.fake_"),
    ("router", "sglang_router"),
    ("router (smg)", " smg"),
    ("client: SGLang 0.5.2 (its venv)", "sglang-0.5.2"),
    ("client: SGLang 0.5.23 (steady_state_serving)", "steady_state_serving"),
    ("client: sglang.bench_serving", "sglang.bench_serving"),
    ("preflight module imports", "importlib.metadata as md"),
    ("submitit batch step", "submitit.core._submit"),
    ("slurm-ab CLI", "-m slurm_ab "),
    ("slurm-ab CLI", "bin/slurm-ab "),
    ("pytest", "pytest"),
    ("pytest-xdist worker", "execnet"),
    ("pytest-xdist worker", "exec(eval(sys.stdin"),
    ("browser (chromium)", "chrom"),
)
# Processes known by their comm: their command lines (paths of run directories) say nothing.
BY_COMM = {"bash", "sh", "curl", "slurm_script", "slurmstepd", "slurmd", "slurmctld", "slurmdbd",
           "srun", "sbatch", "sacct", "squeue", "scancel", "sinfo", "scontrol", "sleep", "date",
           "cat", "grep", "awk", "sed", "tr", "ip", "tc", "shellcheck", "mariadbd", "munged"}


def sample(path: Path, stop: threading.Event) -> None:
    """Write (time, pid, cmdline) of each pid when first seen, every 0.3 s."""
    seen: set[str] = set()
    with path.open("w") as out:
        while not stop.is_set():
            now = {d for d in os.listdir("/proc") if d.isdigit()}
            t = time.time()
            for d in now - seen:
                try:
                    cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                out.write(json.dumps([round(t, 2), int(d), cmd[:300]]) + "\n")
            seen = now
            out.flush()
            stop.wait(0.3)


def busy_ticks() -> int:
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return sum(int(f[i]) for i in (0, 1, 2, 5, 6, 7))       # user nice system irq softirq steal


def kind(comm: str, cmd: str | None) -> str:
    if cmd is None or comm in BY_COMM:
        return comm
    for name, needle in KINDS:
        if needle in cmd:
            return name
    return comm if not comm.startswith("python") else "python: " + " ".join(cmd.split()[:3])[:60]


def attribute(pacct: Path, samples: Path) -> tuple[collections.Counter, collections.Counter]:
    seen = collections.defaultdict(list)
    for line in samples.read_text().splitlines():
        t, pid, cmd = json.loads(line)
        seen[pid].append((t, cmd))
    dump = subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True, check=True).stdout
    cpu, count = collections.Counter(), collections.Counter()
    for line in dump.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 13:
            continue
        comm, seconds, elapsed, pid = f[0], (float(f[2]) + float(f[3])) / HZ, float(f[4]) / HZ, int(f[9])
        begin = datetime.datetime.strptime(f[-1], "%a %b %d %H:%M:%S %Y").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        # the pid's command line while this process ran (pids are reused; begin is to the second)
        cmd = next((c for t, c in seen.get(pid, ()) if begin - 1.5 <= t <= begin + elapsed + 1.5), None)
        k = kind(comm, cmd)
        cpu[k] += seconds
        count[k] += 1
    return cpu, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("build/suite-cpu"))
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("command", nargs="*", default=["make", "test"])
    a = ap.parse_args()
    for tool in ("accton", "dump-acct"):
        if not shutil.which(tool):
            sys.exit(f"suite_cpu: {tool} is missing: apt-get install acct (BSD process accounting)")
    a.out.mkdir(parents=True, exist_ok=True)
    pacct, samples = a.out / "pacct", a.out / "cmdlines.jsonl"
    pacct.write_bytes(b"")
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(samples, stop), daemon=True)
    sampler.start()
    subprocess.run(["accton", str(pacct.resolve())], check=True, capture_output=True)
    b0, t0 = busy_ticks(), time.monotonic()
    try:
        rc = subprocess.run(a.command).returncode
    finally:
        subprocess.run(["accton", "off"], capture_output=True)
        stop.set()
        sampler.join()
    busy, wall = (busy_ticks() - b0) / os.sysconf("SC_CLK_TCK"), time.monotonic() - t0
    cpu, count = attribute(pacct, samples)
    total = sum(cpu.values())
    print(f"\nsuite_cpu: {' '.join(a.command)}: rc {rc}, {wall:.0f} s wall, {busy:.0f} busy CPU-s "
          f"(machine), {total:.0f} CPU-s in {sum(count.values())} processes' accounting records")
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>7}  kind")
    for k, v in cpu.most_common(a.top):
        print(f"{v:8.1f} {100 * v / total:5.1f}% {count[k]:7d}  {k}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
