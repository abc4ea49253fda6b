"""The emulator's side of issue 20: NCCL's init lines chosen from the NCCL_* environment as NCCL
does (IB and socket variants), a replica that hangs but stays alive, SGLang's SIGTERM drain, and
the fabric stand-in the preflight reads."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from slurm_ab_testbed.emulator.nccl import nccl_init
from slurm_ab_testbed.testing import free_ports, http_get, wait_healthy

IFS = [("lo", "127.0.0.1"), ("eth0", "10.77.0.16"), ("ib0", "10.10.0.16")]
INFO = {"NCCL_DEBUG": "INFO"}


def _lines(env, ifs=IFS):
    got = nccl_init(env, ifs)
    return got, got.printed(env, "node06", 4242, 3)


def test_ib_is_used_when_an_active_hca_matches():
    env = {**INFO, "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
           "SLURM_AB_EMU_IB_DEVICES": "mlx5_0,mlx5_1,mlx5_2"}
    got, lines = _lines(env)
    assert got.network == "IB"
    assert lines == [
        "node06:4242:4242 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to =eth0",
        "node06:4242:4242 [3] NCCL INFO Bootstrap: Using eth0:10.77.0.16<0>",
        "node06:4242:4242 [3] NCCL INFO NCCL version 2.27.3+cuda12.9",
        "node06:4242:4242 [3] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1",     # NET|ENV
        "node06:4242:4242 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.77.0.16<0>",
        "node06:4242:4242 [3] NCCL INFO Using network IB"]


@pytest.mark.parametrize("extra,cause", [
    ({}, "NET/IB : No device found."),                                               # no HCA at all
    ({"SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "NCCL_IB_HCA": "mlx5_4"}, "NET/IB : No device found."),
    ({"SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "SLURM_AB_EMU_IB_FAULT": "port_down"}, "NET/IB : No device found."),
    ({"SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "SLURM_AB_EMU_IB_FAULT": "no_ibverbs"}, "Failed to open libibverbs.so[.1]"),
    ({"SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "NCCL_IB_HCA": "^mlx5_0"}, "NET/IB : No device found."),
    ({"SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "NCCL_IB_DISABLE": "1"}, None),
])
def test_sockets_when_no_hca_is_usable(extra, cause):
    got, lines = _lines({**INFO, "NCCL_DEBUG_SUBSYS": "INIT,NET", **extra})
    assert got.network == "Socket"
    text = "\n".join(lines)
    # unset NCCL_SOCKET_IFNAME: ib* interfaces first (misc/socket.cc ncclFindInterfaces)
    assert text.endswith("NCCL INFO NET/Socket : Using [0]ib0:10.10.0.16<0>\n"
                         "node06:4242:4242 [3] NCCL INFO Using network Socket")
    assert (cause in text) if cause else ("NET/IB" not in text and "libibverbs" not in text)
    assert "Bootstrap: Using" not in text          # BOOTSTRAP is not in INIT,NET


def test_fault_nodes_limit_the_fabric_fault():
    env = {**INFO, "SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "SLURM_AB_EMU_IB_FAULT": "no_ibverbs",
           "SLURM_AB_EMU_FAULT_NODES": "node06"}
    assert nccl_init({**env, "SLURMD_NODENAME": "node06"}, IFS).network == "Socket"
    assert nccl_init({**env, "SLURMD_NODENAME": "node05"}, IFS).network == "IB"


def test_no_matching_interface_fails_the_communicator():
    got, lines = _lines({**INFO, "NCCL_SOCKET_IFNAME": "ens"})
    assert got.network is None and got.error == "Bootstrap : no socket interface found"
    assert lines[-1] == "node06:4242:4242 [3] bootstrap.cc:120 NCCL WARN Bootstrap : no socket interface found"
    got, lines = _lines({**INFO, "NCCL_NET": "IB"})          # forced, but no HCA
    assert got.network is None and "Failed to initialize any NET plugin" in lines[-1]


def test_nothing_without_nccl_debug_and_the_subsystem_filter():
    assert _lines({})[1] == [] and _lines({"NCCL_DEBUG": "WARN"})[1] == []
    default = _lines(INFO)[1]                       # INIT,BOOTSTRAP,ENV (debug.cc)
    assert any("Bootstrap: Using" in x for x in default) and any("Using network" in x for x in default)
    only_net = _lines({**INFO, "NCCL_DEBUG_SUBSYS": "NET"})[1]
    assert all("NET/" in x or "NCCL version" in x for x in only_net)


def test_fake_ib_prints_the_fabric_for_the_preflight():
    run = lambda env: subprocess.run([sys.executable, "-m", "slurm_ab_testbed.fake_ib"], capture_output=True,
                                     text=True, env=env)
    base = {"PATH": "/usr/bin:/bin", "SLURM_AB_EMU_IB_DEVICES": "mlx5_0,mlx5_1:2"}
    assert run(base).stdout == "mlx5_0 1 4: ACTIVE\nmlx5_1 2 4: ACTIVE\n"
    assert run({**base, "SLURM_AB_EMU_IB_FAULT": "port_down"}).stdout == "mlx5_0 1 1: DOWN\nmlx5_1 2 1: DOWN\n"
    assert run({**base, "SLURM_AB_EMU_IB_FAULT": "no_ibverbs"}).stdout.count("ACTIVE") == 2   # sysfs looks fine
    assert run({**base, "SLURM_AB_EMU_IB_FAULT": "bogus"}).returncode == 2


# ---- emulator processes -------------------------------------------------------------------------

def _server(procs, model_dir, env=None, extra=()):
    port, dport = free_ports(2)
    argv = ["--model-path", model_dir, "--tp-size", "8", "--nnodes", "1", "--port", str(port),
            "--host", "127.0.0.1", "--enable-metrics", *extra]
    node = procs.start(argv, f"s{port}", {**INFO, **(env or {})})
    return node, f"http://127.0.0.1:{port}"


def _generate(url, n_out, results, timeout=60):
    req = urllib.request.Request(url + "/generate", data=json.dumps(
        {"input_ids": [5] * 500, "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True}}).encode())
    try:
        results.append(json.loads(urllib.request.urlopen(req, timeout=timeout).read())["meta_info"]["completion_tokens"])
    except OSError as e:
        results.append(e)


def _counter(url, name):
    code, body = http_get(url + "/metrics")
    assert code == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_each_gpu_rank_prints_nccls_choice(procs, model_dir):
    node, url = _server(procs, model_dir, {"SLURM_AB_EMU_IB_DEVICES": "mlx5_0", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    assert wait_healthy(url, 30), node.text()
    text = node.text()
    assert text.count("NCCL INFO Using network IB") == 8 and text.count("NET/IB : Using [0]mlx5_0:1/IB") == 8
    assert text.index("NCCL INFO Using network IB") < text.index("Init torch distributed ends.")
    node, url = _server(procs, model_dir, {"NCCL_SOCKET_IFNAME": "nosuch"})
    assert node.wait_exit(30) not in (None, 0)
    text = node.text()
    assert "NCCL WARN Bootstrap : no socket interface found" in text
    assert "Scheduler hit an exception: " in text and "torch.distributed.DistBackendError: NCCL error in:" in text


def test_a_hung_replica_stays_alive_and_a_sigterm_cannot_drain_it(procs, model_dir):
    node, url = _server(procs, model_dir, {"SLURM_AB_EMU_FAULT": "hang_after_requests=2"})
    assert wait_healthy(url, 30), node.text()
    done = []
    for _ in range(2):
        _generate(url, 4, done)
    assert done == [4, 4]
    stuck: list = []
    threads = [threading.Thread(target=_generate, args=(url, 50, stuck, 30), daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    assert stuck == [] and node.p.poll() is None
    finished = _counter(url, "sglang:num_requests_total")       # /metrics answers, the counter stands
    time.sleep(1.0)
    assert _counter(url, "sglang:num_requests_total") == finished
    assert _counter(url, "sglang:num_running_reqs") + _counter(url, "sglang:num_queue_reqs") >= 0
    node.p.send_signal(signal.SIGTERM)
    assert node.wait_log("SIGTERM received. signum=15 frame=<frame at ", 5)
    assert node.wait_log("Gracefully exiting... Remaining number of requests 3.", 5), node.text()
    assert node.wait_exit(1.0) is None                              # only SIGKILL ends it now


def test_sigterm_drains_then_exits(procs, model_dir):
    node, url = _server(procs, model_dir)
    assert wait_healthy(url, 30), node.text()
    done: list = []
    t = threading.Thread(target=_generate, args=(url, 200, done), daemon=True)
    t.start()
    time.sleep(0.3)
    node.p.send_signal(signal.SIGTERM)
    assert node.wait_exit(30) == 0
    t.join(5)
    assert done == [200]                                             # the request in flight finished
    text = node.text()
    assert text.index("SIGTERM received.") < text.index("Gracefully exiting... Remaining number of requests 0. "
                                                        "Remaining requests remaining_rids=[].")
