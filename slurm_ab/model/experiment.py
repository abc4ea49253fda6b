"""The experiment: frozen dataclasses (modes, benchmark, cluster, paths) built from a checked tree.

Flags and environment stay ordered tuples of pairs so rendering is deterministic and the dataclasses
hashable; nothing here knows a model name or a cluster.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

Pairs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class RoleKind:
    """What a role is to SGLang, the router and the job. The kinds are SGLang's (its
    --disaggregation-mode); a mode's roles, their sizes and flags are data ([modes.<M>])."""

    name: str
    label: str                       # an instance's name: "replica 1", "prefill 0"
    disaggregation: str = ""         # SGLang's --disaggregation-mode ("": an ordinary server)

    @property
    def bootstrap(self) -> bool:
        """Its instances run SGLang's KV bootstrap server (a prefill's)."""
        return self.disaggregation == "prefill"

    @property
    def answers(self) -> bool:
        """Its instances' answers are the client's (a prefill's one token goes to its decode only,
        through the KV transfer): they decode, and their requests are the client's requests."""
        return self.disaggregation != "prefill"


# An ordinary mode is one `server` role of experiment.replicas instances; a prefill/decode (PD) mode
# is a `prefill` and a `decode` role ([modes.<M>.roles.<kind>]), xPyD their instance counts.
ROLE_KINDS = {k.name: k for k in (RoleKind("server", "replica"), RoleKind("prefill", "prefill", "prefill"),
                                  RoleKind("decode", "decode", "decode"))}
PD_KINDS = tuple(k for k, v in ROLE_KINDS.items() if v.disaggregation)    # the [modes.<M>.roles] tables


def kind_of(role: str | None) -> RoleKind:
    """The kind of a role name (an unknown one reads as an ordinary server's)."""
    return ROLE_KINDS.get(role or "server", ROLE_KINDS["server"])


def instance_name(role: str | None, instance: int) -> str:
    """How users read a component: "replica 1", "prefill 0", "decode 1"."""
    return f"{kind_of(role).label} {instance}"


@dataclass(frozen=True)
class Role:
    """One role of a mode: `instances` SGLang servers of `nodes` nodes each. Its args go on top of
    [server.args] and the mode's (an ordinary mode's one `server` role has none of its own)."""

    name: str                        # its kind: "server" | "prefill" | "decode"
    instances: int
    nodes: int
    tp: int
    pp: int
    ep: int
    args: Pairs = ()
    env: Pairs = ()

    @property
    def kind(self) -> RoleKind:
        return kind_of(self.name)


@dataclass(frozen=True)
class Component:
    """One het component of a launch: one instance of one role."""

    group: int                       # het group = replica index in file names and events
    nodes: int
    role: str = "server"
    instance: int = 0                # the instance's index within its role

    @property
    def name(self) -> str:
        """How users read it: "replica 1", "prefill 0", "decode 0"."""
        return instance_name(self.role, self.instance)


@dataclass(frozen=True)
class Mode:
    name: str
    description: str
    args: Pairs = ()                 # every role's (on top of [server.args])
    roles: tuple[Role, ...] = ()     # one `server` role, or a PD mode's prefill then decode
    router: Pairs = ()               # PD: (("prefill_policy", ...), ("decode_policy", ...))

    def role(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)

    @property
    def disaggregated(self) -> bool:
        """Its roles are prefill/decode roles (the router pairs them; the job proves each pair)."""
        return any(r.kind.disaggregation for r in self.roles)


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
    # Campaigns (several modes, repeats, a concurrency sweep in one allocation): the defaults the
    # CLI's options override (campaign_plan.resolve_options reads these, never the raw table).
    repeats: int = 1
    compare_repeats: int = 2
    order: str = "counterbalanced"
    burn_in: bool = False
    prompts_per_concurrency: int = 0
    launches: int = 1
    compare_launches: int = 4
    primary_metric: str = "output_tps"
    client: str = "sglang_0_5_23"  # a key of [client_profiles]
    slo: Pairs = ()                # goodput SLOs: (("ttft_ms", 500.0), ("tpot_ms", 0.0), ...); 0 = not set
    steady_concurrency_ratio: float = 0.5   # the steady state's minimum concurrency / peak
    request_rates: str = ""        # open-loop passes' rates, "2,4,8" (campaign_plan.resolve_options)
    saturation_growth: float = 0.1  # backlog growth / arrival rate above which a pass is saturated
    slo_target_pct: float = 90.0   # a pass meets the SLOs when this % of its requests meet every SLO
    margin_pct: float = 3.0        # equivalence margin (percent; 0: none)
    sequential: bool = False       # group-sequential comparisons by default
    max_blocks: int = 8            # a sequential campaign's most counterbalanced blocks
    spending: str = "auto"         # its alpha-spending function (model.campaign.SPENDING_CHOICES)

    @property
    def slo_ms(self) -> Pairs:
        """The SLOs that are set, keyed as bench_serving's --goodput: (("ttft", 500.0), ...)."""
        return slo_ms(self.slo)


