"""A node's emulated GPU activity: written by the emulator, read by the fake ``nvidia-smi``.

The emulator (every node of a replica) appends its engine's busy/idle transitions to one small
file per node, ``$SLURM_AB_EMU_GPU_STATE_DIR/<node>.activity`` (default directory
``/tmp/slurm-ab-emu-gpus``; ``<node>`` is ``SLURMD_NODENAME``, else the host name). Lines, times
in epoch seconds::

    S <t> <gpus> <memory_used_mib>     the server started (truncates the file)
    B <t>                              busy from t (a forward is planned after idle)
    I <t>                              idle from t (the engine found no work)
    X <t>                              the server stopped (memory freed)

Only transitions are written (a handful per request at low load, none while saturated), so the
cost is independent of the token rate. Node rank 0 owns the engine; it tells the other nodes of
its replica each transition over the rendezvous connection, so every node of a busy replica is
busy (TP and PP ranks all work on each forward).

:func:`expected_energy_j` is the exact energy of a node over a window from the same file and the
constants of ``fake_gpus.toml`` (tests compare a run's J/token against it).
"""
from __future__ import annotations

import bisect
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

STATE_DIR_ENV = "SLURM_AB_EMU_GPU_STATE_DIR"
DEFAULT_STATE_DIR = "/tmp/slurm-ab-emu-gpus"
CONFIG_PATH = Path(__file__).with_name("fake_gpus.toml")
FAULT_ENV, FAULT_NODES_ENV = "SLURM_AB_FAKE_GPU_FAULT", "SLURM_AB_FAKE_GPU_FAULT_NODES"


def node_name(env: Mapping[str, str] = os.environ) -> str:
    return env.get("SLURMD_NODENAME") or socket.gethostname()


def activity_path(env: Mapping[str, str] = os.environ, node: Optional[str] = None) -> Path:
    return Path(env.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR) / f"{node or node_name(env)}.activity"


def publishing(env: Mapping[str, str] = os.environ) -> bool:
    """The emulator publishes only where a node is named (a Slurm step) or a directory is set, so
    emulators started side by side on one host outside Slurm do not share one file."""
    return bool(env.get("SLURMD_NODENAME") or env.get(STATE_DIR_ENV))


def load_config(path: Path = CONFIG_PATH) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


# ---- faults --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuFault:
    throttle: bool = False
    gap_s: Optional[float] = None


def parse_fault(env: Mapping[str, str] = os.environ, config: Optional[dict] = None) -> GpuFault:
    """``SLURM_AB_FAKE_GPU_FAULT=throttle,gap[=S]``, limited to ``SLURM_AB_FAKE_GPU_FAULT_NODES``
    (comma list of SLURMD_NODENAME) when set. Unknown items raise ValueError."""
    only = [n.strip() for n in env.get(FAULT_NODES_ENV, "").split(",") if n.strip()]
    if only and node_name(env) not in only:
        return GpuFault()
    throttle, gap = False, None
    for item in env.get(FAULT_ENV, "").replace(";", ",").split(","):
        name, _, value = item.strip().partition("=")
        if not name:
            continue
        if name == "throttle" and not value:
            throttle = True
        elif name == "gap":
            gap = float(value) if value else float((config or load_config())["gap"]["seconds"])
        else:
            raise ValueError(f"unknown {FAULT_ENV} item {item.strip()!r} (expected throttle or gap[=S])")
    return GpuFault(throttle, gap)


# ---- writer (the emulator) -----------------------------------------------------------------------

