"""A stand-in for ``nvidia-smi --query-gpu=...`` on the GPU-less local nodes.

Two uses: the preflight counts the GPUs a node shows (site setting ``preflight.gpu_command``:
``--query-gpu=name,driver_version --format=csv,noheader``), and a telemetry sampler polls power,
clocks, utilisation, memory, temperature and clock-event (throttle) reasons in query mode, once or
looping (``-lms 500`` / ``--loop-ms=500``, ``-l 1`` / ``--loop=1``), as the real tool prints them
(shared/research/gpu-telemetry.md, an H200 with driver 580): a header row of the fields' header
names (``clocks.sm`` comes back as ``clocks.current.sm [MHz]``) unless ``noheader``; units
(``79.80 W``, ``345 MHz``, ``0 %``, ``0 MiB``; temperatures bare) unless ``nounits``; the reasons a
64-bit hex mask (0x1 = idle) and the per-reason fields ``Active`` / ``Not Active``;
``clocks_throttle_reasons.*`` accepted for ``clocks_event_reasons.*``; ``timestamp`` as
``YYYY/MM/DD HH:MM:SS.mmm`` local time; an unknown field: ``Field "X" is not a valid field to
query.`` and exit 2 (``total_energy_consumption`` too, as on that driver).

Values are scripted from the node's emulated activity (gpu_activity.py, written by the emulator)
with the constants of ``fake_gpus.toml``: a sample's utilisation is the busy share of the window
before it (since the sampler's previous sample, at most ``avg_window_s``), its power
``idle + (busy - idle) x utilisation``, so energy is exactly computable
(``gpu_activity.expected_energy_j``); clocks, temperature and memory follow the same share and the
server's memory plan.

``SLURM_AB_FAKE_GPUS``            GPUs to report (default 8)
``SLURM_AB_FAKE_GPU_NODES``       comma list of Slurm node names (``SLURMD_NODENAME``): report
                                  ``SLURM_AB_FAKE_GPUS`` only there, 8 elsewhere (one bad node)
``SLURM_AB_FAKE_GPU_FAIL``        exit with this status and nvidia-smi's driver error instead
``SLURM_AB_FAKE_GPU_FAULT``       ``throttle`` (lower SM clock, reason bits, lower busy power) and/or
                                  ``gap[=S]`` (a looping sampler stalls once for S s, default 4)
``SLURM_AB_FAKE_GPU_FAULT_NODES`` comma list of node names the fault applies to (default: all)
``SLURM_AB_EMU_GPU_STATE_DIR``    where the emulator writes the activity files (gpu_activity.py)
"""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .gpu_activity import Activity, ActivityReader, GpuFault, activity_path, load_config, parse_fault, power_w

DEFAULT = 8
REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
               "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
               "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100}


def count(env=os.environ) -> int:
    only = [n.strip() for n in env.get("SLURM_AB_FAKE_GPU_NODES", "").split(",") if n.strip()]
    if only and env.get("SLURMD_NODENAME", "") not in only:
        return DEFAULT
    return int(env.get("SLURM_AB_FAKE_GPUS", DEFAULT))


@dataclass(frozen=True)
class Sample:
    """One GPU's reading at time t, the busy share u of the window before it."""
    index: int
    t: float
    u: float
    busy_now: bool
    act: Activity
    fault: GpuFault
    cfg: dict

    def sm_clock(self) -> int:
        g, th = self.cfg["gpu"], self.cfg["throttle"]
        if self.u <= 0:
            return g["sm_clock_idle_mhz"]
        return th["sm_clock_busy_mhz"] if self.fault.throttle else g["sm_clock_busy_mhz"]

    def temp(self, idle_key: str, busy_key: str) -> int:
        g = self.cfg["gpu"]
        busy = self.cfg["throttle"]["temp_busy_c"] if self.fault.throttle and busy_key == "temp_busy_c" else g[busy_key]
        return int(round(g[idle_key] + (busy - g[idle_key]) * self.u))

    def reasons(self) -> int:
        bits = REASON_BITS["gpu_idle"] if self.u <= 0 else 0
        return bits | (int(self.cfg["throttle"]["reasons"]) if self.fault.throttle else 0)


