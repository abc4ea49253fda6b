"""From a resolved Experiment to a JobPlan: every command, option and port of the job.

Pure: no file system, no Slurm. Values known only inside the allocation (hosts, the job id
and the ports derived from it) are ``Var`` words that the script expands at run time.
"""
from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass

from .experiment import Experiment
from .shell import Var, flag_words

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Replica:
    index: int           # also its het group
    nodes: int
    port_offset: int     # added to the job's port base


@dataclass(frozen=True)
class Command:
    """A step's command: environment assignments and argv, grouped one flag per line."""

    env: tuple[str, ...]
    lines: tuple[tuple, ...]


@dataclass(frozen=True)
class JobPlan:
    exp: Experiment
    run_id: str
    run_dir: str
    job_name: str
    sbatch_job: tuple[str, ...]            # job-wide #SBATCH options (first component)
    sbatch_component: tuple[str, ...]      # #SBATCH options repeated for every component
    replicas: tuple[Replica, ...]
    container_flags: tuple[str, ...]       # pyxis flags for every step ('' image -> none)
    server: Command                        # without the per-replica run-time flags
    router: Command
    client: Command
    job_slot_size: int                     # ports per job slot (replicas x stride)
    secret_env: tuple[str, ...]
    server_step: tuple[str, ...]           # srun options of the server steps (besides group/nodes)
    side_step: tuple[str, ...]             # srun options of router/client (pinned with --nodelist)
    preflight: "Preflight | None"          # None: disabled
    campaign: "object | None" = None       # campaign_plan.CampaignPlan; None: a single run


@dataclass(frozen=True)
class Preflight:
    """What the first step checks on each node (commands are site data, see experiment.toml)."""

    modules: tuple[str, ...]               # MODULE[=DIST] imported on every node
    client_modules: tuple[str, ...]        # imported on the router's node only
    import_command: tuple[str, ...]
    gpu_command: tuple[str, ...]
    gpus: int                              # GPUs every node must show
    port_command: tuple[str, ...]
    address_command: tuple[str, ...]       # empty unless cluster.address = "interface"
    interface: str
    paths: tuple[tuple[str, str], ...]     # (what, path) needed on every node
    client_paths: tuple[tuple[str, str], ...]   # (what, path) needed on the router's node
    timeout_s: int


def job_name(run_id: str) -> str:
    return f"ab-{run_id}"


def check_run_id(run_id: str) -> None:
    from .errors import ConfigError

    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ConfigError("run id", run_id, "not a valid run id",
                          "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit, no '..'")


def _sbatch_component(exp: Experiment) -> tuple[str, ...]:
    c = exp.cluster
    opts = [f"--partition={c.partition}"]
    if c.account:
        opts.append(f"--account={c.account}")
    opts += [f"--time={c.time_limit}", f"--nodes={exp.nodes_per_replica}", "--ntasks-per-node=1"]
    if c.gpu_request == "gpus-per-node":
        opts.append(f"--gpus-per-node={c.gpus_per_node}")
    elif c.gpu_request == "gres":
        opts.append(f"--gres=gpu:{c.gpus_per_node}")
    if c.exclusive:
        opts.append("--exclusive")
    if c.mem:
        opts.append(f"--mem={c.mem}")
    return tuple(opts) + c.sbatch_extra


def _mounts(exp: Experiment, run_dir: str) -> tuple[str, ...]:
    """User mounts plus the model, draft model, dataset and results directory at the same path
    (the results directory, not the run directory: a re-submitted script may write beside it)."""
    out = list(exp.container.mounts)
    targets = {m.split(":")[1] for m in out}
    for path in (exp.paths.model, exp.paths.draft_model, exp.paths.dataset, str(Path(run_dir).parent)):
        if path and path not in targets:
            out.append(f"{path}:{path}")
            targets.add(path)
    return tuple(out)


def _container_flags(exp: Experiment, run_dir: str) -> tuple[str, ...]:
    ct = exp.container
    if not ct.image:
        return ()
    flags = [f"--container-image={ct.image}", f"--container-mounts={','.join(_mounts(exp, run_dir))}"]
    flags.append("--container-mount-home" if ct.mount_home else "--no-container-mount-home")
    if ct.workdir:
        flags.append(f"--container-workdir={ct.workdir}")
    # No --container-env: it names host variables whose values should win over the image's, so
    # it forwards only names set in the step's own host environment (NVIDIA/pyxis
    # tests/env_vars.bats: `export CUDA_VERSION=...` then --container-env=CUDA_VERSION). [env] is
    # set later, by `env NAME=VALUE ...` inside the container, where its values already win.
    # Secrets are exported by the submitter and inherited by the steps.
    return tuple(flags)


def _env(pairs) -> tuple[str, ...]:
    return tuple(f"{k}={v}" for k, v in pairs)


