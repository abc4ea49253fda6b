"""The preflight (issue 10): the job's first step checks every node before any model loads.

Unit level: the node-side check (check.sh, written by the job script) and the batch script's
decision run in bash here, without Slurm, on the rendered script's own functions and settings.
Cluster level: each failure class on the local cluster ends the job within 30 s of its start with
verdict 'failed' and a first reason naming node and cause, and no server is started; both router
profiles and the three address modes run a whole benchmark.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from helpers import NO_IMPORT, SMALL
from helpers.jobdrive import Job
from helpers.clients import client_dir
from helpers.scripts import render
from slurm_ab.parse.events import read_events
from slurm_ab.parse.preflight import describe, preflight_reasons, ran_on, read_reports, server_info_note
from slurm_ab.job.render import summary
from slurm_ab.model.sources import Sources
from helpers.scripts import layout_formats, plan_for
from slurm_ab.model.rundir import Layout


# ---- the node-side check, in bash ------------------------------------------------------------
def _functions(script: str) -> str:
    """The job script's static functions (without its traps)."""
    start = script.index("# ---- helpers (static)")
    end = script.index("trap on_exit EXIT")
    return script[start:end]


def _preflight_settings(script: str) -> str:
    """The script's generated part (every PF_* setting and what they use, e.g. CACHE_DIR)."""
    return script[:script.index("# ---- helpers (static)")]


def write_check(run_dir: Path, *sets: str) -> Path:
    """Render the local site's tp32 script and let its own functions write preflight/check.sh."""
    # the test's own cache directory: the local site's (/tmp/slurm-ab-cache) is the cluster's, where
    # a slurm-ab-1 made here would be an "ended job's" cache to test_cancel_phases running beside
    script = render("tp32", site="local", sets=(f'cache.dir="{run_dir}/cache"', *sets))
    Layout(run_dir).logs.mkdir(parents=True, exist_ok=True)
    harness = run_dir / "harness.sh"
    harness.write_text(_preflight_settings(script) + f"RUN_DIR={run_dir}\n" + _functions(script)
                       + "write_preflight_script\n")
    r = subprocess.run(["bash", str(harness)], capture_output=True, text=True,
                       env={**os.environ, "SLURM_JOB_ID": "1"})
    assert r.returncode == 0, r.stderr
    return Layout(run_dir).preflight_script


def run_check(check: Path, node: str, g: int, rank: int, *ports: int, env: dict | None = None) -> dict:
    import os

    # the job runs it under the server steps' environment: the local site's PYTHONPATH among it
    e = {**os.environ, "SLURMD_NODENAME": node, "SLURM_NODEID": str(rank), "SLURM_AB_FAKE_GPUS": "8",
         "PYTHONPATH": str(client_dir()), **(env or {})}
    # a guard against a hang, not a bound: the check imports SGLang 0.5.23's client (torch,
    # transformers), 18 s on this idle machine, past 60 s with three CPU hogs beside the suite
    r = subprocess.run(["bash", str(check), str(g), *map(str, ports)], capture_output=True, text=True, env=e,
                       timeout=240)
    assert r.returncode == 0, r.stderr
    return json.loads((check.parent / f"{node}.json").read_text())


def causes(report: dict) -> list[tuple[str, str]]:
    return [(p["check"], p["cause"]) for p in report["problems"]]


def test_node_check_passes_and_records_what_it_ran_on(tmp_path):
    check = write_check(tmp_path)
    head = run_check(check, "nodeA", 0, 0, 0)     # port 0: always free
    assert head["ok"] is True and head["problems"] == []
    assert head["node"] == "nodeA" and head["replica"] == 0 and head["node_rank"] == 0
    import importlib.metadata as md
    import sglang_router
    # the local site's server is the emulator; its client SGLang 0.5.23's steady-state entry point
    assert head["modules"]["slurm_ab_testbed.emulator"] == md.version("slurm-ab-testbed")
    assert head["modules"]["sglang_router"] == sglang_router.__version__
    client = "sglang.benchmark.steady_state_serving"
    installed = next(md.distributions(name="sglang", path=[str(client_dir())])).version
    assert head["modules"][client] == installed == "0.5.23"     # on ROUTER_HOST only
    assert head["gpu_count"] == 8 and head["gpus"] == ["NVIDIA H200 (emulated)"] * 8 and head["driver"] == "570.86.15"
    other = run_check(check, "nodeB", 1, 2)
    assert other["ok"] is True and client not in other["modules"]
    assert (check.parent / "nodeA.problems").read_text() == ""


