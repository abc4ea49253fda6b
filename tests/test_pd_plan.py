"""Prefill/decode (PD) modes as data: the roles, each role's command and the router's as SGLang
0.5.23's own parser and sglang-router 0.3.2's / smg 1.13's parse them, what dry-run shows, the
generated script (golden, bash -n, shellcheck) and the rules checked before anything is submitted."""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess

import pytest

from helpers.clients import importable_sglang
from helpers.scripts import GOLDEN_SETS, check_golden, generated, render, shellcheck
from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
from slurm_ab.model.errors import ConfigErrors
from slurm_ab.job.render import render_script, summary
from slurm_ab.model.sources import Sources, load_experiment
from helpers.scripts import plan_for

PD_MODES = ("pd-1p1d", "pd-1p1d-dflash")
# the job's run-time words, as pipeline.sh appends them (start_servers) and resolve_addresses sets them
RUNTIME = {"prefill": ["--disaggregation-bootstrap-port", "25000", "--dist-init-addr", "node01:20000",
                       "--port", "30000", "--node-rank", "0"],
           "decode": ["--dist-init-addr", "node05:20010", "--port", "30010", "--node-rank", "0"]}
VARS = {"${R0_ADDR}": "node01", "${R0_PORT}": "30000", "${R0_BOOT}": "25000", "${R1_ADDR}": "node05",
        "${R1_PORT}": "30010", "${ROUTER_PORT}": "8000", "${ROUTER_METRICS_PORT}": "29000"}


def _array(text: str, name: str) -> list[str]:
    body = text[text.index(f"{name}=(\n") + len(name) + 3:]
    return shlex.split(body[: body.index("\n)\n")])


def role_argv(text: str, role: str, mode_index: int = 0) -> tuple[list[str], list[str]]:
    """(environment words, argv after the program) of a role's SERVER_CMD array, with the job's
    run-time flags appended."""
    words = _array(text, f"SERVER_CMD_{mode_index}_{role}")
    env = [w for w in words if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w)]
    cmd = words[len(env):]
    start = cmd.index("--model-path")
    return env, cmd[start:] + RUNTIME[role]


def router_argv(text: str) -> list[str]:
    body = text[text.index("router_command() {"):]
    body = body[body.index("ROUTER_CMD=(") + len("ROUTER_CMD=("): body.index("\n  )\n")]
    for k, v in VARS.items():
        body = body.replace(k, v)
    return shlex.split(body)


@pytest.fixture(scope="module")
def sglang_parser():
    """SGLang 0.5.23's own launch_server parser (ServerArgs.add_cli_args), imported once."""
    importable_sglang()
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(p)
    return p


@pytest.mark.parametrize("site", ["example", "local"])
@pytest.mark.parametrize("mode", PD_MODES)
def test_each_role_parses_with_sglang_0_5_23(sglang_parser, mode, site):
    """Every role's command, with the words the job adds, is what SGLang 0.5.23's parser accepts,
    and the emulator's parser (which applies 0.5.23's PD rules) resolves it on the nodes' GPUs."""
    from slurm_ab_testbed.emulator.cli_args import parse

    text = render(mode, site=site)
    for role in ("prefill", "decode"):
        env, argv = role_argv(text, role)
        a = sglang_parser.parse_args(argv)
        assert (a.disaggregation_mode, a.disaggregation_transfer_backend, a.tp_size, a.pp_size, a.nnodes) == \
            (role, "mooncake", 32, 1, 4)
        assert a.disaggregation_bootstrap_port == (25000 if role == "prefill" else 8998)
        assert ("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=" + ("15" if site == "local" else "120")) in env
        if mode.endswith("dflash"):
            assert a.speculative_algorithm == "DFLASH" and a.speculative_num_draft_tokens == 16
        if role == "decode":
            assert (a.mem_fraction_static, a.max_running_requests, a.cuda_graph_max_bs_decode) == (0.86, 16, 16)
        resolved = parse(argv, gpus_per_node=8).args
        assert resolved.disaggregation_mode == role
        if role == "decode":
            assert resolved.disable_radix_cache and resolved.disaggregation_decode_extra_slots == 32


