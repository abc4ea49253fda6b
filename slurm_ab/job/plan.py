"""From a resolved Experiment to a JobPlan: every command, option and port of the job.

Pure: no file system, no Slurm. Values known only inside the allocation (hosts, the job id
and the ports derived from it) are ``Var`` words that the script expands at run time.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from dataclasses import dataclass

from typing import Sequence

from ..model.campaign import Campaign, rate_text
from ..model.duration import Estimate
from ..model.experiment import PD_KINDS, Experiment, kind_of
from ..model.rundir import RELATIVE, Layout, job_formats, launch_dirname
from .shell import Var, flag_words

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Replica:
    index: int           # also its het group
    nodes: int
    port_offset: int     # added to the job's port base
    role: str = "server"  # the role this component runs in the job's first mode
    instance: int = 0

    @property
    def name(self) -> str:
        """How users read it: "replica 1", "prefill 0"."""
        from ..model.experiment import instance_name
        return instance_name(self.role, self.instance)


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
    server_env: tuple[str, ...]            # environment of every server step ([env], [server.env])
    router: Command
    client: Command
    job_slot_size: int                     # ports per job slot (replicas x stride)
    secret_env: tuple[str, ...]
    server_step: tuple[str, ...]           # srun options of the server steps (besides group/nodes)
    side_step: tuple[str, ...]             # srun options of router/client (pinned with --nodelist)
    preflight: "Preflight | None"          # None: disabled
    campaign: "CampaignPlan"               # what the job runs: every launch and pass (make_plan)
    # Site survival (issue 20): options of every srun step (--mpi=... then cluster.srun_extra), the
    # writable cache directory and its environment, the job's expected duration (duration.py).
    srun_extra: tuple[str, ...] = ()
    cache: "Cache | None" = None           # None: no cache directory (the image's HOME)
    estimate: Estimate | None = None       # once the time limit is fitted (duration.fit_time_limit)
    telemetry: "TelemetryPlan | None" = None   # None: telemetry.source = "none"
    profile: "ProfilePlan | None" = None       # None: no pass profiled, no nsys

    @property
    def duration(self) -> Estimate:
        """The job's duration estimate: the fitted one, else from the [estimate] figures alone."""
        if self.estimate is not None:
            return self.estimate
        from ..model.duration import estimate
        return estimate(self)

    @property
    def watch_stall_s(self) -> int:
        """Seconds a replica may finish no request while requests are in flight before its pass
        fails ([watchdog]; 0: no /metrics counter to watch)."""
        wd = self.exp.watchdog
        if not (self.exp.server_metrics and wd.progress_metric):
            return 0
        return wd.stall_s or max(60, int(3 * max(f.seconds for f in self.request_figures.values())))

    @property
    def request_figures(self) -> dict:
        """(mode, concurrency, prompts) -> seconds per request (duration.Figure) of every pass the
        job runs: the watchdog's pass limits and stall time read the one time model's figures."""
        model = self.duration.model
        return {(p.mode, p.concurrency, p.prompts): model.figure(p.mode, p.prompts, p.concurrency)
                for x in self.campaign.campaign.launches for p in x.passes}

    @property
    def time_reserve_s(self) -> int:
        """What the job keeps back from squeue's time left: its own early stop and Slurm's early
        warning (duration.SLURM_EARLY_SIGNAL_S)."""
        from ..model.duration import SLURM_EARLY_SIGNAL_S
        return int(self.exp.cluster.signal_before_limit_s) + SLURM_EARLY_SIGNAL_S

    @property
    def time_blocks(self) -> tuple[tuple[int, int], ...]:
        """(first launch, expected seconds) of each block of a campaign: the job does not start a
        block that cannot finish in the time it has left (duration.block_seconds)."""
        from ..model.duration import block_seconds
        return block_seconds(self)

    @property
    def guards(self) -> "Guards":
        """The site-survival values the job's static part reads (sbatch_templates/site.sh.j2)."""
        e = self.exp
        ct, wd = e.container, e.watchdog
        # pyxis names a container_scope=global container pyxis_<name> (pyxis_slurmstepd.c); the job's
        # are pyxis_<container.name>-<job id>-<het group>: this prefix is what the job removes at its
        # end and what the next job's preflight sweeps for ended jobs' leftovers
        prefix = (f"pyxis_{ct.name}-" if self.container_name and ct.scope == "global" and ct.remove_command
                  else "")
        kinds = dict.fromkeys(r.name for x in self.campaign.experiments for r in x.mode.roles)
        return Guards(nccl_network=e.cluster.nccl_network, nccl_names=tuple(e.cluster.nccl_names),
                      watch_every_s=e.metrics.interval_s,
                      watch_factor_pct=int(round(wd.pass_factor * 100)), progress_metric=wd.progress_metric,
                      inflight_metrics=tuple((k, wd.inflight_of(k)) for k in kinds), container_prefix=prefix,
                      remove_command=tuple(ct.remove_command), list_command=tuple(ct.list_command),
                      sweep=e.cluster.sweep_stale, node_step_args=tuple(e.cluster.side_step_args))

    @property
    def container_name(self) -> str:
        """The pyxis --container-name of a het group's steps on a node without the group (the job
        adds -<G>: one container per node, job and group, so two components sharing a node, or two
        jobs, never race for one name), "" when none is used (no image, or the exec runtime: pyxis
        flags are pyxis' only)."""
        ct = self.exp.container
        return f"{ct.name}-${{SLURM_JOB_ID}}" if ct.image and ct.name and ct.runtime != "exec" else ""

    @property
    def experiment(self) -> str:
        return self.exp.name

    @property
    def title(self) -> str:
        """What the job runs, in a few words (the script's first comment)."""
        cp = self.campaign
        return ", ".join(f"mode {m} ({d})" for m, d in zip(cp.modes, cp.descriptions))

    @property
    def mode_label(self) -> str:
        """MODE of the job's own job_start: its modes joined by '+'."""
        return "+".join(self.campaign.modes)

    @property
    def prologue(self) -> str:
        text = self.exp.cluster.prologue
        return text.rstrip("\n") if text.strip() else ""

    @property
    def variables(self) -> tuple[tuple[str, object], ...]:
        """The job script's settings (NAME=value lines; the static flow reads them)."""
        e = self.exp
        return (
            ("RUN_ID", self.run_id), ("MODE", self.mode_label), ("RUN_DIR", self.run_dir),
            ("REPLICAS", len(self.replicas)),
            ("READY_TIMEOUT", e.cluster.ready_timeout_s),
            ("ROUTER_PROFILE", e.router.profile),
            ("ROUTER_READY_TIMEOUT", e.router.ready_timeout_s),
            ("ROUTER_READY_PATH", e.router.ready_path), ("ROUTER_READY_FIELD", e.router.ready_field),
            ("POLL", e.cluster.poll_interval_s), ("GRACE", e.cluster.teardown_grace_s),
            ("WARMUP_INPUT_LEN", e.warmup.input_len), ("WARMUP_OUTPUT_LEN", e.warmup.output_len),
            ("WARMUP_TOKEN_ID", e.warmup.token_id), ("WARMUP_TIMEOUT", e.warmup.timeout_s),
            ("METRICS_INTERVAL", e.metrics.interval_s), ("METRICS_TIMEOUT", e.metrics.timeout_s),
            ("ADDRESS_MODE", e.cluster.address), ("PREFLIGHT", int(self.preflight is not None)),
            ("JOB_SLOTS", e.ports.job_slots), ("JOB_SLOT_SIZE", self.job_slot_size),
            ("REPLICA_STRIDE", e.ports.replica_stride), ("SERVER_PORT_BASE", e.ports.server),
            ("DIST_PORT_BASE", e.ports.dist_init), ("ROUTER_PORT_BASE", e.ports.router),
            ("ROUTER_METRICS_PORT_BASE", e.ports.router_metrics),
            *self.correctness_variables,
        )

    @property
    def correctness_variables(self) -> tuple[tuple[str, object], ...]:
        """The correctness gate's canary ([correctness]; CORRECTNESS_PROMPTS 0: none)."""
        c = self.exp.correctness
        return (("CORRECTNESS_PROMPTS", c.prompts if c.enabled else 0), ("CORRECTNESS_INPUT_LEN", c.input_len),
                ("CORRECTNESS_OUTPUT_LEN", c.output_len), ("CORRECTNESS_TOKEN_BASE", c.token_base),
                ("CORRECTNESS_TOKEN_SPAN", c.token_span), ("CORRECTNESS_TIMEOUT", c.timeout_s))

    @property
    def files(self) -> tuple[tuple[str, str, str], ...]:
        """The run directory's file names the job script writes, as printf formats (rundir.Layout's
        names: the script spells none itself); a PD job's pair files only with pd.sh, a
        sequential campaign's stop-rule files only in its script, a capacity search's files only in
        its job, the samplers' and the profiles' only with telemetry.sh and profile.sh."""
        return job_formats(self.pd, self.campaign.campaign.sequential, self.capacity is not None,
                           self.telemetry is not None, self.profile is not None)

    @property
    def capacity(self) -> "CapacityPlan | None":
        """A capacity search's spec, program and Python (None for any other job)."""
        c = self.campaign.campaign
        if not c.capacity:
            return None
        first = self.campaign.launches[0]
        spec = {**c.capacity, "passes": [{"key": p.key, "bench": p.bench} for p in first.passes]}
        from ..ab_stats import capacity as search
        program = Path(search.__file__).read_text()
        py = client_python(("python3", "-c"), self.exp.client.command)[:-1]
        return CapacityPlan(json.dumps(spec, sort_keys=True), program, py)

    @property
    def router_profile(self) -> str:
        return self.exp.router.profile

    @property
    def pd(self) -> bool:
        """Some launch of the job runs prefill/decode roles (the job then has pd.sh and its settings)."""
        return any(e.mode.disaggregated for e in self.campaign.experiments)

    @property
    def pd_variables(self) -> tuple[tuple[str, object], ...]:
        """The settings of a job with prefill/decode roles (only such jobs' scripts have them): the
        bootstrap port base, the canary's time, where each node's SGLANG_HOST_IP comes from ("":
        SGLang's guess; else the preflight's file of that node)."""
        if not self.pd:
            return ()
        pd = next(e for e in self.campaign.experiments if e.mode.disaggregated).pd
        return (("BOOTSTRAP_PORT_BASE", self.exp.ports.bootstrap), ("CANARY_TIMEOUT", pd.canary_timeout_s),
                ("HOST_IP_IFACE", pd.host_ip_interface))

    def sbatch_of(self, r: Replica) -> tuple[str, ...]:
        """#SBATCH options of one component (its own --nodes)."""
        return tuple(f"--nodes={r.nodes}" if o.startswith("--nodes=") else o for o in self.sbatch_component)

    def client_of(self, step: "PassStep") -> Command:
        """The client command of one pass with the pass's values in place (what dry-run shows)."""
        values = {"${PASS_PROMPTS}": str(step.prompts), "${PASS_C}": str(step.concurrency),
                  "${PASS_BENCH}": step.bench, "${PASS_RATE}": step.rate}

        def resolve(w):
            if not isinstance(w, Var):
                return w
            text = w.text
            for k, v in values.items():
                text = text.replace(k, v)
            return text if "$" not in text else Var(text)
        return Command(self.client.env, tuple(tuple(resolve(w) for w in line)
                                              for line in self.client.lines))


