"""Checks of the settings that let a job survive a real site (issue 20): the container image path,
the per-job container, the cache directory, the duration figures, the watchdog and the collector
job. Called by validate.resolve; each problem names the key, the value and what is allowed.
"""
from __future__ import annotations

import os
import re

from .config import Tree
from .errors import ConfigError

MOUNT_PATH = re.compile(r"/[A-Za-z0-9_.+@=/-]*")          # a path pyxis can mount (no ',' or ':')
REL_PATH = re.compile(r"(?:\.|[A-Za-z0-9_.+@=-]+(?:/[A-Za-z0-9_.+@=-]+)*)")
CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")   # no ':' (pyxis NAME[:FLAG])
WORD = re.compile(r"[A-Za-z0-9_.-]+")
METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:+=@/%-]*")    # what may stand unquoted on an #SBATCH line
SBATCH_OPTION = re.compile(r"--[a-z][a-z0-9-]*(=[^\s'\"\\#]+)?")
MEM = re.compile(r"\d+[KMGT]?")
SQUASHFS = (".sqsh", ".squashfs", ".sqfs")
# --disaggregation-transfer-backend's choices in SGLang 0.5.23 (arg_groups/choices.py) but "fake",
# which a prefill server refuses ("Prefill server does not support 'fake' as the transfer backend",
# pd_disaggregation_hook.py) and which moves no KV.
TRANSFER_BACKENDS = ("mooncake", "nixl", "mori", "ascend", "mooncake_tcp")
IFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")          # a Linux interface name (IFNAMSIZ - 1)
IB_DEVICES = re.compile(r"[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*")
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SCOPES = ("global", "job")


def image_path(image: str, cwd: str | None = None) -> tuple[str, str | None]:
    """(image to use, problem). pyxis takes an image for a squashfs file only when it starts with
    '/' or '.' (pyxis_slurmstepd.c: ``strspn(image, "./") > 0``), anything else for a registry
    image; and a './' path is relative to the step's working directory. A relative file path is
    made absolute against the submitting directory (the job's working directory); a name that
    looks like a squashfs file but is not there is refused rather than pulled from a registry."""
    if not image or image.startswith("/"):
        return image, None
    cwd = cwd or os.getcwd()
    full = os.path.normpath(os.path.join(cwd, image))
    if image.startswith("."):
        return full, None
    if os.path.isfile(full):
        return full, None
    if image.lower().endswith(SQUASHFS):
        return image, (f"a relative squashfs path that does not exist under {cwd}; pyxis would take "
                       "it for a registry image")
    return image, None


def check(tree: Tree) -> list[ConfigError]:
    """Every problem of the survival settings (the container image is resolved by resolve_image)."""
    errs: list[ConfigError] = []
    c, ct, cache = tree["cluster"], tree["container"], tree["cache"]
    _, problem = image_path(ct["image"])
    if problem:
        errs.append(ConfigError("container.image", ct["image"], problem,
                                "an absolute path to the .sqsh file, or a registry image"))
    if ct["name"] and not CONTAINER_NAME.fullmatch(ct["name"]):
        errs.append(ConfigError("container.name", ct["name"], "not a container name",
                                "letters, digits, '_', '.', '-' (no ':'), or \"\" for one container per step"))
    if ct["scope"] not in SCOPES:
        errs.append(ConfigError("container.scope", ct["scope"], "unknown pyxis container_scope", ", ".join(SCOPES)))
    if any(not w for w in ct["remove_command"]):
        errs.append(ConfigError("container.remove_command", ct["remove_command"], "must not contain empty strings"))
    if tree["container"]["enroot_dir"] and not MOUNT_PATH.fullmatch(tree["container"]["enroot_dir"]):
        errs.append(ConfigError("container.enroot_dir", tree["container"]["enroot_dir"], "not an absolute path",
                                "a node-local directory such as /tmp or /raid, or \"\" to leave enroot's paths"))
    if cache["dir"] and not MOUNT_PATH.fullmatch(cache["dir"]):
        errs.append(ConfigError("cache.dir", cache["dir"], "not an absolute path that can be mounted",
                                "e.g. /scratch/slurm-ab-cache (letters, digits and _ . + @ = / -)"))
    for k, v in cache["env"].items():
        if not isinstance(v, str) or not REL_PATH.fullmatch(v) or ".." in v.split("/"):
            errs.append(ConfigError(f"cache.env.{k}", v, "not a path inside the cache directory",
                                    "a relative path such as .cache/huggingface, or \".\""))
    if c["mpi"] and not WORD.fullmatch(c["mpi"]):
        errs.append(ConfigError("cluster.mpi", c["mpi"], "not an srun --mpi type", "none, pmix, pmi2, or \"\""))
    nets = tree.get("nccl_networks") or {}
    if c["nccl_network"] and c["nccl_network"] not in nets:
        errs.append(ConfigError("cluster.nccl_network", c["nccl_network"], "not a family of [nccl_networks]",
                                ", ".join(sorted(nets)) + ', or "" (not checked)'))
    est = tree["estimate"]
    for k in ("model_load_s", "warmup_s", "request_s", "pass_overhead_s", "job_overhead_s"):
        if est[k] < 0:
            errs.append(ConfigError(f"estimate.{k}", est[k], "must be >= 0 (seconds)"))
    if not 0 <= est["margin"] <= 5:
        errs.append(ConfigError("estimate.margin", est["margin"], "must be between 0 and 5", "e.g. 0.15"))
    wd = tree["watchdog"]
    if wd["stall_s"] < 0:
        errs.append(ConfigError("watchdog.stall_s", wd["stall_s"], "must be >= 0", "0: 3 x estimate.request_s"))
    if wd["pass_factor"] < 1:
        errs.append(ConfigError("watchdog.pass_factor", wd["pass_factor"], "must be >= 1"))
    for key, names in (("progress_metric", [wd["progress_metric"]]), ("inflight_metrics", wd["inflight_metrics"]),
                       *((f"role_inflight_metrics.{k}", v) for k, v in wd["role_inflight_metrics"].items())):
        for name in names:
            if name and not METRIC.fullmatch(name):
                errs.append(ConfigError(f"watchdog.{key}", name, "not a Prometheus metric name"))
    col = tree["collector"]
    for k in ("partition", "qos"):
        if not SBATCH_VALUE.fullmatch(col[k]):
            errs.append(ConfigError(f"collector.{k}", col[k], "contains characters that cannot stand on an sbatch line"))
    if not MEM.fullmatch(col["mem"]):
        errs.append(ConfigError("collector.mem", col["mem"], "not an sbatch --mem size", "e.g. 4G"))
    if col["time_min"] < 1:
        errs.append(ConfigError("collector.time_min", col["time_min"], "must be >= 1 (minutes)"))
    if col["cpus"] < 1:
        errs.append(ConfigError("collector.cpus", col["cpus"], "must be >= 1"))
    if col["python"] and not MOUNT_PATH.fullmatch(col["python"]):
        errs.append(ConfigError("collector.python", col["python"], "not an absolute path",
                                "e.g. /shared/venvs/slurm-ab/bin/python3, or \"\" for the submitting Python"))
    for i, opt in enumerate(col["sbatch_extra"]):
        if not SBATCH_OPTION.fullmatch(opt):
            errs.append(ConfigError(f"collector.sbatch_extra[{i}]", opt, "not a single sbatch option",
                                    "--name or --name=value, no spaces or quotes"))
    return errs


