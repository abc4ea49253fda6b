"""A mode may change any setting its launches run with ([modes.<M>.settings], issue 33 item 1):
validated with the key named, each launch in its own mode's image and environment, the preflight
again in each other image, the page's settings showing what differs."""
from __future__ import annotations

import subprocess

import pytest

from helpers import ROOT
from helpers.scripts import GOLDEN_RUN_ID, GOLDEN_SETS, check_golden, generated, shellcheck
from slurm_ab.job.campaign_plan import CampaignOptions, plan_job
from slurm_ab.job.render import render_script
from slurm_ab.model.errors import ConfigErrors
from slurm_ab.model.sources import Sources, load_experiment
from slurm_ab.report.sides import settings_of

SOFTWARE_AB = str(ROOT / "testbed" / "configs" / "software-ab.toml")


def _write(tmp_path, text: str) -> str:
    p = tmp_path / "modes.toml"
    p.write_text(text)
    return str(p)


NEXT = """
[modes.next]
description = "tp32 on the next image"
tp = 32
pp = 1
ep = 4
"""


def test_a_mode_changes_what_its_launches_run_with(tmp_path):
    cfg = _write(tmp_path, NEXT + """
[modes.next.settings.container]
image = "/images/next.sqsh"
[modes.next.settings.env]
NCCL_ALGO = "Ring"
[modes.next.settings.paths]
model = "/models/K3-FP4"
[modes.next.settings.benchmark]
client = "sglang_0_5_2"
dataset = "random-ids"
[modes.next.settings.router]
profile = "smg"
""")
    src = Sources("example", (cfg,), GOLDEN_SETS)
    base, nxt = load_experiment(src, "tp32"), load_experiment(src, "next")
    assert nxt.container.image == "/images/next.sqsh" and base.container.image.endswith("v0.5.23.sqsh")
    assert dict(nxt.env)["NCCL_ALGO"] == "Ring" and "NCCL_ALGO" not in dict(base.env)
    assert (nxt.paths.model, nxt.client.profile, nxt.router.profile) == ("/models/K3-FP4", "sglang_0_5_2", "smg")
    # the page's settings table shows every difference (image, environment, model, client, router)
    a, b = settings_of(base), settings_of(nxt)
    differ = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert {"image", "env NCCL_ALGO", "model", "client", "router", "benchmark.dataset"} <= differ
    plan = plan_job(src, ["tp32", "next"], GOLDEN_RUN_ID, CampaignOptions(launches=1))
    sw = plan.campaign.software
    assert not plan.campaign.same_software and not plan.campaign.same_client
    # pyxis names every image's container apart: one image's container never serves another's launch
    # (in_image in the job: --container-name=$CONTAINER_NAME${CONTAINER_TAG}-<group>)
    assert [s.container_tag for s in sw] == ["", "-i1"]
    assert not any(str(getattr(f, "text", f)).startswith("--container-name=") for s in sw for f in s.container)
    assert plan.campaign.software_checks == (1,)
    assert "smg" in " ".join(sw[1].modules) and "sglang.bench_serving=sglang" in sw[1].client_modules


@pytest.mark.parametrize("settings, key, words", [
    ("[modes.next.settings.cluster]\npartition = 'x'", "modes.next.settings.cluster",
     "not a setting a mode may change"),
    ("[modes.next.settings.container]\nimagee = 'x'", "modes.next.settings.container.imagee", "did you mean container.image"),
    ("[modes.next.settings.benchmark]\norder = 'blocked'", "modes.next.settings.benchmark.order", "the job's, not a mode's"),
    ("[modes.next.settings.env]\n'bad name' = '1'", "modes.next.settings.env.bad name", "not a valid environment variable"),
    ("[modes.next.settings.container]\nimage = 3", "modes.next.settings.container.image", "must be a string"),
    ("[modes.next.settings.benchmark]\nclient = 'nope'", "benchmark.client", "unknown client profile"),
])
def test_bad_mode_settings_are_named(tmp_path, settings, key, words):
    cfg = _write(tmp_path, NEXT + settings)
    with pytest.raises(ConfigErrors) as e:
        load_experiment(Sources("example", (cfg,), GOLDEN_SETS), "next")
    assert any(err.key == key and words in str(err) for err in e.value.errors), str(e.value)