# benchmark.slo key -> bench_serving's --goodput KEY (SGLang 0.5.23 benchmark/goodput.py).
GOODPUT_KEYS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2el"}


def slo_ms(slo) -> Pairs:
    """benchmark.slo as a table or its pairs (a manifest's JSON) -> the set ones, --goodput keys."""
    items = slo.items() if isinstance(slo, dict) else (
        tuple(x) for x in slo or () if isinstance(x, (list, tuple)) and len(x) == 2)
    return tuple((GOODPUT_KEYS[k], float(v)) for k, v in items
                 if k in GOODPUT_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)


@dataclass(frozen=True)
class Client:
    """The benchmark client of the selected profile ([client_profiles.<benchmark.client>])."""

    profile: str = ""
    description: str = ""
    command: tuple[str, ...] = ()
    module: str = ""
    distribution: str = ""
    args: Pairs = ()                     # flags it always gets
    datasets: tuple[str, ...] = ()       # --dataset-name values its loader knows
    goodput: bool = False                # it has --goodput


@dataclass(frozen=True)
class Correctness:
    """The correctness gate's canary and thresholds ([correctness]; docs/metrics.md)."""

    enabled: bool = False
    prompts: int = 4
    input_len: int = 64
    output_len: int = 32
    token_base: int = 1000
    token_span: int = 1000
    min_common_prefix: int = 16
    min_exact_match: float = 0.5
    reference: str = ""              # the reference mode ("": the campaign's first)
    timeout_s: int = 120

    def prompt_ids(self, k: int) -> tuple[int, ...]:
        """Prompt k's token ids (the job script builds the same in bash: correctness_canary)."""
        return tuple(self.token_base + (k * 7919 + j * 104729) % self.token_span for j in range(self.input_len))


@dataclass(frozen=True)
class Capacity:
    """The capacity search's SLOs, target and bracket ([capacity]; docs/campaigns.md)."""

    slo_ttft_ms: float = 0.0
    slo_tpot_ms: float = 0.0
    slo_e2e_ms: float = 0.0
    attainment: float = 0.9
    rate_lo: float = 0.5
    rate_hi: float = 8.0
    probes: int = 5
    prompts: int = 0

    @property
    def slo_ms(self) -> dict:
        """The SLOs set, keyed as bench_serving's --goodput: {"ttft": 500.0, "tpot": 50.0}."""
        return dict(slo_ms({"ttft_ms": self.slo_ttft_ms, "tpot_ms": self.slo_tpot_ms, "e2e_ms": self.slo_e2e_ms}))


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
    max_retry_pct: float = 5.0       # retried attempts above this % of a pass's requests: invalid


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
    mpi: str = "none"                # srun --mpi of every step ("" = the site's MpiDefault)
    nccl_network: str = ""           # NCCL network every rank must use: "IB", "Socket", "" (unchecked)
    nccl_names: tuple[str, ...] = ()  # the names NCCL may print for it ([nccl_networks]; * any text)
    side_cpu_bind: str = "none"      # srun --cpu-bind of the router and client steps ("" = the site's)
    sweep_stale: bool = True         # the preflight removes ended jobs' containers and caches


