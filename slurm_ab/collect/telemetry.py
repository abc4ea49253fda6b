"""Telemetry of a pass (issue 34): the samplers' files joined to the benchmark the client measured.

The window is the benchmark as the client measured it: its duration, ending when it wrote its
result (bench_end's output_at, recorded by the job); a pass without them (an older job, a client
that wrote nothing) uses its step's window and says so. Over the window, per node: energy (each
GPU's power samples integrated, each sample holding the average since the one before, as
nvidia-smi's power.draw and the fake GPUs' do; DCGM's energy counter where the exporter has it),
mean power per GPU, the SM clock and power under load (samples at >= 50 % utilisation), the
throttle reasons seen. Rules (telemetry.*): two samples of a node further apart than max_gap_s
inside the window make the pass's energy unknown, with the node and the gap named; a node whose
clock or power under load is low against the other nodes of its role (their median), or that
reports a slowdown reason under load, is named; the benchmark client wanting more than
client_busy_pct of one core (running or runnable) is flagged as a suspect bottleneck, as is one
near its open-files limit. Pure: reads the files it is given.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..model.experiment import Experiment, instance_name
from ..model.rundir import Layout
from ..parse.events import EventLog
from ..parse.telemetry import SLOWDOWN, GpuFile, GpuSample, HostFile, read_gpu_file, read_host_file, reason_names

BUSY_UTIL = 50.0            # a sample "under load": utilisation at least this (%)
FD_SHARE = 0.9              # a client this close to its open-files limit is flagged


@dataclass(frozen=True)
class GpuEnergy:
    gpu: int
    energy_j: float | None
    power_w: float | None            # mean over the window


@dataclass(frozen=True)
class NodeTelemetry:
    """One node's GPUs over one pass."""

    node: str
    component: str                   # "replica 0", "prefill 0"
    role: str | None
    rank: int
    file: str                        # run-directory relative
    gpus: int
    samples: int                     # rows in the window
    energy_j: float | None = None    # None: a gap, or no samples
    power_w: float | None = None     # mean per GPU over the window
    busy_power_w: float | None = None    # mean per GPU under load
    busy_sm_mhz: float | None = None     # mean SM clock under load
    mem_mhz: float | None = None
    util_pct: float | None = None        # mean
    mem_used_mib: float | None = None    # max per GPU
    temp_c: float | None = None          # max
    reasons: int = 0                     # every active clock-event reason seen under load
    max_gap_s: float | None = None
    gap: str | None = None               # why its energy is not known
    per_gpu: tuple[GpuEnergy, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.node} ({self.component} node rank {self.rank})"


@dataclass(frozen=True)
class HostTelemetry:
    """ROUTER_HOST over one pass: the node and the benchmark client's process."""

    node: str | None
    samples: int
    cpu_pct: float | None = None     # the node's busy share, mean
    ncpu: int | None = None
    mem_pct: float | None = None     # max
    files: int | None = None         # the node's open files, max
    client_pid: int | None = None
    client_samples: int = 0
    client_cpu_pct: float | None = None      # of one core, mean
    client_demand_pct: float | None = None   # running or runnable, of one core, mean
    client_fds: int | None = None            # max
    client_fd_limit: int | None = None