@pytest.mark.parametrize("profile", ["sglang_router", "smg"])
@pytest.mark.parametrize("mode", PD_MODES)
def test_router_in_pd_mode_parses_with_the_profiles_parser(mode, profile):
    text = render(mode, site="local", sets=[f'router.profile="{profile}"'])
    argv = router_argv(text)
    if profile == "smg":
        from smg.launch_router import parse_router_args
        assert argv[:3] == ["python3", "-m", "smg.launch_router"]
    else:
        from sglang_router.launch_router import parse_router_args
        # the local site runs it without the client's PYTHONPATH (testbed/sites/local.toml)
        assert argv[:3] == ["env", "-u", "PYTHONPATH"]
        argv = argv[3:]
        assert argv[:3] == ["python3", "-m", "sglang_router.launch_router"]
    a = parse_router_args(argv[3:])
    assert a.pd_disaggregation and a.prefill_urls == [("http://node01:30000", 25000)]
    assert a.decode_urls == ["http://node05:30010"]
    assert (a.prefill_policy, a.decode_policy, a.port, a.prometheus_port) == ("round_robin", "round_robin", 8000, 29000)


def test_dry_run_shows_roles_ports_and_bootstrap_addresses():
    plan = plan_for(Sources("example", (), GOLDEN_SETS), "pd-1p1d", "RUN-ID")
    text = summary(plan)
    for line in (
            "components: 2 (one per role instance: prefill 0 x 4 nodes, decode 0 x 4 nodes)",
            "role prefill: 1 instance(s) x 4 nodes, TP32 / PP1 / EP4 over 32 GPUs, --disaggregation-mode prefill",
            "role decode: 1 instance(s) x 4 nodes, TP32 / PP1 / EP4 over 32 GPUs, --disaggregation-mode decode",
            "  prefill 0 (het group 0): http 30000 + slot*20, dist-init 20000 + slot*20, bootstrap 25000 + slot*20",
            "  decode 0 (het group 1): http 30010 + slot*20, dist-init 20010 + slot*20\n",
            "KV bootstrap of prefill 0: $R0_ADDR:$R0_BOOT = its head, port 25000 + slot*20 (the router's --prefill URL",
            '--disaggregation-mode prefill --disaggregation-transfer-backend mooncake',
            '--disaggregation-bootstrap-port "$R0_BOOT" --dist-init-addr "$R0_ADDR:$R0_DIST_PORT"',
            "  KV canary prefill 0 -> decode 0: POST /generate to both at once (bootstrap_host $R0_ADDR, "
            "bootstrap_port $R0_BOOT, a random bootstrap_room)",
            "  warm-up prefill 0 -> decode 0: the same with {input_ids: 16384 x 100, max_new_tokens: 1}",
            '--pd-disaggregation --prefill "http://${R0_ADDR}:${R0_PORT}" "${R0_BOOT}" '
            '--decode "http://${R1_ADDR}:${R1_PORT}" --prefill-policy round_robin --decode-policy round_robin'):
        assert line in text, line
    # the decode gets no bootstrap port of its own: the router names the prefill's in every request
    decode = next(ln for ln in text.splitlines() if ln.startswith("  decode 0 (het group 1) (srun"))
    assert "bootstrap-port" not in decode


def test_golden_pd_local_site():
    check_golden("single-pd-1p1d-local.sbatch", generated(render("pd-1p1d", site="local")))


def test_replica_modes_render_as_before():
    """Nothing of a PD mode leaks into a job without one: no PD variables, no pd.sh; its one role's
    command per mode."""
    full = render("tp32", site="local")
    text = generated(full)
    assert "BOOTSTRAP_PORT_BASE=" not in text and "PF_PD_IB" not in text and "CANARY_TIMEOUT" not in text
    assert "MODE_ROLES_0=(server server)" in text and "SERVER_CMD_0_server=(" in text
    assert "prefill/decode (PD) launches" not in full and "pd_ready()" not in full


