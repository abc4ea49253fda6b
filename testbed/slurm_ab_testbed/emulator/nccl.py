"""NCCL's init lines of one node's GPU ranks, chosen from the NCCL_* environment as NCCL chooses.

What a rank prints when its first communicator starts, with NCCL_DEBUG=INFO (NVIDIA/nccl 2.27.x,
the NCCL of torch 2.8 that SGLang 0.5.x runs on; the texts are the same from 2.18 to 2.29):

- the bootstrap interface, "Bootstrap: Using eth0:10.77.0.11<0>" (bootstrap.cc, subsystem
  BOOTSTRAP), picked by ncclFindInterfaces (misc/socket.cc): NCCL_SOCKET_IFNAME is a list of name
  prefixes, "=" for exact names, "^" for names to leave out; unset, "ib" interfaces first, then
  anything but docker and lo. None matching: "Bootstrap : no socket interface found" (a WARN) and
  the communicator fails with ncclInvalidUsage;
- "NCCL version 2.27.3+cuda12.9" (init.cc showVersion, once per process);
- the IB transport (transport/net_ib.cc ncclIbInit): nothing with NCCL_IB_DISABLE=1; "Failed to open
  libibverbs.so[.1]" without rdma-core in the container; else "NCCL_IB_HCA set to ..." and the
  devices with an ACTIVE port that NCCL_IB_HCA selects (same list syntax, NAME[:PORT]):
  "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.77.0.11<0>", or "NET/IB : No
  device found.";
- without IB, the socket transport: "NET/Socket : Using [0]eth0:10.77.0.11<0>" (net_socket.cc);
- the network picked: "Using network IB" or "Using network Socket" (init.cc); NCCL_NET names one
  (a name no transport offers: "Failed to initialize any NET plugin", plugin/net.cc).

Each line: "<host>:<pid>:<tid> [<cuda dev>] NCCL INFO <text>" (debug.cc), host cut at the first
dot; NCCL_DEBUG_SUBSYS (default INIT,BOOTSTRAP,ENV; "^" inverts) filters by subsystem. The node's
RDMA devices come from the emulated fabric (slurm_ab_testbed.fabric), its interfaces are real.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..fabric import ACTIVE, fault, ib_ports, interfaces

VERSION = "NCCL version 2.27.3+cuda12.9"
INIT, NET, BOOTSTRAP, ENV = "INIT", "NET", "BOOTSTRAP", "ENV"
LEVELS = ("VERSION", "WARN", "INFO", "TRACE")


@dataclass(frozen=True)
class NcclInit:
    lines: tuple[tuple[str, str, str], ...]     # (level, subsystems, text) in print order
    network: str | None                          # "IB", "Socket"; None: the init failed
    error: str | None = None                     # NCCL's last error when it failed

    def printed(self, env: Mapping[str, str], host: str, pid: int, dev: int) -> list[str]:
        """The lines one rank prints under NCCL_DEBUG / NCCL_DEBUG_SUBSYS."""
        level = env.get("NCCL_DEBUG", "").strip().upper()
        if level not in LEVELS:
            return []
        mask = _mask(env.get("NCCL_DEBUG_SUBSYS", ""))
        out = []
        for lvl, subsys, text in self.lines:
            if lvl == "VERSION":
                out.append(text)
            elif lvl == "WARN":
                out.append(f"{host}:{pid}:{pid} [{dev}] {text}")
            elif level in ("INFO", "TRACE") and (subsys == "ALL" or set(subsys.split("|")) & mask):
                out.append(f"{host}:{pid}:{pid} [{dev}] NCCL INFO {text}")
        return out


def _mask(spec: str) -> set[str]:
    every = {INIT, NET, BOOTSTRAP, ENV, "COLL", "P2P", "SHM", "GRAPH", "TUNING", "ALLOC", "CALL",
             "PROXY", "NVLS", "REG", "PROFILE", "RAS"}
    spec = spec.strip()
    if not spec:
        return {INIT, BOOTSTRAP, ENV}
    invert = spec.startswith("^")
    names = {s.strip().upper() for s in spec.lstrip("^").split(",") if s.strip()}
    if "ALL" in names:
        names = every
    return every - names if invert else names


def _selects(spec: str, name: str, port: int | None = None) -> bool:
    """Whether NCCL's interface/HCA list SPEC (prefixes; '=' exact; '^' leave out) takes NAME."""
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    hit = False
    for entry in spec.lstrip("=").split(","):
        entry, _, p = entry.strip().partition(":")
        if not entry:
            continue
        if (name == entry if exact else name.startswith(entry)) and (not p or port is None or str(port) == p):
            hit = True
    return not hit if exclude else hit


