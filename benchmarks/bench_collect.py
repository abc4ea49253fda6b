#!/usr/bin/env python3
"""Benchmark the collector on large synthetic run directories against `grep -c 'Decode batch'`.

Generates a run directory with SIZE MiB of server logs, times the collection of its one pass
(`collect.collect`; `collect_run` in a tree from before every job was a campaign) in a fresh process (throughput and peak RSS via resource.getrusage), times grep on
the same files, and repeats for a smaller size to show that memory does not grow with log size.

Then, for the passes of a campaign launch, times scan_server_log on the node-0 logs (what
collect reads of these runs) in a fresh process: one window over the traffic, the traffic cut
into WINDOWS passes (10 s apart) scanned in one read, and the same passes scanned one per read
(what collecting pass by pass costs).

Profiles (what fills the server logs):
  realistic  node-rank-0 logs: the benchmark's traffic (one POST access line, two 8K prefill
             chunks and ~3 decode samples per 16K->512 request, as SGLang logs them at
             --decode-log-interval 40) interleaved with the other INFO/WARNING/NCCL output of
             its 8 TP ranks, 1:1 in bytes; node ranks 1-3 (which never log batches) carry only
             the latter. Batch/access lines are then ~1/8 of all bytes.
  dense      all bytes are traffic lines in the two node-0 logs: the worst case for the
             collector (every line must be parsed), the best case for grep.

Usage: python benchmarks/bench_collect.py [--size 1024] [--small 256] [--profile realistic]
                                          [--workers auto|N] [--windows 10] [--dir DIR] [--keep]
                                          [--root TREE]
With --dir, a run directory already generated there (DIR/<profile>-<size>) is used again (with
--keep): --root then times another checkout on the same files (before/after comparisons).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 9, 2, 12, 0, 0)
MiB = 1 << 20


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def traffic_lines(rng: random.Random, t: datetime, spec: bool) -> list[str]:
    """One request's worth of node-0 traffic lines at time t."""
    s = _ts(t)
    acc = (f"accept len: {rng.uniform(2, 6):.2f}, accept rate: {rng.uniform(0.1, 0.4):.2f}, "
           if spec else "")
    out = [f'[{s}] INFO:     10.0.0.{rng.randint(2, 9)}:{rng.randint(30000, 60000)} - '
           f'"POST /generate HTTP/1.1" 200 OK']
    for _ in range(2):
        out.append(f"[{s} TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, "
                   f"#cached-token: 0, token usage: 0.{rng.randint(10, 99)}, "
                   f"#running-req: {rng.randint(0, 8)}, #queue-req: 0, #pending-token: 0, "
                   f"cuda graph: False, input throughput (token/s): {rng.uniform(5e3, 9e3):.2f}")
    for _ in range(3):
        out.append(f"[{s} TP0 EP0] Decode batch, #running-req: {rng.randint(1, 8)}, "
                   f"#token: {rng.randint(1000, 200000)}, token usage: 0.{rng.randint(10, 99)}, "
                   f"{acc}cuda graph: True, gen throughput (token/s): "
                   f"{rng.uniform(10, 900):.2f}, #queue-req: 0")
    return out


def other_lines(rng: random.Random, t: datetime, rank: int) -> list[str]:
    s = _ts(t)
    tp = rank * 8 + rng.randint(0, 7)
    pick = rng.random()
    if pick < 0.5:
        return [f"node{rank}:{1000 + tp}:{2000 + tp} [{tp % 8}] NCCL INFO Channel "
                f"{rng.randint(0, 23):02d}/24 : {tp}[{tp % 8}] -> {(tp + 1) % 32}[{(tp + 1) % 8}]"
                f" via P2P/CUMEM/read"]
    if pick < 0.8:
        return [f"[{s} TP{tp} EP{tp}] Memory pool end. avail mem={rng.uniform(5, 90):.2f} GB, "
                f"cache hit rate {rng.random():.3f}, flushing {rng.randint(0, 99)} entries"]
    return [f"[{s} TP{tp} EP{tp}] WARNING: a very long warning message about the environment "
            f"variable SGLANG_SOME_SETTING={rng.randint(0, 9)} being deprecated; "
            f"please migrate to --some-setting (seen {rng.randint(1, 999)} times)"]