def pd_checks(tree: Tree) -> list[ConfigError]:
    """[pd]: the transfer backend, IB devices, the preflight's module, the canary's time."""
    pd = tree["pd"]
    errs = []
    if pd["transfer_backend"] not in TRANSFER_BACKENDS:
        errs.append(ConfigError("pd.transfer_backend", pd["transfer_backend"], "not a KV transfer backend of "
                                "SGLang 0.5.23 that moves KV between servers", ", ".join(TRANSFER_BACKENDS)))
    ib = pd["ib_device"]
    if ib and not IB_DEVICES.fullmatch(ib):
        errs.append(ConfigError("pd.ib_device", ib, "not a list of RDMA device names",
                                'e.g. "mlx5_0" or "mlx5_0,mlx5_1", or "" for SGLang\'s auto discovery'))
    if ib and pd["transfer_backend"] not in ("mooncake", "nixl"):
        errs.append(ConfigError("pd.ib_device", ib, f"--disaggregation-ib-device is read by mooncake and nixl "
                                f"only, not {pd['transfer_backend']}", '"" (mooncake_tcp: SGLang drops it)'))
    if pd["transfer_module"] and not MODULE.fullmatch(pd["transfer_module"]):
        errs.append(ConfigError("pd.transfer_module", pd["transfer_module"], "not a Python module name",
                                'e.g. mooncake.engine, nixl._api, or "" to skip the preflight\'s import'))
    if pd["canary_timeout_s"] < 1:
        errs.append(ConfigError("pd.canary_timeout_s", pd["canary_timeout_s"], "must be >= 1 (seconds)"))
    iface, pf = pd["host_ip_interface"], tree["preflight"]
    if iface and not IFACE.fullmatch(iface):
        errs.append(ConfigError("pd.host_ip_interface", iface, "not a network interface name",
                                'the interface of the KV fabric on every node, e.g. "ib0", or "" for SGLang\'s guess'))
    elif iface and not (pf["enabled"] and pf["address_command"]):
        errs.append(ConfigError("pd.host_ip_interface", iface, "each node's address is read by the preflight",
                                'preflight.enabled = true and preflight.address_command, or "" for SGLang\'s guess'))
    if pd["gpudirect_check"] and any(not w for w in pf["gpudirect_command"]):
        errs.append(ConfigError("preflight.gpudirect_command", pf["gpudirect_command"],
                                "must not contain empty strings", "a command as a list, or [] to skip"))
    for k, v in pd["env"].items():
        if k in tree["server"]["env"]:
            errs.append(ConfigError(f"pd.env.{k}", v, "also set in [server.env]", "set it in one place"))
    return errs


def resolve_image(tree: Tree) -> None:
    """Make a relative squashfs path absolute in the resolved tree (check() refused the others)."""
    tree["container"]["image"], _ = image_path(tree["container"]["image"])


def notices(exp) -> list[str]:
    """What a user should know about these settings (dry-run notes)."""
    out = ["heterogeneous jobs are scheduled by the backfill scheduler only (SchedulerType="
           "sched/backfill), all components at once; each component counts as a job for QOS and "
           f"association limits such as MaxJobsPerUser ({exp.replicas} per run: Slurm "
           "heterogeneous_jobs.shtml, Limitations)"]
    if exp.container.image and not exp.cache.dir:
        out.append("container.image without cache.dir: HOME inside the container is not writable "
                   "(--no-container-mount-home; enroot's root file system is read-only), so "
                   "--trust-remote-code modules, Triton/FlashInfer JIT caches and the client's "
                   "tokenizer load may fail; set cache.dir to a directory every node can write")
    if exp.container.image and not exp.container.name:
        out.append("container.name = \"\": pyxis unpacks the image for every step on every node "
                   "(right only with the site's pyxis use_squashfuse=true)")
    if not exp.server_metrics:
        out.append("the servers run without --enable-metrics: the no-progress watchdog has no "
                   "counter to read; only the per-pass time limit catches a hung replica")
    return out