def test_node_check_names_each_cause(tmp_path):
    check = write_check(tmp_path, 'preflight.server_module="no_such_sglang"', "paths.model=/nonexistent/Kimi-K3",
                        'router.profile="smg"')
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        taken = s.getsockname()[1]
        # replica 1's head: a head's checks without ROUTER_HOST's import of the client (13 s of
        # CPU here; test_node_check_passes_and_records_what_it_ran_on has it)
        head = run_check(check, "nodeA", 1, 0, taken, 0, env={"SLURM_AB_FAKE_GPUS": "4"})
    got = causes(head)
    assert got[0] == ("import", "module no_such_sglang is not importable: ModuleNotFoundError: "
                                "No module named 'no_such_sglang'")
    assert ("gpus", "4 GPUs visible, the mode needs 8 per node") in got
    assert ("path", "model path /nonexistent/Kimi-K3 is missing") in got
    assert ("port", f"port {taken} is already in use (Address already in use)") in got
    assert head["ok"] is False and head["gpu_count"] == 4
    import smg
    assert head["modules"]["smg"] == smg.__version__          # the router of the selected profile
    assert "sglang.benchmark.steady_state_serving" not in head["modules"]
    assert (check.parent / "nodeA.problems").read_text().splitlines()[0] == \
        "import\tmodule no_such_sglang is not importable: ModuleNotFoundError: No module named 'no_such_sglang'"
    # ports are checked on head nodes only (node rank 0): the others listen on none
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        other = run_check(check, "nodeB", 0, 1, s.getsockname()[1])
    assert not [c for c in causes(other) if c[0] == "port"]


def test_gpu_query_failure_and_interface_address(tmp_path):
    check = write_check(tmp_path, 'cluster.address="interface"', 'cluster.address_interface="lo"', "preflight.import_command=[]")
    ok = run_check(check, "nodeA", 0, 1)
    assert ok["address"] == "127.0.0.1" and (check.parent / "nodeA.addr").read_text() == "127.0.0.1\n"
    bad = run_check(check, "nodeB", 0, 1, env={"SLURM_AB_FAKE_GPU_FAIL": "9"})
    assert causes(bad) == [("gpus", "GPU query failed (status 9): NVIDIA-SMI has failed because it couldn't "
                                    "communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
                                    "driver is installed and running.")]
    check = write_check(tmp_path / "x", 'cluster.address="interface"', 'cluster.address_interface="nosuch0"',
                        "preflight.import_command=[]")
    rep = run_check(check, "nodeC", 0, 1)
    assert causes(rep)[0][0] == "address" and "no IPv4 address on interface nosuch0" in causes(rep)[0][1]
    assert not (check.parent / "nodeC.addr").exists()


def test_a_skipped_check_is_an_empty_command(tmp_path):
    check = write_check(tmp_path, "preflight.gpu_command=[]", "preflight.import_command=[]")
    rep = run_check(check, "nodeA", 0, 0, env={"SLURM_AB_FAKE_GPUS": "1"})
    assert rep["ok"] is True and rep["gpu_count"] is None and rep["modules"] == {}