@dataclass(frozen=True)
class TelemetrySummary:
    """What the samplers say about one pass (PassSummary.telemetry; docs/metrics.md "Telemetry")."""

    source: str
    window: tuple[float, float] | None = None    # epoch seconds
    window_source: str = ""          # "benchmark" (the client's own) | "step" (bench_start..bench_end)
    gpus: int = 0
    energy_j: float | None = None
    j_per_token: float | None = None     # energy / output tokens
    power_w: float | None = None         # mean per GPU
    invalid: str | None = None           # why the energy figure is not given
    nodes: tuple[NodeTelemetry, ...] = ()
    low_nodes: tuple[str, ...] = ()      # reasons naming a node low against its peers
    host: HostTelemetry | None = None
    client_busy: str | None = None       # the flag of a saturated client (or one out of files)
    notes: tuple[str, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        """What the pass's verdict says of its telemetry (flags: the verdict stays as it is)."""
        out = list(self.low_nodes)
        if self.invalid:
            out.append(f"energy not computed: {self.invalid}")
        if self.client_busy:
            out.append(self.client_busy)
        return tuple(out)


@dataclass(frozen=True)
class LaunchTelemetry:
    """A launch's samplers' files, read once for all its passes."""

    source: str
    gpu: Mapping[tuple[int, int], GpuFile]       # (het group, node rank) -> its file
    files: Mapping[tuple[int, int], str]         # ... its run-directory relative path
    host: HostFile | None
    host_file: str


def read_launch(root: Path, lay: Layout, exp: Experiment | None) -> LaunchTelemetry | None:
    """The launch's telemetry files (None: the run had none: telemetry off, or an older job)."""
    t = exp.telemetry if exp is not None else None
    found = lay.gpu_sample_map()
    if t is None or not t.enabled and not found:
        return None
    fields = tuple(t.nvidia_smi.fields)
    host = read_host_file(lay.host_samples) if lay.host_samples.is_file() else None
    return LaunchTelemetry(t.source, {k: read_gpu_file(p, fields) for k, p in found.items()},
                           {k: Layout(root).rel(p) for k, p in found.items()}, host, Layout(root).rel(lay.host_samples))


def pass_window(events: EventLog, duration_s: float | None) -> tuple[tuple[float, float] | None, str]:
    """The benchmark the client measured (its duration, ending at output_at), else the step's."""
    start, end = events.last.get("bench_start"), events.last.get("bench_end")
    if start is None or end is None or end.epoch is None or start.epoch is None:
        return None, ""
    try:
        at = float(end.fields.get("output_at", ""))
    except ValueError:
        at = None
    if at is not None and duration_s and start.epoch - 1 <= at - duration_s and at <= end.epoch + 5:
        return (at - duration_s, at), "benchmark"
    return (start.epoch, end.epoch), "step"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 10) % 10}"


def _integrate(samples: list[GpuSample], t0: float, t1: float, max_gap: float
               ) -> tuple[float | None, float | None, tuple[float, float, float] | None]:
    """(energy J, largest gap s, the gap that makes it unknown as (length, from, to)) of one GPU's
    samples (time-ordered) over [t0, t1]. Each sample's power holds for the time since the one
    before; DCGM's energy counter, where present, is read at the window's ends instead."""
    if not samples or samples[0].t > t0 or samples[-1].t < t1:
        first, last = (samples[0].t, samples[-1].t) if samples else (t1, t0)
        gap = max(first - t0, t1 - last, 0.0)
        where = (t0, first) if first - t0 >= t1 - last else (last, t1)
        return None, gap, (gap, *where)
    energy, worst, bad = 0.0, 0.0, None
    counter = all(s.energy_mj is not None for s in samples)
    for a, b in zip(samples, samples[1:]):
        lo, hi = max(a.t, t0), min(b.t, t1)
        if hi <= lo:
            continue
        worst = max(worst, b.t - a.t)
        if b.t - a.t > max_gap and bad is None:
            bad = (b.t - a.t, a.t, b.t)
        if not counter:
            if b.power_w is None:
                return None, worst, bad or (b.t - a.t, a.t, b.t)
            energy += b.power_w * (hi - lo)
    if counter:
        energy = (_at(samples, t1) - _at(samples, t0)) / 1000.0
    return (None if bad else energy), worst, bad