@dataclass(frozen=True)
class CapacityPlan:
    """What a capacity search's job writes and runs: the spec (JSON; every launch's probes have the
    same keys), the program (ab_stats/capacity.py verbatim, stdlib only) and the Python that runs
    it on ROUTER_HOST (the client's)."""

    spec: str
    program: str
    python: tuple[str, ...]


@dataclass(frozen=True)
class PassStep:
    """One timed pass as the job runs it; its files are relative to its launch directory."""

    concurrency: int
    repeat: int                            # 0: the launch's discarded burn-in pass
    prompts: int
    key: str
    bench: str
    client_log: str
    rate: str = "inf"                      # --request-rate: "inf" (closed loop) or requests per second
    profile: bool = False                  # profiled: /start_profile to every head as it starts

    @property
    def spec(self) -> str:
        """CONCURRENCY:REPEAT:PROMPTS:KEY:BENCH:CLIENT_LOG[:RATE[:profile]], as LAUNCH_PASSES lists
        it (no RATE: closed loop, --request-rate inf; a profiled pass spells RATE, inf too)."""
        tail = (self.rate, "profile") if self.profile else (self.rate,) if self.rate != "inf" else ()
        return ":".join(str(x) for x in (self.concurrency, self.repeat, self.prompts, self.key,
                                         self.bench, self.client_log) + tail)


