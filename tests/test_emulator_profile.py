"""/start_profile and /stop_profile as SGLang 0.5.23 serves them (profiler_manager.py's default
path): num_steps stops by itself, start_step and profile_by_stage windows, the errors, log lines,
SGLANG_TORCH_PROFILER_DIR, and one gzipped trace per GPU rank named as SGLang names it, written on
every node of the replica."""
from __future__ import annotations

import gzip
import json
import time
import urllib.error
import urllib.request

import pytest

from slurm_ab_testbed.emulator.profiler import (ALREADY, NOT_RUNNING, ProfileError, Profiler, RankName,
                                                rank_names, trace_name)
from slurm_ab_testbed.emulator.topology import Rank, Topology
from slurm_ab_testbed.testing import free_ports, wait_healthy


def profiler(tmp_path, ranks=(RankName(0), RankName(1))):
    lines = []
    return Profiler(lines.append, list(ranks), env={"SGLANG_TORCH_PROFILER_DIR": str(tmp_path)}), lines


def steps(p, kinds):
    for k in kinds:
        p.on_forward(k, time.time(), 0.01, 4, 4 if k == "decode" else 1000)
    p.wait_written()


def load(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_num_steps_stops_by_itself(tmp_path):
    p, lines = profiler(tmp_path)
    steps(p, ["decode"] * 2)
    p.start({"num_steps": 3, "profile_id": "p1"})
    assert p.in_progress and lines == [f"Profiling starts. Traces will be saved to: {tmp_path} (with profile id: p1)"]
    steps(p, ["decode"] * 3)
    assert p.in_progress and not list(tmp_path.iterdir())      # stops when the 4th forward begins
    steps(p, ["decode"])
    assert not p.in_progress
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p1-TP-0.trace.json.gz", "p1-TP-1.trace.json.gz"]
    trace = load(tmp_path / "p1-TP-0.trace.json.gz")
    assert [e["args"]["forward_ct"] for e in trace["traceEvents"] if e["cat"] == "kernel"] == [3, 4, 5]
    assert lines[1:] == ["Stop profiling...", f"Profiling done. Traces are saved to: {tmp_path}"]
    with pytest.raises(ProfileError, match=NOT_RUNNING):
        p.stop()


def test_start_step_and_manual_stop_and_errors(tmp_path):
    p, _ = profiler(tmp_path)
    p.start({"start_step": 3, "num_steps": 2, "profile_id": "s", "output_dir": str(tmp_path / "o")})
    steps(p, ["prefill", "decode"])
    assert not p.in_progress
    steps(p, ["decode"])
    assert p.in_progress
    with pytest.raises(ProfileError, match=ALREADY):
        p.start({})
    steps(p, ["decode", "decode"])
    assert [e["args"]["forward_ct"] for e in load(tmp_path / "o" / "s-TP-1.trace.json.gz")["traceEvents"]
            if e["cat"] == "kernel"] == [3, 4]
    p.start({"profile_id": "m", "profile_prefix": "run7", "activities": ["CPU", "GPU", "MEM"]})
    steps(p, ["decode"] * 3)
    p.stop()
    p.wait_written()
    names = sorted(x.name for x in tmp_path.iterdir() if x.is_file())
    assert "run7-m-TP-0.trace.json.gz" in names and sum(n.endswith("-memory.pickle") for n in names) == 2


def test_profile_by_stage(tmp_path):
    p, lines = profiler(tmp_path, [RankName(0)])
    p.start({"profile_by_stage": True, "num_steps": 2, "profile_id": "st"})
    steps(p, ["prefill"] * 3 + ["decode"] * 4)
    names = sorted(x.name for x in tmp_path.iterdir())
    assert names == ["st-TP-0-DECODE.trace.json.gz", "st-TP-0-EXTEND.trace.json.gz"]
    kinds = lambda n: [e["name"] for e in load(tmp_path / n)["traceEvents"] if e["cat"] == "kernel"]  # noqa: E731
    assert kinds(names[1]) == ["emulated_prefill_forward"] * 2 and kinds(names[0]) == ["emulated_decode_forward"] * 2
    assert [x for x in lines if x.startswith(("Profiling starts", "Stop"))] == [
        f"Profiling starts for EXTEND. Traces will be saved to: {tmp_path} (with profile id: st)",
        "Stop profiling-EXTEND...",
        f"Profiling starts for DECODE. Traces will be saved to: {tmp_path} (with profile id: st)",
        "Stop profiling-DECODE..."]


def test_file_names_carry_only_the_parallel_ranks_in_use():
    def names(tp, pp, ep, dp=1, dp_attn=False, node=0):
        topo = Topology(tp, pp, ep, dp, dp_attn, max(1, tp * pp // 8), 8)
        return [trace_name("ID", r) for r in rank_names(topo, topo.ranks_on(node))]
    assert names(8, 1, 1) == [f"ID-TP-{t}.trace.json.gz" for t in range(8)]
    assert names(16, 1, 4, node=1)[:2] == ["ID-TP-8-EP-2.trace.json.gz", "ID-TP-9-EP-2.trace.json.gz"]
    assert names(4, 8, 1, node=3) == [f"ID-TP-{t}-PP-{p}.trace.json.gz" for p in (6, 7) for t in range(4)]
    assert names(8, 1, 1, dp=2, dp_attn=True)[3:5] == ["ID-TP-3-DP-0.trace.json.gz", "ID-TP-4-DP-1.trace.json.gz"]
    assert rank_names(Topology(8, 1, 1, 1, False, 1, 8), [Rank(0, 5)]) == [RankName(5)]


# ---- over HTTP, a two-node replica ----------------------------------------------------------------

def _post(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_every_rank_of_every_node_writes_its_trace(procs, model_dir, tmp_path):
    port, dport = free_ports(2)
    env = {"SLURM_AB_EMU_TIME_SCALE": "0.005", "SGLANG_TORCH_PROFILER_DIR": str(tmp_path / "default")}
    nodes = []
    for rank in (1, 0):
        nodes.insert(0, procs.start(["--model-path", model_dir, "--tp-size", "16", "--ep-size", "4", "--nnodes", "2",
                                     "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dport}",
                                     "--port", str(port)], f"n{rank}", env))
        time.sleep(0.3)
    url = f"http://127.0.0.1:{port}"
    assert wait_healthy(url, 40), nodes[0].text()
    out = tmp_path / "prof"
    assert _post(url + "/start_profile", {"output_dir": str(out), "num_steps": 5, "profile_id": "job9"}) == \
        (200, "Start profiling.\n")
    gen = {"input_ids": [5] * 500, "sampling_params": {"max_new_tokens": 12}}
    assert _post(url + "/generate", gen)[0] == 200
    deadline = time.time() + 20
    while len(list(out.glob("*.gz"))) < 16 and time.time() < deadline:
        time.sleep(0.2)
    assert sorted(x.name for x in out.iterdir()) == sorted(f"job9-TP-{t}-EP-{t // 4}.trace.json.gz" for t in range(16))
    for n, ranks in ((nodes[0], range(8)), (nodes[1], range(8, 16))):
        text = n.text()
        for t in ranks:
            assert f" TP{t} EP{t // 4}] Profiling starts. Traces will be saved to: {out} (with profile id: job9)" in text
            assert f" TP{t} EP{t // 4}] Profiling done. Traces are saved to: {out}" in text
    assert _post(url + "/stop_profile", {}) == (500, "Internal Server Error")
    assert "RuntimeError: Profiling is not in progress. Call /start_profile first." in nodes[0].text()
    assert _post(url + "/start_profile")[0] == 200                       # GET, no body: until /stop_profile
    assert _post(url + "/generate", gen)[0] == 200
    assert _post(url + "/start_profile", {})[0] == 500
    assert _post(url + "/stop_profile") == (200, "Stop profiling. This will take some time.\n")
    deadline = time.time() + 20
    while len(list((tmp_path / "default").glob("*.gz"))) < 16 and time.time() < deadline:
        time.sleep(0.2)
    assert len(list((tmp_path / "default").glob("*-TP-*-EP-*.trace.json.gz"))) == 16