def _at(samples: list[GpuSample], t: float) -> float:
    """DCGM's energy counter (mJ) at t, linear between the scrapes around it."""
    for a, b in zip(samples, samples[1:]):
        if a.t <= t <= b.t:
            return a.energy_mj + (b.energy_mj - a.energy_mj) * ((t - a.t) / (b.t - a.t) if b.t > a.t else 0.0)
    return samples[-1].energy_mj


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def node_figures(f: GpuFile, window: tuple[float, float], max_gap: float, node: str, component: str,
                 role: str | None, rank: int, file: str) -> NodeTelemetry:
    t0, t1 = window
    by_gpu: dict[int, list[GpuSample]] = {}
    for s in f.samples:
        by_gpu.setdefault(s.gpu, []).append(s)
    inside = [s for s in f.samples if t0 <= s.t <= t1]
    busy = [s for s in inside if (s.util_pct or 0) >= BUSY_UTIL]
    per, gap, worst = [], None, 0.0
    for g, ss in sorted(by_gpu.items()):
        ss.sort(key=lambda s: s.t)
        e, w, bad = _integrate(ss, t0, t1, max_gap)
        worst = max(worst, w or 0.0)
        if bad is not None and gap is None:
            length, a, b = bad
            gap = (f"{node} ({component} node rank {rank}): no GPU sample for {length:.1f} s "
                   f"({_clock(a)} .. {_clock(b)}) within the pass [{file}]")
        per.append(GpuEnergy(g, e, e / (t1 - t0) if e is not None and t1 > t0 else None))
    if not by_gpu:
        why = f"its sampler's last line: {f.last_line[:160]}" if f.last_line else "its file is empty"
        gap = f"{node} ({component} node rank {rank}): no GPU sample ({why}) [{file}]"
    energy = sum(p.energy_j for p in per) if per and all(p.energy_j is not None for p in per) else None
    reasons = 0
    for s in busy:
        reasons |= s.reasons or 0
    return NodeTelemetry(
        node=node, component=component, role=role, rank=rank, file=file, gpus=len(by_gpu), samples=len(inside),
        energy_j=energy, power_w=energy / (t1 - t0) / len(per) if energy is not None and per and t1 > t0 else None,
        busy_power_w=_mean(s.power_w for s in busy), busy_sm_mhz=_mean(s.sm_mhz for s in busy),
        mem_mhz=_mean(s.mem_mhz for s in inside), util_pct=_mean(s.util_pct for s in inside),
        mem_used_mib=max((s.mem_used_mib for s in inside if s.mem_used_mib is not None), default=None),
        temp_c=max((s.temp_c for s in inside if s.temp_c is not None), default=None),
        reasons=reasons, max_gap_s=worst or None, gap=gap, per_gpu=tuple(per))


def low_nodes(nodes: tuple[NodeTelemetry, ...], clock_pct: float, power_pct: float) -> tuple[str, ...]:
    """A node whose clock or power under load is low against the other nodes of its role (their
    median), or that reports a slowdown reason under load, named once with what is low."""
    out = []
    for n in nodes:
        peers = [p for p in nodes if p is not n and p.role == n.role]
        said = []
        for attr, pct, what, unit in (("busy_sm_mhz", clock_pct, "SM clock", "MHz"),
                                      ("busy_power_w", power_pct, "power per GPU", "W")):
            mine = getattr(n, attr)
            theirs = [getattr(p, attr) for p in peers if getattr(p, attr) is not None]
            if mine is None or not theirs:
                continue
            med = statistics.median(theirs)
            if med > 0 and mine < (1 - pct / 100.0) * med:
                said.append(f"{what} {mine:.0f} {unit} under load, {100 * (1 - mine / med):.0f} % below "
                            f"its peers' {med:.0f} {unit}")
        slow = n.reasons & SLOWDOWN
        if said or slow:
            out.append(f"{n.where}: " + "; ".join(said)
                       + (("; " if said else "") + "clock-event reasons under load: "
                          + ", ".join(reason_names(slow)) + f" (0x{n.reasons:x})" if slow else "")
                       + f" [{n.file}]")
    return tuple(out)


def host_figures(h: HostFile, window: tuple[float, float], client_module: str, node: str | None
                 ) -> HostTelemetry:
    t0, t1 = window
    ns = [s for s in h.node if t0 <= s.t <= t1]
    match = client_module or "bench_serving"
    ps = [p for p in h.procs if t0 <= p.t <= t1 and any(match in a for a in p.argv)]
    pids: dict[int, list] = {}
    for p in ps:
        pids.setdefault(p.pid, []).append(p)
    mine = max(pids.values(), key=len) if pids else []
    return HostTelemetry(
        node=node, samples=len(ns), cpu_pct=_mean(s.cpu_pct for s in ns),
        ncpu=next((s.ncpu for s in ns if s.ncpu), None),
        mem_pct=max((s.mem_pct for s in ns if s.mem_pct is not None), default=None),
        files=max((s.files for s in ns if s.files is not None), default=None),
        client_pid=mine[0].pid if mine else None, client_samples=len(mine),
        client_cpu_pct=_mean(p.cpu_pct for p in mine), client_demand_pct=_mean(p.demand_pct for p in mine),
        client_fds=max((p.fds for p in mine), default=None),
        client_fd_limit=next((p.fd_limit for p in mine if p.fd_limit), None))


