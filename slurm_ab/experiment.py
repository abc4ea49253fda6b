"""The experiment: frozen dataclasses (modes, benchmark, cluster, paths) built from a checked tree.

Flags and environment stay ordered tuples of pairs so rendering is deterministic and the dataclasses
hashable; nothing here knows a model name or a cluster.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

Pairs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Mode:
    name: str
    description: str
    tp: int
    pp: int
    ep: int
    args: Pairs = ()


@dataclass(frozen=True)
class Benchmark:
    dataset: str
    dataset_config: str
    input_len: int
    output_len: int
    concurrency: int
    num_prompts: int
    backend: str
    warmup_requests: int
    seed: int
    extra_args: tuple[str, ...]
    dataset_args: tuple[str, ...]  # resolved from [datasets.<dataset>]


@dataclass(frozen=True)
class Warmup:
    input_len: int
    output_len: int
    token_id: int
    timeout_s: int


@dataclass(frozen=True)
class Router:
    """The router of the selected profile ([router] plus [router_profiles.<profile>])."""

    profile: str
    description: str
    command: tuple[str, ...]
    module: str
    distribution: str
    policy: str
    ready_timeout_s: int
    ready_path: str
    ready_field: str
    args: Pairs                      # the profile's flags, then [router.args]


@dataclass(frozen=True)
class Cluster:
    partition: str
    account: str
    time_limit: str
    gpus_per_node: int
    gpu_request: str
    exclusive: bool
    sbatch_extra: tuple[str, ...]
    srun_extra: tuple[str, ...]
    ready_timeout_s: int
    poll_interval_s: int
    teardown_grace_s: int
    signal_before_limit_s: int
    secret_env: tuple[str, ...]
    mem: str
    server_cpu_bind: str
    side_step_args: tuple[str, ...]
    address: str
    address_interface: str
    prologue: str


@dataclass(frozen=True)
class Container:
    image: str
    mounts: tuple[str, ...]
    workdir: str
    mount_home: bool


@dataclass(frozen=True)
class Paths:
    model: str
    draft_model: str
    dataset: str
    tokenizer: str
    results: str


@dataclass(frozen=True)
class Commands:
    server: tuple[str, ...]
    client: tuple[str, ...]


@dataclass(frozen=True)
class Preflight:
    enabled: bool
    timeout_s: int
    server_module: str
    client_module: str
    import_command: tuple[str, ...]
    gpu_command: tuple[str, ...]
    port_command: tuple[str, ...]
    address_command: tuple[str, ...]


@dataclass(frozen=True)
class Metrics:
    """Scraping of the servers' and the router's Prometheus /metrics during the benchmark."""

    interval_s: int = 10
    timeout_s: int = 5


@dataclass(frozen=True)
class Ports:
    server: int
    dist_init: int
    router: int
    router_metrics: int
    replica_stride: int
    job_slots: int


@dataclass(frozen=True)
class Experiment:
    """One mode of one experiment on one site, fully resolved."""

    name: str
    description: str
    replicas: int
    nodes_per_replica: int
    context_length: int
    mode: Mode
    benchmark: Benchmark
    warmup: Warmup
    server_args: Pairs
    server_env: Pairs
    env: Pairs
    router: Router
    cluster: Cluster
    container: Container
    paths: Paths
    commands: Commands
    ports: Ports
    preflight: Preflight
    metrics: Metrics = Metrics()

    @property
    def server_metrics(self) -> bool:
        """The servers run with --enable-metrics (the mode's flags override [server.args])."""
        flags = dict(self.server_args)
        flags.update(dict(self.mode.args))
        return bool(flags.get("enable-metrics"))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _build(cls, table: dict, **extra):
    """Build a dataclass from a table, turning lists into tuples and tables into pairs."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in extra:
            kwargs[f.name] = extra[f.name]
            continue
        v = table[f.name]
        if isinstance(v, list):
            v = tuple(v)
        elif isinstance(v, dict):
            v = tuple((k, tuple(x) if isinstance(x, list) else x) for k, x in v.items())
        kwargs[f.name] = v
    return cls(**kwargs)


def build(tree: dict, mode_name: str) -> Experiment:
    """Assemble the model; the tree must already be validated and its references resolved."""
    m = tree["modes"][mode_name]
    mode = Mode(mode_name, m.get("description", ""), m["tp"], m["pp"], m["ep"],
                tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in m.get("args", {}).items()))
    bench = tree["benchmark"]
    dataset_args = tuple(str(a) for a in tree["datasets"][bench["dataset"]]["args"])
    return Experiment(
        name=tree["experiment"]["name"],
        description=tree["experiment"]["description"],
        replicas=tree["experiment"]["replicas"],
        nodes_per_replica=tree["experiment"]["nodes_per_replica"],
        context_length=tree["model"]["context_length"],
        mode=mode,
        benchmark=_build(Benchmark, bench, dataset_args=dataset_args),
        warmup=_build(Warmup, tree["warmup"]),
        server_args=_build_pairs(tree["server"]["args"]),
        server_env=_build_pairs(tree["server"]["env"]),
        env=_build_pairs(tree["env"]),
        router=_router(tree),
        cluster=_build(Cluster, tree["cluster"]),
        container=_build(Container, tree["container"]),
        paths=_build(Paths, tree["paths"]),
        commands=_build(Commands, tree["commands"]),
        ports=_build(Ports, tree["ports"]),
        preflight=_build(Preflight, tree["preflight"]),
        metrics=_build(Metrics, tree["metrics"]),
    )


def _router(tree: dict) -> Router:
    r = tree["router"]
    prof = tree["router_profiles"][r["profile"]]
    args = dict(prof.get("args", {}))
    args.update(r["args"])
    return Router(profile=r["profile"], description=prof.get("description", ""), command=tuple(prof["command"]),
                  module=prof["module"], distribution=prof.get("distribution", ""), policy=r["policy"],
                  ready_timeout_s=r["ready_timeout_s"], ready_path=prof["ready_path"],
                  ready_field=prof["ready_field"], args=_build_pairs(args))


def _build_pairs(table: dict) -> Pairs:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in table.items())
