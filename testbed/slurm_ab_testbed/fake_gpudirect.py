"""A stand-in for the preflight's GPUDirect RDMA check (preflight.gpudirect_command) on the local
nodes, which have neither GPUs nor nvidia_peermem: prints what the real command prints, from the
emulated fabric (slurm_ab_testbed.fabric: SLURM_AB_EMU_GPUDIRECT):

    peermem yes|no        nvidia_peermem (or the older nv_peer_mem) is loaded
    dmabuf yes|no         the GPU driver supports dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)
"""
from __future__ import annotations

import sys

from .fabric import gpudirect


def main() -> int:
    try:
        how = gpudirect()
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print("peermem", "yes" if how == "peermem" else "no")
    print("dmabuf", "yes" if how in ("peermem", "dmabuf") else "no")
    return 0


if __name__ == "__main__":
    sys.exit(main())