@dataclass(frozen=True)
class Container:
    image: str
    mounts: tuple[str, ...]
    workdir: str
    mount_home: bool
    name: str = ""                   # pyxis --container-name prefix ("<name>-<job id>"); "": per step
    scope: str = "global"            # the site's pyxis container_scope
    remove_command: tuple[str, ...] = ()
    runtime: str = "pyxis"           # "pyxis": srun flags; "exec": exec_command [mounts] IMAGE CMD
    exec_command: tuple[str, ...] = ()
    exec_mount_flag: str = ""
    list_command: tuple[str, ...] = ()   # this user's containers on a node (enroot list)
    enroot_dir: str = ""             # node-local home of enroot's paths when they would be under HOME


@dataclass(frozen=True)
class Cache:
    """A writable directory for HOME and the JIT/model caches of every step ([cache])."""

    dir: str = ""                    # host path (mounted at the same path); "": the image's HOME
    per_job: bool = True             # <dir>/slurm-ab-<job id>, removed at the end
    env: Pairs = ()                  # NAME -> path relative to the cache directory


@dataclass(frozen=True)
class Estimate:
    """Default figures of a job's duration ([estimate]; duration.py replaces them by measured ones)."""

    model_load_s: float = 1800
    warmup_s: float = 60
    request_s: float = 60
    pass_overhead_s: float = 30
    job_overhead_s: float = 120
    margin: float = 0.15
    from_results: bool = True
    enforce: bool = True             # refuse a time limit below the estimate


@dataclass(frozen=True)
class Watchdog:
    """Hang detection while a pass runs ([watchdog])."""

    stall_s: int = 0
    pass_factor: float = 3.0
    progress_metric: str = ""
    inflight_metrics: tuple[str, ...] = ()      # every role's gauges of requests in flight
    role_inflight_metrics: Pairs = ()           # kind -> the gauges a role of that kind adds

    def inflight_of(self, kind: str) -> tuple[str, ...]:
        """The gauges whose sum is a role's requests in flight: every role's, then its kind's."""
        return tuple(dict.fromkeys(self.inflight_metrics + tuple(dict(self.role_inflight_metrics).get(kind, ()))))


@dataclass(frozen=True)
class Collector:
    """The chained collector job's own request ([collector])."""

    partition: str = ""
    qos: str = ""
    mem: str = "4G"
    time_min: int = 15
    sbatch_extra: tuple[str, ...] = ()
    cpus: int = 1
    python: str = ""                 # "" = the submitting Python (same architecture, checked)


@dataclass(frozen=True)
class Paths:
    model: str
    draft_model: str
    dataset: str
    tokenizer: str
    results: str
    trace: str = ""                  # a Mooncake-format trace (the mooncake dataset)


@dataclass(frozen=True)
class Commands:
    server: tuple[str, ...]


@dataclass(frozen=True)
class Preflight:
    enabled: bool
    timeout_s: int
    server_module: str
    import_command: tuple[str, ...]
    gpu_command: tuple[str, ...]
    port_command: tuple[str, ...]
    address_command: tuple[str, ...]
    interfaces_command: tuple[str, ...] = ()
    hca_command: tuple[str, ...] = ()
    tokenizer_command: tuple[str, ...] = ()
    client_import: bool = True       # also import the client profile's module on ROUTER_HOST
    gpudirect_command: tuple[str, ...] = ()   # prints "peermem yes|no", "dmabuf yes|no|unknown"


@dataclass(frozen=True)
class Metrics:
    """Scraping of the servers' and the router's Prometheus /metrics during the benchmark."""

    interval_s: int = 10
    timeout_s: int = 5


@dataclass(frozen=True)
class NvidiaSmi:
    """nvidia-smi in query mode: the command and its --query-gpu fields, in order."""

    command: tuple[str, ...] = ("nvidia-smi",)
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dcgm:
    """A DCGM exporter's /metrics: its URL, the exporter a sampler starts (none: the site runs
    one), the scrape loop (+ URL INTERVAL_S)."""

    url: str = ""
    exporter_command: tuple[str, ...] = ()
    scrape_command: tuple[str, ...] = ()


TELEMETRY_SOURCES = ("nvidia-smi", "dcgm", "none")