# ---- the batch script's decision ---------------------------------------------------------------
def decide(run_dir: Path, reports: dict[str, str | None]) -> subprocess.CompletedProcess:
    """wait_preflight over two components (nodeA, nodeB | nodeC); reports: node -> problems text
    (None: no report at all)."""
    script = render("tp32", site="local")
    lay = Layout(run_dir)
    lay.preflight.mkdir(parents=True, exist_ok=True)
    lay.logs.mkdir(exist_ok=True)
    for node, problems in reports.items():
        if problems is not None:
            lay.preflight_report(node).write_text("{}")
            lay.preflight_problems(node).write_text(problems)
    harness = run_dir / "decide.sh"
    harness.write_text(f"RUN_DIR={run_dir}\n" + layout_formats() + _functions(script)
                       + "HEADS=(nodeA nodeC); R0_NODES=(nodeA nodeB); R1_NODES=(nodeC); PREFLIGHT_TIMEOUT=5\n"
                       + "wait_preflight\n")
    return subprocess.run(["bash", str(harness)], capture_output=True, text=True, timeout=30)


def test_the_first_problem_fails_the_job_naming_node_and_cause(tmp_path):
    r = decide(tmp_path, {"nodeA": "", "nodeB": "gpus\t4 GPUs visible, the mode needs 8 per node\n",
                          "nodeC": "path\tmodel path /m is missing\n"})
    assert r.returncode == 1
    assert "FATAL: preflight: nodeB (replica 0 node rank 1): 4 GPUs visible, the mode needs 8 per node" in r.stderr
    assert "preflight: nodeC (replica 1 node rank 0): model path /m is missing" in r.stderr   # every problem logged
    ev = read_events(Layout(tmp_path).events)
    assert preflight_reasons(ev) == ["preflight: nodeB (replica 0 node rank 1): 4 GPUs visible, the mode needs 8 per node"]
    fail = ev.failures()[0].fields
    assert (fail["kind"], fail["node"], fail["replica"], fail["node_rank"], fail["check"]) == ("preflight", "nodeB", "0", "1", "gpus")


def test_a_node_without_report_fails_the_job(tmp_path):
    r = decide(tmp_path, {"nodeA": "", "nodeB": "", "nodeC": None})
    assert r.returncode == 1
    assert preflight_reasons(read_events(Layout(tmp_path).events)) == [
        "preflight: nodeC (replica 1 node rank 0): no preflight report from nodeC (the step failed there: "
        "see logs/preflight-r1-n0.log)"]


def test_all_reports_clean_pass(tmp_path):
    r = decide(tmp_path, {"nodeA": "", "nodeB": "", "nodeC": ""})
    assert r.returncode == 0, r.stderr
    ev = read_events(Layout(tmp_path).events)
    # bash's SECONDS ticks on the wall clock's whole seconds: an instant wait may read 1 s
    done = ev.named("preflight_done")[0].fields
    assert ev.failures() == [] and set(done) == {"nodes", "seconds"}
    assert done["nodes"] == "3" and done["seconds"] in ("0", "1"), done


# ---- findings for the manifest and report ------------------------------------------------------
def test_ran_on_summarises_the_nodes(tmp_path):
    lay = Layout(tmp_path)
    lay.preflight.mkdir()
    for node, g, rank, driver in (("nodeC", 1, 0, "570.86.15"), ("nodeA", 0, 0, "570.86.15"), ("nodeB", 0, 1, "560.35.03")):
        lay.preflight_report(node).write_text(json.dumps({
            "node": node, "replica": g, "node_rank": rank, "host": "h", "ok": True,
            "modules": {"sglang": "0.5.23", "smg": "1.13.0"}, "gpu_count": 8, "gpus": ["NVIDIA H200"] * 8,
            "driver": driver, "address": "", "problems": [], "seconds": 1}))
    lay.preflight_report("nodeD").write_text("{not json")           # unreadable: ignored
    reports = read_reports(lay.preflight_reports())
    assert [r.node for r in reports] == ["nodeA", "nodeB", "nodeC"]
    info = ran_on(reports)
    assert info == {"nodes": 3, "modules": {"sglang": "0.5.23", "smg": "1.13.0"}, "gpus_per_node": "8 x NVIDIA H200",
                    "driver": "570.86.15 (2 nodes), 560.35.03 (1 nodes)", "problems": 0}
    assert describe(info) == ("sglang 0.5.23, smg 1.13.0 on 3 nodes, 8 x NVIDIA H200 GPUs per node, "
                              "driver 570.86.15 (2 nodes), 560.35.03 (1 nodes)")
    assert ran_on([]) == {} and describe({}) is None


