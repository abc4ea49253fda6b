"""The static part of every job script (sbatch_templates/functions.sh and pipeline.sh), checked
once on its own: shellcheck, and its functions run in bash with stand-ins for Slurm's commands."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers.scripts import layout_formats, render, shellcheck, static
from slurm_ab.model.rundir import Layout
from slurm_ab.parse.events import parse_event_line


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("flow") / "static.sh"
    path.write_text(static(render("tp32")))
    return path


def bash(flow: Path, script: str, tmp_path: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `script` after sourcing the static part (its traps removed), in tmp_path, with a
    PATH whose first directory (tmp_path/bin) holds the test's stand-in commands."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    full = (f"RUN_DIR={tmp_path / 'run'}\nmkdir -p \"$RUN_DIR\"\n{layout_formats()}source {flow}\n"
            "trap - EXIT TERM INT USR1\n" + script)
    e = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", **(env or {}))
    return subprocess.run(["bash", "-c", full], capture_output=True, text=True, cwd=tmp_path, env=e)


def stub(tmp_path: Path, name: str, body: str) -> None:
    p = tmp_path / "bin" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text("#!/bin/bash\n" + body + "\n")
    p.chmod(0o755)


def test_shellcheck_of_the_static_part_alone(flow, tmp_path):
    # The generated part defines the job's values (RUN_DIR, HEADS, SERVER_CMD_<i>, ...):
    # SC2154/SC2153 (assigned elsewhere) are the warnings a part read alone must give.
    p = tmp_path / "static.sh"
    p.write_text("#!/bin/bash\n# shellcheck disable=SC2154,SC2153\n" + flow.read_text())
    r = shellcheck(p)
    assert r.returncode == 0, r.stdout + r.stderr


def test_event_lines_parse_as_the_collector_reads_them(flow, tmp_path):
    r = bash(flow, 'event bench_start pass=c8-r1 "reason=two words"', tmp_path)
    assert r.returncode == 0, r.stderr
    (line,) = Layout(tmp_path / "run").events.read_text().splitlines()
    e = parse_event_line(line, 1)
    assert e.name == "bench_start" and e.fields == {"pass": "c8-r1", "reason": "two words"}
    assert e.local is not None and abs(e.epoch - e.local.timestamp()) < 1


def test_json_str_gives_valid_json_for_any_text(flow, tmp_path):
    text = 'a "quoted" \\ back\tslash\nnew line \x01 ctl'
    r = subprocess.run(["bash", "-c", f"source {flow}; trap - EXIT; json_str \"$1\"", "_", text],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == text.replace("\x01", "")


def test_fatal_records_the_failure_and_exits_1(flow, tmp_path):
    r = bash(flow, 'fatal warmup_failed replica=1 "warm-up of replica 1 failed"; echo not-reached',
             tmp_path)
    assert r.returncode == 1 and "not-reached" not in r.stdout
    assert "FATAL: warm-up of replica 1 failed" in r.stderr
    (line,) = Layout(tmp_path / "run").events.read_text().splitlines()
    e = parse_event_line(line, 1)
    assert e.name == "fail" and e.fields == {"kind": "warmup_failed", "replica": "1"}


def test_hosts_and_ports_come_from_the_het_groups_and_the_job_id(flow, tmp_path):
    stub(tmp_path, "scontrol", 'case "$3" in n*) printf "n0%s\\n" 1 2 3 4 ;; '
                               '*) printf "m0%s\\n" 1 2 3 4 ;; esac')
    script = ("REPLICAS=2 JOB_SLOTS=100 JOB_SLOT_SIZE=20 REPLICA_STRIDE=10 SERVER_PORT_BASE=30000 "
              "DIST_PORT_BASE=20000 ROUTER_PORT_BASE=8000 ROUTER_METRICS_PORT_BASE=29000\n"
              "read_hosts; record_hosts\n"
              'echo "${HEADS[*]}|${PORTS[*]}|${DIST_PORTS[*]}|$ROUTER_HOST:$ROUTER_PORT:$ROUTER_METRICS_PORT|${R1_NODES[*]}"')
    r = bash(flow, script, tmp_path, {"SLURM_JOB_ID": "4217", "SLURM_JOB_NODELIST_HET_GROUP_0": "n[01-04]",
                                      "SLURM_JOB_NODELIST_HET_GROUP_1": "m[01-04]"})
    assert r.returncode == 0, r.stderr
    # slot 17: 30000 + 17 * 20 (+ 10 for replica 1); the router's port and metrics port + 17
    assert r.stdout.strip() == "n01 m01|30340 30350|20340 20350|n01:8017:29017|m01 m02 m03 m04"
    events = [parse_event_line(ln, i) for i, ln in
              enumerate(Layout(tmp_path / "run").events.read_text().splitlines(), 1)]
    assert [e.name for e in events] == ["hosts", "hosts", "ports"]
    assert events[1].fields == {"replica": "1", "head": "m01", "nodes": "m01,m02,m03,m04",
                                "port": "30350", "dist_port": "20350"}


@pytest.mark.parametrize("mode,expected", [("name", "n01"), ("nodeaddr", "10.1.2.3"),
                                           ("interface", "192.168.7.7")])
def test_head_addresses_by_cluster_address(flow, tmp_path, mode, expected):
    stub(tmp_path, "scontrol", 'echo "NodeName=n01 Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=n01"')
    Layout(tmp_path / "run").preflight.mkdir(parents=True, exist_ok=True)
    Layout(tmp_path / "run").preflight_address("n01").write_text("192.168.7.7\n")
    r = bash(flow, f"ADDRESS_MODE={mode}; head_address n01", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr


def test_a_run_directory_a_job_wrote_to_is_never_reused(flow, tmp_path):
    (tmp_path / "run").mkdir()
    Layout(tmp_path / "run").events.write_text("earlier job\n")
    r = bash(flow, 'prepare_run_dir 2>/dev/null; echo "$RUN_DIR" > "$OUT"', tmp_path,
             {"SLURM_JOB_ID": "77", "OUT": str(tmp_path / "out")})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out").read_text().strip() == f"{tmp_path / 'run'}-job77"
    assert Layout(tmp_path / "run").events.read_text() == "earlier job\n"
    assert (tmp_path / "run-job77" / "logs").is_dir()


def test_watch_pid_returns_the_status_and_a_dead_step_fails_the_job(flow, tmp_path):
    r = bash(flow, "POLL=0.1; ( sleep 0.3; exit 7 ) & watch_pid $!; echo rc=$?", tmp_path)
    assert "rc=7" in r.stdout, r.stderr
    (tmp_path / "run" / "logs").mkdir(parents=True, exist_ok=True)
    r = bash(flow, "POLL=0.1; ( exit 3 ) & STEP_PIDS[router]=$!; sleep 0.2; ( sleep 5 ) & watch_pid $!",
             tmp_path)
    assert r.returncode == 1 and "router exited with status 3" in r.stderr
    e = parse_event_line(Layout(tmp_path / "run").events.read_text().splitlines()[-1], 1)
    assert e.fields == {"kind": "step_exited", "step": "router", "rc": "3"}


def test_teardown_after_a_launchs_own_waits_for_leftover_steps_by_a_deadline(flow, tmp_path):
    """Nothing of the script runs any more and Slurm still lists a step (on a node that stopped
    answering, it never ends): the exit teardown waits 3 s for it, however slow squeue is (each
    call took ~3 s in the cluster tests while slurmctld waited for the node), then SIGKILLs it once
    more. No SIGTERM: that step had its grace from the launch's teardown."""
    calls = tmp_path / "calls"
    stub(tmp_path, "squeue", f'echo squeue >> "{calls}"; sleep 1; echo 12.4')
    stub(tmp_path, "scancel", f'echo "scancel $*" >> "{calls}"')
    stub(tmp_path, "sinfo", "true")
    r = bash(flow, "teardown exit", tmp_path, {"SLURM_JOB_ID": "12"})
    assert r.returncode == 0, r.stderr
    lines = calls.read_text().splitlines()
    # 3 s of 1 s squeue calls (a count of ten calls took 13 s here), then signal_steps' own one
    assert 2 <= lines.count("squeue") <= 5 and lines[-1] == "scancel --signal=KILL 12.4", lines
    kinds = [parse_event_line(l, 1).fields.get("signal") for l in
             Layout(tmp_path / "run").events.read_text().splitlines()]
    assert kinds == [None, "KILL"], kinds     # teardown, steps_signal KILL