@dataclass(frozen=True)
class Telemetry:
    """GPU and host samplers per node over every pass ([telemetry]; docs/telemetry.md)."""

    source: str = "none"
    interval_ms: int = 1000
    host: bool = True
    host_interval_ms: int = 1000
    step_args: tuple[str, ...] = ()
    max_gap_s: float = 3.0
    low_clock_pct: float = 10.0
    low_power_pct: float = 20.0
    client_busy_pct: float = 90.0
    host_command: tuple[str, ...] = ()
    nvidia_smi: NvidiaSmi = NvidiaSmi()
    dcgm: Dcgm = Dcgm()

    @property
    def enabled(self) -> bool:
        return self.source in ("nvidia-smi", "dcgm")

    @property
    def interval_s(self) -> float:
        return self.interval_ms / 1000.0


@dataclass(frozen=True)
class ProfileWindow:
    """One role's profile window: SGLang's ProfileReq start_step (0: from the next forward) and
    num_steps."""

    start_step: int = 0
    num_steps: int = 5


@dataclass(frozen=True)
class Profile:
    """Profiles on demand ([profile]): which pass, what SGLang records, each role's step window,
    and nsys around the server steps."""

    target: str = ""                 # "": none; "extra": a dedicated pass; or a pass key
    activities: tuple[str, ...] = ("CPU", "GPU")
    profile_by_stage: bool = False
    nsys: bool = False
    nsys_command: tuple[str, ...] = ()
    roles: tuple[tuple[str, ProfileWindow], ...] = ()

    def window(self, role: str) -> ProfileWindow:
        return dict(self.roles).get(role, ProfileWindow())


@dataclass(frozen=True)
class History:
    """The index of collected runs and its change-point detector ([history]; docs/history.md)."""

    index: str = ""
    metric: str = ""
    alpha: float = 0.01
    permutations: int = 499
    min_segment: int = 4
    min_change_pct: float = 2.0


@dataclass(frozen=True)
class Pd:
    """The site's KV transfer for PD modes ([pd])."""

    transfer_backend: str = "mooncake"
    ib_device: str = ""
    transfer_module: str = ""
    canary_timeout_s: int = 60
    env: Pairs = ()                  # both roles' servers
    kv_checksum: bool = False        # --disaggregation-enable-kv-checksum on both roles
    host_ip_interface: str = ""      # SGLANG_HOST_IP of every PD node: this interface's address there
    gpudirect_check: bool = False    # the preflight checks GPUDirect RDMA on an RDMA backend

    @property
    def rdma(self) -> bool:
        """The backend moves KV over RDMA (GPU memory registered with the HCAs): mooncake unless its
        protocol is tcp (MOONCAKE_PROTOCOL, MC_FORCE_TCP in [pd.env]), nixl (UCX), mori."""
        env = dict(self.env)
        if self.transfer_backend == "mooncake":
            return env.get("MOONCAKE_PROTOCOL", "rdma") == "rdma" and env.get("MC_FORCE_TCP") != "1"
        return self.transfer_backend in ("nixl", "mori")


