"""Rendered job scripts: golden files, structure, the tp32 / tp32-dflash difference, bash -n, shellcheck."""
import difflib
import os
import re
import subprocess

import pytest

from helpers.scripts import GOLDEN, MODES, render, shellcheck


@pytest.mark.parametrize("mode", MODES)
def test_golden(mode):
    text = render(mode)
    path = GOLDEN / f"{mode}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    expected = path.read_text()
    assert text == expected, "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "golden", "rendered"))


def test_golden_local_site():
    text = render("tp32", site="local")
    path = GOLDEN / "tp32-local.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("mode", MODES)
def test_structure(mode):
    text = render(mode)
    header = [l for l in text.splitlines() if l.startswith("#SBATCH")]
    assert header.count("#SBATCH hetjob") == 1
    assert header.count("#SBATCH --nodes=4") == 2 and header.count("#SBATCH --ntasks-per-node=1") == 2
    assert header.count("#SBATCH --gpus-per-node=8") == 2 and header.count("#SBATCH --exclusive") == 2
    assert header.count("#SBATCH --mem=0") == 2   # --exclusive alone gives only the default memory
    assert "#SBATCH --job-name=ab-RUN-ID" in header
    # one server step per replica, each on its own het group, node rank from Slurm
    for g in (0, 1):
        assert re.search(rf'srun --het-group={g} --nodes=4 --ntasks-per-node=1 --kill-on-bad-exit=1 "\$\{{SERVER_STEP\[@\]\}}" \\\n.*server-r{g}-n%t\.log', text)
        assert f'--dist-init-addr "$R{g}_ADDR:$R{g}_DIST_PORT"' in text
    assert "SERVER_STEP=(--cpu-bind=none)\n" in text
    assert text.count('--node-rank "$SLURM_NODEID"') == 2
    assert "  python3 -m sglang.launch_server\n" in text and "  --host 0.0.0.0\n" in text
    assert re.search(r"--tp-size \d+\n  --pp-size \d+\n  --ep-size 4\n", text)
    assert not re.search(r"--pp(\s|=)", text), "--pp is ambiguous in SGLang"
    # router and client pinned to component 0's first node, router waits for both workers
    assert text.count('side_srun --het-group=0 --nodelist="$ROUTER_HOST" "${SIDE_STEP[@]}"') == 2
    assert "SIDE_STEP=(--nodes=1 --ntasks=1 --overlap --gres=none --mem=0)\n" in text
    assert "ROUTER_HOST=$R0_HEAD" in text and "ROUTER_ADDR=$R0_ADDR" in text
    assert '--worker-urls "http://${R0_ADDR}:${R0_PORT}" "http://${R1_ADDR}:${R1_PORT}"' in text
    assert '--base-url "http://${ROUTER_ADDR}:${ROUTER_PORT}"' in text
    # no --container-env: pyxis would forward only names set in the host environment
    assert "--container-env" not in text
    assert "--policy round_robin" in text and "--model-path /shared/models/Kimi-K3\n)" in text
    assert "--num-prompts 40\n  --max-concurrency 8\n" in text and "--output-details" in text
    assert "--dataset-name speed-bench" in text
    # warm-up of each replica directly, before the router starts
    assert text.index("warmup_replica \"$g\"") < text.index("event router_launch")
    assert "WARMUP_INPUT_LEN=16384" in text and "WARMUP_OUTPUT_LEN=1" in text
    # teardown on every exit path
    for trap in ("trap on_exit EXIT", "trap 'on_signal TERM' TERM", "trap on_time_limit USR1"):
        assert trap in text
    # pyxis with the model mounted
    assert "--container-image=" in text and "/shared/models/Kimi-K3:/shared/models/Kimi-K3" in text
    assert "--no-container-mount-home" in text


def _server_flags(text):
    body = text[text.index("SERVER_CMD=(\n"):]
    return body[: body.index("\n)\n")].splitlines()[1:]