def _campaign(modes, sets=()):
    return plan_job(Sources("local", (), GOLDEN_SETS + tuple(sets)), list(modes), "RUN-ID",
                         CampaignOptions(repeats=1, order="blocked"))


@pytest.mark.parametrize("script", ["pd-1p1d", "pd-1p1d-dflash", "campaign", "1p2d"])
def test_pd_scripts_pass_bash_n_and_shellcheck(tmp_path, script):
    text = (render_script(_campaign(["tp32", "pd-1p1d"])) if script == "campaign" else
            render("pd-1p1d", site="local", sets=["mode.roles.decode.instances=2"]) if script == "1p2d" else
            render(script, site="local"))
    if script == "1p2d":                  # xPyD is a count: three het groups, the router told of both decodes
        assert "MODE_ROLES_0=(prefill decode decode)" in text and text.count("#SBATCH hetjob") == 2
        assert '--decode "http://${R1_ADDR}:${R1_PORT}"' in text and '--decode "http://${R2_ADDR}:${R2_PORT}"' in text
    p = tmp_path / "pd.sbatch"
    p.write_text(text)
    r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = shellcheck(p)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dp2_and_pd_share_one_allocation():
    """tp32 (2 replicas x 4 nodes) and pd-1p1d (prefill 4 + decode 4 nodes) are one shape: each
    launch starts its own mode's servers and router (router_command picks by MODE_INDEX)."""
    plan = _campaign(["tp32", "pd-1p1d"])
    text = render_script(plan)
    assert "SERVER_CMD_0_server=(" in text and "SERVER_CMD_1_prefill=(" in text and "SERVER_CMD_1_decode=(" in text
    assert "MODE_ROLES_0=(server server)" in text and "MODE_ROLES_1=(prefill decode)" in text
    assert "\n# ---- prefill/decode (PD) launches (static)" in text          # pd.sh: the job has PD roles
    body = text[text.index("router_command() {"): text.index("client_command() {")]
    assert "case $MODE_INDEX in" in body and "0) ROUTER_CMD=(" in body and "1) ROUTER_CMD=(" in body
    assert body.index("--worker-urls") < body.index("1) ROUTER_CMD=(") < body.index("--pd-disaggregation")
    assert "BOOTSTRAP_PORT_BASE=25000" in text
    assert "PF_MODULES=(slurm_ab_testbed.emulator sglang_router=sglang-router slurm_ab_testbed.emulator.pd_transfer)" in text


def test_campaign_dry_run_shows_the_pd_modes_roles_and_router():
    from slurm_ab.job.campaign_plan import campaign_summary
    text = campaign_summary(_campaign(["tp32", "pd-1p1d"]))
    for line in ("  pd-1p1d launches: het groups 0 = prefill 0, 1 = decode 0\n",
                 "    KV bootstrap of prefill 0: $R0_ADDR:$R0_BOOT = its head, port 25000 + slot*20",
                 "    KV canary prefill 0 -> decode 0: POST /generate to both at once",
                 '    router of pd-1p1d: env -u PYTHONPATH python3 -m sglang_router.launch_router --pd-disaggregation --prefill',
                 "  prefill role of pd-1p1d: SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=15 ",
                 "  server role of tp32: python3 -m slurm_ab_testbed.emulator "):
        assert line in text, line


def test_modes_lists_a_pd_mode_by_its_roles(tmp_path):
    r = subprocess.run(["slurm-ab", "modes", "--config", str(_nodesc(tmp_path))], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()}
    assert lines["pd-1p1d"].split(None, 1)[1] == ("1 x prefill TP32/PP1/EP4 (4 nodes) + 1 x decode TP32/PP1/EP4 "
                                                   "(4 nodes)")
    draft = load_experiment(Sources(None, (str(_nodesc(tmp_path)),)), "pd-1p1d-dflash").paths.draft_model
    assert draft and "{" not in draft                     # the resolved model: references filled in
    assert lines["pd-1p1d-dflash"].endswith("[both roles: speculative-algorithm=DFLASH, speculative-draft-model-path="
                                            f"{draft}, speculative-num-draft-tokens=16, "
                                            "speculative-draft-kv-cache-dtype=bf16]")