@dataclass(frozen=True)
class LaunchStep:
    index: int
    mode: str
    server: int                            # index of its mode (its role commands, MODE_* arrays)
    dir: str                               # relative to the run directory (launch<N>-<MODE>)
    passes: tuple[PassStep, ...]


@dataclass(frozen=True)
class Software:
    """What one mode's launches run in (its [modes.<M>.settings] over the job's): its image (pyxis
    flags, or the exec runtime's words before each step's command), the environments of its server
    steps and of its router and client steps, its client's command and what its preflight imports."""

    container: tuple = ()                  # pyxis flags of every step ('' image or exec runtime: none)
    container_tag: str = ""                # pyxis: the K-th other image's container names end -i<K>
    image_exec: tuple = ()                 # exec runtime: exec_command [mount flag] IMAGE
    server_env: tuple = ()
    common_env: tuple = ()
    client: "Command | None" = None
    modules: tuple = ()                    # preflight: imported on every node
    client_modules: tuple = ()             # ... and on ROUTER_HOST
    client_import: tuple = ()              # by the client's Python ((): the one import)

    @property
    def environment(self) -> tuple:
        """What tells two modes' software apart for the job (one preflight per distinct one)."""
        return (self.container, self.image_exec, self.server_env, self.common_env, self.modules,
                self.client_modules, self.client_import)