def test_server_info_answer_is_a_note_not_an_error(tmp_path):
    Layout(tmp_path).events.write_text("1796051162.808 2026-11-30 15:06:02.808 router_server_info http=404\n")
    note = server_info_note(read_events(Layout(tmp_path).events))
    assert note.startswith("router answered HTTP 404 for /server_info")


# ---- rendering ---------------------------------------------------------------------------------
def _generated(text: str) -> str:
    return text[:text.index("# ---- helpers (static)")]


def _function(text: str, name: str) -> str:
    body = text[text.index(f"\n{name}() {{\n"):]
    return body[:body.index("\n}\n") + 3]


def test_preflight_is_the_first_step_one_per_component():
    text = render("tp32")
    gen, main = _generated(text), _function(text, "main")
    assert "PREFLIGHT=1\n" in gen and "PREFLIGHT_TIMEOUT=300\n" in gen
    # before any server: after the hosts are known, before the addresses and the launches
    assert main.index("record_hosts") < main.index("sweep_nodes") < main.index("if (( PREFLIGHT )); then\n    run_preflight") < \
        main.index("resolve_addresses") < main.index("run_launches")
    pf = _function(text, "run_preflight")
    # one srun per component (het group), in the servers' container, on every node of it; the
    # router's ports checked on the first component's nodes; then wait_preflight
    assert pf.index("write_preflight_script\n  event preflight_start") < pf.index("srun --het-group=\"$g\"")
    assert pf.count("\n    srun ") == 1 and 'for g in "${!HEADS[@]}"' in pf
    assert '(( g == 0 )) && extra=("$ROUTER_PORT" "$ROUTER_METRICS_PORT")' in pf
    # the group's container and environment (in_image G: one container per node, job and group)
    assert 'in_image "$g" SERVER_ENV' in pf and '"${CT[@]}" "${SRUN_EXTRA[@]}"' in pf
    # its script: the job's own, or (run_preflight I) a mode's in its own image (preflight_script)
    assert '"${IN_IMAGE[@]}" bash "$(preflight_script)" "$g" "${PORTS[g]}"' in pf
    assert "printf '%s' \"$RUN_DIR/$F_PREFLIGHT_SCRIPT\"" in _function(text, "preflight_script")
    assert pf.rstrip().endswith("wait_preflight\n}")
    assert "PF_GPUS=8\n" in gen and "PF_MODULES=(sglang sglang_router=sglang-router)\n" in gen
    assert "PF_CLIENT_PATHS=(dataset /shared/datasets/speed_bench/throughput_16k.jsonl)\n" in gen


def test_preflight_disabled_is_said():
    gen = _generated(render("tp32", sets=["preflight.enabled=false"]))
    assert "PREFLIGHT=0\n" in gen and "PF_MODULES=" not in gen
    plan = plan_for(Sources("example", (), ("preflight.enabled=false",)), "tp32", "R")
    assert "preflight: disabled" in summary(plan)
    assert "note: preflight.enabled = false" in summary(plan)