def _w(v: float) -> tuple[str, str]:
    return f"{v:.2f} W", f"{v:.2f}"


def _unit(v: int, unit: str) -> tuple[str, str]:
    return f"{v} {unit}", str(v)


def _same(v) -> tuple[str, str]:
    return str(v), str(v)


def _reason(name: str) -> Callable[[Sample], tuple[str, str]]:
    return lambda s: _same("Active" if s.reasons() & REASON_BITS[name] else "Not Active")


# query name -> (header, value of a sample as (with units, without units))
FIELDS: dict[str, tuple[str, Callable[[Sample], tuple[str, str]]]] = {
    "timestamp": ("timestamp", lambda s: _same(time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(s.t))
                                               + f".{int(s.t * 1000) % 1000:03d}")),
    "index": ("index", lambda s: _same(s.index)),
    "name": ("name", lambda s: _same(s.cfg["gpu"]["name"])),
    "uuid": ("uuid", lambda s: _same(f"GPU-00000000-0000-0000-0000-{s.index:012d}")),
    "pci.bus_id": ("pci.bus_id", lambda s: _same(f"00000000:{0x18 + 0x10 * s.index:02X}:00.0")),
    "driver_version": ("driver_version", lambda s: _same(s.cfg["gpu"]["driver_version"])),
    "pstate": ("pstate", lambda s: _same("P0")),
    "power.draw": ("power.draw [W]", lambda s: _w(power_w(s.u, s.fault, s.cfg))),
    "power.draw.average": ("power.draw.average [W]", lambda s: _w(power_w(s.u, s.fault, s.cfg))),
    "power.draw.instant": ("power.draw.instant [W]", lambda s: _w(power_w(1.0 if s.busy_now else 0.0, s.fault, s.cfg))),
    "power.limit": ("power.limit [W]", lambda s: _w(s.cfg["gpu"]["power_limit_w"])),
    "enforced.power.limit": ("enforced.power.limit [W]", lambda s: _w(s.cfg["gpu"]["power_limit_w"])),
    "clocks.sm": ("clocks.current.sm [MHz]", lambda s: _unit(s.sm_clock(), "MHz")),
    "clocks.current.sm": ("clocks.current.sm [MHz]", lambda s: _unit(s.sm_clock(), "MHz")),
    "clocks.mem": ("clocks.current.memory [MHz]", lambda s: _unit(s.cfg["gpu"]["mem_clock_mhz"], "MHz")),
    "clocks.current.memory": ("clocks.current.memory [MHz]", lambda s: _unit(s.cfg["gpu"]["mem_clock_mhz"], "MHz")),
    "clocks.max.sm": ("clocks.max.sm [MHz]", lambda s: _unit(s.cfg["gpu"]["sm_clock_max_mhz"], "MHz")),
    "utilization.gpu": ("utilization.gpu [%]", lambda s: _unit(int(round(100 * s.u)), "%")),
    "utilization.memory": ("utilization.memory [%]",
                           lambda s: _unit(int(round(s.cfg["gpu"]["memory_util_busy_pct"] * s.u)), "%")),
    "memory.used": ("memory.used [MiB]", lambda s: _unit(s.act.memory_used_mib if s.act.up else 0, "MiB")),
    "memory.total": ("memory.total [MiB]", lambda s: _unit(s.cfg["gpu"]["memory_total_mib"], "MiB")),
    "temperature.gpu": ("temperature.gpu", lambda s: _same(s.temp("temp_idle_c", "temp_busy_c"))),
    "temperature.memory": ("temperature.memory", lambda s: _same(s.temp("mem_temp_idle_c", "mem_temp_busy_c"))),
    "clocks_event_reasons.active": ("clocks_event_reasons.active", lambda s: _same(f"0x{s.reasons():016x}")),
    **{f"clocks_event_reasons.{r}": (f"clocks_event_reasons.{r}", _reason(r)) for r in REASON_BITS},
}
for _k in [k for k in FIELDS if k.startswith("clocks_event_reasons.")]:
    FIELDS["clocks_throttle_reasons." + _k.split(".", 1)[1]] = FIELDS[_k]