def _nodesc(tmp_path):
    cfg = tmp_path / "nodesc.toml"
    cfg.write_text('[modes.pd-1p1d]\ndescription = ""\n')
    return cfg


def test_a_pd_mode_of_another_shape_cannot_join(tmp_path):
    with pytest.raises(ConfigErrors) as e:
        _campaign(["tp32", "pd-1p1d"], ["modes.pd-1p1d.roles.decode.nodes=2", "modes.pd-1p1d.roles.decode.tp=16",
                                        "modes.pd-1p1d.roles.decode.instances=2"])
    assert "modes of different shape cannot share one allocation" in str(e.value.errors[0])


# ---- validation before submit ----------------------------------------------------------------------

def errors_of(mode: str, *sets: str) -> list[str]:
    with pytest.raises(ConfigErrors) as e:
        load_experiment(Sources("example", (), GOLDEN_SETS + sets), mode)
    return [str(x) for x in e.value.errors]


@pytest.mark.parametrize("sets, key, rule", [
    (["mode.roles.prefill.args.page-size=16"], "modes.pd-1p1d.roles.prefill.args.page-size",
     "page-size differs between the roles (prefill 16, decode unset): the decode refuses the prefill at the first "
     'handshake: "Page size mismatch"'),
    (["mode.roles.decode.args.kv-cache-dtype=\"fp8_e4m3\""], "modes.pd-1p1d.roles.decode.args.kv-cache-dtype",
     "kv-cache-dtype differs between the roles (prefill 'bf16', decode 'fp8_e4m3')"),
    (["mode.roles.decode.args.context-length=65536"], "modes.pd-1p1d.roles.decode.args.context-length",
     "context-length differs between the roles"),
    (["mode.roles.prefill.args.speculative-algorithm=\"DFLASH\"",
      "mode.roles.prefill.args.speculative-draft-model-path=\"/d\""],
     "modes.pd-1p1d.roles.prefill.args.speculative-algorithm", "speculative decoding runs on both roles or neither"),
    (["mode.roles.decode.args.disaggregation-enable-kv-checksum=true"],
     "modes.pd-1p1d.roles.decode.args.disaggregation-enable-kv-checksum",
     'set by slurm-ab for every role instance (allowed: pd.kv_checksum (both roles: its --help says "Enable on both'),
    (['pd.host_ip_interface="ib 0"'], "pd.host_ip_interface", "not a network interface name"),
    (['pd.host_ip_interface="ib0"', "preflight.enabled=false"], "pd.host_ip_interface",
     "each node's address is read by the preflight"),
    (['pd.host_ip_interface="ib0"', "preflight.address_command=[]"], "pd.host_ip_interface",
     "each node's address is read by the preflight"),
    (['preflight.gpudirect_command=["python3", ""]'], "preflight.gpudirect_command", "must not contain empty strings"),
    (["mode.roles.decode.pp=2", "mode.roles.decode.tp=16", "mode.roles.prefill.pp=4", "mode.roles.prefill.tp=8"],
     "modes.pd-1p1d.roles.decode.pp", '"Decode pp size (2) should be equal to prefill pp size (4) or 1"'),
    (["mode.roles.decode.tp=16"], "modes.pd-1p1d.roles.decode.tp",
     "TP x PP = 16 x 1 = 16 must equal nodes x GPUs per node = 4 x 8 = 32"),
    (["mode.roles.decode.args.cuda-graph-max-bs=16"], "modes.pd-1p1d.roles.decode.args.cuda-graph-max-bs",
     "ambiguous in SGLang 0.5.23 (could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill)"),
    (["mode.roles.prefill.args.prefill-only=true"], "modes.pd-1p1d.roles.prefill.args.prefill-only",
     "SGLang 0.5.23 reads it as --prefill-only-disable-kv-cache"),
    (["mode.roles.decode.args.disaggregation-mode=\"decode\""],
     "modes.pd-1p1d.roles.decode.args.disaggregation-mode", "set by slurm-ab for every role instance"),
    (["mode.roles.decode.args.tp-size=32"], "modes.pd-1p1d.roles.decode.args.tp-size", "set by slurm-ab, not as a flag"),
    (["mode.router.decode_policy=\"bucket\""], "modes.pd-1p1d.router.decode_policy",
     "not a decode policy of router profile sglang_router"),
    (["mode.router.prefill_policy=\"power_of_two\""], "modes.pd-1p1d.router.prefill_policy",
     'requires at least 2 prefill workers'),
    (["pd.transfer_backend=\"fake\""], "pd.transfer_backend", "not a KV transfer backend of SGLang 0.5.23"),
    (["pd.transfer_backend=\"mori\"", "pd.ib_device=\"mlx5_0\""], "pd.ib_device", "read by mooncake and nixl only"),
    (["mode.roles.decode.args.disaggregation-decode-allocation-policy=\"prefill_complete\"",
      "mode.roles.prefill.args.disaggregation-decode-allocation-policy=\"prefill_complete\"",
      "pd.transfer_backend=\"nixl\""], "pd.transfer_backend", "prefill_complete does not yet support transfer backends"),
    (["mode.roles.decode.instances=0"], "modes.pd-1p1d.roles.decode.instances", "must be >= 1"),
    (["mode.tp=32"], "modes.pd-1p1d.tp", "a PD mode's parallelism is per role"),
    (["ports.bootstrap=30000"], "ports.bootstrap", "overlaps ports.server"),
    (["mode.roles.decode.args.context-length=8192", "mode.roles.prefill.args.context-length=8192"],
     "benchmark.input_len", "input + output = 16896 tokens exceeds the prefill role's context length 8192"),
])
def test_cross_role_rules_are_checked_before_submit(sets, key, rule):
    errs = errors_of("pd-1p1d", *sets)
    assert any(e.startswith(key + " = ") and rule in e for e in errs), errs


