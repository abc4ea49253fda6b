"""The fake nvidia-smi in query mode (fields, header names, units and formats as the real tool
prints them: shared/research/gpu-telemetry.md), values scripted from the node's emulated activity
so that energy is exactly computable, the throttle and sample-gap faults, and the emulator
publishing its activity on every node of a replica."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_ab_testbed.fake_gpus import Query, header, main, parse_args, rows
from slurm_ab_testbed.gpu_activity import (Activity, ActivityLog, GpuFault, activity_path, expected_energy_j,
                                           load_config, parse_fault, read_activity)
from slurm_ab_testbed.testing import free_ports, wait_healthy

TELEMETRY = ("power.draw,clocks.sm,clocks.mem,utilization.gpu,memory.used,temperature.gpu,"
             "clocks_throttle_reasons.active")
CFG = load_config()


def run(args, env=None, timeout=20):
    return subprocess.run([sys.executable, "-m", "slurm_ab_testbed.fake_gpus", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def activity(*events) -> Activity:
    a = Activity()
    for e in events:
        a.feed(e)
    return a


# ---- formats -------------------------------------------------------------------------------------

def test_header_names_units_and_nounits():
    q = parse_args([f"--query-gpu={TELEMETRY}", "--format=csv"])
    assert header(q) == ("power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz], utilization.gpu [%], "
                         "memory.used [MiB], temperature.gpu, clocks_event_reasons.active")
    idle = activity("S 0 8 52000")
    assert rows(q, 100.0, 1.0, idle, GpuFault(), CFG, 2) == [
        "80.00 W, 345 MHz, 3201 MHz, 0 %, 52000 MiB, 38, 0x0000000000000001"] * 2
    q = parse_args(["--query-gpu", TELEMETRY, "--format", "csv,noheader,nounits"])
    busy = activity("S 0 8 52000", "B 10")
    assert rows(q, 100.0, 1.0, busy, GpuFault(), CFG, 1) == ["620.00, 1980, 3201, 100, 52000, 67, 0x0000000000000000"]
    half = activity("S 0 8 52000", "B 99.5", "I 100")
    assert rows(q, 100.0, 1.0, half, GpuFault(), CFG, 1) == ["350.00, 1980, 3201, 50, 52000, 52, 0x0000000000000000"]
    assert rows(q, 100.0, 1.0, activity("S 0 8 52000", "X 50"), GpuFault(), CFG, 1)[0].split(", ")[4] == "0"


def test_the_preflight_query_is_unchanged_and_bad_fields_fail_like_nvidia_smi():
    r = run(["--query-gpu=name,driver_version", "--format=csv,noheader"], {"SLURM_AB_FAKE_GPUS": "3"})
    assert r.returncode == 0 and r.stdout.splitlines() == ["NVIDIA H200 (emulated), 570.86.15"] * 3
    r = run(["--query-gpu=power.draw,total_energy_consumption", "--format=csv"])
    assert r.returncode == 2 and r.stdout == "" and \
        r.stderr.strip() == 'Field "total_energy_consumption" is not a valid field to query.'
    assert run(["--bogus"]).returncode == 2
    r = run(["--query-gpu=timestamp,index,clocks_event_reasons.gpu_idle,clocks_event_reasons.hw_slowdown",
             "--format=csv,noheader", "-i", "1"], {"SLURM_AB_EMU_GPU_STATE_DIR": "/nonexistent"})
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}, 1, Active, Not Active\n", r.stdout)


# ---- the script: utilisation, power, exact energy ------------------------------------------------

def test_energy_is_exact_and_samples_integrate_to_it(tmp_path):
    env = {"SLURM_AB_EMU_GPU_STATE_DIR": str(tmp_path), "SLURMD_NODENAME": "node42", "SLURM_AB_FAKE_GPUS": "4"}
    log = ActivityLog(activity_path(env))
    log.start(1000.0, 8, 60000)
    for a, b in ((1001.0, 1003.5), (1004.0, 1004.25), (1007.0, 1010.0)):
        log.mark(True, a)
        log.mark(False, b)
    log.mark(True, 1012.0)
    act = read_activity(activity_path(env))
    assert act.busy_seconds(1000, 1011) == pytest.approx(5.75) and act.busy_seconds(1011, 1013) == pytest.approx(1)
    assert act.busy_seconds(1003, 1007.5) == pytest.approx(0.5 + 0.25 + 0.5)
    # 4 GPUs x (80 W x 13 s + 540 W x 6.75 busy s)
    assert expected_energy_j(1000, 1013, env=env) == pytest.approx(4 * (80 * 13 + 540 * 6.75))
    # samples every 0.5 s, each the average since the previous one: the rectangle sum is exact
    q = Query(("power.draw",), False, False)
    ts = [1000 + 0.5 * k for k in range(1, 27)]
    watts = [float(rows(q, t, 0.5, act, GpuFault(), CFG, 1)[0]) for t in ts]
    assert sum(w * 0.5 for w in watts) * 4 == pytest.approx(expected_energy_j(1000, 1013, env=env), rel=1e-4)


def test_throttled_node_lower_clock_reasons_and_power(tmp_path):
    env = {"SLURM_AB_FAKE_GPU_FAULT": "throttle", "SLURM_AB_FAKE_GPU_FAULT_NODES": "node12",
           "SLURM_AB_EMU_GPU_STATE_DIR": str(tmp_path)}
    assert parse_fault({**env, "SLURMD_NODENAME": "node12"}) == GpuFault(throttle=True)
    assert parse_fault({**env, "SLURMD_NODENAME": "node13"}) == GpuFault()
    with pytest.raises(ValueError):
        parse_fault({"SLURM_AB_FAKE_GPU_FAULT": "melt"})
    q = parse_args([f"--query-gpu={TELEMETRY}", "--format=csv,noheader"])
    busy = activity("S 0 8 1", "B 1")
    assert rows(q, 10.0, 1.0, busy, GpuFault(throttle=True), CFG, 1) == [
        "430.00 W, 1215 MHz, 3201 MHz, 100 %, 1 MiB, 88, 0x0000000000000048"]
    assert rows(q, 10.0, 1.0, activity("S 0 8 1"), GpuFault(throttle=True), CFG, 1)[0].endswith("0x0000000000000049")
    log = ActivityLog(activity_path({**env, "SLURMD_NODENAME": "node12"}))
    log.start(0.0, 8, 1)
    log.mark(True, 1.0)
    log.stop(3.0)
    assert expected_energy_j(0, 4, node="node12", env=env, gpus=1) == pytest.approx(80 * 4 + 350 * 2)
    assert expected_energy_j(0, 4, node="node13", env=env, gpus=1) == pytest.approx(0 + 80 * 4)


def test_looping_sampler_rows_and_the_gap_fault(tmp_path):
    env = {"SLURM_AB_EMU_GPU_STATE_DIR": str(tmp_path), "SLURMD_NODENAME": "node07", "SLURM_AB_FAKE_GPUS": "2"}
    log = ActivityLog(activity_path(env))
    log.start(time.time() - 10, 8, 1000)
    log.mark(True, time.time() - 5)          # busy throughout: the gap comes after 2 busy s of sampling
    cmd = [sys.executable, "-m", "slurm_ab_testbed.fake_gpus", "--query-gpu=timestamp,index,power.draw,utilization.gpu",
           "--format=csv,noheader,nounits", "-lms", "200"]
    for fault, want_gap in ((None, False), ("gap=1.5", True)):
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **env, **({"SLURM_AB_FAKE_GPU_FAULT": fault} if fault else {})})
        first = p.stdout.readline()              # sampling started (Python's start-up is not a gap)
        time.sleep(4.0)                          # the gap (2 busy s in, 1.5 s) ends by 3.5 s
        p.terminate()
        out = (first + p.stdout.read()).splitlines()  # (communicate() would skip what readline buffered)
        assert p.wait(10) == 0
        stamps = sorted({time.mktime(time.strptime(x.split(", ")[0][:19], "%Y/%m/%d %H:%M:%S"))
                         + int(x.split(", ")[0][20:]) / 1000 for x in out})
        assert all(x.split(", ")[2:] == ["620.00", "100"] for x in out)
        per_stamp = [sum(x.startswith(x0.split(", ")[0] + ",") for x in out) for x0 in out[::2]]
        assert set(per_stamp[:-1]) == {2}, out          # both GPUs per row time (SIGTERM may cut the last)
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        assert len(stamps) >= 5 and (max(gaps) > 1.4) == want_gap and min(gaps) > 0.1, gaps
    log.stop(time.time())


def test_main_is_the_module_entry(capsys):
    assert main(["--query-gpu=index", "--format=csv,noheader", "--id=0,1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["0", "1"]


# ---- the emulator publishes every node's activity ------------------------------------------------

def test_emulator_nodes_publish_busy_and_idle(procs, model_dir, tmp_path):
    port, dport = free_ports(2)
    state = {"SLURM_AB_EMU_GPU_STATE_DIR": str(tmp_path), "SLURM_AB_EMU_TIME_SCALE": "0.01"}
    nodes = []
    for rank in (1, 0):
        argv = ["--model-path", model_dir, "--tp-size", "16", "--nnodes", "2", "--node-rank", str(rank),
                "--dist-init-addr", f"127.0.0.1:{dport}", "--port", str(port), "--chunked-prefill-size", "8192"]
        nodes.append(procs.start(argv, f"n{rank}", {**state, "SLURMD_NODENAME": f"node{60 + rank}"}))
        time.sleep(0.3)
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url, 40), nodes[1].text()
    import json
    import urllib.request
    t0 = time.time()
    req = urllib.request.Request(url + "/generate", json.dumps(
        {"input_ids": [5] * 8000, "sampling_params": {"max_new_tokens": 60}}).encode())
    urllib.request.urlopen(req, timeout=60).read()
    t1 = time.time()
    time.sleep(0.5)
    for node in ("node60", "node61"):
        lines = Path(tmp_path, f"{node}.activity").read_text().splitlines()
        assert lines[0].startswith("S ") and lines[0].split()[2] == "8" and int(lines[0].split()[3]) > 0
        act = read_activity(Path(tmp_path, f"{node}.activity"))
        # prefill 8000 tokens + 59 decode steps at scale 0.01: about a second of work
        assert 0.3 * (t1 - t0) < act.busy_seconds(t0, t1 + 0.5) <= t1 + 0.5 - t0
        assert not act.busy_at(time.time())


def test_sampled_energy_of_an_emulated_run_matches_the_exact_integral(procs, model_dir, tmp_path):
    """A sampler at 250 ms beside a real emulated server: sum(power x interval) over its samples is
    the exact energy of expected_energy_j within 1 % (the product's J/token check)."""
    import json
    import urllib.request
    env = {"SLURM_AB_EMU_GPU_STATE_DIR": str(tmp_path), "SLURMD_NODENAME": "node70", "SLURM_AB_FAKE_GPUS": "8"}
    port, = free_ports(1)
    p = procs.start(["--model-path", model_dir, "--tp-size", "8", "--port", str(port)], "node",
                    {**env, "SLURM_AB_EMU_TIME_SCALE": "0.02"})
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url, 30), p.text()
    sampler = procs.start([sys.executable, "-m", "slurm_ab_testbed.fake_gpus", "--query-gpu=timestamp,index,power.draw",
                           "--format=csv,noheader,nounits", "-lms", "250"], "sampler", env, module=False)
    time.sleep(1.5)
    for n_in in (8000, 3000, 12000):
        req = urllib.request.Request(url + "/generate", json.dumps(
            {"input_ids": [5 + n_in % 7] * n_in, "sampling_params": {"max_new_tokens": 40}}).encode())
        urllib.request.urlopen(req, timeout=60).read()
        time.sleep(0.6)
    sampler.p.terminate()
    sampler.wait_exit(10)
    samples = {}
    for line in sampler.text().splitlines():
        stamp, idx, watts = line.split(", ")
        t = time.mktime(time.strptime(stamp[:19], "%Y/%m/%d %H:%M:%S")) + int(stamp[20:]) / 1000
        samples.setdefault(t, []).append(float(watts))
    ts = sorted(samples)
    assert len(ts) > 8 and all(len(samples[t]) == 8 for t in ts)
    measured = sum(sum(samples[b]) * (b - a) for a, b in zip(ts, ts[1:]))
    exact = expected_energy_j(ts[0], ts[-1], env=env)
    assert measured == pytest.approx(exact, rel=0.01)
    assert exact > 1.2 * 8 * 80 * (ts[-1] - ts[0])                 # the requests' work is in it


