"""A stand-in for ``nvidia-smi --query-gpu=... --format=csv,noheader`` on the GPU-less local nodes.

The preflight counts the GPUs a node shows (site setting ``preflight.gpu_command``); the local
site runs this instead of nvidia-smi. It prints one CSV line per emulated GPU with the fields the
query asks for, as nvidia-smi 5xx prints them (``name, driver_version`` -> ``NVIDIA H200, 570.86.15``).

``SLURM_AB_FAKE_GPUS``        GPUs to report (default 8)
``SLURM_AB_FAKE_GPU_NODES``   comma list of Slurm node names (``SLURMD_NODENAME``): report
                              ``SLURM_AB_FAKE_GPUS`` only there, 8 elsewhere (one bad node)
``SLURM_AB_FAKE_GPU_FAIL``    exit with this status and nvidia-smi's driver error instead
"""
from __future__ import annotations

import os
import sys

FIELDS = {
    "index": lambda i: str(i),
    "name": lambda i: "NVIDIA H200 (emulated)",
    "driver_version": lambda i: "570.86.15",
    "memory.total": lambda i: "143771 MiB",
    "uuid": lambda i: f"GPU-00000000-0000-0000-0000-{i:012d}",
}
DEFAULT = 8


def count(env=os.environ) -> int:
    only = [n.strip() for n in env.get("SLURM_AB_FAKE_GPU_NODES", "").split(",") if n.strip()]
    if only and env.get("SLURMD_NODENAME", "") not in only:
        return DEFAULT
    return int(env.get("SLURM_AB_FAKE_GPUS", DEFAULT))


def main(argv: list[str]) -> int:
    fail = os.environ.get("SLURM_AB_FAKE_GPU_FAIL")
    if fail:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")
        return int(fail)
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), "name,driver_version")
    names = [f.strip() for f in query.split(",") if f.strip()]
    bad = [f for f in names if f not in FIELDS]
    if bad:
        print(f'Field "{bad[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    for i in range(count()):
        print(", ".join(FIELDS[f](i) for f in names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
