"""Bad input (issue 5): shell safety proven on the cluster, run directories, secrets.

One real job runs every step's command through a recording stub (tests/stubs/record_exec.py: argv and
environment as JSON, then exec of the real program), with the model directory at a path made of
spaces, quotes, $(...), backticks, ';', glob characters and a newline, the same text in
environment values and in extra flags of the server, the router and the client, and a secret
from the site's cluster.secret_env. The job must complete, every process must have received the
literal values, no shell may have run anything, and the secret must reach the processes without
being written anywhere in the run directory.
"""
from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest

from slurm_ab.model.rundir import Layout

from helpers import CLIENT_052
from helpers.jobdrive import Job, cli as run_cli

STUB = Path(__file__).parent / "stubs" / "record_exec.py"
MODEL = Path("/var/lib/slurm-ab-local/models/Kimi-K3")
PWN = "slurm-ab-pwned"
# Everything a shell would act on: word splitting, both quotes, command substitution both ways,
# variables, a command separator, globs, redirections, a comment, a backslash and a newline.
NASTY = f"a b 'q' \"dq\" $(touch {PWN}) `touch {PWN}` $HOME; x*y?[ab] & | > < # ~ % \\ end\nline2"


def toml_str(s: str) -> str:
    return json.dumps(s)   # a JSON string is a valid TOML basic string (same escapes)


def toml_list(xs) -> str:
    return "[" + ", ".join(toml_str(x) for x in xs) + "]"


def local_site_text() -> str:
    return (Path(__file__).resolve().parents[1] / "testbed" / "sites" / "local.toml").read_text()


# ---- run ids, job names, run directories (no cluster needed) ---------------------------------------

@pytest.mark.parametrize("run_id", ["../escape", "a/b", "..", "x..y", "/abs", "a b", "a;b", "$(id)", "`id`",
                                    "a\nb", "*", "", "a" * 101, "\u00e9"])
def test_bad_run_ids_are_rejected_before_anything_is_written(run_id, cli, tmp_path):
    """The run id names the directory and the job (ab-<RUN_ID>): a strict pattern, a clear error."""
    code, out, err = cli("submit", "tp32", "--site", "local", "--run-id", run_id)
    assert code == 2, (out, err)
    assert "slurm-ab: error: run id" in err and "not a valid run id" in err, err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_bad_run_id_from_the_environment(cli, monkeypatch):
    monkeypatch.setenv("RUN_ID", "../../etc")
    code, _, err = cli("dry-run", "tp32", "--site", "local")
    assert code == 2 and "run id" in err and "not a valid run id" in err


@pytest.mark.parametrize("key,value,what", [
    ("paths.results", "res ults", "run directories are named on #SBATCH lines"),
    ("paths.results", "res\nults", "run directories are named on #SBATCH lines"),
    ("paths.results", "res%j", "run directories are named on #SBATCH lines"),
    ("cluster.partition", "gpu\n#SBATCH --uid=0", "cannot stand on an #SBATCH line"),
    ("cluster.account", "a b", "cannot stand on an #SBATCH line"),
])
def test_values_that_cannot_be_safe_are_rejected(key, value, what, cli, tmp_path):
    """Newlines and spaces cannot be made safe on #SBATCH lines: a clear error, nothing written."""
    code, out, err = cli("submit", "tp32", "--site", "local", "--run-id", "ok", "--set", f"{key}={toml_str(value)}")
    assert code == 2, (out, err)
    assert f"slurm-ab: error: {key}" in err and what in err, err
    assert not (tmp_path / "results" / "ok").exists()


def test_sbatch_extra_must_be_one_option(cli):
    code, _, err = cli("dry-run", "tp32", "--site", "local", "--set", 'cluster.sbatch_extra=["--qos=high --uid=0"]')
    assert code == 2 and "cluster.sbatch_extra[0]" in err and "not a single sbatch option" in err


def test_existing_run_directory_is_never_reused(cli, tmp_path):
    run = tmp_path / "results" / "taken"
    Layout(run).logs.mkdir(parents=True)
    Layout(run).events.write_text("evidence\n")
    Layout(run).server_log(0, 0).write_text("more evidence\n")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, _, err = cli("submit", "tp32", "--site", "local", "--run-id", "taken")
    assert code == 2 and "already exists" in err and "never reuses" in err, err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def _secret_site(tmp_path: Path) -> Path:
    site = tmp_path / "site.toml"
    site.write_text(local_site_text().replace("[cluster]\n", '[cluster]\nsecret_env = ["HF_TOKEN"]\n', 1))
    return site


