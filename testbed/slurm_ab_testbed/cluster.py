"""Helpers for the local multi-node test cluster (``testbed/slurm_ab_testbed/cluster.sh``).

Kept tiny and stdlib-only: the tool and the tests import this to find the script, to check whether
the cluster answers, and to run Slurm client commands against it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = [
    "cluster_dir",
    "cluster_script",
    "ctld_running",
    "is_up",
    "layout",
    "net",
    "node_states",
    "run",
    "slurm_conf",
    "slurm_env",
]

# The netns layout's fixed names (cluster.sh: NS_PREFIX, BRIDGE, VETH_PREFIX, SUBNET).
NS_PREFIX = "sab-"
BRIDGE = "sabbr0"
VETH_PREFIX = "sabv"
SUBNET = "10.77.0.0/24"
FALLBACK_METRIC = 4000

DEFAULT_DIR = "/var/lib/slurm-ab-cluster"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
USABLE_STATES = frozenset({"idle", "alloc", "mix", "comp"})


def cluster_script() -> Path:
    """Path of ``cluster.sh`` (install | up | down [--purge] | status | env)."""
    return Path(__file__).resolve().with_name("cluster.sh")


def cluster_dir() -> Path:
    """The cluster's state directory (``$SLURM_AB_CLUSTER_DIR`` or the default)."""
    return Path(os.environ.get("SLURM_AB_CLUSTER_DIR") or DEFAULT_DIR)


def slurm_conf() -> Path:
    """The slurm.conf written by ``cluster.sh up``."""
    return cluster_dir() / "etc" / "slurm.conf"


def slurm_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Slurm client commands.

    Keeps an explicit ``SLURM_CONF``; otherwise points it at the cluster's conf when that exists
    (so clients work even when /etc/slurm/slurm.conf is not our symlink).
    """
    out = dict(os.environ if env is None else env)
    if "SLURM_CONF" not in out and slurm_conf().is_file():
        out["SLURM_CONF"] = str(slurm_conf())
    return out


def run(*cmd: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command (``run("sacct", "-j", "12")``) with :func:`slurm_env`.

    Returns the CompletedProcess (text stdout/stderr); raises CalledProcessError when ``check``
    and the command fails.
    """
    return subprocess.run(
        list(cmd), env=slurm_env(), capture_output=True, text=True, timeout=timeout, check=check
    )


def ctld_running() -> bool:
    """Fast local check: the pid in the cluster's slurmctld.pid is a live ``slurmctld``.

    (sinfo against a stopped controller retries for ~10 s before failing; this does not.)
    """
    try:
        pid = int((cluster_dir() / "run" / "slurmctld.pid").read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    state = stat[stat.rfind(")") + 2 :].split(" ", 1)[0]
    return comm == "slurmctld" and state != "Z"


def node_count() -> int:
    """How many nodes the cluster was last started with (cluster.sh up records it; 9 before that)."""
    try:
        return int((cluster_dir() / "etc" / "nodes").read_text())
    except (OSError, ValueError):
        return 9


def node_states() -> dict[str, str]:
    """``{node: compact state}`` from ``sinfo -N`` (e.g. ``{"node01": "idle"}``); {} if unreachable."""
    if shutil.which("sinfo") is None:
        return {}
    try:
        proc = run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0:
        return {}
    states: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def is_up(min_nodes: int = 1) -> bool:
    """True when the local cluster's slurmctld runs, sinfo answers and at least ``min_nodes`` nodes
    exist, all idle/alloc/mix/comp."""
    if not ctld_running():
        return False
    states = node_states()
    return len(states) >= min_nodes and all(s in USABLE_STATES for s in states.values())


def layout() -> str:
    """The running cluster's network layout: ``netns`` or ``localhost`` (cluster.sh up records it)."""
    try:
        return (cluster_dir() / "etc" / "layout").read_text().strip() or "localhost"
    except OSError:
        return "localhost"


def net(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """A network fault of the netns layout through cluster.sh (needs root), e.g.
    ``net("link", "node06", "down")``, ``net("rate", "node05", "400kbit")``,
    ``net("block", "node01", "node05", "31000")``, ``net("names", "ib")``; raises on failure."""
    return subprocess.run(["bash", str(cluster_script()), *args], capture_output=True, text=True,
                          timeout=timeout, check=True)