def test_dflash_with_pp_on_the_decode_is_refused():
    errs = errors_of("pd-1p1d-dflash", "mode.roles.decode.pp=2", "mode.roles.decode.tp=16",
                     "mode.roles.prefill.pp=2", "mode.roles.prefill.tp=16")
    assert any(e.startswith("modes.pd-1p1d-dflash.roles.decode.pp = 2: DFLASH speculative decoding only supports "
                            "pp_size == 1") for e in errs), errs


def test_unknown_role_and_role_key_are_named(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[modes.pd-1p1d.roles.mixed]\ninstances = 1\n[modes.pd-1p1d.roles.decode]\nnode = 4\n")
    with pytest.raises(ConfigErrors) as e:
        load_experiment(Sources("example", (str(cfg),), GOLDEN_SETS), "pd-1p1d")
    errs = [str(x) for x in e.value.errors]
    assert any(x.startswith("modes.pd-1p1d.roles.mixed = ") and "not a PD role (allowed: prefill, decode)" in x
               for x in errs), errs
    assert any(x.startswith("modes.pd-1p1d.roles.decode.node = 4: unknown key") and "did you mean nodes?" in x
               for x in errs), errs


def test_cli_exits_2_and_submits_nothing(tmp_path):
    r = subprocess.run(["slurm-ab", "dry-run", "pd-1p1d", "--set", "paths.results=" + str(tmp_path),
                        "--set", "mode.roles.prefill.args.page-size=16"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert "slurm-ab: error: modes.pd-1p1d.roles.prefill.args.page-size = 16: page-size differs" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_role_env_and_site_settings_reach_the_role_commands():
    text = render("pd-1p1d", sets=['pd.ib_device="mlx5_0,mlx5_1"', 'pd.transfer_backend="nixl"',
                                   'mode.roles.decode.env.UCX_NET_DEVICES="mlx5_0:1"'])
    env, argv = role_argv(text, "decode")
    assert "UCX_NET_DEVICES=mlx5_0:1" in env and env.index("UCX_NET_DEVICES=mlx5_0:1") == len(env) - 1
    assert argv[argv.index("--disaggregation-transfer-backend") + 1] == "nixl"
    assert argv[argv.index("--disaggregation-ib-device") + 1] == "mlx5_0,mlx5_1"
    _, pargv = role_argv(text, "prefill")
    assert "UCX_NET_DEVICES" not in " ".join(pargv)
    assert "PF_PD_IB='mlx5_0,mlx5_1'" in text


def test_a_pd_job_spells_no_path_of_the_run_directory():
    from test_layout_paths import spelled_paths

    text = render_script(_campaign(["tp32", "pd-1p1d"])) + render("pd-1p1d", site="local")
    assert spelled_paths(text) == set()
    for name in ("F_PD_CANARY", "F_PD_CANARY_HTTP", "F_PD_CANARY_DP", "F_PD_CANARY_DP_HTTP", "F_PD_WARMUP", "F_PD_WARMUP_HTTP", "F_ROUTER_CANARY",
                 "F_PREFLIGHT_HOST_IP"):
        assert f"{name}=" in text and f"${name}" in text, name


def test_fabric_settings_reach_the_job_and_dry_run():
    """[pd] kv_checksum (both roles' flag), host_ip_interface (the preflight reads it, the job
    exports it), gpudirect_check (the preflight's command, on RDMA backends only) and the decode's
    DP workers (one canary each): in the script and in dry-run's words."""
    text = render("pd-1p1d", sets=['pd.host_ip_interface="ib0"', "mode.roles.decode.args.dp-size=2",
                                   "mode.roles.decode.args.enable-dp-attention=true", "pd.kv_checksum=true"])
    for role in ("prefill", "decode"):
        assert "--disaggregation-enable-kv-checksum" in role_argv(text, role)[1]
    assert "HOST_IP_IFACE=ib0" in text and "PF_PD_IFACE=ib0" in text and "MODE_DP_0=(1 2)" in text
    assert re.search(r"^PF_ADDRESS=\(python3 -c ", text, re.M)                 # the address probe, for ib0
    assert re.search(r"^PF_PD_GPUDIRECT=\(python3 -c ", text, re.M)
    off = render("pd-1p1d", sets=['pd.transfer_backend="mooncake_tcp"',
                                  'pd.host_ip_interface=""'])       # the example site sets ib0
    for role in ("prefill", "decode"):                               # off by default (docs/pd.md)
        assert "--disaggregation-enable-kv-checksum" not in role_argv(off, role)[1]
    assert "PF_PD_GPUDIRECT=()" in off and "HOST_IP_IFACE=''" in off and "MODE_DP_0=(1 1)" in off
    tcp = render("pd-1p1d", sets=['pd.env.MOONCAKE_PROTOCOL="tcp"'])
    assert "PF_PD_GPUDIRECT=()" in tcp                                         # no RDMA: nothing to check
    plan = plan_for(Sources("example", (), GOLDEN_SETS + ('pd.host_ip_interface="ib0"', "mode.roles.decode.args.dp-size=2",
                                                          "mode.roles.decode.args.enable-dp-attention=true")),
                    "pd-1p1d", "R")
    text = summary(plan)
    assert "KV checksum: off (pd.kv_checksum = false, SGLang's default)" in text
    assert "KV checksum: --disaggregation-enable-kv-checksum on both roles (pd.kv_checksum)" in summary(plan_for(
        Sources("example", (), GOLDEN_SETS + ("pd.kv_checksum=true",)), "pd-1p1d", "R"))
    assert "SGLANG_HOST_IP (the address each rank advertises for KV): the IPv4 address of ib0 on each node" in text
    assert "GPUDirect RDMA on every node (nvidia_peermem or dma-buf" in text
    assert "2 canaries, one per DP rank" in text
