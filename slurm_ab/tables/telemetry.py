"""Telemetry and profiles in tables (issue 34): a pass's energy, per-node GPU figures and the
benchmark client's host, a job's passes side by side, and its profiled passes' traces."""
from __future__ import annotations

from typing import Sequence

from ..collect.records import CampaignSummary, PassSummary
from ..parse.telemetry import reason_names
from .table import DASH, Table, num


def energy_line(t) -> str:
    """'energy: 70.16 J/token, 288 W per GPU (64 GPUs, 143.7 kJ over the benchmark's 7.8 s)'."""
    if t.window is None:
        return "energy: - (" + (t.notes[0] if t.notes else "no window") + ")"
    span = t.window[1] - t.window[0]
    over = "the benchmark's" if t.window_source == "benchmark" else "the client step's"
    if t.energy_j is None:
        return f"energy: not computed ({t.invalid or 'no samples'})"
    return (f"energy: {num(t.j_per_token, '.3f')} J/token, {num(t.power_w, '.0f')} W per GPU "
            f"({t.gpus} GPUs, {t.energy_j / 1000:.1f} kJ over {over} {span:.1f} s; {t.source})")


def host_line(t) -> str | None:
    h = t.host
    if h is None:
        return None
    client = (f"client pid {h.client_pid}: {num(h.client_cpu_pct, '.0f')} % of a core running, "
              f"{num(h.client_demand_pct, '.0f')} % wanted, {num(h.client_fds, 'd')} files open"
              + (f" of {h.client_fd_limit}" if h.client_fd_limit else "")) if h.client_pid else "client: not seen"
    return (f"host {h.node or '?'}: CPU {num(h.cpu_pct, '.0f')} % busy"
            + (f" of {h.ncpu}" if h.ncpu else "") + f", memory {num(h.mem_pct, '.0f')} % used; {client}")


def telemetry_lines(s: PassSummary) -> list[str]:
    """What collect prints of a pass's telemetry (its flags are among the verdict's reasons)."""
    t = s.telemetry
    if t is None:
        return []
    return [energy_line(t)] + [x for x in (host_line(t),) if x]


def _reasons(mask: int) -> str:
    names = [n for n in reason_names(mask) if n != "GPU idle"]
    return ", ".join(names) if names else DASH


def nodes_table(t) -> Table:
    rows = [[n.node, n.component, str(n.rank), str(n.gpus), str(n.samples),
             DASH if n.energy_j is None else f"{n.energy_j / 1000:.2f}", num(n.power_w, ".0f"),
             num(n.busy_power_w, ".0f"), num(n.busy_sm_mhz, ".0f"), num(n.util_pct, ".0f"), num(n.temp_c, ".0f"),
             num(n.max_gap_s, ".1f"), _reasons(n.reasons)] for n in t.nodes]
    return Table.of(["node", "component", "rank", "GPUs", "samples", "energy (kJ)", "W/GPU", "W/GPU under load",
                     "SM MHz under load", "util %", "max temp C", "max gap (s)", "throttle reasons"], rows,
                    ("left", "left") + ("right",) * 10 + ("left",))


def telemetry_md(s: PassSummary) -> str:
    """summary.md's telemetry section of one pass."""
    t = s.telemetry
    if t is None:
        return ""
    lines = ["## Telemetry", "", energy_line(t), ""]
    if t.nodes:
        lines += [nodes_table(t).md(), ""]
    h = host_line(t)
    if h:
        lines += [h, ""]
    lines += [f"- {x}" for x in t.flags] + ([""] if t.flags else [])
    return "\n".join(lines)


def passes_telemetry_md(passes: Sequence[PassSummary]) -> str:
    """A job's passes' energy side by side (with the flags each raised)."""
    rows = [[p.ref.mode or p.mode or DASH, str(p.ref.concurrency), p.ref.key or DASH, str(p.ref.launch),
             num(p.telemetry.j_per_token, ".3f"), num(p.telemetry.power_w, ".0f"),
             DASH if p.telemetry.energy_j is None else f"{p.telemetry.energy_j / 1000:.1f}",
             "; ".join(p.telemetry.flags)]
            for p in passes if p.telemetry is not None]
    if not rows:
        return ""
    return "\n".join(["## Telemetry (per pass)", "", Table.of(
        ["Mode", "C", "Pass", "Launch", "J/token", "W/GPU", "Energy (kJ)", "Flags"], rows,
        ("left", "right", "left", "right", "right", "right", "right", "left")).md(), ""])


def profiles_md(cs: CampaignSummary) -> str:
    if not cs.profiles:
        return ""
    lines = ["## Profiles", ""]
    for pr in cs.profiles:
        counts = ", ".join(f"{c.component}: {len(c.traces)}" + (f"/{c.expected}" if c.expected else "")
                           for c in pr.components)
        lines.append(f"- {pr.mode} {pr.key} (launch {pr.launch}, {pr.verdict}; left out of the statistics): "
                     f"{pr.traces} traces in {pr.dir}/ ({counts})")
        lines += [f"  - {x}" for x in pr.problems]
    return "\n".join(lines + [""])


__all__ = ["energy_line", "nodes_table", "passes_telemetry_md", "profiles_md", "telemetry_lines", "telemetry_md"]