@dataclass(frozen=True)
class Query:
    fields: tuple[str, ...]
    header: bool = True
    units: bool = True
    loop_s: Optional[float] = None
    ids: Optional[tuple[int, ...]] = None


def parse_args(argv: list[str]) -> Query:
    """nvidia-smi's query-mode options: --query-gpu, --format, -lms/--loop-ms, -l/--loop, -i/--id."""
    opts: dict[str, str] = {}
    it = iter(argv)
    for a in it:
        name, eq, value = a.partition("=")
        if name in ("--query-gpu", "--format", "--loop-ms", "-lms", "--loop", "-l", "-i", "--id"):
            opts[name] = value if eq else next(it, "")
        else:
            raise ValueError(a)
    query = opts.get("--query-gpu", "name,driver_version")
    fmt = [x.strip() for x in opts.get("--format", "csv,noheader").split(",")]
    loop = None
    if "-lms" in opts or "--loop-ms" in opts:
        loop = float(opts.get("-lms") or opts.get("--loop-ms")) / 1000.0
    elif "-l" in opts or "--loop" in opts:
        loop = float(opts.get("-l") or opts.get("--loop") or 5)
    ids = opts.get("-i") or opts.get("--id")
    return Query(tuple(f.strip() for f in query.split(",") if f.strip()), "noheader" not in fmt,
                 "nounits" not in fmt, loop, tuple(int(x) for x in ids.split(",")) if ids else None)


def rows(q: Query, t: float, window: float, act: Activity, fault: GpuFault, cfg: dict, gpus: int) -> list[str]:
    u = act.busy_seconds(t - window, t) / window if window > 0 else (1.0 if act.busy_at(t) else 0.0)
    u = min(1.0, max(0.0, u))
    out = []
    for i in (q.ids if q.ids is not None else range(gpus)):
        s = Sample(i, t, u, act.busy_at(t), act, fault, cfg)
        out.append(", ".join(FIELDS[f][1](s)[0 if q.units else 1] for f in q.fields))
    return out


def header(q: Query) -> str:
    return ", ".join(FIELDS[f][0] for f in q.fields)


def main(argv: list[str]) -> int:
    fail = os.environ.get("SLURM_AB_FAKE_GPU_FAIL")
    if fail:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")
        return int(fail)
    try:
        q = parse_args(argv)
    except ValueError:
        print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
        return 2
    bad = [f for f in q.fields if f not in FIELDS]
    if bad:
        print(f'Field "{bad[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    cfg = load_config()
    try:
        fault = parse_fault(os.environ, cfg)
    except ValueError as e:
        print(f"fake_gpus: {e}", file=sys.stderr)
        return 2
    gpus = count()
    reader = ActivityReader(activity_path())
    avg = float(cfg["gpu"]["avg_window_s"])
    if q.header:
        print(header(q))
    if q.loop_s is None:
        t = time.time()
        print("\n".join(rows(q, t, avg, reader.refresh(), fault, cfg, gpus)))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return _loop(q, reader, fault, cfg, gpus, avg)


def _loop(q: Query, reader: ActivityReader, fault: GpuFault, cfg: dict, gpus: int, avg: float) -> int:
    """One row per GPU every loop interval until killed; the gap fault stalls once."""
    start = base = time.time()
    prev = start - avg
    gap_done = fault.gap_s is None
    k = 0
    try:
        while True:
            now = time.time()
            act = reader.refresh()
            if not gap_done and act.busy_seconds(start, now) >= float(cfg["gap"]["after_busy_s"]):
                gap_done = True
                time.sleep(fault.gap_s)
                now = base = time.time()            # then on from here, no burst of catch-up rows
                k = 0
                act = reader.refresh()
            sys.stdout.write("\n".join(rows(q, now, min(now - prev, avg), act, fault, cfg, gpus)) + "\n")
            sys.stdout.flush()
            prev = now
            k += 1
            time.sleep(max(0.0, base + k * q.loop_s - time.time()))
    except (KeyboardInterrupt, BrokenPipeError):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
