"""The job's own guards of a real site (issue 20), run in bash with stand-ins for Slurm's and
curl's commands: SIGTERM to the steps through Slurm and SIGKILL only after the grace, every het
component's steps, the network NCCL chose per node, the no-progress watchdog, the per-pass limit."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers.scripts import layout_formats, template_lib
from slurm_ab.model.rundir import Layout
from slurm_ab.parse.events import read_events


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    return template_lib(tmp_path_factory.mktemp("guards") / "lib.sh", "functions.sh", "guards.sh")


def bash(lib: Path, tmp_path: Path, script: str, env: dict | None = None, **stubs: str):
    """Run script after sourcing the functions, with stand-in commands (name -> bash body) first
    on PATH; every call of a stand-in is appended to tmp_path/calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        p = bindir / name
        p.write_text(f"#!/bin/bash\necho \"{name} $*\" >>{tmp_path}/calls\n{body}\n")
        p.chmod(0o755)
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True, exist_ok=True)
    full = f"RUN_DIR={run}\nPOLL=0.1\nGRACE=1\nMETRICS_TIMEOUT=2\n{layout_formats()}source {lib}\n" + script
    e = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", **(env or {}))
    e.pop("SLURM_JOB_ID", None)
    r = subprocess.run(["bash", "-c", full], capture_output=True, text=True, cwd=tmp_path, env=e, timeout=60)
    return r, read_events(Layout(run).events), (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""


HET = {"SLURM_JOB_ID": "5", "SLURM_JOB_ID_HET_GROUP_0": "5", "SLURM_JOB_ID_HET_GROUP_1": "6"}


def test_steps_of_every_component_get_the_signal_through_slurm(lib, tmp_path):
    r, ev, calls = bash(lib, tmp_path, "signal_steps TERM\n", env=HET,
                        squeue='printf "5.7\\n5.batch\\n5.extern\\n6.8\\n"', scancel="true")
    assert r.returncode == 0, r.stderr
    assert "squeue -h -s -j 5,6 -o %i" in calls          # a component's steps are under its own id
    assert "scancel --signal=TERM 5.7 6.8" in calls
    assert [(e.name, e.fields) for e in ev.events] == [("steps_signal", {"signal": "TERM", "steps": "5.7,6.8"})]


def test_teardown_terms_through_slurm_then_kills_after_the_grace(lib, tmp_path):
    # an "srun" (comm srun: a script's comm is its file name) that would answer SIGTERM by killing
    # its tasks: it must not get one from the job; and a launch subshell that ends on SIGTERM
    srun = tmp_path / "srun"
    srun.write_text(f"#!/bin/bash\ntrap 'echo got-TERM >>{tmp_path}/srun.log; exit 143' TERM\nsleep 30 >/dev/null 2>&1 & wait\n")
    srun.chmod(0o755)
    script = f"""
{srun} & STEP_PIDS[server-r0]=$!
( trap 'kill $!; exit 143' TERM; sleep 30 >/dev/null 2>&1 & wait ) & CLIENT_PID=$!
sleep 0.3
teardown exit
kill -0 "${{STEP_PIDS[server-r0]}}" 2>/dev/null && echo srun-alive || echo srun-gone
"""
    r, ev, calls = bash(lib, tmp_path, script, env=HET, squeue='printf "5.7\\n"', scancel="true", sinfo="true")
    assert r.returncode == 0, r.stderr
    names = [(e.name, e.fields.get("signal")) for e in ev.events]
    assert names == [("teardown", None), ("steps_signal", "TERM"), ("steps_signal", "KILL")], names
    term, kill = ev.named("steps_signal")
    assert 1.0 <= kill.epoch - term.epoch <= 1.6                     # GRACE=1: SIGKILL only after all of it
    assert "scancel --signal=TERM 5.7" in calls and "scancel --signal=KILL 5.7" in calls
    assert "srun-gone" in r.stdout and not (tmp_path / "srun.log").exists()   # SIGKILL, never SIGTERM


def test_teardown_stops_early_when_everything_has_ended(lib, tmp_path):
    script = "( trap 'kill $!; exit 143' TERM; sleep 30 >/dev/null 2>&1 & wait ) & CLIENT_PID=$!\nsleep 0.2\nteardown exit\n"
    r, ev, calls = bash(lib, tmp_path, script, env=HET, squeue="true", scancel="true", sinfo="true")
    assert r.returncode == 0, r.stderr
    assert [e.name for e in ev.events] == ["teardown"]               # no step left: no signal, no KILL


def test_the_jobs_teardown_leaves_completing_steps_of_a_torn_down_launch_alone(lib, tmp_path):
    # the launch (a subshell) already sent TERM and KILL; Slurm lists its step a moment longer
    squeue = f'n=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) >{tmp_path}/n; (( n < 2 )) && echo 5.7; true'
    r, ev, calls = bash(lib, tmp_path, "teardown exit\n", env=HET, squeue=squeue, scancel="true", sinfo="true")
    assert r.returncode == 0, r.stderr
    assert [e.name for e in ev.events] == ["teardown"] and "scancel" not in calls


def test_a_step_a_torn_down_launch_could_not_end_gets_sigkill_without_a_second_grace(lib, tmp_path):
    # the launch's teardown gave it TERM, the grace and KILL; its node stopped answering, so Slurm
    # lists it to the end: the job's own teardown sends KILL at once (GRACE=1 would show)
    r, ev, calls = bash(lib, tmp_path, "teardown exit\n", env=HET, squeue="echo 5.7", scancel="true", sinfo="true")
    assert r.returncode == 0, r.stderr
    names = [(e.name, e.fields.get("signal")) for e in ev.events]
    assert names == [("teardown", None), ("steps_signal", "KILL")], names
    assert "scancel --signal=KILL 5.7" in calls and "--signal=TERM" not in calls


def _log(tmp_path, g, r, network):
    line = f"node0{g * 4 + r + 1}:100:100 [0] NCCL INFO Using network {network}\n" if network else "nothing\n"
    (tmp_path / "run" / "logs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "run" / "logs" / f"server-r{g}-n{r}.log").write_text("[2027-01-15 08:00:00] Init\n" + line * 3)


NODES = "HEADS=(node01 node05)\nR0_NODES=(node01 node02)\nR1_NODES=(node05 node06)\n"


def test_the_network_nccl_chose_is_recorded_and_a_fallback_fails(lib, tmp_path):
    for g, r, net in ((0, 0, "IB"), (0, 1, "IB"), (1, 0, "IB"), (1, 1, "Socket")):
        _log(tmp_path, g, r, net)
    r, ev, _ = bash(lib, tmp_path, NODES + "NCCL_NETWORK=IB\ncheck_nccl_network\necho passed\n")
    assert r.returncode == 1 and "passed" not in r.stdout
    nets = {e.fields["node"]: e.fields["network"] for e in ev.named("nccl_network")}
    assert nets == {"node01": "IB", "node02": "IB", "node05": "IB", "node06": "Socket"}
    assert ev.failures()[0].fields == {"kind": "nccl_network", "node": "node06", "replica": "1", "node_rank": "1",
                                       "network": "Socket", "expected": "IB"}
    assert "FATAL: NCCL on node06 (replica 1 node rank 1) uses network Socket, not IB" in r.stdout + r.stderr


def test_an_unchecked_or_silent_nccl_passes(lib, tmp_path):
    for g, r in ((0, 0), (0, 1), (1, 0), (1, 1)):
        _log(tmp_path, g, r, "Socket")
    r, ev, _ = bash(lib, tmp_path, NODES + "NCCL_NETWORK=Socket\ncheck_nccl_network\necho passed\n")
    assert "passed" in r.stdout and not ev.failures()
    silent = tmp_path / "silent"
    for g, r_ in ((0, 0), (0, 1), (1, 0), (1, 1)):
        _log(silent, g, r_, None)
    r, ev, _ = bash(lib, silent, NODES + "NCCL_NETWORK=IB\ncheck_nccl_network\necho passed\n")
    assert "passed" in r.stdout and "the fabric is unchecked" in r.stderr
    assert {e.fields["network"] for e in ev.named("nccl_network")} == {"unknown"}


IB_NAMES = "NCCL_NAMES=(IB IBext 'IBext_v*' UCX UCX-RMA UCX-UCT UCX-UCT-RD)\n"


def test_a_net_plugins_name_counts_as_its_family(lib, tmp_path):
    # NCCL logs the net plugin's own name (comm->ncclNet->name, src/init.cc): the HPC-X/SHARP
    # plugin's IBext_v8 (nccl-rdma-sharp-plugins ib_plugin.c) and its UCX transport are IB; a
    # name with a space (aws-ofi-nccl's "AWS Libfabric") is recorded whole; Socket still fails
    for g, r, net in ((0, 0, "IBext_v8"), (0, 1, "UCX-RMA"), (1, 0, "IB"), (1, 1, "IBext_v11")):
        _log(tmp_path, g, r, net)
    r, ev, _ = bash(lib, tmp_path, NODES + "NCCL_NETWORK=IB\n" + IB_NAMES + "check_nccl_network\necho passed\n")
    assert "passed" in r.stdout and not ev.failures(), r.stderr
    assert {e.fields["node"]: e.fields["network"] for e in ev.named("nccl_network")} == \
        {"node01": "IBext_v8", "node02": "UCX-RMA", "node05": "IB", "node06": "IBext_v11"}
    socket = tmp_path / "socket"
    for g, r, net in ((0, 0, "IBext_v8"), (0, 1, "AWS Libfabric"), (1, 0, "IB"), (1, 1, "IB")):
        _log(socket, g, r, net)
    r, ev, _ = bash(lib, socket, NODES + "NCCL_NETWORK=IB\n" + IB_NAMES + "check_nccl_network\necho passed\n")
    assert r.returncode == 1 and "passed" not in r.stdout
    assert ev.failures()[0].fields["network"] == "AWS Libfabric" and ev.failures()[0].fields["node"] == "node02"


def test_metric_sum_and_pass_limit(lib, tmp_path):
    text = ('# TYPE sglang:num_requests_total counter\\n'
            'sglang:num_requests_total{is_streaming="true",model_name="m"} 12.0\\n'
            'sglang:num_requests_total{is_streaming="false",model_name="m"} 2.0\\n'
            'sglang:num_requests_total_created 1.7e9\\n')
    script = (f"printf '{text}' | metric_sum sglang:num_requests_total; echo\n"
              "declare -A REQUEST_MS=([tp32:8:40]=60000 [pp8:1:40]=1500)\nPASS_OVERHEAD_S=30\nWATCH_FACTOR_PCT=300\n"
              "pass_limit 40 8 tp32; pass_limit 40 1 pp8; pass_limit 40 8 other; pass_limit 80 8 tp32\n")
    r, _, _ = bash(lib, tmp_path, script)
    # (5 x 60 + 30) x 3; (40 x 1.5 + 30) x 3; a pass the figures do not hold (mode, C, prompts): no limit
    assert r.stdout.split() == ["14", "990", "270", "0", "0"]


INFLIGHT = ("declare -A WATCH_INFLIGHT=([server]='sglang:num_running_reqs sglang:num_queue_reqs' "
            "[decode]='sglang:num_running_reqs sglang:num_queue_reqs sglang:num_decode_prealloc_queue_reqs "
            "sglang:num_decode_transfer_queue_reqs')\n")


def _watch(lib, tmp_path, counts, inflight, role="server", gauges=""):
    """watch_pass on a 'client' that runs for 4 s while group 0's /metrics shows COUNTS (one per
    scrape, the last repeated), INFLIGHT running requests and the GAUGES lines; group 0 runs ROLE."""
    seq = tmp_path / "seq"
    seq.write_text("".join(f"{c}\n" for c in counts))
    curl = (f'n=$(head -n 1 {seq}); [ $(wc -l <{seq}) -gt 1 ] && sed -i 1d {seq}\n'
            '[ "$n" = down ] && { echo "curl: (7) Failed to connect to a0 port 1" >&2; exit 7; }\n'
            f'printf "sglang:num_requests_total{{a=\\"b\\"}} $n\\nsglang:num_running_reqs{{a=\\"b\\"}} {inflight}\\n{gauges}"')
    name = "replica 0" if role == "server" else f"{role} 0"
    script = (NODES + "ADDRS=(a0 a1)\nPORTS=(1 2)\nHEADS=(node01)\nMETRICS_SERVERS=1\nWATCH_STALL_S=2\n"
              f"GROUP_ROLES=({role})\nGROUP_NAMES=('{name}')\n"
              "WATCH_EVERY=0\nWATCH_PROGRESS=sglang:num_requests_total\n" + INFLIGHT +
              "PASS_KEY=c8-r1\nsleep 4 & watch_pass $! 0\necho client_rc=$?\n")
    return bash(lib, tmp_path, script, curl=curl)


def test_a_replica_that_finishes_nothing_while_busy_fails_the_pass(lib, tmp_path):
    r, ev, _ = _watch(lib, tmp_path, [3, 4, 5, 5], inflight=4)
    assert r.returncode == 1 and "client_rc" not in r.stdout
    f = ev.failures()[0].fields
    assert f["kind"] == "stalled" and f["replica"] == "0" and f["pass"] == "c8-r1" and f["finished"] == "5"
    assert f["inflight"] == "4" and f["metrics"] == "answered" and int(f["seconds"]) >= 2
    assert "replica 0 (head node01) is stalled: no request finished for" in r.stderr, r.stderr


def test_a_decode_whose_transfers_hang_fails_the_pass_naming_its_queue(lib, tmp_path):
    """SGLang 0.5.23 counts a decode request waiting for its KV in neither num_running_reqs nor
    num_queue_reqs: the decode's own queue gauges (watchdog.role_inflight_metrics.decode) are what
    shows it in flight, and the failure names them."""
    queue = 'sglang:num_decode_transfer_queue_reqs{a=\\"b\\"} 6\\nsglang:num_decode_prealloc_queue_reqs{a=\\"b\\"} 0\\n'
    r, ev, _ = _watch(lib, tmp_path, [3, 4, 4], inflight=0, role="decode", gauges=queue)
    assert r.returncode == 1 and "client_rc" not in r.stdout
    f = ev.failures()[0].fields
    assert f["kind"] == "stalled" and f["role"] == "decode" and f["inflight"] == "6", f
    assert f["held"] == "sglang:num_decode_transfer_queue_reqs:6", f
    assert ("decode 0 (head node01) is stalled: no request finished for" in r.stderr
            and "while 6 were in flight (sglang:num_decode_transfer_queue_reqs:6;" in r.stderr), r.stderr
    # the same scrapes read with a server's gauges only: idle, no stall (what the watchdog saw before)
    (tmp_path / "server").mkdir()
    r, ev, _ = _watch(lib, tmp_path / "server", [3, 4, 4], inflight=0, role="server", gauges=queue)
    assert "client_rc=0" in r.stdout and not ev.failures()


def test_a_replica_whose_metrics_stop_answering_fails_the_pass_as_stalled_or_unreachable(lib, tmp_path):
    """The batch host cannot tell a hung server from a path down between them: it says both."""
    r, ev, _ = _watch(lib, tmp_path, [3, 4, "down"], inflight=4)
    assert r.returncode == 1 and "client_rc" not in r.stdout
    f = ev.failures()[0].fields
    assert f["kind"] == "stalled" and f["finished"] == "4" and f["metrics"] == "did", f
    assert "replica 0 (head node01) is stalled or unreachable from the batch host: no request finished for" in r.stderr
    assert "its /metrics did not answer (curl: (7) Failed to connect to a0 port 1)" in r.stderr, r.stderr


def test_progress_or_an_idle_replica_is_no_stall(lib, tmp_path):
    r, ev, _ = _watch(lib, tmp_path, list(range(100)), inflight=4)
    assert "client_rc=0" in r.stdout and not ev.failures()
    r, ev, _ = _watch(lib, tmp_path, [7], inflight=0)
    assert "client_rc=0" in r.stdout and not ev.failures()


def test_a_pass_past_its_limit_fails(lib, tmp_path):
    script = "HEADS=(node01)\nMETRICS_SERVERS=0\nPASS_KEY=c1-r2\nsleep 10 & watch_pass $! 1\necho rc=$?\n"
    r, ev, _ = bash(lib, tmp_path, script)
    assert r.returncode == 1
    f = ev.failures()[0].fields
    assert f["kind"] == "pass_timeout" and f["pass"] == "c1-r2" and f["limit"] == "1"