def test_secret_must_come_from_the_environment(cli, tmp_path, monkeypatch):
    site = _secret_site(tmp_path)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    code, _, err = cli("submit", "tp32", "--site", str(site), "--run-id", "nosecret")
    assert code == 2 and "cluster.secret_env" in err and "HF_TOKEN" in err, err
    code, _, err = cli("dry-run", "tp32", "--site", str(site), "--set", 'env.HF_TOKEN="x"')
    assert code == 2 and "a secret's value must come from the submitter's environment" in err, err
    monkeypatch.setenv("HF_TOKEN", "hf_dry_run_value")
    code, out, err = cli("dry-run", "tp32", "--site", str(site))
    assert code == 0 and "hf_dry_run_value" not in out + err and "SECRET_ENV=(HF_TOKEN)" in out


def test_secrets_go_through_a_file_only_the_user_reads(tmp_path, monkeypatch):
    """Never in the script or in sbatch's environment (the job's environment record): a file created
    0600, whose shell quoting the job's batch shell reads back exactly."""
    import os
    import stat
    import subprocess

    from slurm_ab.job.submit import _without, write_secrets
    from slurm_ab.model.sources import Sources
    from helpers.scripts import plan_for

    value = "hf_x 'q' $(id) \"dq\"\nline2"
    monkeypatch.setenv("HF_TOKEN", value)
    plan = plan_for(Sources(str(_secret_site(tmp_path)), (), ()), "tp32", "R")
    write_secrets(plan, tmp_path)
    f = Layout(tmp_path).secrets
    assert stat.S_IMODE(f.stat().st_mode) == 0o600 and value not in render_text(plan)
    r = subprocess.run(["bash", "-c", f'source {f}; printf %s "$HF_TOKEN"'], capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"]})
    assert r.stdout == value
    with _without(plan.secret_env):
        assert "HF_TOKEN" not in os.environ
    assert os.environ["HF_TOKEN"] == value


def render_text(plan) -> str:
    from slurm_ab.job.render import render_script
    return render_script(plan)


# ---- the recorded job on the cluster ----------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory, local_cluster):
    """Run the job once; yield what the test functions check."""
    work = tmp_path_factory.mktemp("stub")
    nasty_dir = work / ("models " + NASTY)
    nasty_dir.mkdir()
    model = nasty_dir / ("Kimi K3 " + NASTY)
    model.symlink_to(MODEL, target_is_directory=True)
    rec = work / ("rec " + NASTY)
    token = "hf_" + secrets.token_hex(16)
    site = _secret_site(work)
    stub = ["python3", str(STUB), str(rec)]
    client, router = _site_commands(site, CLIENT_052[1])
    cfg = work / "nasty.toml"
    cfg.write_text("\n".join([
        "[paths]", f"model = {toml_str(str(model))}",
        "[commands]",
        f"server = {toml_list(stub + ['python3', '-m', 'slurm_ab_testbed.emulator'])}",
        # The router's and the client's commands belong to their profiles (the site picks them);
        # the stub goes right before the program (after the site's `env -u PYTHONPATH`)
        "[router_profiles.sglang_router]",
        f"command = {toml_list(_before_python(router, stub))}",
        f"[client_profiles.{client['name']}]", f"command = {toml_list(stub + client['command'])}",
        "[env]", f"SLURM_AB_NASTY = {toml_str(NASTY)}",
        "[server.env]", f"SLURM_AB_NASTY_SERVER = {toml_str(NASTY)}", 'SLURM_AB_EMU_TIME_SCALE = "0.02"',
        "[server.args]", f"served-model-name = {toml_str(NASTY)}",
        "[router.args]", f"request-id-headers = {toml_str(NASTY)}",
        "[benchmark]", f"extra_args = {toml_list(['--disable-tqdm', '--prompt-suffix', NASTY])}",
        "num_prompts = 16", ""]))
    # 0.5.2's client (Job's default; the quoting is the script's, whatever the client): its import
    # is half of 0.5.23's, on ROUTER_HOST's preflight and in the pass
    j = Job(work, f"stub-{time.strftime('%H%M%S')}", site=str(site), extra=("--config", str(cfg)),
            env={"HF_TOKEN": token})
    try:
        # slurmctld's record of the job's environment (what AccountingStoreFlags=job_env sends to
        # slurmdbd) while the job runs, and the secrets file the job reads and removes at its start
        j.wait_event("job_start", 120)
        env_record = _env_record(str(j.job_id))
        j.wait_event("preflight_start", 120)
        secrets_left = Layout(j.run_dir).secrets.exists()
        j.finish(180)
        records = [json.loads(p.read_text()) for p in sorted(rec.glob("*.json"))]
        yield dict(job=j, work=work, model=model, rec=rec, token=token, records=records, env_record=env_record,
                   secrets_left=secrets_left)
    finally:
        j.cleanup()


def _env_record(job_id: str) -> bytes:
    """slurmctld's saved environment of a batch job (StateSaveLocation/hash.<id % 10>/job.<id>)."""
    import subprocess

    conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    state = next(line.split("=", 1)[1].strip() for line in conf.splitlines() if line.startswith("StateSaveLocation"))
    return (Path(state) / f"hash.{int(job_id) % 10}" / f"job.{job_id}" / "environment").read_bytes()


def _site_commands(site, *configs: str) -> tuple[dict, list[str]]:
    """The client profile of the site with CONFIGS (its name and command) and its sglang_router
    profile's command."""
    from slurm_ab.model.config import load_tree

    tree = load_tree(str(site), configs)
    name = tree["benchmark"]["client"]
    return ({"name": name, "command": list(tree["client_profiles"][name]["command"])},
            list(tree["router_profiles"]["sglang_router"]["command"]))


def _before_python(command: list[str], stub: list[str]) -> list[str]:
    i = command.index("python3")
    return command[:i] + stub + command[i:]


def _role(r: dict) -> str:
    a = r["argv"]
    return {"slurm_ab_testbed.emulator": "server", "sglang_router.launch_router": "router",
            "sglang.bench_serving": "client", "sglang.benchmark.steady_state_serving": "client",
            }.get(a[2] if len(a) > 2 else "", "?")


@pytest.mark.cluster
@pytest.mark.slow
def test_recorded_job_completes(recorded):
    j = recorded["job"]
    assert j.rc == 0, j.output()[-4000:]
    assert j.sacct()["state"] == "COMPLETED"
    s = j.summary()
    assert s["verdict"] == "ok", s["reasons"]
    assert s["bench"]["completed"] == 16
    j.assert_nothing_left()


@pytest.mark.cluster
@pytest.mark.slow
def test_every_value_arrives_as_one_literal_argument(recorded):
    records, model = recorded["records"], str(recorded["model"])
    roles = sorted(_role(r) for r in records)
    assert roles == ["client"] + ["router"] + ["server"] * 8, roles
    for r in records:
        argv = r["argv"]
        if _role(r) == "server":
            assert argv[argv.index("--model-path") + 1] == model
            assert argv[argv.index("--served-model-name") + 1] == NASTY
            assert r["env"]["SLURM_AB_NASTY_SERVER"] == NASTY
        elif _role(r) == "router":
            assert argv[argv.index("--model-path") + 1] == model
            assert argv[argv.index("--request-id-headers") + 1] == NASTY
        else:
            assert argv[argv.index("--model") + 1] == model
            assert argv[argv.index("--tokenizer") + 1] == model
            assert argv[argv.index("--prompt-suffix") + 1] == NASTY
            assert argv[-1] == NASTY
        assert r["env"]["SLURM_AB_NASTY"] == NASTY
    # the servers really served the model from that directory
    head = recorded["job"].launch().server_log(0, 0).read_text()
    assert "model_path=" in head and "Kimi K3 a b" in head


@pytest.mark.cluster
@pytest.mark.slow
def test_no_shell_ran_anything(recorded):
    j = recorded["job"]
    places = {recorded["work"], j.run_dir, Layout(j.run_dir).logs, j.launch().root, j.launch().logs, Path.home(), Path("/tmp"),
              Path("/var/lib/slurm-ab-cluster")}
    places |= {Path(r["cwd"]) for r in recorded["records"]}
    assert not [p / PWN for p in places if (p / PWN).exists()]


@pytest.mark.cluster
@pytest.mark.slow
def test_secret_reaches_processes_but_no_file(recorded):
    token, j = recorded["token"], recorded["job"]
    assert all(r["env"].get("HF_TOKEN") == token for r in recorded["records"])
    assert len(recorded["records"]) == 10
    leaked = [str(p.relative_to(j.run_dir)) for p in j.run_dir.rglob("*")
              if p.is_file() and token.encode() in p.read_bytes()]
    assert leaked == [], leaked
    lay = Layout(j.run_dir)
    assert all(p.is_file() for p in (lay.job_script, lay.manifest, lay.events, lay.summary("json"), lay.summary("md")))
    assert lay.slurm_outs()
    assert "HF_TOKEN" in lay.job_script.read_text()       # by name only
    # submit kept it out of sbatch's environment (the job's record, slurmdbd's with job_env): it
    # went through a 0600 file, which the job read and removed before its first step
    assert b"PATH=" in recorded["env_record"] and token.encode() not in recorded["env_record"]
    assert b"HF_TOKEN=" not in recorded["env_record"] and not recorded["secrets_left"]
    assert token not in j.output()
    r = run_cli("collect", j.run_id, cwd=recorded["work"])
    assert token not in r.stdout + r.stderr