def test_cli_exits_2_naming_the_key(tmp_path):
    cfg = _write(tmp_path, NEXT + "[modes.next.settings.ports]\nserver = 1\n")
    r = subprocess.run(["python3", "-m", "slurm_ab", "dry-run", "next", "--config", cfg], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 2 and "modes.next.settings.ports" in r.stderr and "allowed: container, env" in r.stderr


def test_software_ab_golden_and_dry_run(tmp_path):
    """The local site's software A/B: the exec runtime's image words per mode, the per-launch choice
    (use_mode_software), the preflight again in the second image."""
    plan = plan_job(Sources("local", (SOFTWARE_AB,), GOLDEN_SETS), ["v0523", "v0524"], GOLDEN_RUN_ID,
                    CampaignOptions(launches=1, repeats=1))
    text = render_script(plan)
    check_golden("campaign-software-ab-local.sbatch", generated(text))
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    r = shellcheck(script)
    assert r.returncode == 0, r.stdout
    assert "IMAGE_EXEC_1=(python3 -m slurm_ab_testbed.fake_apptainer exec --bind " in text
    assert text.count("/var/lib/slurm-ab-local/images/sglang-0.5.24") == 1
    # no pyxis flag in an exec runtime's job: no --container-name (srun refuses the option without
    # pyxis), no pyxis container to remove or sweep
    assert 'CONTAINER_NAME=""\n' in text and "CT_PREFIX=''\n" in text
    r = subprocess.run(["python3", "-m", "slurm_ab", "dry-run", "v0523", "v0524", "--site", "local", "--config",
                        SOFTWARE_AB, "--launches", "1"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = r.stdout + r.stderr
    assert "image of v0524: /var/lib/slurm-ab-local/images/sglang-0.5.24 (python3 -m slurm_ab_testbed.fake_apptainer" in said
    assert "preflight again in the image and environment of v0524" in said


def test_use_mode_software_takes_the_launch_modes_arrays():
    """The static function on its own, in bash: mode 1's container, image words and environments
    (its configured words: in_image adds the locale and the cache's); a job whose modes share their
    software keeps its own."""
    from slurm_ab.sbatch_templates import __file__ as tpl
    import re
    from pathlib import Path
    body = Path(tpl).parent.joinpath("pipeline.sh").read_text()
    fn = re.search(r"^use_mode_software\(\) \{.*?^\}", body, re.S | re.M).group(0)
    script = fn + """
CACHE_ENV=(HOME=/c) CONTAINER=(c0) IMAGE_EXEC=() SERVER_ENV=(A=0) COMMON_ENV=(B=0)
CONTAINER_1=() IMAGE_EXEC_1=(run img1) SERVER_ENV_1=(A=1 'X=a b') COMMON_ENV_1=(B=1)
MODE_INDEX=1; use_mode_software; echo "${CONTAINER[*]}|${IMAGE_EXEC[*]}|${SERVER_ENV[*]}|${COMMON_ENV[*]}"
MODE_SOFTWARE=1; use_mode_software; echo "${#CONTAINER[@]}|${IMAGE_EXEC[*]}|${SERVER_ENV[*]}|${#SERVER_ENV[@]}|${COMMON_ENV[*]}"
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.splitlines()
    assert out == ["c0||A=0|B=0", "0|run img1|A=1 X=a b|2|B=1"]


def test_every_step_after_the_switch_runs_in_the_modes_image_with_the_sites_locale(tmp_path):
    """The rendered software A/B job (exec runtime, telemetry on), sourced in bash under a
    submitter's locale: after use_mode_software, in_image (the one builder of a step's image and
    environment) gives mode 1's image words, then the submitter's LC_ALL (STEP_LOCALE), the cache's
    variables and mode 1's words, exactly as the job's own steps before the switch get them (they
    lost the locale); the GPU sampler runs in that image too (it ran on the host)."""
    plan = plan_job(Sources("local", (SOFTWARE_AB,), GOLDEN_SETS + ("telemetry.source=nvidia-smi",)),
                    ["v0523", "v0524"], GOLDEN_RUN_ID, CampaignOptions(launches=1, repeats=1))
    text = render_script(plan)
    job = tmp_path / "job.sh"
    job.write_text(text[: text.rindex("\nmain\n") + 1])
    sw = plan.campaign.software
    harness = f"""export SLURM_JOB_ID=7 LC_ALL=de_DE.UTF-8
source {job}; trap - EXIT
srun() {{ printf 'STEP %s\\n' "$*"; }}; side_srun() {{ srun "$@"; }}
event() {{ :; }}
RUN_DIR={tmp_path} HEADS=(n1) R0_NODES=(n1) SAMPLER_PIDS=() ROUTER_HOST=n1
echo "CACHE ${{CACHE_ENV[*]}}"; in_image 0 SERVER_ENV; echo "JOB ${{IN_IMAGE[*]}}"
MODE_INDEX=1; use_mode_software
in_image 0 SERVER_ENV; echo "SERVER ${{IN_IMAGE[*]}}"
in_image 0 COMMON_ENV; echo "COMMON ${{IN_IMAGE[*]}}"
start_samplers; wait
"""
    r = subprocess.run(["bash", "-c", harness], capture_output=True, text=True)
    out = r.stdout.splitlines()
    line = {w.split(" ", 1)[0]: w.split(" ", 1)[1] for w in out if w.split(" ", 1)[0] in ("CACHE", "JOB", "SERVER", "COMMON")}
    cache = line["CACHE"]
    assert cache.startswith("HOME=/") and "slurm-ab-7" in cache
    image0, image1 = (" ".join(str(w) for w in s.image_exec) for s in sw)
    assert line["JOB"] == f"{image0} env LC_ALL=de_DE.UTF-8 {cache} " + " ".join(sw[0].server_env), r.stderr
    assert line["SERVER"] == f"{image1} env LC_ALL=de_DE.UTF-8 {cache} " + " ".join(sw[1].server_env)
    assert line["COMMON"] == f"{image1} env LC_ALL=de_DE.UTF-8 {cache} " + " ".join(sw[1].common_env)
    steps = [w for w in out if w.startswith("STEP ")]
    gpu = [s for s in steps if "telemetry/gpu-r0" in s]
    host = [s for s in steps if "telemetry/host" in s]
    assert len(gpu) == 1 and f" {image1} env LC_ALL=de_DE.UTF-8 {cache} " in gpu[0], steps
    # the host sampler reads the node's /proc outside an exec image, with the same environment
    assert len(host) == 1 and image1 not in host[0] and f" env LC_ALL=de_DE.UTF-8 {cache} " in host[0], steps
    assert "sglang-0.5.24" in image1 and "sglang-0.5.24" not in image0


@pytest.mark.parametrize("preflight", ["true", "false"])
def test_cleanup_removes_every_images_containers_with_or_without_preflight(tmp_path, preflight):
    """The job's clean-up removes the other images' pyxis containers (<prefix><job>-i1-<G>) from
    the plan's CT_TAGS, rendered whatever else the job has: it read them through MODE_LIST, which
    only a job with a preflight had, so with preflight.enabled = false they were left behind."""
    cfg = _write(tmp_path, NEXT + '[modes.next.settings.container]\nimage = "/images/next.sqsh"\n')
    plan = plan_job(Sources("example", (cfg,), GOLDEN_SETS + (f"preflight.enabled={preflight}",)),
                    ["tp32", "next"], GOLDEN_RUN_ID, CampaignOptions(launches=1))
    assert plan.campaign.container_tags == ("-i1",)
    text = render_script(plan)
    job = tmp_path / "job.sh"
    job.write_text(text[: text.rindex("\nmain\n") + 1])
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "srun").write_text("#!/bin/bash\na=(\"$@\"); IFS='|'; echo \"CLEANUP |${a[*]//$'\\n'/ }|\"\n")
    (bin_ / "srun").chmod(0o755)
    harness = f"""export SLURM_JOB_ID=7 PATH={bin_}:$PATH
source {job}; trap - EXIT
event() {{ printf 'EVENT %s\\n' "$*"; }}
RUN_DIR={tmp_path} HEADS=(n1 n2) R0_NODES=(n1) R1_NODES=(n2)
cleanup_nodes
"""
    r = subprocess.run(["bash", "-c", harness], capture_output=True, text=True)
    steps = [ln for ln in r.stdout.splitlines() if ln.startswith("CLEANUP ")]
    assert len(steps) == 2, r.stdout + r.stderr
    prefix = plan.guards.container_prefix
    for g, step in enumerate(sorted(steps)):                 # one per het group, in the background
        assert f"|--het-group={g}|" in step and f"|{prefix}7-{g}|" in step and f"| {prefix}7-i1-{g}|" in step, step


@pytest.mark.parametrize("where", ["job", "second mode"])
def test_saturation_growth_is_checked_for_every_mode(tmp_path, where):
    """benchmark.saturation_growth may differ per mode ([modes.<M>.settings.benchmark]; the
    collector reads each launch's own): every mode's value is checked (validate.resolve), not only
    the first mode's (campaign_plan checked exps[0]'s: the second mode's 1.5 went through)."""
    text = NEXT + "[modes.next.settings.benchmark]\nsaturation_growth = 1.5\n" if where == "second mode" else NEXT
    sets = ("benchmark.saturation_growth=0",) if where == "job" else ()
    cfg = _write(tmp_path, text)
    with pytest.raises(ConfigErrors) as e:
        plan_job(Sources("example", (cfg,), GOLDEN_SETS + sets), ["tp32", "next"], GOLDEN_RUN_ID,
                 CampaignOptions(launches=1, rates="2"))
    bad = [err for err in e.value.errors if err.key == "benchmark.saturation_growth"]
    assert bad and bad[0].value == (1.5 if where == "second mode" else 0) and "(0, 1)" in str(bad[0]), str(e.value)
    r = subprocess.run(["python3", "-m", "slurm_ab", "dry-run", "tp32", "next", "--config", cfg, "--request-rate", "2",
                        *(a for s in sets for a in ("--set", s))], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "benchmark.saturation_growth" in r.stderr, r.stderr