@dataclass(frozen=True)
class Ports:
    server: int
    dist_init: int
    router: int
    router_metrics: int
    replica_stride: int
    job_slots: int
    bootstrap: int = 25000           # PD: each prefill instance's bootstrap server


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
    cache: Cache = Cache()
    estimate: Estimate = Estimate()
    watchdog: Watchdog = Watchdog()
    collector: Collector = Collector()
    client: Client = Client()
    pd: Pd = Pd()
    correctness: Correctness = Correctness()
    capacity: Capacity = Capacity()
    telemetry: Telemetry = Telemetry()
    profile: Profile = Profile()
    history: History = History()

    @property
    def components(self) -> tuple[Component, ...]:
        """The het components of a launch of this mode: every instance of every role, in role
        order (a PD mode's prefill instances first)."""
        out: list[Component] = []
        for role in self.mode.roles:
            for i in range(role.instances or 0):
                out.append(Component(len(out), role.nodes, role.name, i))
        return tuple(out)

    @property
    def gpus(self) -> int | None:
        """GPUs a launch holds: every role instance's nodes x GPUs per node (None when unknown)."""
        comps = self.components
        try:
            return sum(c.nodes for c in comps) * self.cluster.gpus_per_node if comps else None
        except TypeError:
            return None

    def dp_ranks(self, role: str) -> int:
        """The DP workers of one role's instance a request can be routed to (routed_dp_rank):
        --attn-dp-size, or --dp-size (with DP attention its attention-DP ranks, without it data
        parallel replicas of the TP group); 1 when neither is set."""
        f = dict(self.role_flags(role))
        for k in ("attn-dp-size", "dp-size"):
            v = f.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                return v
        return 1

    def role_flags(self, role: str) -> Pairs:
        """The SGLang flags of one role: [server.args], each key the mode's args also set taking
        the mode's value in place, then the mode's other args; the role's own args over both
        (--set has already written into whichever table it names). The one merge: the srun
        lines, the dry-run summary, the report's flags rows, validation and the collector read it."""
        r = self.mode.role(role)
        return merge_flags(merge_flags(self.server_args, self.mode.args), r.args if r else ())

    def flag(self, role: str, name: str, default: Any = None) -> Any:
        """One merged flag of one role (None/default when not set)."""
        return dict(self.role_flags(role)).get(name, default)

    @property
    def server_metrics(self) -> bool:
        """Every role's servers run with --enable-metrics (the job scrapes their /metrics)."""
        return bool(self.mode.roles) and all(self.flag(r.name, "enable-metrics") for r in self.mode.roles)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Experiment":
        """The Experiment a manifest recorded (to_dict, then JSON). Keys an older slurm-ab did not
        write read as unknown (None; tables and lists empty), so old runs still read. A mode
        recorded without roles (before every mode had them) reads as its one `server` role of
        `replicas` instances with the mode's own tp/pp/ep: the one adapter of old manifests."""
        exp = _from_dict(cls, d)
        if exp.mode.roles:
            return exp
        m = d.get("mode") if isinstance(d.get("mode"), dict) else {}
        server = Role("server", exp.replicas, exp.nodes_per_replica, m.get("tp"), m.get("pp"), m.get("ep"))
        return dataclasses.replace(exp, mode=dataclasses.replace(exp.mode, roles=(server,)))


def merge_flags(base: Pairs, over: Pairs) -> Pairs:
    """`over` wins: a key of both keeps base's position with over's value; over's new keys follow."""
    merged = dict(base)
    merged.update(dict(over))
    return tuple(merged.items())


def _neutral(tp) -> Any:
    """What a field an older manifest lacks reads as: an empty table or tuple, else None
    (unknown, never a made-up 0 or False)."""
    origin = typing.get_origin(tp) or tp
    if dataclasses.is_dataclass(origin):
        return _from_dict(origin, {})
    return () if origin is tuple else None


def _convert(tp, v) -> Any:
    """JSON value -> the field's type: lists become tuples (nested), tables dataclasses."""
    origin = typing.get_origin(tp) or tp
    if dataclasses.is_dataclass(origin) and isinstance(v, dict):
        return _from_dict(origin, v)
    if isinstance(v, (list, tuple)):
        args = typing.get_args(tp) if origin is tuple else ()
        if len(args) > 1 and args[-1] is not Ellipsis and len(args) == len(v):     # a fixed pair
            return tuple(_convert(a, x) for a, x in zip(args, v))
        item = (args or (Any,))[0]
        return tuple(_convert(item, x) for x in v)
    return v


