"""The preflight's site checks (issue 20), run in bash on the rendered script's own functions:
the interfaces of NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, the HCAs of NCCL_IB_HCA with an ACTIVE
port, the cache directory every step writes to, and the client's tokenizer on ROUTER_HOST."""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from helpers import NO_IMPORT
from helpers.scripts import generated, render, static

FAKE_IB = 'preflight.hca_command=["python3", "-m", "slurm_ab_testbed.fake_ib"]'


def ifaces() -> str:
    return ",".join(n for _, n in socket.if_nameindex())


def write_check(run_dir: Path, *sets: str, job_id: int = 77) -> Path:
    """Render the local site's tp32 script (with SETS) and let its own functions and settings
    write preflight/check.sh, as the job's first step does."""
    # the test's own cache directory unless SETS name one: the local site's is the cluster's
    script = render("tp32", site="local", sets=(f'cache.dir="{run_dir}/cache"', *sets))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    harness = run_dir / "harness.sh"
    harness.write_text(f"SLURM_JOB_ID={job_id}\n" + generated(script) + static(script)
                       + f"trap - EXIT TERM INT USR1\nRUN_DIR={run_dir}\nwrite_preflight_script\n")
    r = subprocess.run(["bash", str(harness)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return run_dir / "preflight" / "check.sh"


def run_check(check: Path, node: str, g: int, rank: int, *ports: int, env: dict | None = None) -> dict:
    e = {**os.environ, "SLURMD_NODENAME": node, "SLURM_NODEID": str(rank), "SLURM_AB_FAKE_GPUS": "8", **(env or {})}
    r = subprocess.run(["bash", str(check), str(g), *map(str, ports)], capture_output=True, text=True, env=e,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads((check.parent / f"{node}.json").read_text())


def causes(report: dict) -> list[tuple[str, str]]:
    return [(p["check"], p["cause"]) for p in report["problems"]]


def fabric(check, **env):
    return [c for c in causes(run_check(check, "nodeA", 1, 2, env=env)) if c[0] == "fabric"]


def test_socket_interfaces(tmp_path):
    check = write_check(tmp_path, NO_IMPORT)

    def steady(**env):
        """fabric() and the host's interfaces while it ran (other tests' namespaces come and go
        on this host: a check is only compared with the interfaces it saw)."""
        for _ in range(5):
            before = ifaces()
            got = fabric(check, **env)
            if ifaces() == before:
                return got, before
        raise AssertionError("the host's interfaces kept changing")

    assert steady(NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")[0] == []
    assert steady(NCCL_SOCKET_IFNAME="=lo")[0] == [] and steady(NCCL_SOCKET_IFNAME="l")[0] == []
    got, seen = steady(NCCL_SOCKET_IFNAME="ib")
    assert got == [("fabric", f"NCCL_SOCKET_IFNAME=ib matches no interface here (interfaces: {seen})")]
    got, seen = steady(NCCL_SOCKET_IFNAME="=l")
    assert got == [("fabric", f"NCCL_SOCKET_IFNAME==l matches no interface here (interfaces: {seen})")]
    # an exclusion list needs one interface left that is not loopback
    for _ in range(5):
        other = [n for n in ifaces().split(",") if n != "lo"]
        got, seen = steady(NCCL_SOCKET_IFNAME="^" + ",".join(other))
        if [n for n in seen.split(",") if n != "lo"] == other:
            break
    assert got == [
        ("fabric", f"NCCL_SOCKET_IFNAME=^{','.join(other)} matches no interface here (interfaces: {seen})")]
    # Gloo takes exact names, each must exist
    got, seen = steady(GLOO_SOCKET_IFNAME="lo,ib0")
    assert got == [("fabric", f"GLOO_SOCKET_IFNAME=lo,ib0: interface ib0 does not exist here (interfaces: {seen})")]


def test_hcas_of_nccl_ib_hca_need_an_active_port(tmp_path):
    check = write_check(tmp_path, NO_IMPORT, FAKE_IB)
    dev = {"SLURM_AB_EMU_IB_DEVICES": "mlx5_0,mlx5_1"}
    assert fabric(check, NCCL_IB_HCA="mlx5", **dev) == []
    assert fabric(check, NCCL_IB_HCA="mlx5_0:1,mlx5_1", **dev) == []
    assert fabric(check, NCCL_IB_HCA="mlx5_0,mlx5_3", **dev) == [
        ("fabric", "NCCL_IB_HCA=mlx5_0,mlx5_3: no RDMA device mlx5_3 here (devices: mlx5_0,mlx5_1)")]
    assert fabric(check, NCCL_IB_HCA="=mlx5", **dev) == [
        ("fabric", "NCCL_IB_HCA==mlx5: no RDMA device mlx5 here (devices: mlx5_0,mlx5_1)")]
    assert fabric(check, NCCL_IB_HCA="mlx5_0:2", **dev) == [
        ("fabric", "NCCL_IB_HCA=mlx5_0:2: no RDMA device mlx5_0:2 here (devices: mlx5_0,mlx5_1)")]
    assert fabric(check, NCCL_IB_HCA="mlx5_1", SLURM_AB_EMU_IB_FAULT="port_down", **dev) == [
        ("fabric", "NCCL_IB_HCA=mlx5_1: mlx5_1 has no ACTIVE port (state 1: DOWN): NCCL would fall back to sockets")]
    assert fabric(check, NCCL_IB_HCA="^mlx5_0", **dev) == []          # no IB declared: not required


def test_an_ib_site_needs_an_active_port(tmp_path):
    check = write_check(tmp_path, NO_IMPORT, FAKE_IB, 'cluster.nccl_network="IB"')
    assert fabric(check, SLURM_AB_EMU_IB_DEVICES="mlx5_0") == []
    assert fabric(check) == [("fabric", "no ACTIVE RDMA port here, and cluster.nccl_network is IB")]
    assert fabric(check, NCCL_IB_HCA="^mlx5_0", SLURM_AB_EMU_IB_DEVICES="mlx5_0") == [
        ("fabric", "no ACTIVE RDMA port here outside NCCL_IB_HCA=^mlx5_0, and cluster.nccl_network is IB")]


def test_the_cache_directory_must_be_writable(tmp_path):
    check = write_check(tmp_path / "ok", NO_IMPORT, f'cache.dir="{tmp_path}/cache"')
    report = run_check(check, "nodeA", 0, 1)
    assert report["ok"] and (tmp_path / "cache" / "slurm-ab-77").is_dir()
    assert list((tmp_path / "cache" / "slurm-ab-77").iterdir()) == []        # the probe is gone
    (tmp_path / "afile").write_text("")
    check = write_check(tmp_path / "bad", NO_IMPORT, f'cache.dir="{tmp_path}/afile"')
    got = causes(run_check(check, "nodeA", 0, 1))
    assert got[0][0] == "cache" and got[0][1].startswith(
        f"cache directory {tmp_path}/afile/slurm-ab-77 is not writable: mkdir: cannot create directory ")
    assert got[0][1].endswith(": Not a directory")


TOKENIZER = ('preflight.tokenizer_command=["python3", "-c", "import sys; from transformers import AutoTokenizer; '
             'print(len(AutoTokenizer.from_pretrained(sys.argv[1])))"]')


@pytest.mark.parametrize("tokenizer,ok", [("{model}", True), ("/nonexistent/tokenizer", False)])
def test_the_clients_tokenizer_loads_on_the_routers_node(tmp_path, model_dir, tokenizer, ok):
    check = write_check(tmp_path, NO_IMPORT, TOKENIZER, f'paths.tokenizer="{tokenizer.format(model=model_dir)}"',
                        "preflight.enabled=true")
    head = run_check(check, "nodeA", 0, 0)
    tok = [c for c in causes(head) if c[0] == "tokenizer"]
    if ok:
        from slurm_ab_testbed.make_model import mooncake_words      # the model's words after its 4000 w words
        assert tok == [] and (check.parent / "nodeA.tokenizer").read_text().strip().endswith(
            str(4000 + len(mooncake_words())))
    else:
        assert tok[0][1].startswith("tokenizer /nonexistent/tokenizer does not load (status 1): ")
        assert "Error" in tok[0][1]
    other = run_check(check, "nodeB", 0, 1)                   # only ROUTER_HOST loads it
    assert not [c for c in causes(other) if c[0] == "tokenizer"]
    assert not (check.parent / "nodeB.tokenizer").exists()


def test_the_clients_modules_are_imported_by_the_clients_python(tmp_path):
    # a client installed in an environment of its own (a venv's python3, as the 0.5.2 config's):
    # its module imports there and nowhere else; the site's python3 imports the server's modules
    env_dir = tmp_path / "client-env"
    (env_dir / "only_in_client_env").mkdir(parents=True)
    (env_dir / "only_in_client_env" / "__init__.py").write_text("__version__ = '9.9'\n")
    py = tmp_path / "client-python3"
    py.write_text(f'#!/bin/bash\nPYTHONPATH={env_dir} exec python3 "$@"\n')
    py.chmod(0o755)
    sets = ('preflight.enabled=true', 'preflight.tokenizer_command=[]',
            f'client_profiles.sglang_0_5_23.command=["{py}", "-m", "only_in_client_env"]',
            'client_profiles.sglang_0_5_23.module="only_in_client_env"',
            'client_profiles.sglang_0_5_23.distribution=""')
    check = write_check(tmp_path, *sets)
    head = run_check(check, "nodeA", 0, 0)
    assert not [c for c in causes(head) if c[0] == "import"], causes(head)
    assert head["modules"]["only_in_client_env"] == "9.9"
    assert "slurm_ab_testbed.emulator" in head["modules"]
    other = run_check(check, "nodeB", 0, 1)                   # only ROUTER_HOST imports the client's
    assert "only_in_client_env" not in other["modules"] and not causes(other)
    # the client run by the site's python3 (the default): one import, where the module is absent
    check = write_check(tmp_path / "plain", *sets[:2], 'client_profiles.sglang_0_5_23.module="only_in_client_env"',
                        'client_profiles.sglang_0_5_23.distribution=""')
    assert [c[1] for c in causes(run_check(check, "nodeA", 0, 0)) if c[0] == "import"] == [
        "module only_in_client_env is not importable: ModuleNotFoundError: No module named 'only_in_client_env'"]