def test_prologue_is_verbatim_before_any_step_and_shown():
    prologue = "module load cuda/12.8\nsource /opt/sglang/bin/activate  # site's own"
    text = render("tp32", sets=[f"cluster.prologue={json.dumps(prologue)}"])
    block = "# shellcheck disable=all\n{\n" + prologue + "\n}\n# <<< cluster.prologue\n"
    # in the generated part, as a function main runs before the first step (the preflight)
    gen = _generated(text)
    assert block in gen and gen.index("\nsite_prologue() {\n") < gen.index(block)
    main = _function(text, "main")
    assert main.index("site_prologue") < main.index("run_preflight") < main.index("run_launches")
    plan = plan_for(Sources("example", (), (f"cluster.prologue={json.dumps(prologue)}",)), "tp32", "R")
    s = summary(plan)
    assert "  | module load cuda/12.8\n  | source /opt/sglang/bin/activate  # site's own\n" in s
    assert "note: cluster.prologue: 2 line(s) of site shell code are written into the job script verbatim and unquoted" in s
    assert "# >>> cluster.prologue" not in render("tp32")


def test_address_modes_render():
    assert "ADDRESS_MODE=name\n" in _generated(render("tp32"))
    gen = _generated(render("tp32", sets=['cluster.address="nodeaddr"']))
    assert "ADDRESS_MODE=nodeaddr\n" in gen and "PF_IFACE=''\n" in gen
    text = render("tp32", sets=['cluster.address="interface"', 'cluster.address_interface="ib0"'])
    assert "PF_IFACE=ib0\n" in _generated(text) and "PF_ADDRESS=(python3 -c" in _generated(text)
    # every head's address is resolved after the preflight (which reads it on the node), and a
    # head without one fails the job naming it
    res = _function(text, "resolve_addresses")
    assert 'ADDRS[g]=$(head_address "${HEADS[g]}") || fatal address' in res
    main = _function(text, "main")
    assert main.index("run_preflight") < main.index("resolve_addresses")


def test_router_profiles_render_with_their_command():
    assert "  python3 -m sglang_router.launch_router\n" in render("tp32")
    text = render("tp32", sets=['router.profile="smg"'])
    gen = _generated(text)
    assert "  python3 -m smg.launch_router\n" in gen and "PF_MODULES=(sglang smg=smg)\n" in gen
    assert "ROUTER_PROFILE=smg\n" in gen
    assert 'event router_launch "port=$ROUTER_PORT" "host=$ROUTER_HOST" "profile=$ROUTER_PROFILE"' in text


def _router_argv(sets=()) -> list[str]:
    plan = plan_for(Sources("local", (), ("paths.results=/results", *sets)), "tp32", "R")
    argv = [str(w.text if hasattr(w, "text") else w) for line in plan.router.lines for w in line]
    subst = {"${R0_ADDR}": "node01", "${R0_PORT}": "30000", "${R1_ADDR}": "node05", "${R1_PORT}": "30010",
             "${ROUTER_PORT}": "8000", "${ROUTER_METRICS_PORT}": "29000"}
    out = []
    for a in argv:
        for k, v in subst.items():
            a = a.replace(k, v)
        out.append(a)
    return out


def test_smg_profile_parses_with_smgs_own_parser():
    """smg's real argument parser (smg 1.x installed by the testbed) accepts what the job runs."""
    from smg.launch_router import parse_router_args

    argv = _router_argv(['router.profile="smg"'])
    assert argv[:3] == ["python3", "-m", "smg.launch_router"]
    args = parse_router_args(argv[3:])
    assert args.worker_urls == ["http://node01:30000", "http://node05:30010"]
    assert args.policy == "round_robin" and args.port == 8000 and args.prometheus_port == 29000
    assert args.model_path == "/var/lib/slurm-ab-local/models/Kimi-K3"


def test_sglang_router_profile_parses_with_its_own_parser():
    from sglang_router.launch_router import parse_router_args

    argv = _router_argv()
    # the local site runs it without the client's PYTHONPATH (testbed/sites/local.toml)
    assert argv[:6] == ["env", "-u", "PYTHONPATH", "python3", "-m", "sglang_router.launch_router"]
    args = parse_router_args(argv[6:])
    assert args.worker_urls == ["http://node01:30000", "http://node05:30010"] and args.policy == "round_robin"


# ---- on the local cluster ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory, local_cluster):
    return tmp_path_factory.mktemp("preflight")