@dataclass(frozen=True)
class CampaignPlan:
    """Every server launch of the job and the passes each runs (a run of one mode: one of each)."""

    campaign: Campaign
    experiments: tuple[Experiment, ...]   # per mode, in campaign.modes order
    launches: tuple[LaunchStep, ...]
    roles: tuple = ()                      # per mode: ((role, its servers' Command), ...) in role order
    routers: tuple = ()                    # per mode: the router's Command
    software: tuple[Software, ...] = ()    # per mode: its image, environments, client

    @property
    def same_software(self) -> bool:
        """Every mode runs in the same image and environments (the job's one CONTAINER, SERVER_ENV,
        COMMON_ENV); else each launch takes its mode's (MODE_SOFTWARE)."""
        return len({s.environment for s in self.software}) <= 1

    @property
    def container_tags(self) -> tuple[str, ...]:
        """The other images' container tags (-i<K>, each once): the job's clean-up removes their
        containers too, whatever else the job renders (CT_TAGS)."""
        return tuple(dict.fromkeys(s.container_tag for s in self.software if s.container_tag))

    @property
    def same_client(self) -> bool:
        """Every mode runs the same client command (one client_command for the job)."""
        return len({s.client.lines if s.client else () for s in self.software}) <= 1

    @property
    def software_checks(self) -> tuple[int, ...]:
        """Modes (indices) whose software differs from every earlier mode's but the first: each
        gets a preflight of its own, in its own image and environment."""
        seen, out = set(), []
        for i, s in enumerate(self.software):
            if s.environment not in seen and i > 0:
                out.append(i)
            seen.add(s.environment)
        return tuple(out)

    @property
    def group_roles(self) -> tuple[tuple[str, ...], ...]:
        """Per mode: the role of each het group of its launch."""
        return tuple(tuple(c.role for c in e.components) for e in self.experiments)

    @property
    def group_names(self) -> tuple[tuple[str, ...], ...]:
        """Per mode: how users read each het group of its launch ("replica 1", "prefill 0")."""
        return tuple(tuple(c.name for c in e.components) for e in self.experiments)

    @property
    def group_dp(self) -> tuple[tuple[int, ...], ...]:
        """Per mode: the DP workers of each het group's role (its PD canaries reach each one)."""
        return tuple(tuple(e.dp_ranks(c.role) for c in e.components) for e in self.experiments)

    @property
    def same_router(self) -> bool:
        """Every mode starts the same router (one router_command for the job)."""
        return len({r.lines for r in self.routers}) <= 1

    @property
    def modes(self) -> tuple[str, ...]:
        return self.campaign.modes

    @property
    def descriptions(self) -> tuple[str, ...]:
        return tuple(e.mode.description for e in self.experiments)

    @property
    def metrics(self) -> tuple[int, ...]:
        """Per mode: 1 when its servers run with --enable-metrics (the job scrapes them)."""
        return tuple(int(e.server_metrics) for e in self.experiments)

    def role_command(self, mode_index: int, role: str) -> Command:
        return dict(self.roles[mode_index])[role]


def campaign_plan(exps: tuple[Experiment, ...], campaign: Campaign, run_dir: str = "") -> CampaignPlan:
    """The launches and passes with their directories and files (rundir.Layout's names)."""
    modes = tuple(e.mode.name for e in exps)
    steps = []
    for launch in campaign.launches:
        passes = tuple(PassStep(p.concurrency, p.repeat, p.prompts, p.key, str(RELATIVE.bench(p.key)),
                                str(RELATIVE.client_log(p.key)),
                                "search" if p.probe else (rate_text(p.rate) if p.rate else "inf"), p.profile)
                       for p in launch.passes)
        steps.append(LaunchStep(launch.index, launch.mode, modes.index(launch.mode),
                                launch_dirname(launch), passes))
    roles = tuple(tuple((r.name, role_command(e, r.name)) for r in e.mode.roles) for e in exps)
    return CampaignPlan(campaign, exps, tuple(steps), roles, tuple(_router(e) for e in exps),
                        software_of(exps, run_dir))


def software_of(exps: tuple[Experiment, ...], run_dir: str) -> tuple[Software, ...]:
    """Each mode's image, environments, client and preflight imports. Images: one pyxis container
    name per distinct image and group (<name>-<job id>-<group> for the first, <name>-<job
    id>-i<K>-<group> for the K-th other), so two images never share a container."""
    images: list[str] = []
    out = []
    for e in exps:
        if e.container.image not in images:
            images.append(e.container.image)
        k = images.index(e.container.image)
        pyxis = e.container.runtime != "exec"
        pf = _preflight((e,))
        out.append(Software(
            container=container_flags_for(exps, run_dir, e) if pyxis else (),
            container_tag=f"-i{k}" if pyxis and k and e.container.name else "",
            image_exec=() if pyxis else image_exec(exps, run_dir, e),
            server_env=_env(e.env) + _env(e.server_env), common_env=_env(e.env), client=_client(e),
            modules=pf.modules if pf else (), client_modules=pf.client_modules if pf else (),
            client_import=pf.client_import_command if pf else ()))
    return tuple(out)


def image_exec(exps, run_dir: str, exp: Experiment) -> tuple[str, ...]:
    """The exec runtime's words before a step's command: exec_command, the mounts (the paths every
    mode uses, the cache and the results directory: as pyxis' --container-mounts) and the image."""
    ct = exp.container
    if not ct.image:
        return ()
    mounts = _mounts(exps, run_dir, exp)
    return (*ct.exec_command, *((ct.exec_mount_flag, ",".join(mounts)) if ct.exec_mount_flag and mounts else ()),
            ct.image)