def client_flag(h: HostTelemetry, busy_pct: float, file: str) -> str | None:
    if h.client_samples < 2:
        return None
    where = f"pid {h.client_pid}" + (f" on {h.node}" if h.node else "")
    if h.client_demand_pct is not None and h.client_demand_pct >= busy_pct:
        return (f"suspect bottleneck: the benchmark client ({where}) wanted {h.client_demand_pct:.0f} % of one "
                f"CPU core over the benchmark (running {h.client_cpu_pct or 0:.0f} %, the rest waiting to run; "
                f"telemetry.client_busy_pct = {busy_pct:g}): its latencies include its own CPU time [{file}]")
    if h.client_fds and h.client_fd_limit and h.client_fds >= FD_SHARE * h.client_fd_limit:
        return (f"suspect bottleneck: the benchmark client ({where}) had {h.client_fds} files open, its limit "
                f"is {h.client_fd_limit} [{file}]")
    return None


def sampler_died(h: HostFile, window: tuple[float, float], file: str) -> str | None:
    """A host sampler that died before the window's end (its error in its own output) left the
    rest of the pass unsampled: said, with its error, rather than read as a quiet client."""
    last = max((s.t for s in h.node), default=None)
    if h.error is None or (last is not None and last >= window[1]):
        return None
    when = "before its first sample" if last is None else \
        f"{window[1] - last:.0f} s before the window's end" if last > window[0] else "before the window"
    return f"host sampler: it died {when}: {h.error} [{file}]"


def pass_telemetry(lt: LaunchTelemetry | None, events: EventLog, exp: Experiment | None, duration_s: float | None,
                   output_tokens: int | None, node_lists: Mapping) -> TelemetrySummary | None:
    """The telemetry of one pass (None when its launch had no samplers)."""
    if lt is None or exp is None:
        return None
    cfg = exp.telemetry
    window, source = pass_window(events, duration_s)
    if window is None:
        return TelemetrySummary(lt.source, notes=("no benchmark window: the pass did not run to its end",))
    notes = [] if source == "benchmark" else [
        "telemetry window: the client step's (bench_start .. bench_end, client start-up included): the "
        "job recorded no end of the client's own benchmark (output_at)"]
    nodes = []
    for c in exp.components:
        hosts = node_lists.get(str(c.group)) or []
        for rank in range(c.nodes):
            f = lt.gpu.get((c.group, rank), GpuFile(None, None, ""))
            name = f.node or (hosts[rank] if rank < len(hosts) else f"r{c.group}n{rank}")
            nodes.append(node_figures(f, window, cfg.max_gap_s, name, instance_name(c.role, c.instance), c.role,
                                      rank, lt.files.get((c.group, rank), "?")))
    nodes_t = tuple(nodes)
    gaps = [n.gap for n in nodes_t if n.gap]
    gpus = sum(n.gpus for n in nodes_t)
    energy = sum(n.energy_j for n in nodes_t) if nodes_t and not gaps else None
    invalid = None
    if gaps:
        invalid = gaps[0] + (f" (and {len(gaps) - 1} more node(s))" if len(gaps) > 1 else "") + \
            f"; telemetry.max_gap_s = {cfg.max_gap_s:g}"
    length = window[1] - window[0]
    host, busy = None, None
    if lt.host is not None:
        hosts0 = node_lists.get("0") or []
        host = host_figures(lt.host, window, exp.client.module, hosts0[0] if hosts0 else None)
        busy = client_flag(host, cfg.client_busy_pct, lt.host_file)
        if host.client_samples < 2:
            notes.append(f"host sampler: {host.client_samples} sample(s) of the benchmark client in the window "
                         f"(telemetry.host_interval_ms = {cfg.host_interval_ms})")
        died = sampler_died(lt.host, window, lt.host_file)
        if died:
            notes.append(died)
    return TelemetrySummary(
        source=lt.source, window=window, window_source=source, gpus=gpus, energy_j=energy,
        j_per_token=energy / output_tokens if energy is not None and output_tokens else None,
        power_w=energy / length / gpus if energy is not None and gpus and length > 0 else None,
        invalid=invalid, nodes=nodes_t, low_nodes=low_nodes(nodes_t, cfg.low_clock_pct, cfg.low_power_pct),
        host=host, client_busy=busy, notes=tuple(notes))


__all__ = ["GpuEnergy", "HostTelemetry", "LaunchTelemetry", "NodeTelemetry", "TelemetrySummary",
           "pass_telemetry", "read_launch"]