def _free_port_range(base: int) -> int:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", base))
    return base


def run_job(workdir: Path, name: str, *sets: str) -> Job:
    j = Job(workdir, f"{name}-{time.strftime('%H%M%S')}", 'server.env.SLURM_AB_EMU_TIME_SCALE="0.02"', *sets)
    try:
        j.finish(240)
    except BaseException:
        j.cleanup()
        raise
    return j


def node(i: int) -> str:
    """The i-th node (1-based, as in node01) of this worker's lane: jobs get the lowest idle ones."""
    from helpers.lanes import nodes
    return nodes()[i - 1]


def assert_failed_fast(j: Job, first_reason: str) -> dict:
    ev = j.events()
    start = next(t for t, k, _ in ev if k == "job_start")
    # the slowest node sets the pace (these jobs skip ROUTER_HOST's import of the client, helpers.
    # jobdrive.Job; with it, SGLang 0.5.23 and torch: 13-14 s of CPU, ~28 s on the loaded machine)
    assert j.job_end() - start < 60, f"job ran {j.job_end() - start:.1f} s"
    s = j.summary()
    assert s["verdict"] == "failed", s
    assert s["reasons"][0] == first_reason, s["reasons"]
    assert not [k for _, k, _ in ev if k in ("server_launch", "router_launch")], "a server was started"
    assert not j.launch().server_logs() and not Layout(j.run_dir).server_logs(), "a server log exists"
    j.assert_nothing_left()
    print(f"MEASURE preflight {first_reason[:60]}: {j.job_end() - start:.1f} s from job start")
    return s


@pytest.mark.cluster
def test_cluster_missing_module(workdir):
    j = run_job(workdir, "pf-import", 'preflight.server_module="no_such_sglang"')
    assert_failed_fast(j, f"preflight: {node(1)} (replica 0 node rank 0): module no_such_sglang is not importable: "
                          "ModuleNotFoundError: No module named 'no_such_sglang'")


@pytest.mark.cluster
def test_cluster_gpu_count_on_one_node(workdir):
    j = run_job(workdir, "pf-gpus", NO_IMPORT, 'server.env.SLURM_AB_FAKE_GPUS="4"', f'server.env.SLURM_AB_FAKE_GPU_NODES="{node(6)}"')
    assert_failed_fast(j, f"preflight: {node(6)} (replica 1 node rank 1): 4 GPUs visible, the mode needs 8 per node")
    assert json.loads(Layout(j.run_dir).preflight_report(node(5)).read_text())["gpu_count"] == 8


@pytest.mark.cluster
def test_cluster_missing_model_path(workdir):
    j = run_job(workdir, "pf-path", NO_IMPORT, "paths.model=/nonexistent/Kimi-K3")
    assert_failed_fast(j, f"preflight: {node(1)} (replica 0 node rank 0): model path /nonexistent/Kimi-K3 is missing")


@pytest.mark.cluster
def test_cluster_port_taken_on_the_router_node(workdir):
    # one job slot: the router's port is exactly ports.router
    port = _free_port_range(18123)
    from slurm_ab_testbed.cluster import NS_PREFIX, layout
    if layout() == "netns":
        # the first node is a host of its own (its network namespace): hold the port there
        holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{NS_PREFIX}{node(1)}", "python3", "-c",
             f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
             "print('listening', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "listening"
            j = run_job(workdir, "pf-port", NO_IMPORT, "ports.job_slots=1", f"ports.router={port}")
        finally:
            holder.kill()
            holder.wait()
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()
            j = run_job(workdir, "pf-port", NO_IMPORT, "ports.job_slots=1", f"ports.router={port}")
    assert_failed_fast(j, f"preflight: {node(1)} (replica 0 node rank 0): port {port} is already in use "
                          "(Address already in use)")