def generate(run: Path, size_mb: int, profile: str, spec: bool = True) -> dict:
    """Write a run dir whose server logs total ~size_mb MiB; return the window. The layout is
    the one from before launch directories (one pass in the run directory itself: the collector
    reads it through rundir.OldRunLayout), so that every tree --root names collects the same files."""
    logs = run / "logs"
    logs.mkdir(parents=True)
    rng = random.Random(1)
    total = size_mb * MiB
    if profile == "dense":
        share = {(g, r): (0.5 if r == 0 else 0.0) for g in range(2) for r in range(4)}
        traffic_frac = 1.0
    else:
        share = {(g, r): 1 / 8 for g in range(2) for r in range(4)}
        traffic_frac = 0.5
    bench_start = T0 + timedelta(seconds=600)
    duration = 4 * 3600
    for (g, r), frac in share.items():
        path = logs / f"server-r{g}-n{r}.log"
        target = int(total * frac)
        with open(path, "w", buffering=1 << 22) as f:
            f.write(f"[{_ts(T0)}] server_args=ServerArgs(mem_fraction_static=0.83, node_rank={r})\n")
            if r == 0:
                f.write(f"[{_ts(T0 + timedelta(seconds=300))}] The server is fired up and "
                        "ready to roll!\n")
                f.writelines(x + "\n" for x in traffic_lines(rng, bench_start - timedelta(
                    seconds=60), False)[:3])              # warm-up: POST + two 8K chunks
            written = 0
            # templates are generated per simulated second and written until the share is met
            sec = 0
            while written < target:
                t = bench_start + timedelta(seconds=sec % duration)
                chunk: list[str] = []
                if r == 0 and traffic_frac > 0:
                    chunk += traffic_lines(rng, t, spec)
                if traffic_frac < 1.0 or r != 0:
                    goal = sum(len(x) + 1 for x in chunk) * (1 - traffic_frac) / max(
                        traffic_frac, 1e-9) if r == 0 else 2000
                    n = 0
                    while n < goal:
                        for x in other_lines(rng, t, r):
                            chunk.append(x)
                            n += len(x) + 1
                text = "\n".join(chunk) + "\n"
                # repeat the second's block a few times to keep generation cheap
                block = text * 8
                f.write(block)
                written += len(block)
                sec += 1
    bench_end = bench_start + timedelta(seconds=duration + 1)

    def ev(t: datetime, text: str) -> str:
        return f"{t.timestamp():.3f} {t.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} {text}\n"
    w = bench_start - timedelta(seconds=61)
    (run / "events.log").write_text(
        ev(T0, "job_start job_id=1 run_id=bench mode=tp32-dflash")
        + "".join(ev(w, f"warmup_start replica={g}") + ev(w + timedelta(seconds=3),
                  f"warmup_done replica={g} ok=1 http=200 prompt_tokens=16384") for g in range(2))
        + ev(bench_start, "bench_start") + ev(bench_end, "bench_end rc=0")
        + ev(bench_end, "job_end rc=0"))
    rec = {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
           "max_concurrency": 8, "duration": float(duration), "completed": 4,
           "total_input_tokens": 4 * 16384, "total_output_tokens": 4 * 512,
           "ttfts": [1.0] * 4, "itls": [[0.05] * 511] * 4, "output_lens": [512] * 4,
           "errors": [""] * 4}
    (run / "bench.jsonl").write_text(json.dumps(rec) + "\n")
    return {"bench_start": str(bench_start), "bench_end": str(bench_end)}


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
try:
    from slurm_ab.collect import collect

    def collect_run(run_dir, **kw):           # the job's one pass
        (one,) = collect(run_dir, **kw).passes
        return one
except ImportError:                           # a tree from before every job was a campaign
    from slurm_ab.collect import collect_run
workers = None if sys.argv[3] == "auto" else int(sys.argv[3])
s = collect_run(sys.argv[2], sacct={"state": "COMPLETED"}, workers=workers)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "verdict": s.verdict, "samples": s.accept.samples,
                  "rss_self_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "rss_children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


