"""The emulated fabric of a local node: which RDMA devices it has and in which state, and its real
network interfaces. One source for the preflight's stand-in (fake_ib) and the emulator's NCCL init
lines (emulator/nccl.py), so both see the same node.

``SLURM_AB_EMU_IB_DEVICES``   RDMA devices every node has, ``mlx5_0,mlx5_1`` (port 1 each, ACTIVE);
                              empty (the default): none, as on the GPU-less local nodes
``SLURM_AB_EMU_IB_FAULT``     ``port_down``: the ports are DOWN (sysfs and NCCL agree: NCCL skips
                              them); ``no_ibverbs``: sysfs shows ACTIVE ports but the container has
                              no libibverbs, so NCCL cannot open them (the preflight cannot see it)
``SLURM_AB_EMU_GPUDIRECT``    how the node's GPU memory reaches the HCAs (GPUDirect RDMA):
                              ``peermem`` (the default: nvidia_peermem loaded), ``dmabuf`` (no
                              peermem, the driver and kernel support dma-buf) or ``none`` (neither:
                              Mooncake and UCX cannot register GPU memory, every KV transfer from
                              or to the node fails; NVIDIA/srt-slurm#429's first failure)
``SLURM_AB_EMU_FAULT_NODES``  limits the fault (and a GPUDirect setting other than peermem) to these
                              Slurm nodes (SLURMD_NODENAME), as for the emulator's faults
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
from typing import Mapping

FAULTS = ("port_down", "no_ibverbs")
GPUDIRECT = ("peermem", "dmabuf", "none")
ACTIVE, DOWN = "4: ACTIVE", "1: DOWN"


def fault(env: Mapping[str, str] = os.environ) -> str:
    """The fabric fault on this node ("" for none); ValueError on an unknown one."""
    name = env.get("SLURM_AB_EMU_IB_FAULT", "").strip()
    if name and name not in FAULTS:
        raise ValueError(f"SLURM_AB_EMU_IB_FAULT={name!r}: choose one of {', '.join(FAULTS)}")
    only = [n.strip() for n in env.get("SLURM_AB_EMU_FAULT_NODES", "").split(",") if n.strip()]
    if only and env.get("SLURMD_NODENAME", "") not in only:
        return ""
    return name


def gpudirect(env: Mapping[str, str] = os.environ) -> str:
    """How this node's GPU memory is registered for RDMA: peermem, dmabuf or none."""
    name = env.get("SLURM_AB_EMU_GPUDIRECT", "").strip() or "peermem"
    if name not in GPUDIRECT:
        raise ValueError(f"SLURM_AB_EMU_GPUDIRECT={name!r}: choose one of {', '.join(GPUDIRECT)}")
    only = [n.strip() for n in env.get("SLURM_AB_EMU_FAULT_NODES", "").split(",") if n.strip()]
    if only and env.get("SLURMD_NODENAME", "") not in only:
        return "peermem"
    return name


def ib_ports(env: Mapping[str, str] = os.environ) -> list[tuple[str, int, str]]:
    """(device, port, sysfs state) of every RDMA port the node shows."""
    state = DOWN if fault(env) == "port_down" else ACTIVE
    out = []
    for item in env.get("SLURM_AB_EMU_IB_DEVICES", "").split(","):
        dev, _, port = item.strip().partition(":")
        if dev:
            out.append((dev, int(port) if port.isdigit() else 1, state))
    return out


def interfaces() -> list[tuple[str, str | None]]:
    """(name, IPv4 address or None) of this process's network interfaces (its namespace's)."""
    out = []
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name[:15].encode())
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
            except OSError:
                addr = None
            out.append((name, addr))
    finally:
        s.close()
    return out
