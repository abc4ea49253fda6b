"""The samplers' files (issue 34): a node's GPU samples and ROUTER_HOST's host samples. Pure and
streaming: one pass over each file, samples as plain tuples.

GPU files open with the job's line ``# slurm-ab telemetry node=N epoch=E tz=+HHMM``, then either
nvidia-smi's query output (``--format=csv,nounits``: a header of its header names, then one row per
GPU and sample, the fields in the order the job asked for them; ``timestamp`` is the node's local
time, read with the line's UTC offset; ``[N/A]`` / ``[Not Supported]`` read as unknown;
shared/research/gpu-telemetry.md) or DCGM scrapes (``# slurm-ab sample <epoch>`` then the
exporter's ``DCGM_FI_DEV_*{gpu="i",...} value`` lines). Host files: ``T`` lines (the node) and
``P`` lines (one process of the job), written by telemetry.host_command.
"""
from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from pathlib import Path

HEADER = "# slurm-ab telemetry "
DCGM_SAMPLE = "# slurm-ab sample "
# query field -> sample attribute (either spelling nvidia-smi accepts)
FIELD_ATTR = {
    "power.draw": "power_w", "power.draw.average": "power_w", "power.draw.instant": "power_w",
    "clocks.sm": "sm_mhz", "clocks.current.sm": "sm_mhz",
    "clocks.mem": "mem_mhz", "clocks.current.memory": "mem_mhz",
    "utilization.gpu": "util_pct", "memory.used": "mem_used_mib", "temperature.gpu": "temp_c",
    "clocks_throttle_reasons.active": "reasons", "clocks_event_reasons.active": "reasons",
}
DCGM_ATTR = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_DEV_SM_CLOCK": "sm_mhz", "DCGM_FI_DEV_MEM_CLOCK": "mem_mhz",
    "DCGM_FI_DEV_GPU_UTIL": "util_pct", "DCGM_FI_DEV_FB_USED": "mem_used_mib", "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}
DCGM_LINE = re.compile(r"^(DCGM_FI_DEV_[A-Z_]+)\{([^}]*)\}\s+(\S+)")
GPU_LABEL = re.compile(r'(?:^|,)\s*gpu="(\d+)"')
# the clock-event reasons' bits (nvidia-smi -q "Clocks Event Reasons"; NVML's nvmlClocksEventReason*)
REASON_BITS = ((0x1, "GPU idle"), (0x2, "applications clocks setting"), (0x4, "SW power cap"),
               (0x8, "HW slowdown"), (0x10, "sync boost"), (0x20, "SW thermal slowdown"),
               (0x40, "HW thermal slowdown"), (0x80, "HW power brake slowdown"), (0x100, "display clock setting"))
SLOWDOWN = 0x4 | 0x8 | 0x20 | 0x40 | 0x80       # the reasons that hold clocks down under load


@dataclass(frozen=True)
class GpuSample:
    t: float                        # epoch seconds
    gpu: int
    power_w: float | None = None    # the average since the previous sample (nvidia-smi's power.draw)
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    util_pct: float | None = None
    mem_used_mib: float | None = None
    temp_c: float | None = None
    reasons: int | None = None
    energy_mj: float | None = None  # DCGM's counter since the exporter started


@dataclass(frozen=True)
class GpuFile:
    """One node's GPU sampler output."""

    node: str | None
    started: float | None           # the sampler step's start (epoch)
    source: str                     # "nvidia-smi" | "dcgm" | "" (no sample)
    samples: tuple[GpuSample, ...] = ()
    bad_lines: int = 0
    last_line: str = ""             # its last line (why it stopped, when it did)
    errors: tuple[str, ...] = ()    # the DCGM loop's "# slurm-ab error" lines (first few)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS if mask & bit]


def _header(line: str) -> dict:
    return dict(kv.split("=", 1) for kv in line[len(HEADER):].split() if "=" in kv)


def _tz_seconds(tz: str) -> int:
    """'+0100' -> 3600 (local = UTC + offset)."""
    m = re.fullmatch(r"([+-])(\d\d)(\d\d)", tz or "")
    if not m:
        return 0
    s = int(m.group(2)) * 3600 + int(m.group(3)) * 60
    return s if m.group(1) == "+" else -s


def _local_epoch(stamp: str, offset: int) -> float | None:
    """nvidia-smi's 'YYYY/MM/DD HH:MM:SS.mmm' (local time) -> epoch seconds."""
    try:
        whole, _, frac = stamp.strip().partition(".")
        tm = time.strptime(whole, "%Y/%m/%d %H:%M:%S")
    except ValueError:
        return None
    return calendar.timegm(tm) - offset + (float("0." + frac) if frac.isdigit() else 0.0)


def _number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("["):          # [N/A], [Not Supported], [Unknown Error]
        return None
    try:
        return float(text.split()[0])            # '79.80 W' with units, '79.80' without
    except ValueError:
        return None