SCAN_CHILD = r"""
import inspect, json, sys, time
from datetime import datetime, timedelta
sys.path.insert(0, sys.argv[1])
from slurm_ab.parse.server_scan import Interval, scan_server_log
n, start, end = int(sys.argv[2]), datetime.fromisoformat(sys.argv[3]), \
    datetime.fromisoformat(sys.argv[4])
modes, repeats, files = sys.argv[5].split(","), int(sys.argv[6]), sys.argv[7:]
step = (end - start) / n
passes = [Interval(f"pass{k}", start + step * k + timedelta(seconds=10 if k else 0),
                   start + step * (k + 1)) for k in range(n)]
if "windows" not in inspect.signature(scan_server_log).parameters:
    modes = [m for m in modes if m != "multi"]            # a tree from before windows=


def samples(mode, f):
    if mode == "none":                                    # start-up and imports only
        return 0
    if mode == "one":
        return scan_server_log(f, window=(start, end)).primary_stream().samples
    if mode == "multi":
        s = scan_server_log(f, windows=passes)
        return sum(w.primary_stream().samples for w in s.windows.values())
    return sum(scan_server_log(f, window=(w.start, w.end)).primary_stream().samples
               for w in passes)


out = {}
for mode in modes:
    runs = []
    for _ in range(repeats if mode != "each" else 1):
        t0 = time.perf_counter()
        got = sum(samples(mode, f) for f in files)
        runs.append(time.perf_counter() - t0)
    out[mode] = {"seconds": min(runs), "samples": got}
print(json.dumps(out))
"""
_STAMP = re.compile(rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^]]*\] Decode batch")
VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]


def child(args: list[str], instructions: bool = False) -> tuple[str, int | None]:
    """stdout of a fresh Python running args, and with instructions=True the number of
    instructions it executed (valgrind's count: the same on a busy machine, unlike times)."""
    cmd = [*VALGRIND, sys.executable, *args] if instructions else [sys.executable, *args]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr) if instructions else None
    return p.stdout, int(m.group(1).replace(",", "")) if m else None


def traffic_span(log: Path) -> tuple[str, str]:
    """First and last decode-batch stamps of a node-0 log (its head and tail)."""
    with open(log, "rb") as f:
        head = f.read(1 << 20)
        f.seek(max(0, log.stat().st_size - (1 << 20)))
        tail = f.read()
    return _STAMP.findall(head)[0].decode(), _STAMP.findall(tail)[-1].decode()


def measure_windows(run: Path, windows: int, root: Path = ROOT, instructions: bool = False
                    ) -> dict:
    """scan_server_log over the node-0 logs: one window, `windows` passes in one read (if the
    tree has it), the passes one per read; with instructions, counts of one and multi."""
    files = sorted((run / "logs").glob("server-r*-n0.log"))
    start, end = traffic_span(files[0])
    args = ["-c", SCAN_CHILD, str(root), str(windows), start, end]
    res = json.loads(child([*args, "one,multi,each", "2", *map(str, files)])[0])
    res["mib"] = sum(p.stat().st_size for p in files) / MiB
    if instructions:                     # net of the child's start-up and imports
        base = child([*args, "none", "1", *map(str, files)], True)[1]
        for mode in ("one", "multi"):
            if mode in res:
                res[mode]["instructions"] = \
                    child([*args, mode, "1", *map(str, files)], True)[1] - base
    return res


