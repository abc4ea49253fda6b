"""Settings that make a job survive a real site (issue 20): the container image path, one
container per node and job, mounts of what a mode uses, --mpi=none, the cache directory, the
collector job's request, and what dry-run says about them."""
from __future__ import annotations

import os

import pytest

from slurm_ab.model.errors import ConfigErrors
from slurm_ab.job.render import summary
from slurm_ab.model.site_checks import image_path
from slurm_ab.model.sources import Sources, load_experiment
from helpers.scripts import plan_for
from slurm_ab.job.shell import Var


def _plan(mode="tp32", *sets, site="example"):
    return plan_for(Sources(site, (), ("paths.results=/results",) + sets), mode, "R")


def _errors(*sets, mode="tp32"):
    with pytest.raises(ConfigErrors) as e:
        load_experiment(Sources("example", (), sets), mode)
    return [str(x) for x in e.value.errors]


def test_relative_images_are_resolved_or_refused(tmp_path):
    sq = tmp_path / "images" / "sglang.sqsh"
    sq.parent.mkdir()
    sq.write_bytes(b"hsqs")
    # pyxis: an image not starting with '/' or '.' is a registry image (pyxis_slurmstepd.c strspn)
    assert image_path("images/sglang.sqsh", str(tmp_path)) == (str(sq), None)
    assert image_path("./images/sglang.sqsh", str(tmp_path)) == (str(sq), None)
    assert image_path("../x.sqsh", str(tmp_path / "images")) == (str(tmp_path / "x.sqsh"), None)
    assert image_path("nvcr.io#nvidia/pytorch:24.01-py3", str(tmp_path)) == ("nvcr.io#nvidia/pytorch:24.01-py3", None)
    assert image_path("/abs/x.sqsh", str(tmp_path)) == ("/abs/x.sqsh", None)
    img, problem = image_path("missing/sglang.sqsh", str(tmp_path))
    assert "does not exist" in problem and "registry image" in problem


def test_a_relative_image_reaches_the_script_absolute(tmp_path, monkeypatch):
    (tmp_path / "sglang.sqsh").write_bytes(b"hsqs")
    monkeypatch.chdir(tmp_path)
    p = _plan("tp32", "container.image=sglang.sqsh")
    assert p.container_flags[0] == f"--container-image={tmp_path}/sglang.sqsh"
    errs = _errors("container.image=nothere.sqsh")
    assert errs[0].startswith("container.image = 'nothere.sqsh': a relative squashfs path that does not exist")


@pytest.mark.parametrize("sets,key", [
    (["container.name=a:b"], "container.name"),
    (["container.scope=node"], "container.scope"),
    (["cache.dir=relative/dir"], "cache.dir"),
    (["cache.dir=/a,b"], "cache.dir"),
    (["cache.env.HF_HOME=../up"], "cache.env.HF_HOME"),
    (["cluster.mpi=pm ix"], "cluster.mpi"),
    (["estimate.request_s=-1"], "estimate.request_s"),
    (["estimate.margin=9"], "estimate.margin"),
    (["watchdog.pass_factor=0.5"], "watchdog.pass_factor"),
    (["watchdog.progress_metric=not a metric"], "watchdog.progress_metric"),
    (["collector.mem=lots"], "collector.mem"),
    (["collector.sbatch_extra=['--x y']"], "collector.sbatch_extra[0]"),
])
def test_each_bad_survival_setting_is_named(sets, key):
    errs = _errors(*sets)
    assert any(e.startswith(f"{key} = ") for e in errs), errs


