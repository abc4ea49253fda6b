"""The local cluster's netns layout (issue 13): every Slurm node in its own network namespace and
UTS namespace, with its own address on a private bridge, and the safety net that keeps test
traffic on this machine.

Safety first: no packet may go to a test address unless the fallback route
``unreachable 10.77.0.0/24 metric 4000`` is in place (then, with the bridge or its route gone, a
connect fails at once instead of following the default route off the machine). Every test here
that sends anything to a node address checks the route first (``_assert_fallback``).

The last test takes the shared cluster down and up again (marked ``exclusive``: `make test` runs
it alone, after the side-by-side part): `down` must leave no namespace, link or hosts line behind,
and `up` must remove the leftovers of an interrupted run (a namespace with a process in it, a
veth, a hosts line).
"""
from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers.lanes import nodes as lane_nodes
from slurm_ab_testbed.cluster import (BRIDGE, FALLBACK_METRIC, NS_PREFIX, SUBNET, VETH_PREFIX,
                                      cluster_script, is_up, layout, node_count, run)

pytestmark = pytest.mark.cluster
HOSTS_MARK = "# slurm-ab-cluster"
N = node_count()                     # 9, or 9 per lane when the tests run side by side
NODES = [f"node{i:02d}" for i in range(1, N + 1)]


def our_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(w.split()[0] for w in out.splitlines()
                  if re.fullmatch(rf"{re.escape(NS_PREFIX)}node\d+", w.split()[0] if w.split() else ""))


def our_links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(": ")[1].split("@")[0] for line in out.splitlines() if ": " in line]
    return sorted(n for n in names if n == BRIDGE or re.fullmatch(rf"{VETH_PREFIX}\d+", n))


def fallback_route() -> bool:
    out = subprocess.run(["ip", "route", "show", "type", "unreachable"], capture_output=True, text=True).stdout
    return any(re.match(rf"unreachable {re.escape(SUBNET)}( .*)? metric {FALLBACK_METRIC}\b", line)
               for line in out.splitlines())


def hosts_lines() -> list[str]:
    return [line for line in Path("/etc/hosts").read_text().splitlines() if HOSTS_MARK in line]


def _assert_fallback() -> None:
    assert fallback_route(), f"no 'unreachable {SUBNET} metric {FALLBACK_METRIC}' route: refusing to send"


@pytest.fixture(scope="module")
def netns_cluster(local_cluster):
    if layout() != "netns":
        msg = (f"the local cluster runs the {layout()} layout (SLURM_AB_CLUSTER_NET=netns make "
               "cluster-down cluster-up for this one)")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    _assert_fallback()


def node_addrs() -> dict[str, tuple[str, str]]:
    """{node: (NodeAddr, NodeHostName)} from scontrol."""
    out = run("scontrol", "show", "node", "-o").stdout
    got = {}
    for line in out.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        got[kv["NodeName"]] = (kv.get("NodeAddr", ""), kv.get("NodeHostName", ""))
    return got


def test_fallback_route_exists_whenever_the_namespaces_do():
    """Checked in every layout: namespaces of ours never exist without the fallback route."""
    ns, links = our_namespaces(), our_links()
    assert fallback_route() or not (ns or BRIDGE in links), (ns, links)
    if layout() == "netns":
        assert ns == [f"{NS_PREFIX}{n}" for n in NODES]


def test_distinct_addresses_in_slurm_and_hosts(netns_cluster):
    addrs = node_addrs()
    assert sorted(addrs) == NODES
    ips = [a for a, _ in addrs.values()]
    assert len(set(ips)) == N
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(SUBNET) for a in ips), ips
    assert all(h == n for n, (_, h) in addrs.items()), addrs
    # /etc/hosts: one marked line per node, name -> its NodeAddr (the resolver agrees)
    lines = {line.split()[1]: line.split()[0] for line in hosts_lines()}
    assert lines == {n: a for n, (a, _) in addrs.items()}
    for n, (a, _) in addrs.items():
        assert subprocess.run(["getent", "hosts", n], capture_output=True, text=True).stdout.split()[0] == a