@dataclass(frozen=True)
class TelemetryPlan:
    """The samplers of every launch ([telemetry]): each node's GPU sampler (its command complete,
    a DCGM exporter it starts first) and ROUTER_HOST's host sampler."""

    source: str
    gpu_command: tuple[str, ...]
    exporter: tuple[str, ...]              # () : the site runs its exporter (or nvidia-smi)
    host_command: tuple[str, ...]          # () : no host sampler
    step: tuple[str, ...]                  # srun options of the GPU samplers


@dataclass(frozen=True)
class ProfilePlan:
    """What the profiled passes ask of SGLang: per mode, per role, /start_profile's body (the job
    adds output_dir, profile_id and profile_prefix); nsys around the server steps."""

    bodies: tuple[tuple[tuple[str, str], ...], ...]   # per mode: ((role, JSON body), ...)
    nsys: tuple[str, ...] = ()                        # () : no nsys


def telemetry_plan(exp: Experiment) -> TelemetryPlan | None:
    t = exp.telemetry
    if not t.enabled:
        return None
    if t.source == "nvidia-smi":
        gpu = (*t.nvidia_smi.command, f"--query-gpu={','.join(t.nvidia_smi.fields)}", "--format=csv,nounits",
               "-lms", str(t.interval_ms))
        exporter: tuple[str, ...] = ()
    else:
        gpu = (*t.dcgm.scrape_command, t.dcgm.url, f"{t.interval_s:g}")
        exporter = tuple(t.dcgm.exporter_command)
    host = (*t.host_command, f"{t.host_interval_ms / 1000:g}") if t.host else ()
    return TelemetryPlan(t.source, gpu, exporter, host, ("--overlap", *t.step_args))


def profile_body(exp: Experiment, role: str) -> str:
    """/start_profile's JSON of one role (SGLang 0.5.23's ProfileReq: num_steps, start_step when
    set, activities, profile_by_stage)."""
    import json
    p = exp.profile
    w = p.window(role)
    body = {"num_steps": w.num_steps, **({"start_step": w.start_step} if w.start_step else {}),
            "activities": list(p.activities), **({"profile_by_stage": True} if p.profile_by_stage else {})}
    return json.dumps(body)


def profile_plan(exps: Sequence[Experiment], campaign: Campaign) -> ProfilePlan | None:
    p = exps[0].profile
    if not campaign.profiled and not p.nsys:
        return None
    bodies = tuple(tuple((r.name, profile_body(e, r.name)) for r in e.mode.roles) for e in exps)
    return ProfilePlan(bodies, tuple(p.nsys_command) if p.nsys else ())


@dataclass(frozen=True)
class Guards:
    """What keeps a job honest on a real site: the network NCCL must use ("" = not checked), the
    pass watchdog's figures, the clean-up of each node's named container."""
    nccl_network: str
    nccl_names: tuple[str, ...]          # the names NCCL may print for it (patterns, * any text)
    watch_every_s: int
    watch_factor_pct: int
    progress_metric: str
    inflight_metrics: tuple[tuple[str, tuple[str, ...]], ...]   # role kind -> its in-flight gauges
    container_prefix: str               # pyxis_<container.name>-: the job's are <prefix><job id>-<G>; "" = none
    remove_command: tuple[str, ...]
    list_command: tuple[str, ...]       # lists this user's containers on a node (enroot list)
    sweep: bool                         # the preflight removes ended jobs' containers and caches
    node_step_args: tuple[str, ...]     # srun options of the steps that run once per node


@dataclass(frozen=True)
class Cache:
    """The writable cache directory of every step: <dir>[/slurm-ab-<job id>] and its variables."""

    base: str                              # host path, mounted at the same path under pyxis
    per_job: bool
    env: tuple                             # Var words NAME=${CACHE_DIR}/... (before [env])


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
    interfaces_command: tuple[str, ...] = ()    # checked against NCCL_/GLOO_SOCKET_IFNAME
    hca_command: tuple[str, ...] = ()           # checked against NCCL_IB_HCA
    tokenizer_command: tuple[str, ...] = ()     # + the client's tokenizer, on ROUTER_HOST
    tokenizer: str = ""
    pd_ib: str = ""                             # PD: RDMA devices of pd.ib_device, each ACTIVE
    gpudirect_command: tuple[str, ...] = ()     # PD on an RDMA backend: GPUDirect RDMA on every node
    host_ip_interface: str = ""                 # PD: each node's SGLANG_HOST_IP from this interface
    client_import_command: tuple[str, ...] = ()  # by the client's Python, when not import_command's


def job_name(run_id: str) -> str:
    return f"ab-{run_id}"


def check_run_id(run_id: str) -> None:
    from ..model.errors import ConfigError

    if not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ConfigError("run id", run_id, "not a valid run id",
                          "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit, no '..'")