@pytest.mark.cluster
def test_cluster_prologue_environment_reaches_every_step(workdir):
    """The site prologue runs in the batch shell before any step: what it exports, the steps see
    (here a GPU query that fails on every node)."""
    j = run_job(workdir, "pf-prologue", NO_IMPORT, 'cluster.prologue="export SLURM_AB_FAKE_GPU_FAIL=9"')
    assert_failed_fast(j, f"preflight: {node(1)} (replica 0 node rank 0): GPU query failed (status 9): NVIDIA-SMI has "
                          "failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                          "latest NVIDIA driver is installed and running.")
    names = [k for _, k, _ in j.events()]
    assert names.index("prologue_end") < names.index("preflight_start")
    assert len(Layout(j.run_dir).preflight_reports()) == 8


@pytest.mark.cluster
@pytest.mark.parametrize("profile,address,expect_addr", [("smg", "nodeaddr", "127.0.0.1"),
                                                          ("sglang_router", "interface", "127.0.0.1")])
def test_cluster_router_profile_and_address_mode_run(workdir, profile, address, expect_addr):
    sets = [f'router.profile="{profile}"', f'cluster.address="{address}"']
    if profile == "smg":
        # smg 1.13's /v1/completions takes text prompts only (a token-id prompt, as bench_serving's
        # random-ids sends, is a 400 "did not match any variant of untagged enum StringOrArray");
        # its /generate forwards input_ids, and it proxies /get_server_info to a worker.
        sets.append('benchmark.backend="sglang"')
    from slurm_ab_testbed.cluster import layout
    netns = layout() == "netns"      # every node has its own address on eth0 (else all are 127.0.0.1)
    if address == "interface":
        sets.append('cluster.gpu_request="gpus-per-node"')     # the local nodes declare gpu:8 GRES
        sets.append(f'cluster.address_interface="{"eth0" if netns else "lo"}"')
    j = run_job(workdir, f"pf-{profile}-{address}", *sets, *SMALL)
    s = j.summary()
    assert j.rc == 0 and s["verdict"] == "ok", s
    ev = {k: kv for _, k, kv in j.events()}
    expect = ({f"replica{g}": socket.gethostbyname(nodes[0]) for g, nodes in j.hosts().items()} if netns
              else {"replica0": expect_addr, "replica1": expect_addr})
    assert ev["addresses"] == {"mode": address, **expect}
    assert ev["router_launch"]["profile"] == profile and ev["router_launch"]["host"] == node(1)
    assert ev["router_server_info"] == {"http": "404"}          # recorded, not an error
    info = ran_on(read_reports(Layout(j.run_dir).preflight_reports()))
    assert info["nodes"] == 8 and info["problems"] == 0 and profile in info["modules"]
    # the summary says what the run ran on, and that /server_info was a 404 (a note, not a reason)
    assert any(n.startswith("ran on: ") and f"{profile} " in n and "on 8 nodes, 8 x NVIDIA H200 (emulated)" in n
               for n in s["notes"]), s["notes"]
    assert any(n.startswith("router answered HTTP 404 for /server_info") for n in s["notes"])
    assert j.launch().router_log.stat().st_size > 0
    j.assert_nothing_left()
    if address == "interface":
        # with --gpus-per-node on the job, the router and client steps still ask for no GPU
        # (side_srun drops the SLURM_GPUS_* the batch environment would pass on as options)
        out = subprocess.run(["sacct", "-j", str(j.job_id), "-P", "-n", "--format=JobID,AllocTRES"],
                             capture_output=True, text=True).stdout
        steps = [line.split("|") for line in out.splitlines() if line.startswith(f"{j.job_id}+0.")
                 and not line.split("|")[0].endswith((".batch", ".extern"))]
        without_gpu = [s for s in steps if "gres/gpu" not in s[1]]
        # the sweep of ended jobs' leftovers, preflight, server, GPU sampler (--overlap: it sees the
        # GPUs) | router, client, host sampler, the nodes' clean-up at the end (cache, container)
        assert len(without_gpu) == 5 and len(steps) == 8, steps