def _server(exp: Experiment) -> Command:
    m = exp.mode
    flags = dict(exp.server_args)
    flags.update(dict(m.args))
    lines = [
        tuple(exp.commands.server),
        ("--model-path", exp.paths.model),
        ("--tp-size", str(m.tp)), ("--pp-size", str(m.pp)), ("--ep-size", str(m.ep)),
        ("--nnodes", str(exp.nodes_per_replica)),
        ("--host", "0.0.0.0"),
        *(tuple(w) for w in flag_words(flags.items())),
    ]
    return Command(_env(exp.env) + _env(exp.server_env), tuple(lines))


def _router(exp: Experiment) -> Command:
    urls = tuple(Var(f"http://${{R{g}_ADDR}}:${{R{g}_PORT}}") for g in range(exp.replicas))
    lines = [
        tuple(exp.router.command),
        ("--worker-urls", *urls),
        ("--policy", exp.router.policy),
        ("--host", "0.0.0.0"),
        ("--port", Var("${ROUTER_PORT}")),
        ("--prometheus-port", Var("${ROUTER_METRICS_PORT}")),
        ("--model-path", exp.paths.model),
        *(tuple(w) for w in flag_words(exp.router.args)),
    ]
    return Command(_env(exp.env), tuple(lines))


def _client(exp: Experiment) -> Command:
    b = exp.benchmark
    lines = [
        tuple(exp.commands.client),
        ("--backend", b.backend),
        ("--base-url", Var("http://${ROUTER_ADDR}:${ROUTER_PORT}")),
        ("--model", exp.paths.model),
        ("--tokenizer", exp.paths.tokenizer),
        tuple(b.dataset_args),
        ("--num-prompts", str(b.num_prompts)),
        ("--max-concurrency", str(b.concurrency)),
        ("--request-rate", "inf"),
        ("--seed", str(b.seed)),
        ("--warmup-requests", str(b.warmup_requests)),
        ("--output-file", Var("${RUN_DIR}/bench.jsonl")),
        ("--output-details",),
    ]
    if b.extra_args:
        lines.append(tuple(b.extra_args))
    return Command(_env(exp.env), tuple(lines))


def _server_step(exp: Experiment) -> tuple[str, ...]:
    c = exp.cluster
    return (f"--cpu-bind={c.server_cpu_bind}",) if c.server_cpu_bind else ()


def _side_step(exp: Experiment) -> tuple[str, ...]:
    """Router and client: one task on ROUTER_HOST, overlapping the server step there."""
    return ("--nodes=1", "--ntasks=1", "--overlap", *exp.cluster.side_step_args)


def _preflight(exp: Experiment, server: Command, client: Command) -> Preflight | None:
    pf = exp.preflight
    if not pf.enabled:
        return None
    words = [w for line in server.lines for w in line if isinstance(w, str)]
    paths = [("model", exp.paths.model)]
    if exp.paths.draft_model and exp.paths.draft_model in words:
        paths.append(("draft model", exp.paths.draft_model))
    cwords = [w for line in client.lines for w in line if isinstance(w, str)]
    client_paths = []
    if exp.paths.dataset and exp.paths.dataset in cwords:
        client_paths.append(("dataset", exp.paths.dataset))
    if exp.paths.tokenizer.startswith("/") and exp.paths.tokenizer != exp.paths.model:
        client_paths.append(("tokenizer", exp.paths.tokenizer))
    router = exp.router.module + (f"={exp.router.distribution}" if exp.router.distribution else "")
    interface = exp.cluster.address == "interface"
    return Preflight(
        modules=tuple(m for m in (pf.server_module, router) if m),
        client_modules=(pf.client_module,) if pf.client_module else (),
        import_command=pf.import_command, gpu_command=pf.gpu_command,
        gpus=exp.cluster.gpus_per_node, port_command=pf.port_command,
        address_command=pf.address_command if interface else (),
        interface=exp.cluster.address_interface if interface else "",
        paths=tuple(paths), client_paths=tuple(client_paths), timeout_s=pf.timeout_s)


def make_plan(exp: Experiment, run_id: str, run_dir: str) -> JobPlan:
    check_run_id(run_id)
    stride = exp.ports.replica_stride
    c = exp.cluster
    sbatch_job = (
        f"--job-name={job_name(run_id)}",
        f"--output={run_dir}/slurm-%j.out",
        f"--signal=B:USR1@{c.signal_before_limit_s}",
        "--no-requeue",  # a node failure must end the run with its evidence, not silently rerun it
    )
    server, client = _server(exp), _client(exp)
    return JobPlan(
        exp=exp,
        run_id=run_id,
        run_dir=run_dir,
        job_name=job_name(run_id),
        sbatch_job=sbatch_job,
        sbatch_component=_sbatch_component(exp),
        replicas=tuple(Replica(g, exp.nodes_per_replica, g * stride) for g in range(exp.replicas)),
        container_flags=_container_flags(exp, run_dir),
        server=server,
        router=_router(exp),
        client=client,
        job_slot_size=exp.replicas * stride,
        secret_env=c.secret_env,
        server_step=_server_step(exp),
        side_step=_side_step(exp),
        preflight=_preflight(exp, server, client),
    )