def component_options(exp: Experiment) -> tuple[str, ...]:
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


def used_paths(exp: Experiment) -> tuple[tuple[str, str], ...]:
    """(what, path) of the site paths this mode reads: the model always; the draft model only if
    its server flags name it, the dataset and a separate tokenizer only if the client's do (a
    path a mode does not use must not be mounted: a missing draft model breaks no other mode)."""
    words = {w for r in exp.mode.roles for line in role_command(exp, r.name).lines for w in line
             if isinstance(w, str)}
    cwords = {w for line in _client(exp).lines for w in line if isinstance(w, str)}
    out = [("model", exp.paths.model)]
    if exp.paths.draft_model and exp.paths.draft_model in words:
        out.append(("draft model", exp.paths.draft_model))
    if exp.paths.dataset and exp.paths.dataset in cwords:
        out.append(("dataset", exp.paths.dataset))
    if exp.paths.trace and exp.paths.trace in cwords:
        out.append(("trace", exp.paths.trace))
    tok = exp.paths.tokenizer
    if tok.startswith("/") and tok != exp.paths.model and tok in cwords:
        out.append(("tokenizer", tok))
    return tuple(out)


def _mounts(exps, run_dir: str, exp: Experiment | None = None) -> tuple[str, ...]:
    """User mounts (`exp`'s, else the first mode's) plus, at the same path, the paths the modes
    use, the cache directory and the results directory (not the run directory: a re-submitted
    script may write beside it)."""
    exp = exp or exps[0]
    out = list(exp.container.mounts)
    targets = {m.split(":")[1] for m in out}
    paths = [p for e in exps for _, p in used_paths(e)] + [exp.cache.dir, str(Path(run_dir).parent)]
    for path in paths:
        if path and path not in targets:
            out.append(f"{path}:{path}")
            targets.add(path)
    return tuple(out)


def container_flags_for(exps, run_dir: str, exp: Experiment | None = None) -> tuple:
    """pyxis flags of every step of a job running these experiments' modes (one or a campaign's) in
    `exp`'s image (the first mode's by default)."""
    exp = exp or exps[0]
    ct = exp.container
    if not ct.image or ct.runtime == "exec":
        return ()
    flags = [f"--container-image={ct.image}", f"--container-mounts={','.join(_mounts(exps, run_dir, exp))}"]
    # With container.name, the job adds --container-name=<name>-<job id>[-i<K>]-<het group> to each
    # step (CONTAINER_NAME, CONTAINER_TAG, container_flags in the job): one container per node, job,
    # image and group (pyxis_slurmstepd.c: a named container's root file system is reused by the
    # node's later steps, "pyxis: reusing existing container filesystem"; an unnamed one is unpacked
    # again for every step). The job id: pyxis' default container_scope=global would otherwise hand
    # an old job's container on; the group: two components sharing a node would race to create one;
    # the image (a campaign's K-th other image, Software.container_tag): never one image's
    # container for another mode's launch.
    flags.append("--container-mount-home" if ct.mount_home else "--no-container-mount-home")
    if ct.workdir:
        flags.append(f"--container-workdir={ct.workdir}")
    # No --container-env: it names host variables whose values should win over the image's, so
    # it forwards only names set in the step's own host environment (NVIDIA/pyxis
    # tests/env_vars.bats: `export CUDA_VERSION=...` then --container-env=CUDA_VERSION). [env] is
    # set later, by `env NAME=VALUE ...` inside the container, where its values already win.
    # Secrets are exported by the submitter and inherited by the steps.
    return tuple(flags)


def srun_extra(exp: Experiment) -> tuple[str, ...]:
    """Options of every srun step: --mpi (cluster.mpi; no PMIx set-up for SGLang, which needs
    none) and the site's cluster.srun_extra."""
    mpi = (f"--mpi={exp.cluster.mpi}",) if exp.cluster.mpi else ()
    return mpi + tuple(exp.cluster.srun_extra)


def cache_plan(exp: Experiment) -> Cache | None:
    """[cache]: HOME and the caches of every step under one writable directory."""
    c = exp.cache
    if not c.dir:
        return None
    env = tuple(Var(f"{k}=${{CACHE_DIR}}" + ("" if v in (".", "") else f"/{v.strip('/')}"))
                for k, v in c.env)
    return Cache(c.dir.rstrip("/") or "/", c.per_job, env)


def _env(pairs) -> tuple[str, ...]:
    return tuple(f"{k}={v}" for k, v in pairs)