class ActivityLog:
    """The emulator's side: one instance per node process; every method is cheap and never raises
    (an unwritable state directory only disables the telemetry)."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path = path
        self.enabled = enabled
        self._lock = threading.Lock()
        self._busy = False
        self._f = None

    def start(self, t: float, gpus: int, memory_used_mib: int) -> None:
        if not self.enabled:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w", encoding="ascii")
        except OSError:
            self._f = None
        self._write(f"S {t:.6f} {gpus} {memory_used_mib}")

    def mark(self, busy: bool, t: float) -> None:
        with self._lock:
            if busy == self._busy:
                return
            self._busy = busy
        self._write(f"{'B' if busy else 'I'} {t:.6f}")

    def stop(self, t: float) -> None:
        self.mark(False, t)
        self._write(f"X {t:.6f}")
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None

    def _write(self, line: str) -> None:
        with self._lock:
            if self._f is None:
                return
            try:
                self._f.write(line + "\n")
                self._f.flush()
            except (OSError, ValueError):
                self._f = None


# ---- reader (the fake nvidia-smi, the energy check) ----------------------------------------------

@dataclass
class Activity:
    """What a node's file says: busy intervals (closed, in order), an open one, the server's state."""
    starts: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    open_since: Optional[float] = None
    gpus: int = 0
    memory_used_mib: int = 0
    up: bool = False
    _cum: list = field(default_factory=list)        # busy seconds before interval i

    def feed(self, line: str) -> None:
        parts = line.split()
        if len(parts) < 2:
            return
        kind, t = parts[0], float(parts[1])
        if kind == "S":
            self.__init__()
            self.gpus, self.memory_used_mib, self.up = int(parts[2]), int(parts[3]), True
        elif kind == "B":
            self.open_since = t
        elif kind in ("I", "X"):
            if self.open_since is not None and t > self.open_since:
                self._cum.append((self._cum[-1] + self.ends[-1] - self.starts[-1]) if self.starts else 0.0)
                self.starts.append(self.open_since)
                self.ends.append(t)
            self.open_since = None
            if kind == "X":
                self.up = False

    def busy_seconds(self, t0: float, t1: float) -> float:
        """Busy time within [t0, t1] (an open interval counts as busy up to t1)."""
        if t1 <= t0:
            return 0.0
        total = self._closed_until(t1) - self._closed_until(t0)
        if self.open_since is not None and self.open_since < t1:
            total += t1 - max(t0, self.open_since)
        return total

    def _closed_until(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t)          # intervals starting before t
        if i == 0:
            return 0.0
        done = self._cum[i - 1]
        return done + min(t, self.ends[i - 1]) - self.starts[i - 1]

    def busy_at(self, t: float) -> bool:
        if self.open_since is not None and t >= self.open_since:
            return True
        i = bisect.bisect_right(self.starts, t)
        return i > 0 and t < self.ends[i - 1]


class ActivityReader:
    """Follows a node's file incrementally (the looping sampler re-reads only what was appended)."""

    def __init__(self, path: Path):
        self.path = path
        self.activity = Activity()
        self._offset = 0
        self._partial = ""

    def refresh(self) -> Activity:
        try:
            size = self.path.stat().st_size
            if size < self._offset:                       # a new server truncated it
                self.activity, self._offset, self._partial = Activity(), 0, ""
            with open(self.path, encoding="ascii") as f:
                f.seek(self._offset)
                data = f.read()
                self._offset = f.tell()
        except OSError:
            return self.activity
        lines = (self._partial + data).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self.activity.feed(line)
        return self.activity


def read_activity(path: Path) -> Activity:
    return ActivityReader(path).refresh()


# ---- the script: values at a time, exact energy --------------------------------------------------

def power_w(utilisation: float, fault: GpuFault, config: dict) -> float:
    g = config["gpu"]
    busy = config["throttle"]["busy_power_w"] if fault.throttle else g["busy_power_w"]
    return g["idle_power_w"] + (busy - g["idle_power_w"]) * utilisation


def expected_energy_j(t0: float, t1: float, node: Optional[str] = None, env: Mapping[str, str] = os.environ,
                      gpus: Optional[int] = None, config: Optional[dict] = None) -> float:
    """Exact energy (J) of a node's GPUs over [t0, t1] from its activity file: per GPU
    idle_power_w * (t1 - t0) + (busy_power_w - idle_power_w) * busy seconds (the throttled busy
    power on a node with the throttle fault); gpus defaults to the fake nvidia-smi's count."""
    from .fake_gpus import count
    config = config or load_config()
    env = dict(env, SLURMD_NODENAME=node) if node else env
    act = read_activity(activity_path(env, node))
    fault = parse_fault(env, config)
    n = gpus if gpus is not None else count(env)
    idle = power_w(0.0, fault, config)
    return n * (idle * (t1 - t0) + (power_w(1.0, fault, config) - idle) * act.busy_seconds(t0, t1))