def pick_interface(env: Mapping[str, str], ifaces: Sequence[tuple[str, str | None]]) -> tuple[str, str] | None:
    """The interface NCCL's bootstrap and OOB use (ncclFindInterfaces), with its IPv4 address."""
    usable = [(n, a) for n, a in ifaces if a]
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if len(spec) > 1:
        return next(((n, a) for n, a in usable if _selects(spec, n)), None)
    for attempt in ("ib", "^docker,lo", "docker", "lo"):
        found = next(((n, a) for n, a in usable if _selects(attempt, n)), None)
        if found:
            return found
    return None


def nccl_init(env: Mapping[str, str] = os.environ,
              ifaces: Sequence[tuple[str, str | None]] | None = None) -> NcclInit:
    """What NCCL prints and picks on this node."""
    lines: list[tuple[str, str, str]] = []
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if len(spec) > 1:
        lines.append(("INFO", ENV, f"NCCL_SOCKET_IFNAME set by environment to {spec}"))
    iface = pick_interface(env, interfaces() if ifaces is None else ifaces)
    if iface is None:
        msg = "Bootstrap : no socket interface found"
        lines.append(("WARN", "ALL", f"bootstrap.cc:120 NCCL WARN {msg}"))
        return NcclInit(tuple(lines), None, msg)
    oob = f"{iface[0]}:{iface[1]}<0>"
    lines.append(("INFO", BOOTSTRAP, f"Bootstrap: Using {oob}"))
    lines.append(("INFO", "ALL", VERSION))
    ib: list[str] = []
    if env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0"):
        pass
    elif fault(env) == "no_ibverbs":
        lines.append(("INFO", INIT, "Failed to open libibverbs.so[.1]"))
    else:
        hca = env.get("NCCL_IB_HCA")
        if hca is not None:
            lines.append(("INFO", f"{NET}|{ENV}", f"NCCL_IB_HCA set to {hca}"))
        for dev, port, state in ib_ports(env):
            if state == ACTIVE and (not hca or _selects(hca, dev, port)):
                ib.append(f" [{len(ib)}]{dev}:{port}/IB")
        if ib:
            lines.append(("INFO", f"{INIT}|{NET}", f"NET/IB : Using{''.join(ib)} [RO]; OOB {oob}"))
        else:
            lines.append(("INFO", f"{INIT}|{NET}", "NET/IB : No device found."))
    if not ib:
        lines.append(("INFO", f"{INIT}|{NET}", f"NET/Socket : Using [0]{oob}"))
    network = "IB" if ib else "Socket"
    forced = env.get("NCCL_NET", "").strip()
    if forced and forced.lower() != network.lower():
        msg = "Failed to initialize any NET plugin"
        lines.append(("WARN", "ALL", f"net.cc:279 NCCL WARN {msg}"))
        return NcclInit(tuple(lines), None, msg)
    lines.append(("INFO", INIT, f"Using network {network}"))
    return NcclInit(tuple(lines), network)


def host_name() -> str:
    """NCCL's host name: gethostname() up to the first dot (debug.cc, getHostName)."""
    return socket.gethostname().split(".")[0]


def init_error_traceback(error: str) -> str:
    """torch's exception when the communicator cannot start (ProcessGroupNCCL)."""
    return ("Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2960, in run_scheduler_process\n'
            "    scheduler = Scheduler(\n"
            '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce\n'
            "    work = group.allreduce([tensor], opts)\n"
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:3356, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.3\n"
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
            f"Last error:\n{error}")