def role_command(exp: Experiment, role: str) -> Command:
    """The one builder of SGLang's command line, for every node of every instance of one role (the
    job adds --dist-init-addr, --port, --node-rank and, on a prefill, --disaggregation-bootstrap-port).
    Its env words go before it, after the job's SERVER_ENV: a prefill/decode role's [pd.env], then
    the role's own env (which wins). Its words after the program are the report's flags row of the
    role. What SGLang 0.5.23 takes of a prefill/decode role (shared/research/pd-disaggregation.md):
    --disaggregation-mode, the site's --disaggregation-transfer-backend (and -ib-device); the other
    ranks of an instance register with <dist-init host>:<bootstrap port> (common/conn.py), so the
    router's prefill URL, the dist-init address and the bootstrap host are one address, the head's."""
    r = exp.mode.role(role)
    kind = r.kind
    lines = [
        tuple(exp.commands.server),
        ("--model-path", exp.paths.model),
        ("--tp-size", str(r.tp)), ("--pp-size", str(r.pp)), ("--ep-size", str(r.ep)),
        ("--nnodes", str(r.nodes)),
        ("--host", "0.0.0.0"),
    ]
    env = exp.pd.env if kind.disaggregation else ()
    if kind.disaggregation:
        lines += [("--disaggregation-mode", kind.disaggregation),
                  ("--disaggregation-transfer-backend", exp.pd.transfer_backend)]
        if exp.pd.ib_device:
            lines.append(("--disaggregation-ib-device", exp.pd.ib_device))
        if exp.pd.kv_checksum:
            lines.append(("--disaggregation-enable-kv-checksum",))
    lines += [tuple(w) for w in flag_words(exp.role_flags(role))]
    return Command(_env(env + r.env), tuple(lines))


def server_flags_text(exp: Experiment, role: str) -> str:
    """One role's flags as the job script's srun line writes them (shell words)."""
    from .shell import words
    return words(w for line in role_command(exp, role).lines[1:] for w in line)


def _router(exp: Experiment) -> Command:
    """The router: one --worker-urls list of servers, or in PD mode (--pd-disaggregation) one
    `--prefill URL BOOTSTRAP_PORT` per prefill instance (always with its port: without one the router
    sends bootstrap_port null and each server substitutes its own setting, scheduler.py), one
    `--decode URL` per decode instance (nargs=1 in sglang-router 0.3.2: two URLs after one flag are
    "unrecognized arguments") and the per-role policies (sglang-router 0.3.2 and smg 1.13 alike)."""
    def url(g: int) -> Var:
        return Var(f"http://${{R{g}_ADDR}}:${{R{g}_PORT}}")

    m = exp.mode
    head: list[tuple] = [tuple(exp.router.command)]
    if m.disaggregated:
        head.append(("--pd-disaggregation",))
        for c in exp.components:
            kind = kind_of(c.role)
            head.append((f"--{kind.disaggregation}", url(c.group), *((Var(f"${{R{c.group}_BOOT}}"),)
                                                                     if kind.bootstrap else ())))
        policies = dict(m.router)
        head += [(f"--{k}-policy", policies.get(f"{k}_policy", "round_robin")) for k in PD_KINDS]
    else:
        head += [("--worker-urls", *(url(c.group) for c in exp.components)), ("--policy", exp.router.policy)]
    lines = [
        *head,
        ("--host", "0.0.0.0"),
        ("--port", Var("${ROUTER_PORT}")),
        ("--prometheus-port", Var("${ROUTER_METRICS_PORT}")),
        ("--model-path", exp.paths.model),
        *(tuple(w) for w in flag_words(exp.router.args)),
    ]
    return Command(_env(exp.env), tuple(lines))


def pairs(exp: Experiment) -> tuple[tuple[int, int], ...]:
    """(prefill group, decode group) of every pair a PD launch proves and warms up."""
    comps = exp.components
    return tuple((p.group, d.group) for p in comps if p.role == "prefill" for d in comps if d.role == "decode")


def _client(exp: Experiment) -> Command:
    """The client of one pass: prompts, concurrency and output file are the pass's (run_pass)."""
    b = exp.benchmark
    lines = [
        tuple(exp.client.command),
        *(tuple(w) for w in flag_words(exp.client.args)),
        ("--backend", b.backend),
        ("--base-url", Var("http://${ROUTER_ADDR}:${ROUTER_PORT}")),
        ("--model", exp.paths.model),
        ("--tokenizer", exp.paths.tokenizer),
        tuple(b.dataset_args),
        ("--num-prompts", Var("${PASS_PROMPTS}")),
        ("--max-concurrency", Var("${PASS_C}")),
        ("--request-rate", Var("${PASS_RATE}")),
        ("--seed", str(b.seed)),
        ("--warmup-requests", str(b.warmup_requests)),
        ("--output-file", Var("${RUN_DIR}/${PASS_BENCH}")),
        ("--output-details",),
    ]
    slo = goodput_words(exp)
    if slo:
        lines.append(("--goodput", *slo))
    if b.extra_args:
        lines.append(tuple(b.extra_args))
    return Command(_env(exp.env), tuple(lines))


def goodput_words(exp: Experiment) -> tuple[str, ...]:
    """--goodput's KEY:MS values for the SLOs that are set, when the client has --goodput."""
    if not exp.client.goodput:
        return ()
    return tuple(f"{k}:{v:g}" for k, v in exp.benchmark.slo_ms)


