"""A stand-in for the preflight's RDMA listing (``/sys/class/infiniband/*/ports/*/state``) on the
local nodes, which have no HCAs: prints "DEVICE PORT STATE" per port of the emulated fabric
(slurm_ab_testbed.fabric: SLURM_AB_EMU_IB_DEVICES, SLURM_AB_EMU_IB_FAULT), as the site's
``preflight.hca_command`` prints the real ones.
"""
from __future__ import annotations

import sys

from .fabric import ib_ports


def main() -> int:
    try:
        ports = ib_ports()
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    for dev, port, state in ports:
        print(f"{dev} {port} {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