def test_one_named_container_per_node_job_and_het_group():
    """pyxis_<name>-<job id>-<G>: two jobs, or two components of one job on a shared node, never
    race to create one container (nor does one reuse another's); the job adds the group."""
    import subprocess
    from helpers.scripts import render, static

    p = _plan()
    assert not any("--container-name" in str(f) for f in p.container_flags)
    assert p.container_name == "slurm-ab-${SLURM_JOB_ID}"
    text = render("tp32")
    assert 'CONTAINER_NAME=slurm-ab-"$SLURM_JOB_ID"\n' in text and "CT_PREFIX=pyxis_slurm-ab-\n" in text
    script = static(text) + """trap - EXIT TERM INT USR1
CONTAINER=(--container-image=/i.sqsh)
for SLURM_JOB_ID in 7 8; do CONTAINER_NAME=slurm-ab-$SLURM_JOB_ID
  for g in 0 1; do in_image $g SERVER_ENV; echo "${CT[*]}"; done; done
CONTAINER_NAME=""; in_image 1 SERVER_ENV; echo "${CT[*]}"
"""
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    assert lines[:4] == [f"--container-image=/i.sqsh --container-name=slurm-ab-{j}-{g}" for j in (7, 8) for g in (0, 1)]
    assert len(set(lines[:4])) == 4 and lines[4] == "--container-image=/i.sqsh", r.stderr
    assert _plan("tp32", 'container.name=""').container_name == ""
    assert "CONTAINER_NAME=\"\"\n" in render("tp32", sets=['container.name=""'])
    assert _plan("tp32", 'container.image=""').container_flags == ()
    assert "fabric: every rank's NCCL must use network IB" in summary(_plan())


def _mounts(p):
    flag = next(f for f in p.container_flags if str(f).startswith("--container-mounts="))
    return flag.split("=", 1)[1].split(",")


def test_only_the_paths_a_mode_uses_are_mounted():
    tp32, dflash = _mounts(_plan("tp32")), _mounts(_plan("tp32-dflash"))
    draft = "/shared/models/Kimi-K3-DFlash:/shared/models/Kimi-K3-DFlash"
    assert draft not in tp32 and draft in dflash
    assert "/shared/models/Kimi-K3:/shared/models/Kimi-K3" in tp32
    # a dataset that reads no file is not mounted; a separate tokenizer is
    m = _mounts(_plan("tp32", 'benchmark.dataset="random-ids"', 'paths.tokenizer="/tok/k3"'))
    assert not any("speed_bench" in x for x in m) and "/tok/k3:/tok/k3" in m


def test_every_step_runs_with_mpi_none_unless_the_site_says_otherwise():
    assert _plan().srun_extra == ("--mpi=none",)
    assert _plan("tp32", 'cluster.mpi="pmix"', 'cluster.srun_extra=["--network=x"]').srun_extra == \
        ("--mpi=pmix", "--network=x")
    assert _plan("tp32", 'cluster.mpi=""').srun_extra == ()


def test_the_cache_environment_of_every_step():
    p = _plan("tp32", "cache.dir=/scratch/cache")
    assert p.cache.base == "/scratch/cache" and p.cache.per_job
    env = [v.text for v in p.cache.env]
    assert env[:3] == ["HOME=${CACHE_DIR}", "XDG_CACHE_HOME=${CACHE_DIR}/.cache",
                       "HF_HOME=${CACHE_DIR}/.cache/huggingface"]
    assert "TRITON_CACHE_DIR=${CACHE_DIR}/.triton/cache" in env
    assert "/scratch/cache:/scratch/cache" in _mounts(p)
    assert _plan("tp32", 'cache.dir=""').cache is None
    assert _plan().cache.base == "/scratch/slurm-ab-cache"              # the example site sets one
    p = _plan("tp32", "cache.dir=/scratch/cache", "cache.env.SGLANG_DG_CACHE_DIR=.cache/deep_gemm")
    assert "SGLANG_DG_CACHE_DIR=${CACHE_DIR}/.cache/deep_gemm" in [v.text for v in p.cache.env]


def test_dry_run_summary_of_a_pyxis_site():
    text = summary(_plan("tp32", "cache.dir=/scratch/cache"))
    assert "every srun step: --mpi=none (cluster.mpi: no PMIx set-up per step)" in text
    assert ("one container per node, job and het group: --container-name=slurm-ab-$SLURM_JOB_ID-<G>, created by "
            "each node's first step (the preflight) and reused by its later steps, removed at the end") in text
    assert ("sweep (cluster.sweep_stale): before the preflight, every node removes this user's containers "
            "pyxis_slurm-ab-<id>-<G> and cache directories /scratch/cache/slurm-ab-<id> of jobs Slurm no longer "
            "lists") in text
    assert "cache directory /scratch/cache/slurm-ab-$SLURM_JOB_ID on every node" in text
    assert "HOME=$CACHE_DIR XDG_CACHE_HOME=$CACHE_DIR/.cache HF_HOME=$CACHE_DIR/.cache/huggingface" in text
    assert "duration estimate: 1 server launch(es)" in text and "time limit 00:48:00" in text
    assert "watchdog: a pass fails when it runs longer than 3 x its estimate, or when a server " \
           "finishes no request for 180 s" in text
    assert "in flight: server sglang:num_running_reqs + sglang:num_queue_reqs)" in text
    assert "note: heterogeneous jobs are scheduled by the backfill scheduler only" in text
    assert "MaxJobsPerUser" in text
    plain = summary(_plan("tp32", 'cache.dir=""'))
    assert "note: container.image without cache.dir: HOME inside the container is not writable" in plain