def test_every_step_runs_in_its_nodes_namespace_with_its_hostname(netns_cluster):
    """A 9-node step (this worker's lane): each task sees its node's hostname (UTS namespace), its own network
    namespace (not the host's, not another node's), and its own address on eth0; slurmd itself
    runs in the namespace named after the node."""
    _assert_fallback()
    script = ('echo "$SLURMD_NODENAME $(hostname) $(readlink /proc/self/ns/net) '
              '$(python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
              "s.connect(('10.77.0.1', 9)); print(s.getsockname()[0])\")\"")
    proc = run("srun", "-N9", "--ntasks-per-node=1", "-t", "1", "--job-name=slurm-ab-test-netns",
               "bash", "-c", script, timeout=90)
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.strip()}
    assert sorted(rows) == lane_nodes()[:9], proc.stdout + proc.stderr    # (no lane: the cluster's first 9)
    host_ns = os.readlink("/proc/self/ns/net")
    addrs = node_addrs()
    assert len({ns for _, ns, _ in rows.values()} | {host_ns}) == 10
    for node, (hostname, ns, addr) in rows.items():
        assert hostname == node and addr == addrs[node][0], (node, hostname, addr)
        # the step's namespace is the node's named namespace (same inode as /run/netns/sab-nodeNN)
        assert ns == f"net:[{os.stat(f'/run/netns/{NS_PREFIX}{node}').st_ino}]"
        pid = int(Path(f"/var/lib/slurm-ab-cluster/run/slurmd.{node}.pid").read_text())
        assert os.readlink(f"/proc/{pid}/ns/net") == ns


def test_status_names_the_layout(netns_cluster):
    out = subprocess.run(["bash", str(cluster_script()), "status"], capture_output=True, text=True).stdout
    assert re.search(rf"^network +netns: {N} namespaces", out, re.M), out
    assert re.search(rf"^fallback +unreachable {re.escape(SUBNET)} metric {FALLBACK_METRIC}", out, re.M), out


@pytest.mark.slow
@pytest.mark.exclusive
def test_down_leaves_nothing_and_up_removes_leftovers(netns_cluster):
    """The shared cluster goes down and up again (``exclusive``: nothing else may run meanwhile).
    `down` removes every namespace, link and hosts line (the fallback route stays: it only ever
    refuses traffic). Then leftovers of an interrupted run are planted (a namespace with a
    process in it, a veth pair, a stale hosts line) and `up` must clean them and come back."""
    script = ["bash", str(cluster_script())]
    t = time.monotonic()
    down = subprocess.run([*script, "down"], capture_output=True, text=True, timeout=180)
    t_down = time.monotonic() - t
    try:
        assert down.returncode == 0, down.stderr
        assert our_namespaces() == [] and our_links() == [], (our_namespaces(), our_links())
        assert hosts_lines() == []
        assert fallback_route()
        # leftovers of an interrupted run
        subprocess.run(["ip", "netns", "add", f"{NS_PREFIX}node03"], check=True)
        subprocess.run(["ip", "link", "add", f"{VETH_PREFIX}07", "type", "veth", "peer", "name", "sabtmp07"], check=True)
        sleeper = subprocess.Popen(["nsenter", f"--net=/run/netns/{NS_PREFIX}node03", "sleep", "600"])
        with open("/etc/hosts", "a") as f:
            f.write(f"10.77.0.99 node99 {HOSTS_MARK}\n")
    finally:
        t = time.monotonic()
        up = subprocess.run([*script, "up"], capture_output=True, text=True, timeout=300)
        t_up = time.monotonic() - t
    assert up.returncode == 0, up.stderr[-3000:]
    assert sleeper.wait(10) is not None                     # ended by up (it ran in our namespace)
    assert "removing the node network of an earlier run" in up.stderr
    assert our_namespaces() == [f"{NS_PREFIX}{n}" for n in NODES]
    assert sorted(our_links()) == sorted([BRIDGE] + [f"{VETH_PREFIX}{i:02d}" for i in range(1, N + 1)])
    assert "sabtmp07" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert len(hosts_lines()) == N and not any("node99" in line for line in hosts_lines())
    assert fallback_route() and layout() == "netns" and is_up(min_nodes=N)
    print(f"MEASURE cluster down: {t_down:.1f} s, up (netns, leftovers cleaned): {t_up:.1f} s")