def _server_step(exp: Experiment) -> tuple[str, ...]:
    c = exp.cluster
    return (f"--cpu-bind={c.server_cpu_bind}",) if c.server_cpu_bind else ()


def _side_step(exp: Experiment) -> tuple[str, ...]:
    """Router and client: one task on ROUTER_HOST, overlapping the server step there, not bound to
    one core (cluster.side_cpu_bind)."""
    bind = (f"--cpu-bind={exp.cluster.side_cpu_bind}",) if exp.cluster.side_cpu_bind else ()
    return ("--nodes=1", "--ntasks=1", "--overlap", *exp.cluster.side_step_args, *bind)


def client_python(check: tuple[str, ...], client_command: tuple[str, ...]) -> tuple[str, ...]:
    """A client-side check (`PY -c SCRIPT`) run by the Python that runs the client: the words of the
    client's command before its `-m` (a venv's python3, `env -u X python3`). A client installed in
    another environment than the site's python3 is checked where it runs, not where it is absent
    (a false failure) or where another version is (a false pass)."""
    if len(check) < 2 or check[1] != "-c" or "-m" not in client_command[1:]:
        return check
    return (*client_command[:client_command.index("-m", 1)], *check[1:])


def _preflight(exps: Sequence[Experiment]) -> Preflight | None:
    """The preflight of the job's first mode's settings, checking the paths every mode reads
    (a draft model that one mode of a campaign uses)."""
    exp = exps[0]
    pf = exp.preflight
    if not pf.enabled:
        return None
    used = list(dict.fromkeys(x for e in exps for x in used_paths(e)))
    paths = [x for x in used if x[0] in ("model", "draft model")]
    client_paths = [x for x in used if x[0] not in ("model", "draft model")]
    router = exp.router.module + (f"={exp.router.distribution}" if exp.router.distribution else "")
    interface = exp.cluster.address == "interface"
    pd = next((e.pd for e in exps if e.mode.disaggregated), None)
    client_import = client_python(pf.import_command, exp.client.command)
    return Preflight(
        modules=tuple(m for m in (pf.server_module, router, pd.transfer_module if pd else "") if m),
        client_modules=(exp.client.module + (f"={exp.client.distribution}" if exp.client.distribution
                                             else ""),) if exp.client.module and pf.client_import else (),
        import_command=pf.import_command, gpu_command=pf.gpu_command,
        client_import_command=() if client_import == pf.import_command else client_import,
        gpus=exp.cluster.gpus_per_node, port_command=pf.port_command,
        address_command=pf.address_command if interface or (pd and pd.host_ip_interface) else (),
        interface=exp.cluster.address_interface if interface else "",
        paths=tuple(paths), client_paths=tuple(client_paths), timeout_s=pf.timeout_s,
        interfaces_command=pf.interfaces_command, hca_command=pf.hca_command,
        tokenizer_command=client_python(pf.tokenizer_command, exp.client.command),
        tokenizer=exp.paths.tokenizer,
        pd_ib=pd.ib_device if pd and pd.transfer_backend != "mooncake_tcp" else "",
        gpudirect_command=pf.gpudirect_command if pd and pd.gpudirect_check and pd.rdma else (),
        host_ip_interface=pd.host_ip_interface if pd else "")


def make_plan(exp: Experiment | Sequence[Experiment], run_id: str, run_dir: str,
              campaign: Campaign) -> JobPlan:
    """The plan of a job: the campaign of one or several validated modes of one shape
    (campaign_plan.plan_job checks them and schedules the campaign)."""
    exps = (exp,) if isinstance(exp, Experiment) else tuple(exp)
    exp = exps[0]
    check_run_id(run_id)
    stride = exp.ports.replica_stride
    c = exp.cluster
    sbatch_job = (
        f"--job-name={job_name(run_id)}",
        f"--output={Layout(Path(run_dir)).slurm_out('%j')}",
        f"--signal=B:USR1@{c.signal_before_limit_s}",
        "--no-requeue",  # a node failure must end the run with its evidence, not silently rerun it
    )
    return JobPlan(
        exp=exp,
        run_id=run_id,
        run_dir=run_dir,
        job_name=job_name(run_id),
        sbatch_job=sbatch_job,
        sbatch_component=component_options(exp),
        replicas=tuple(Replica(c.group, c.nodes, c.group * stride, c.role, c.instance) for c in exp.components),
        container_flags=container_flags_for(exps, run_dir),
        server_env=_env(exp.env) + _env(exp.server_env),
        router=_router(exp),
        client=_client(exp),
        job_slot_size=exp.replicas * stride,
        secret_env=c.secret_env,
        server_step=_server_step(exp),
        side_step=_side_step(exp),
        preflight=_preflight(exps),
        campaign=campaign_plan(exps, campaign, run_dir),
        srun_extra=srun_extra(exp),
        cache=cache_plan(exp),
        telemetry=telemetry_plan(exp),
        profile=profile_plan(exps, campaign),
    )