def test_dcgm_exporter_stand_in(tmp_path):
    """fake_dcgm serves dcgm-exporter's default families; the energy counter's difference over a
    window is the exact energy of the window."""
    from prometheus_client.parser import text_string_to_metric_families

    from slurm_ab_testbed.fake_dcgm import COUNTERS, Exporter

    class parse_scrape:                                           # noqa: N801 (sum per family, types)
        def __init__(self, text):
            fams = list(text_string_to_metric_families(text))
            self.types = {f.name: f.type for f in fams}
            self.sums = {}
            for f in fams:
                for smp in f.samples:                             # (the parser adds _total to counters)
                    self.sums[f.name] = self.sums.get(f.name, 0.0) + smp.value

        def total(self, name):
            return self.sums.get(name)
    env = {"SLURM_AB_EMU_GPU_STATE_DIR": str(tmp_path), "SLURMD_NODENAME": "node33", "SLURM_AB_FAKE_GPUS": "2"}
    log = ActivityLog(activity_path(env))
    log.start(100.0, 8, 50000)
    ex = Exporter(env)
    ex.boot = 100.0
    log.mark(True, 110.0)
    log.mark(False, 114.0)
    a, b = parse_scrape(ex.render(105.0)), parse_scrape(ex.render(113.5))
    energy = lambda sc: sc.total("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") / 1000      # noqa: E731 (J, 2 GPUs)
    assert energy(b) - energy(a) == pytest.approx(expected_energy_j(105.0, 113.5, env=env), rel=1e-6)
    assert b.total("DCGM_FI_DEV_GPU_UTIL") == 200 and a.total("DCGM_FI_DEV_GPU_UTIL") == 0
    assert b.total("DCGM_FI_DEV_POWER_USAGE") == pytest.approx(2 * 620)
    assert b.total("DCGM_FI_DEV_FB_USED") == 2 * 50000 and b.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    text = ex.render(113.5)
    assert len([x for x in text.splitlines() if x.startswith("# TYPE")]) == len(COUNTERS)
    assert ('DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-00000000-0000-0000-0000-000000000001",pci_bus_id="00000000:28:00.0",'
            'device="nvidia1",modelName="NVIDIA H200 (emulated)",Hostname="node33",DCGM_FI_DRIVER_VERSION="570.86.15"} 1980') in text