def test_dflash_differs_from_tp32_only_by_dflash_flags():
    a, b = _server_flags(render("tp32")), _server_flags(render("tp32-dflash"))
    removed = [l for l in a if l not in b]
    added = [l.strip() for l in b if l not in a]
    assert removed == []
    assert added == [
        "--speculative-algorithm DFLASH",
        "--speculative-draft-model-path /shared/models/Kimi-K3-DFlash",
        "--speculative-num-draft-tokens 16",
        "--speculative-draft-kv-cache-dtype bf16",
        "--mem-fraction-static 0.83",
    ]
    # and nothing else in the whole script differs except the mode's name
    diff = [l for l in difflib.ndiff(render("tp32").splitlines(), render("tp32-dflash").splitlines())
            if l.startswith(("+", "-"))]
    others = [l for l in diff if "speculative" not in l and "mem-fraction" not in l
              and not l[2:].startswith("PF_PATHS=")]
    # the preflight checks the draft model path too
    assert "+ PF_PATHS=(model /shared/models/Kimi-K3 'draft model' /shared/models/Kimi-K3-DFlash)" in diff
    assert all("tp32" in l for l in others), others


def test_pp8_parallelism():
    flags = _server_flags(render("pp8"))
    assert "  --tp-size 4" in flags and "  --pp-size 8" in flags and "  --ep-size 4" in flags
    assert not any("speculative" in f for f in flags)


@pytest.mark.parametrize("mode", MODES)
def test_bash_syntax(tmp_path, mode):
    p = tmp_path / f"{mode}.sbatch"
    p.write_text(render(mode))
    r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("mode,site", [(m, "example") for m in MODES] + [("tp32", "local")])
def test_shellcheck_clean(tmp_path, mode, site):
    p = tmp_path / f"{mode}.sbatch"
    p.write_text(render(mode, site=site))
    r = shellcheck(p)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_container_means_no_pyxis_flags():
    text = render("tp32", sets=["container.image="])
    assert "--container-image" not in text and "CONTAINER=()" in text


def test_gpu_request_styles():
    assert "#SBATCH --gres=gpu:8" in render("tp32", sets=["cluster.gpu_request=gres"])
    text = render("tp32", sets=["cluster.gpu_request=none"])
    assert "--gpus-per-node" not in text and "--gres=gpu" not in text


def test_ports_are_per_replica_and_per_job():
    text = render("tp32")
    assert "JOB_SLOT=$(( SLURM_JOB_ID % 100 ))" in text
    assert "R0_PORT=$(( 30000 + JOB_SLOT * 20 + 0 ))" in text
    assert "R1_PORT=$(( 30000 + JOB_SLOT * 20 + 10 ))" in text
    assert "ROUTER_PORT=$(( 8000 + JOB_SLOT ))" in text


def test_new_mode_is_a_toml_edit(tmp_path):
    cfg = tmp_path / "tp16.toml"
    cfg.write_text('[modes.tp16-ep8]\ndescription = "2 x TP16/PP2/EP8"\ntp = 16\npp = 2\nep = 8\n')
    flags = _server_flags(render("tp16-ep8", configs=[str(cfg)]))
    assert "  --tp-size 16" in flags and "  --pp-size 2" in flags and "  --ep-size 8" in flags


@pytest.mark.parametrize("sets", [
    ['cluster.address="interface"', 'cluster.address_interface="ib0"'],
    ['cluster.address="nodeaddr"', 'router.profile="smg"', 'cluster.mem=""', 'cluster.server_cpu_bind=""',
     "cluster.side_step_args=[]"],
    ["preflight.enabled=false", 'cluster.prologue="module load cuda/12.8\\nsource /opt/sglang/bin/activate"'],
], ids=["interface", "nodeaddr-smg-site-defaults", "no-preflight-prologue"])
def test_site_variants_pass_bash_n_and_shellcheck(tmp_path, sets):
    p = tmp_path / "v.sbatch"
    p.write_text(render("tp32-dflash", sets=sets))
    r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = shellcheck(p)
    assert r.returncode == 0, r.stdout + r.stderr


def test_site_defaults_can_be_left_to_the_site():
    text = render("tp32", sets=['cluster.mem=""', 'cluster.server_cpu_bind=""', "cluster.side_step_args=[]"])
    assert "--mem=0" not in text.split("set -uo pipefail")[0]
    assert "SERVER_STEP=()\n" in text and "SIDE_STEP=(--nodes=1 --ntasks=1 --overlap)\n" in text