def measure(run: Path, workers: str, root: Path = ROOT, instructions: bool = False) -> dict:
    files = sorted((run / "logs").glob("server-*.log"))
    size = sum(p.stat().st_size for p in files)
    for p in files:                                       # warm the page cache for both tools
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    grep_s = []
    for _ in range(3):
        t0 = time.perf_counter()
        # stdout must not be /dev/null: GNU grep then stops at the first match
        subprocess.run(["grep", "-c", "Decode batch", *map(str, files)], check=False,
                       stdout=subprocess.PIPE, env={**os.environ, "LC_ALL": "C"})
        grep_s.append(time.perf_counter() - t0)
    runs = [json.loads(child(["-c", CHILD, str(root), str(run), workers])[0]) for _ in range(2)]
    best = min(runs, key=lambda r: r["seconds"])
    g = min(grep_s)
    return {"mib": size / MiB, "grep_s": g, "grep_mb_s": size / MiB / g,
            "collect_s": best["seconds"], "collect_mb_s": size / MiB / best["seconds"],
            "ratio": g / best["seconds"], "rss_mib": best["rss_self_kb"] / 1024,
            "rss_children_mib": best["rss_children_kb"] / 1024, "verdict": best["verdict"],
            "samples": best["samples"],
            "instructions": child(["-c", CHILD, str(root), str(run), "1"], True)[1]
            if instructions else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="MiB of server logs (default 1024)")
    ap.add_argument("--small", type=int, default=256, help="smaller size for the RSS check")
    ap.add_argument("--profile", choices=("realistic", "dense"), default="realistic")
    ap.add_argument("--workers", default="auto", help="'auto' or a number of processes")
    ap.add_argument("--windows", type=int, default=10,
                    help="passes of the multi-window scan (0: skip the scan figures)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="where to generate (default: tmp); run dirs found there are used again")
    ap.add_argument("--keep", action="store_true", help="keep the generated run dirs")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the slurm_ab checkout to time (default: this one)")
    ap.add_argument("--instructions", action="store_true",
                    help="also count the instructions of collect (1 worker) and of the scans "
                         "under valgrind: slow, but the same on a busy machine")
    args = ap.parse_args()
    root = args.root.resolve()
    base = args.dir if args.dir and args.keep else \
        Path(tempfile.mkdtemp(prefix="bench-collect-", dir=args.dir))
    print(f"profile={args.profile} workers={args.workers} cpus={os.cpu_count()} "
          f"python={sys.version.split()[0]} root={root}")
    try:
        for size in (args.small, args.size):
            run = base / f"{args.profile}-{size}"
            t0 = time.perf_counter()
            if not (run / "events.log").exists():
                generate(run, size, args.profile)
            gen = time.perf_counter() - t0
            m = measure(run, args.workers, root, args.instructions)
            print(f"{m['mib']:7.0f} MiB  grep {m['grep_s']:6.2f}s {m['grep_mb_s']:7.0f} MB/s | "
                  f"collect {m['collect_s']:6.2f}s {m['collect_mb_s']:6.0f} MB/s "
                  f"= {m['ratio']:.2f} x grep | peak RSS {m['rss_mib']:.0f} MiB (+ workers "
                  f"{m['rss_children_mib']:.0f} MiB) | verdict {m['verdict']}, "
                  f"{m['samples']} samples | generated in {gen:.0f}s"
                  + (f" | {m['instructions'] / 1e9:.2f} G instructions (1 worker)"
                     if m["instructions"] else ""), flush=True)
            if args.windows and args.profile == "realistic":
                w = measure_windows(run, args.windows, root, args.instructions)
                print(windows_line(w, args.windows), flush=True)
            elif args.windows:
                print("         (dense logs wrap around their 4-hour window, so they are not "
                      "cut into passes)")
            if not args.keep:
                shutil.rmtree(run)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def windows_line(w: dict, n: int) -> str:
    one = w["one"]["seconds"]

    def fig(mode: str, label: str) -> str:
        if mode not in w:
            return f"{label}: n/a in this tree"
        s = w[mode]["seconds"]
        return f"{label} {s:6.2f}s {w['mib'] / s:5.0f} MB/s ({s / one:.2f} x one)"
    ins = " | instructions (net of start-up) one {:.2f} G, {} windows {}".format(
        w["one"]["instructions"] / 1e9, n, f"{w['multi']['instructions'] / 1e9:.2f} G "
        f"({w['multi']['instructions'] / w['one']['instructions']:.2f} x one)"
        if "multi" in w else "n/a") if "instructions" in w["one"] else ""
    return (f"         scan of the node-0 logs ({w['mib']:.0f} MiB): one window {one:6.2f}s "
            f"{w['mib'] / one:5.0f} MB/s | {fig('multi', f'{n} windows in one read')} | "
            f"{fig('each', f'{n} windows one per read')} | decode samples "
            f"{w['one']['samples']} / {w.get('multi', {}).get('samples', '-')} / "
            f"{w['each']['samples']}{ins}")


if __name__ == "__main__":
    sys.exit(main())
