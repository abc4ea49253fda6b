"""Every value reaching bash arrives as one literal word, whatever characters it holds."""
import subprocess

import pytest

from helpers.scripts import generated, layout_formats, render
from slurm_ab.model.rundir import Layout

NASTY = [
    "/models/Kimi K3",
    "/models/it's \"quoted\"",
    "/models/$HOME/$(touch /tmp/pwned)/`id`",
    "/models/semi;colon&amp|pipe>redir",
    "/models/glob*?[ab]",
    "/models/new\nline",
    "/models/{paths}x",
]


def _array(text: str, name: str) -> list[str]:
    """Evaluate the generated part of the rendered script in bash (assignments and the command
    functions) and return the words of array NAME."""
    script = generated(text) + "set +u\nrouter_command\nclient_command\n" + \
        f'printf "%s\\0" "${{{name}[@]}}"\n'
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "1"}).stdout
    return out.decode().split("\0")[:-1]


@pytest.mark.parametrize("path", NASTY)
def test_model_path_is_one_literal_word(path, tmp_path):
    cfg = tmp_path / "site.toml"
    # TOML basic string with escapes for the nasty characters
    esc = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    cfg.write_text(f'[paths]\nmodel = "{esc}"\n[container]\nimage = ""\n')
    text = render("tp32", configs=[str(cfg)])
    words = _array(text, "SERVER_CMD_0_server")
    i = words.index("--model-path")
    assert words[i + 1] == path
    client = _array(text, "CLIENT_CMD")
    assert client[client.index("--tokenizer") + 1] == path
    assert not (tmp_path / "pwned").exists()


def test_env_values_are_literal(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text('[env]\nNCCL_IB_HCA = "=mlx5_0,mlx5_1 $(id) `id`"\n')
    words = _array(render("tp32", configs=[str(cfg)]), "SERVER_ENV")
    assert "NCCL_IB_HCA==mlx5_0,mlx5_1 $(id) `id`" in words


def test_extra_client_args_are_literal(tmp_path):
    cfg = tmp_path / "x.toml"
    cfg.write_text('[benchmark]\nextra_args = ["--extra-request-body", "{\\"a\\": \\"$b c\\"}"]\n')
    words = _array(render("tp32", configs=[str(cfg)]), "CLIENT_CMD")
    assert words[-1] == '{"a": "$b c"}'


@pytest.mark.parametrize("path", NASTY)
def test_preflight_paths_survive_into_the_node_script(path, tmp_path):
    """The preflight's settings reach each node through check.sh (bash's own declare -p): a nasty
    model path is still one literal word there, and its absence is reported with that exact path."""
    import json
    import os

    esc = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[paths]\nmodel = "{esc}"\n[preflight]\nimport_command = []\ngpu_command = []\n')
    text = render("tp32", site="local", configs=[str(cfg)])
    funcs = text[text.index("# ---- helpers (static)"):text.index("trap on_exit EXIT")]
    settings = text[text.index("PF_MODULES=("):text.index("\n", text.index("PREFLIGHT_TIMEOUT=")) + 1]
    run = tmp_path / "run"
    harness = tmp_path / "h.sh"
    harness.write_text(f"RUN_DIR={run}\nmkdir -p {run}/logs\n" + layout_formats() + funcs + settings
                       + "write_preflight_script\n")
    subprocess.run(["bash", str(harness)], check=True, capture_output=True)
    check = Layout(run).preflight_script
    out = subprocess.run(["bash", "-c", f'source <(head -n -1 {check}); printf "%s\\0" "${{PF_PATHS[@]}}"'],
                         capture_output=True, check=True).stdout.decode().split("\0")[:-1]
    assert out[:2] == ["model", path]
    env = {**os.environ, "SLURMD_NODENAME": "nodeQ", "SLURM_NODEID": "1", "SLURM_AB_FAKE_GPUS": "8"}
    subprocess.run(["bash", str(check), "0"], check=True, capture_output=True, env=env,
                   cwd=tmp_path)
    rep = json.loads(Layout(run).preflight_report("nodeQ").read_text())
    assert {"check": "path", "cause": f"model path {path} is missing"} in rep["problems"]
    assert not (tmp_path / "pwned").exists()
