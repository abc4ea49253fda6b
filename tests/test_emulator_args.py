"""The emulator accepts and rejects SGLang launch_server flags exactly as SGLang 0.5.23 does."""
import subprocess
import sys

import pytest

from slurm_ab_testbed.emulator.cli_args import (DFLASH_PP_ERROR, SPEC_RESET_WARNING, ServerArgsError, build_parser,
                                        parse)
from slurm_ab_testbed.emulator.faults import Faults, FaultSpecError, parse_faults
from slurm_ab_testbed.emulator.knobs import KnobError, read_knobs

BASE = ["--model-path", "/m", "--tp-size", "8"]


def test_defaults_match_sglang():
    a = parse(["--model-path", "/m", "--tp-size", "8"]).args
    assert (a.host, a.port, a.decode_log_interval, a.kv_cache_dtype, a.moe_runner_backend) == \
        ("127.0.0.1", 30000, 40, "auto", "auto")
    assert a.max_running_requests is None and a.served_model_name == "/m" and a.tokenizer_path == "/m"


def test_aliases_and_abbreviations():
    a = parse(["--model", "/m", "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--ep", "2",
               "--nccl-init-addr", "h:5000", "--speculative-draft-model", "/d", "--speculative-algorithm", "EAGLE"]).args
    assert (a.model_path, a.tp_size, a.pp_size, a.ep_size, a.dist_init_addr) == ("/m", 4, 2, 2, "h:5000")
    assert a.speculative_draft_model_path == "/d"
    assert parse(["--model-path", "/m", "--tp", "8"]).args.tp_size == 8   # prefix abbreviation, as in SGLang


@pytest.mark.parametrize("flag, msg", [
    ("--pp", "ambiguous option: --pp could match --pp-size, --pp-max-micro-batch-size, --pp-async-batch-depth"),
    ("--cuda-graph-max-bs", "ambiguous option: --cuda-graph-max-bs could match"),
    ("--enable-ep-moe", "unrecognized arguments: --enable-ep-moe"),
    ("--bogus-flag", "unrecognized arguments: --bogus-flag"),
])
def test_rejected_flags_exit_2(flag, msg, capsys):
    argv = BASE + [flag] + (["4"] if flag in ("--pp", "--cuda-graph-max-bs") else [])
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    assert msg in capsys.readouterr().err


def test_choices():
    assert parse(BASE + ["--kv-cache-dtype", "bf16", "--moe-runner-backend", "flashinfer_mxfp4"]).args.kv_cache_dtype == "bf16"
    for bad in (["--kv-cache-dtype", "fp4_e2m1"], ["--moe-runner-backend", "nope"],
                ["--speculative-draft-kv-cache-dtype", "mxfp8"]):
        with pytest.raises(SystemExit):
            parse(BASE + bad)


def test_prog_name_is_sglang_serve():
    assert build_parser().prog == "sglang serve"


def test_dflash_rules():
    with pytest.raises(ServerArgsError, match="only supports pp_size == 1"):
        parse(["--model-path", "/m", "--tp-size", "4", "--pp-size", "2", "--speculative-algorithm", "DFLASH",
               "--speculative-draft-model-path", "/d"])
    with pytest.raises(ServerArgsError, match="draft-model-path"):
        parse(BASE + ["--speculative-algorithm", "DFLASH"])
    r = parse(BASE + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                      "--speculative-num-draft-tokens", "16"])
    assert r.args.max_running_requests == 48 and SPEC_RESET_WARNING in r.warnings
    assert (r.args.speculative_num_draft_tokens, r.args.speculative_num_steps, r.args.speculative_eagle_topk) == (16, 1, 1)
    r = parse(BASE + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                      "--max-running-requests", "64", "--speculative-dflash-block-size", "8"])
    assert r.args.max_running_requests == 64 and not any("reset to 48" in w for w in r.warnings)
    assert r.args.speculative_num_draft_tokens == 8


def test_world_size_must_fill_the_nodes():
    assert parse(["--model-path", "/m", "--tp-size", "32", "--nnodes", "4", "--dist-init-addr", "h:1"]).args.nnodes == 4
    assert parse(["--model-path", "/m", "--tp-size", "4", "--pp-size", "8", "--nnodes", "4",
                  "--dist-init-addr", "h:1"]).args.pp_size == 8
    with pytest.raises(ServerArgsError, match="must equal nnodes"):
        parse(["--model-path", "/m", "--tp-size", "16", "--nnodes", "4", "--dist-init-addr", "h:1"])
    assert parse(["--model-path", "/m", "--tp-size", "4", "--nnodes", "2", "--dist-init-addr", "h:1"],
                 gpus_per_node=2).args.tp_size == 4


def test_cli_exit_codes(tmp_path):
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "slurm_ab_testbed.emulator", *argv], capture_output=True, text=True,
                              timeout=30)
    r = run("--model-path", "/m", "--pp", "2")
    assert r.returncode == 2 and "ambiguous option: --pp" in r.stderr
    r = run("--model-path", "/m", "--tp-size", "8", "--unknown")
    assert r.returncode == 2 and "unrecognized arguments: --unknown" in r.stderr
    r = run("--model-path", "/m", "--tp-size", "4", "--pp-size", "2", "--speculative-algorithm", "DFLASH",
            "--speculative-draft-model-path", "/d")
    assert r.returncode == 1 and f"ValueError: {DFLASH_PP_ERROR}" in r.stderr


def test_knobs_and_faults():
    k = read_knobs({"SLURM_AB_EMU_TIME_SCALE": "0.02", "SLURM_AB_EMU_LOG_VERSION": "0.5.6",
                    "SLURM_AB_EMU_FAULT": "die_after_requests=3, crash_rank=1", "SGLANG_LOG_MS": "1"})
    assert (k.time_scale, k.log_version, k.log_ms) == (0.02, "0.5.6", True)
    assert k.faults == Faults(die_after_requests=3, crash_rank=1)
    assert parse_faults("hang_startup,oom_first_prefill") == Faults(hang_startup=True, oom_first_prefill=True)
    for env in ({"SLURM_AB_EMU_TIME_SCALE": "0"}, {"SLURM_AB_EMU_LOG_VERSION": "0.6"},
                {"SLURM_AB_EMU_FAULT": "explode"}, {"SLURM_AB_EMU_GPUS_PER_NODE": "x"}):
        with pytest.raises(KnobError):
            read_knobs(env)
    with pytest.raises(FaultSpecError):
        parse_faults("crash_rank=")