def _mask(text: str) -> int | None:
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def read_gpu_file(path: str | Path, fields: tuple[str, ...]) -> GpuFile:
    """A GPU sampler's file; `fields` the --query-gpu fields in the order the job asked
    (telemetry.nvidia_smi.fields, as the run's manifest recorded them)."""
    node = started = None
    offset = 0
    source = ""
    samples: list[GpuSample] = []
    bad, last, errors = 0, "", []
    dcgm_t: float | None = None
    dcgm: dict[int, dict] = {}

    def flush():
        for g, vals in sorted(dcgm.items()):
            samples.append(GpuSample(dcgm_t, g, **vals))
        dcgm.clear()

    attrs = [FIELD_ATTR.get(f) for f in fields]
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError:
        return GpuFile(None, None, "")
    with f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            last = line
            if line.startswith(HEADER):
                h = _header(line)
                node = h.get("node") or node
                try:
                    started = float(h.get("epoch", ""))
                except ValueError:
                    pass
                offset = _tz_seconds(h.get("tz", ""))
                continue
            if line.startswith(DCGM_SAMPLE):
                if dcgm_t is not None:
                    flush()
                source = "dcgm"
                try:
                    dcgm_t = float(line[len(DCGM_SAMPLE):].split()[0])
                except (ValueError, IndexError):
                    dcgm_t = None
                continue
            if line.startswith("# slurm-ab error"):
                if len(errors) < 3:                   # '# slurm-ab error <epoch> <message>'
                    rest = line[len("# slurm-ab error"):].split(None, 1)
                    errors.append(rest[1] if len(rest) > 1 else "")
                continue
            if line.startswith("DCGM_FI_DEV_"):
                m = DCGM_LINE.match(line)
                g = GPU_LABEL.search(m.group(2)) if m else None
                if m and g and dcgm_t is not None and m.group(1) in DCGM_ATTR:
                    dcgm.setdefault(int(g.group(1)), {})[DCGM_ATTR[m.group(1)]] = _number(m.group(3))
                continue
            if line.startswith("timestamp"):          # nvidia-smi's header row
                source = "nvidia-smi"
                continue
            cells = line.split(",")
            if len(cells) != len(fields) or fields[:2] != ("timestamp", "index"):
                bad += 1
                continue
            t = _local_epoch(cells[0], offset)
            gpu = _number(cells[1])
            if t is None or gpu is None:
                bad += 1
                continue
            source = "nvidia-smi"
            vals: dict = {}
            for a, cell in zip(attrs[2:], cells[2:]):
                if a == "reasons":
                    vals[a] = _mask(cell)
                elif a and a not in vals:
                    vals[a] = _number(cell)
            samples.append(GpuSample(t, int(gpu), **vals))
    if dcgm_t is not None:
        flush()
    return GpuFile(node, started, source, tuple(samples), bad, last, tuple(errors))


@dataclass(frozen=True)
class NodeSample:
    t: float
    cpu_pct: float | None
    ncpu: int | None
    mem_pct: float | None
    files: int | None


@dataclass(frozen=True)
class ProcSample:
    t: float
    pid: int
    cpu_pct: float                  # of one core
    demand_pct: float               # running or runnable, of one core
    rss_mib: int
    fds: int
    fd_limit: int | None            # None: unlimited
    argv: tuple[str, ...]


@dataclass(frozen=True)
class HostFile:
    node: tuple[NodeSample, ...] = ()
    procs: tuple[ProcSample, ...] = ()
    bad_lines: int = 0
    error: str | None = None        # the sampler's last words when it died (a traceback's last line)


def _kv(parts) -> dict:
    return dict(p.split("=", 1) for p in parts if "=" in p)


def read_host_file(path: str | Path) -> HostFile:
    node, procs, bad = [], [], 0
    error, traceback = None, False
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError:
        return HostFile()
    with f:
        for raw in f:
            line = raw.rstrip("\n")
            try:
                if line.startswith("T "):
                    parts = line.split()
                    kv = _kv(parts[2:])
                    node.append(NodeSample(float(parts[1]), _number(kv.get("cpu", "")),
                                           int(kv["ncpu"]) if kv.get("ncpu", "").isdigit() else None,
                                           _number(kv.get("mem", "")),
                                           int(kv["files"]) if kv.get("files", "").isdigit() else None))
                elif line.startswith("P "):
                    head, _, cmd = line.partition(" cmd=")
                    parts = head.split()
                    kv = _kv(parts[3:])
                    lim = kv.get("fdmax", "")
                    procs.append(ProcSample(float(parts[1]), int(parts[2]), float(kv["cpu"]), float(kv["demand"]),
                                            int(kv.get("rss", 0)), int(kv.get("fds", 0)),
                                            int(lim) if lim.isdigit() else None, tuple(cmd.split("\x1f"))))
                elif line.strip():
                    bad += 1              # not a sample: the sampler's own words (a traceback)
                    if line.startswith("Traceback (most recent call last)"):
                        traceback = True
                    elif traceback and not line[:1].isspace():
                        error = line.strip()[:300]     # Python's last traceback line: 'Kind: message'
            except (ValueError, KeyError, IndexError):
                bad += 1
    return HostFile(tuple(node), tuple(procs), bad, error)