def _from_dict(cls, d: dict):
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in d:
            kwargs[f.name] = _convert(hints[f.name], d[f.name])
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        else:
            kwargs[f.name] = _neutral(hints[f.name])
    return cls(**kwargs)


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
    mode = mode_of(tree, mode_name)
    bench = tree["benchmark"]
    dataset_args = tuple(str(a) for a in tree["datasets"][bench["dataset"]]["args"])
    return Experiment(
        name=tree["experiment"]["name"],
        description=tree["experiment"]["description"],
        replicas=sum(r.instances for r in mode.roles),
        nodes_per_replica=max(r.nodes for r in mode.roles),
        context_length=tree["model"]["context_length"],
        mode=mode,
        benchmark=_build(Benchmark, bench, dataset_args=dataset_args),
        warmup=_build(Warmup, tree["warmup"]),
        server_args=_build_pairs(tree["server"]["args"]),
        server_env=_build_pairs(tree["server"]["env"]),
        env=_build_pairs(tree["env"]),
        router=_router(tree),
        cluster=_build(Cluster, tree["cluster"], nccl_names=tuple(
            (tree.get("nccl_networks") or {}).get(tree["cluster"]["nccl_network"], ()))),
        container=_build(Container, tree["container"]),
        paths=_build(Paths, tree["paths"]),
        commands=_build(Commands, tree["commands"]),
        ports=_build(Ports, tree["ports"]),
        preflight=_build(Preflight, tree["preflight"]),
        metrics=_build(Metrics, tree["metrics"]),
        cache=_build(Cache, tree["cache"]),
        estimate=_build(Estimate, tree["estimate"]),
        watchdog=_build(Watchdog, tree["watchdog"]),
        collector=_build(Collector, tree["collector"]),
        client=_client(tree),
        pd=_build(Pd, tree["pd"]),
        correctness=_build(Correctness, tree["correctness"]),
        capacity=_build(Capacity, tree["capacity"]),
        telemetry=_telemetry(tree["telemetry"]),
        profile=_profile(tree["profile"]),
        history=_build(History, tree["history"]),
    )


def history_of(tree: dict) -> History:
    """[history] of a merged tree (`slurm-ab history` needs no mode)."""
    return _build(History, tree["history"])


def _telemetry(t: dict) -> Telemetry:
    return _build(Telemetry, t, nvidia_smi=_build(NvidiaSmi, t["nvidia_smi"]), dcgm=_build(Dcgm, t["dcgm"]))


def _profile(p: dict) -> Profile:
    return _build(Profile, p, roles=tuple((k, _build(ProfileWindow, v)) for k, v in p["roles"].items()))


def mode_of(tree: dict, name: str) -> Mode:
    """The typed mode `name` of a (not necessarily validated) tree: what `slurm-ab modes` lists.
    KeyError names a key the mode lacks."""
    return _mode(tree["modes"][name], name, tree["experiment"])


def _mode(m: dict, name: str, experiment: dict) -> Mode:
    """A mode and its roles: a PD mode's [roles.prefill] and [roles.decode] (in that order), or
    an ordinary mode's one `server` role (experiment.replicas x nodes_per_replica, its tp/pp/ep)."""
    roles = tuple(Role(r, x["instances"], x["nodes"], x["tp"], x["pp"], x["ep"], _build_pairs(x.get("args", {})),
                       _build_pairs(x.get("env", {})))
                  for r in PD_KINDS if (x := m.get("roles", {}).get(r)) is not None)
    if not roles:
        roles = (Role("server", experiment["replicas"], experiment["nodes_per_replica"], m["tp"], m["pp"], m["ep"]),)
    return Mode(name, m.get("description", ""), _build_pairs(m.get("args", {})), roles,
                _build_pairs(m.get("router", {})) if m.get("roles") else ())


def _client(tree: dict) -> Client:
    name = tree["benchmark"]["client"]
    prof = tree["client_profiles"][name]
    return Client(profile=name, description=prof.get("description", ""), command=tuple(prof["command"]),
                  module=prof["module"], distribution=prof.get("distribution", ""),
                  args=_build_pairs(prof.get("args", {})), datasets=tuple(prof.get("datasets", ())),
                  goodput=bool(prof.get("goodput", False)))


def _router(tree: dict) -> Router:
    r = tree["router"]
    prof = tree["router_profiles"][r["profile"]]
    args = dict(prof.get("args", {}))
    args.update(r["args"])
    return Router(profile=r["profile"], description=prof.get("description", ""), command=tuple(prof["command"]),
                  module=prof["module"], distribution=prof.get("distribution", ""), policy=r["policy"],
                  ready_timeout_s=r["ready_timeout_s"], ready_path=prof["ready_path"],
                  ready_field=prof["ready_field"], args=_build_pairs(args), max_retry_pct=r["max_retry_pct"])


def _build_pairs(table: dict) -> Pairs:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in table.items())