def test_the_collector_job_asks_for_what_it_needs(tmp_path):
    from slurm_ab.job.submit import collector_python, collector_request

    p = _plan("tp32", 'collector.partition="cpu"', 'collector.qos="short"', 'collector.sbatch_extra=["--reservation=x", "--requeue"]')
    r = collector_request(p, "123", tmp_path)
    assert r["partition"] == "cpu" and r["qos"] == "short" and r["mem"] == "4G" and r["time"] == 15
    assert r["cpus_per_task"] == 1 and r["nodes"] == 1 and not r["use_srun"]
    extra = r["additional_parameters"]
    assert extra["gres"] == "none" and extra["dependency"] == "afterany:123" and extra["chdir"] == str(tmp_path)
    assert extra["reservation"] == "x" and extra["requeue"] is True
    assert "gpus_per_node" not in r and "num_gpus" not in r
    assert collector_request(_plan(), "1", tmp_path)["partition"] == "gpu"
    assert os.path.isabs(collector_python())
    assert collector_request(_plan("tp32", "collector.cpus=2"), "1", tmp_path)["cpus_per_task"] == 2
    assert collector_python(_plan("tp32", 'collector.python="/opt/venv/bin/python3"').exp) == "/opt/venv/bin/python3"


def _fake_slurm(tmp_path, monkeypatch, arch: str, default: str = "cpu", oversubscribe: str = "NO"):
    """scontrol/sinfo on PATH: partitions gpu and (Default=YES) DEFAULT, whose nodes are ARCH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(f"""#!/bin/sh
case "$2" in
  partition) if [ -n "$4" ]; then echo "PartitionName=$4 MaxTime=UNLIMITED MaxNodes=UNLIMITED TotalNodes=64 OverSubscribe={oversubscribe}"
             else echo "PartitionName=gpu Default=NO"; echo "PartitionName={default} Default=YES"; fi ;;
  node) echo "NodeName=c01 Arch={arch} State=IDLE"; echo "NodeName=c02 Arch={arch} State=IDLE" ;;
esac
""")
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'c[01-02]'\n")
    for f in ("scontrol", "sinfo"):
        (bin_dir / f).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_the_collector_runs_on_slurms_default_partition_with_a_python_of_its_nodes(tmp_path, monkeypatch):
    """Not the GPU partition by default; the submitting Python is refused on nodes of another
    architecture (an x86_64 login node's Python on aarch64 nodes), an explicit one is taken."""
    import platform

    from slurm_ab.job.submit import check_collector, collector_partition
    from slurm_ab.model.errors import ConfigError

    here = platform.machine()
    other = "aarch64" if here != "aarch64" else "x86_64"
    _fake_slurm(tmp_path, monkeypatch, here)
    assert collector_partition(_plan().exp) == "cpu"
    assert check_collector(_plan().exp)[-1].startswith("collector: the submitting Python (")
    _fake_slurm(tmp_path, monkeypatch, other, oversubscribe="EXCLUSIVE")
    with pytest.raises(ConfigError) as e:
        check_collector(_plan().exp)
    assert str(e.value).startswith(f"collector.python = '': the submitting Python (") and \
        f"is built for {here}, partition cpu's nodes are {other}" in str(e.value)
    notes = check_collector(_plan("tp32", 'collector.python="/arm/venv/bin/python3"').exp)
    assert notes == ["collector: partition cpu is OverSubscribe=EXCLUSIVE: the collector's one CPU task takes a whole "
                     "node (collector.partition)", "collector: /arm/venv/bin/python3 on partition cpu (collector.python)"]
    monkeypatch.setenv("PATH", "/nonexistent")                   # no Slurm here: said, not checked
    assert "not checked" in check_collector(_plan().exp)[-1]
