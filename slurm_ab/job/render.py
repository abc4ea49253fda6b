"""Render a JobPlan into the job script (jinja2) and a short human summary. Pure functions."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .. import __version__
from ..model.duration import parse_time, sized
from ..model.experiment import Experiment, kind_of
from ..model.rundir import Layout
from .plan import JobPlan, Replica, pairs
from .shell import word, words
from ..model.rundir import RELATIVE
from ..model.validate import notices


@lru_cache(maxsize=1)
def _env():
    import jinja2

    from .. import sbatch_templates

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(sbatch_templates.__file__).parent)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = word
    env.filters["words"] = words
    return env


def render_script(plan: JobPlan, template: str = "hetjob.sbatch.j2") -> str:
    return _env().get_template(template).render(p=sized(plan), version=__version__, seq=sequential_parts(plan))


def sequential_parts(plan: JobPlan) -> dict | None:
    """A sequential campaign's part of the script: the launches that end a block (a look after
    each), the client's Python, the spec (ab_stats.sequential.job_spec: boundaries computed here,
    at render time) and the stop rule's program (ab_stats/looks.py, verbatim: stdlib only)."""
    campaign = plan.campaign.campaign
    if not campaign.sequential:
        return None
    import json

    from ..ab_stats import looks
    from ..ab_stats.sequential import job_spec

    program = Path(looks.__file__).read_text()
    python = plan.client.lines[0][0] if plan.client.lines and plan.client.lines[0] else "python3"
    return {"look_after": [blk[-1] for blk in campaign.blocks], "python": python,
            "spec": json.dumps(job_spec(campaign), indent=1, sort_keys=True), "program": program.rstrip("\n")}


def summary(plan: JobPlan) -> str:
    """What the job will do, for dry-run: components, each role's parallelism, ports and every
    command (each role instance's as its srun line runs it)."""
    e = plan.exp
    m = e.mode
    slot = plan.job_slot_size
    lines = [
        f"experiment {e.name}, mode {m.name}: {m.description}",
        f"run id {plan.run_id}, run directory {plan.run_dir}, job name {plan.job_name}",
        f"components: {len(plan.replicas)} (one per role instance: "
        + ", ".join(f"{r.name} x {r.nodes} nodes" for r in plan.replicas)
        + f"), {e.cluster.gpus_per_node} GPUs per node, partition {e.cluster.partition}, time {_time(plan)}",
        *role_lines(e),
        f"benchmark: {e.benchmark.dataset} ({e.benchmark.dataset_config}) {e.benchmark.input_len} -> {e.benchmark.output_len}, "
        f"C={e.benchmark.concurrency}, {e.benchmark.num_prompts} prompts; warm-up {e.warmup.input_len} -> {e.warmup.output_len} per "
        + ("prefill/decode pair" if m.disaggregated else "replica")
        + (f"; SLOs {', '.join(f'{k} <= {v:g} ms' for k, v in e.benchmark.slo_ms)} (goodput; a pass meets them "
           f"when {e.benchmark.slo_target_pct:g}% of its requests do: benchmark.slo_target_pct)"
           if e.benchmark.slo_ms else ""),
        f"ports (slot = job id % {e.ports.job_slots}):",
    ]
    for r in plan.replicas:
        lines.append(f"  {_name(r)}: http {e.ports.server + r.port_offset} + slot*{slot}, "
                     f"dist-init {e.ports.dist_init + r.port_offset} + slot*{slot}"
                     + (f", bootstrap {e.ports.bootstrap + r.port_offset} + slot*{slot}" if kind_of(r.role).bootstrap
                        else ""))
    lines.append(f"  router: {e.ports.router} + slot, metrics {e.ports.router_metrics} + slot")
    addr = {"name": "the Slurm node name", "nodeaddr": "the node's NodeAddr (scontrol show node)",
            "interface": f"the IPv4 address of {e.cluster.address_interface} on the node (read by the preflight)"}
    lines.append(f"head node addresses ($R<g>_ADDR): {addr.get(e.cluster.address, e.cluster.address)}")
    lines += bootstrap_lines(plan, e)
    lines.append(f"router profile {e.router.profile}: {e.router.description}; ready when GET "
                 f"{e.router.ready_path} counts {e.replicas} {e.router.ready_field}")
    pf = plan.preflight
    if pf:
        py = pf.client_import_command[:len(pf.client_import_command) - len(pf.import_command) + 1]
        by = f" by {words(py)}" if pf.client_import_command else ""
        checks = [f"imports {', '.join(pf.modules)}"
                  + (f" (+ {', '.join(pf.client_modules)} on ROUTER_HOST{by})" if pf.client_modules else "")]
        if pf.gpu_command:
            checks.append(f"{pf.gpus} GPUs per node ({words(pf.gpu_command)})")
        checks.append("paths " + ", ".join(f"{w} {p}" for w, p in pf.paths + pf.client_paths))
        if pf.port_command:
            checks.append("ports free on head nodes")
        if pf.interface:
            checks.append(f"address of {pf.interface}")
        if pf.host_ip_interface:
            checks.append(f"each PD node's SGLANG_HOST_IP: the address of {pf.host_ip_interface}")
        if pf.gpudirect_command:
            checks.append("GPUDirect RDMA on every node (nvidia_peermem or dma-buf: "
                          f"{words(pf.gpudirect_command[:2])} ...)")
        lines.append(f"preflight (first step, every node, {pf.timeout_s} s at most): " + "; ".join(checks))
    else:
        lines.append("preflight: disabled")
    lines += site_lines(plan)
    lines += correctness_lines(plan)
    prologue = e.cluster.prologue.strip("\n")
    if prologue.strip():
        lines.append("prologue (cluster.prologue, site shell code run verbatim by the batch script before any step):")
        lines += [f"  | {ln}" for ln in prologue.splitlines()]
    lines.append("commands:")
    env = " ".join(word(x) for x in plan.server_env)
    step = " ".join(plan.server_step)
    for r in plan.replicas:
        lines.append(f"  {_name(r)} (srun --het-group={r.index} --nodes={r.nodes}{' ' + step if step else ''}, every node): "
                     f"{env + ' ' if env else ''}{instance_command(plan, 0, r)} --dist-init-addr "
                     f"\"$R{r.index}_ADDR:$R{r.index}_DIST_PORT\" --port \"$R{r.index}_PORT\" --node-rank \"$SLURM_NODEID\"")
    lines += ready_lines(e)
    side = " ".join(plan.side_step)
    lines.append(f"  router (srun --het-group=0 --nodelist=\"$ROUTER_HOST\" {side}): "
                 + words(w for line in plan.router.lines for w in line))
    if m.disaggregated:
        lines.append(f"  router canary: POST http://$ROUTER_ADDR:$ROUTER_PORT/generate {{4 tokens, max_new_tokens: 2}} "
                     f"once the router counts {e.replicas} healthy workers (within pd.canary_timeout_s = "
                     f"{e.pd.canary_timeout_s} s)")
    first = plan.campaign.launches[0].passes[0]
    lines.append(f"  client (srun --het-group=0 --nodelist=\"$ROUTER_HOST\" {side}; per pass, the first "
                 f"shown: {first.key}): " + words(w for line in plan.client_of(first).lines for w in line))
    for n in notices(e):
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def _name(r: Replica) -> str:
    return f"{r.name} (het group {r.index})"


def role_lines(e: Experiment) -> list[str]:
    """Each role's instances and parallelism, and a prefill/decode mode's KV transfer."""
    gpus = e.cluster.gpus_per_node
    out = [f"role {r.name}: {r.instances} instance(s) x {r.nodes} nodes, TP{r.tp} / PP{r.pp} / EP{r.ep} over "
           f"{r.nodes * gpus} GPUs" + (f", --disaggregation-mode {r.kind.disaggregation}" if r.kind.disaggregation
                                       else "") for r in e.mode.roles]
    if e.mode.disaggregated:
        out.append(f"KV transfer: --disaggregation-transfer-backend {e.pd.transfer_backend}"
                   + (f" --disaggregation-ib-device {e.pd.ib_device}" if e.pd.ib_device else
                      " (IB devices: SGLang's auto discovery)")
                   + "; both roles' environment: " + (" ".join(f"{k}={v}" for k, v in e.pd.env) or "(none)"))
        out.append("KV checksum: " + ("--disaggregation-enable-kv-checksum on both roles (pd.kv_checksum): the "
                                      "decode verifies every request's KV, the benchmark's too (its cost is in the figures)" if e.pd.kv_checksum
                                      else "off (pd.kv_checksum = false, SGLang's default): the canaries prove "
                                      "that KV arrives, not that it arrives intact"))
        out.append("SGLANG_HOST_IP (the address each rank advertises for KV): " + (
            f"the IPv4 address of {e.pd.host_ip_interface} on each node (pd.host_ip_interface, read by the preflight)"
            if e.pd.host_ip_interface else "unset: SGLang's guess (the route to 8.8.8.8), wrong on a node whose "
            "default route is not the fabric's (pd.host_ip_interface)"))
    return out


def bootstrap_lines(plan: JobPlan, e: Experiment) -> list[str]:
    """Where each prefill's bootstrap server listens, and what the router is told."""
    stride, slot = e.ports.replica_stride, plan.job_slot_size
    return [f"KV bootstrap of {c.name}: $R{c.group}_ADDR:$R{c.group}_BOOT = its head, port "
            f"{e.ports.bootstrap + c.group * stride} + slot*{slot} (the router's --prefill URL, the dist-init host "
            f"and the bootstrap host are one address: the other ranks register there)"
            for c in e.components if kind_of(c.role).bootstrap]


def instance_command(plan: JobPlan, mode_index: int, r: Replica) -> str:
    """A role instance's command as the job runs it (its role's environment first; a prefill's
    bootstrap port)."""
    cmd = plan.campaign.role_command(mode_index, r.role)
    nsys = [*plan.profile.nsys, "-o", f"<launch>/{Layout(Path()).nsys_report(r.index, '%q{SLURM_NODEID}')}"] \
        if plan.profile is not None and plan.profile.nsys else []
    text = words(list(cmd.env) + nsys + [w for line in cmd.lines for w in line])
    return text + (f' --disaggregation-bootstrap-port "$R{r.index}_BOOT"' if kind_of(r.role).bootstrap else "")


def ready_lines(e: Experiment) -> list[str]:
    """What proves a launch ready before the router: each server's direct warm-up; or for
    prefill/decode roles the roles check, the bootstrap registries, each pair's KV canary and
    warm-up (pd.sh)."""
    names = {c.group: c.name for c in e.components}
    out = [f"  warm-up {c.name}: POST http://$R{c.group}_ADDR:$R{c.group}_PORT/generate "
           f"{{input_ids: {e.warmup.input_len} x {e.warmup.token_id}, max_new_tokens: {e.warmup.output_len}}}"
           for c in e.components if not kind_of(c.role).disaggregation]
    if not e.mode.disaggregated:
        return out
    out.append("  roles: GET /server_info of every head: its disaggregation_mode is its role, page_size and "
               "kv_cache_dtype the same on all; then each prefill's GET $R<g>_ADDR:$R<g>_BOOT/route (-1 "
               "wildcards) answers 200 (every rank registered)")
    roles = {c.group: c.role for c in e.components}
    for p, d in pairs(e):
        fields = f"bootstrap_host $R{p}_ADDR, bootstrap_port $R{p}_BOOT, a random bootstrap_room"
        dpp, dpd = e.dp_ranks(roles[p]), e.dp_ranks(roles[d])
        n = max(dpp, dpd)
        each = (f"; {n} canaries, one per DP rank (canary k: routed_dp_rank k mod {dpp} on the prefill, "
                f"a room of that rank; routed_dp_rank k mod {dpd} on the decode)" if n > 1 else "")
        out.append(f"  KV canary {names[p]} -> {names[d]}: POST /generate to both at once ({fields}) "
                   f"{{4 tokens, max_new_tokens: 2}}; the decode returns 2 tokens within {e.pd.canary_timeout_s} s"
                   + each)
        out.append(f"  warm-up {names[p]} -> {names[d]}: the same with {{input_ids: {e.warmup.input_len} x "
                   f"{e.warmup.token_id}, max_new_tokens: {e.warmup.output_len}}}")
    return out


def mode_lines(plan: JobPlan, i: int) -> list[str]:
    """A campaign's mode i after its first (whose summary is above): its het groups, roles, bootstrap
    ports, readiness steps, router and each role's command."""
    cp = plan.campaign
    e, mode = cp.experiments[i], cp.modes[i]
    out = [f"  {mode} launches: het groups " + ", ".join(f"{c.group} = {c.name}" for c in e.components)]
    out += [f"    {x}" for x in role_lines(e) + bootstrap_lines(plan, e)]
    out += [f"  {x}" for x in ready_lines(e)]
    out.append(f"    router of {mode}: " + words(w for line in cp.routers[i].lines for w in line))
    out += [f"    {x}" for x in software_lines(plan, i)]
    return out


def software_lines(plan: JobPlan, i: int) -> list[str]:
    """What mode i runs in where it differs from the first mode ([modes.<M>.settings]): its image,
    its environments, its client, and the preflight again in its image."""
    cp = plan.campaign
    if not cp.software or i == 0:
        return []
    mine, first = cp.software[i], cp.software[0]
    e, e0 = cp.experiments[i], cp.experiments[0]
    out = []
    if e.container.image != e0.container.image:
        how = (words(mine.image_exec) if e.container.runtime == "exec" else
               " ".join(getattr(f, "text", f).replace("${SLURM_JOB_ID}", "$SLURM_JOB_ID") for f in mine.container
                        if not str(f).startswith("--container-mounts=")))
        out.append(f"image of {cp.modes[i]}: {e.container.image or '(none: the nodes own environment)'} ({how})")
    for what, a, b in (("environment of its servers", mine.server_env, first.server_env),
                       ("environment of its router and client", mine.common_env, first.common_env)):
        if a != b:
            added = [x for x in a if x not in b]
            gone = [x.split("=", 1)[0] for x in b if x not in a and x.split("=", 1)[0] not in
                    {y.split("=", 1)[0] for y in a}]
            out.append(f"{what}: " + (" ".join(added) or "-") + (f" (unset: {' '.join(gone)})" if gone else ""))
    if mine.client and first.client and mine.client.lines != first.client.lines:
        out.append(f"client of {cp.modes[i]} ({e.client.profile}): " + words(w for line in mine.client.lines
                                                                          for w in line))
    if i in cp.software_checks and plan.preflight:
        out.append(f"preflight again in the image and environment of {cp.modes[i]}: imports "
                   + ", ".join(mine.modules + mine.client_modules) + f" (reports {RELATIVE.preflight_report('<node>@' + cp.modes[i])})")
    return out


def _time(plan: JobPlan) -> str:
    """The job's --time as submitted (fitted to the estimate with cluster.time_limit = "auto")."""
    return next((o.split("=", 1)[1] for o in sized(plan).sbatch_component if o.startswith("--time=")),
                plan.exp.cluster.time_limit)


def correctness_lines(plan: JobPlan) -> list[str]:
    """The correctness gate's canary and thresholds ([correctness])."""
    c = plan.exp.correctness
    if not (c.enabled and c.prompts):
        return ["correctness canary: off (correctness.enabled = false or prompts = 0): outputs are not checked"]
    first = " ".join(map(str, c.prompt_ids(0)[:4]))
    ref = c.reference or plan.campaign.modes[0]
    return [f"correctness canary (every launch, after the warm-ups and the router): {c.prompts} fixed prompt(s) of "
            f"{c.input_len} token ids (prompt 0 begins {first} ...) at temperature 0 for {c.output_len} tokens, to "
            "every server directly (prefill/decode: through the router); answers compared with the reference "
            f"mode {ref}'s: a prompt with fewer than {c.min_common_prefix} common leading tokens has diverged, an "
            f"empty or missing answer fails, {c.min_exact_match:.0%} exact answers needed; else the launch is invalid"]


def site_lines(plan: JobPlan) -> list[str]:
    """Dry-run lines of what makes the job survive a real site: steps, container, cache, fabric,
    duration and watchdog (issue 20)."""
    e = plan.exp
    out = [f"every srun step: {' '.join(plan.srun_extra) or '(no extra options)'}"
           + (" (cluster.mpi: no PMIx set-up per step)" if e.cluster.mpi else "")]
    if e.container.image and e.container.runtime == "exec":
        out.append(f"container {e.container.image} (container.runtime exec): every step runs as "
                   + words(plan.campaign.software[0].image_exec) + " env ... COMMAND")
    elif e.container.image:
        name = plan.container_name
        how = (f"one container per node, job and het group: --container-name="
               f"{name.replace('${SLURM_JOB_ID}', '$SLURM_JOB_ID')}-<G>, "
               "created by each node's first step (the preflight) and reused by its later steps"
               + (f", removed at the end ({' '.join(e.container.remove_command)} on every node)"
                  if e.container.scope == "global" and e.container.remove_command else
                  ", removed by pyxis' epilog (container_scope=job)")
               if name else "a new container for every step (container.name = \"\")")
        out.append(f"container {e.container.image}: {how}")
        mounts = next((str(f).split("=", 1)[1] for f in plan.container_flags
                       if str(f).startswith("--container-mounts=")), "")
        out.append(f"  mounts: {mounts.replace(',', ', ')}")
    g = plan.guards
    if g.sweep and (g.container_prefix or (plan.cache and plan.cache.per_job)):
        what = " and ".join(x for x in (f"containers {g.container_prefix}<id>-<G>" if g.container_prefix else "",
                                         f"cache directories {plan.cache.base}/slurm-ab-<id>"
                                         if plan.cache and plan.cache.per_job else "") if x)
        out.append(f"sweep (cluster.sweep_stale): before the preflight, every node removes this user's {what} "
                   "of jobs Slurm no longer lists (what a cancelled or failed job could not remove)")
    if plan.cache:
        where = f"{plan.cache.base}/slurm-ab-$SLURM_JOB_ID" if plan.cache.per_job else plan.cache.base
        out.append(f"cache directory {where} on every node (preflight: created and written; "
                   f"{'removed at the end' if plan.cache.per_job else 'kept'}); every step runs with "
                   + " ".join(v.text.replace("${CACHE_DIR}", "$CACHE_DIR") for v in plan.cache.env))
    if e.cluster.nccl_network:
        out.append(f"fabric: every rank's NCCL must use network {e.cluster.nccl_network} (cluster.nccl_network: "
                   f"{', '.join(e.cluster.nccl_names)}); the job checks NCCL's 'Using network' lines once "
                   "the servers are ready")
    d = plan.duration
    given = parse_time(_time(plan))
    short = " -- SHORTER than the estimate (estimate.enforce = false): Slurm may stop the job part-way" \
        if given is not None and given < d.limit_s else ""
    out.append(f"duration estimate: {d.text}; time limit {_time(plan)}{short}"
               + (f" ({d.limit_note})" if d.limit_note else ""))
    out += [f"WARNING: {w}" for w in d.warnings]
    blocks = plan.time_blocks
    if blocks:
        ends = [b[0] - 1 for b in blocks[1:]] + [len(plan.campaign.launches)]
        out.append("blocks: " + ", ".join(f"launches {first}-{end} ~{secs} s" for (first, secs), end in
                                          zip(blocks, ends))
                   + f"; a block starts only when the time left (squeue, less {plan.time_reserve_s} s for the "
                   "early stops) covers it, and its launches at the pace of the slowest block run so far: a "
                   "campaign out of time stops at a block boundary")
    out += observe_lines(plan)
    wd = e.watchdog
    out.append(f"watchdog: a pass fails when it runs longer than {wd.pass_factor:g} x its estimate"
               + (f", or when a server finishes no request for {plan.watch_stall_s} s while requests are in "
                  f"flight ({wd.progress_metric} in its /metrics; in flight: "
                  + "; ".join(f"{k} {' + '.join(v) or 'nothing'}" for k, v in plan.guards.inflight_metrics) + ")"
                  if plan.watch_stall_s else ""))
    return out


def observe_lines(plan: JobPlan) -> list[str]:
    """Dry-run lines of the telemetry samplers and the profiles (issue 34)."""
    from ..model.rundir import RELATIVE

    t, e = plan.telemetry, plan.exp
    tc = e.telemetry
    if t is None:
        out = ["telemetry: none (telemetry.source = \"none\": no energy, clocks or host figures)"]
    else:
        out = [f"telemetry ({t.source}, every {tc.interval_ms} ms): a step on every node of each launch "
               f"(srun {' '.join(t.step)}), from its servers' start to its teardown: {words(t.gpu_command)}"
               + (f"; it starts the exporter {words(t.exporter)} first" if t.exporter else "")
               + f" -> <launch>/{RELATIVE.gpu_samples('<G>', '<R>')}",
               (f"  host sampler on ROUTER_HOST every {tc.host_interval_ms} ms -> <launch>/" + str(RELATIVE.host_samples) + ": "
                + (words(t.host_command[:2]) + " ... " + t.host_command[-1] if t.host_command else ""))
               if t.host_command else "  host sampler: off (telemetry.host = false)",
               f"  rules: a pass's energy is invalid when a node's samples are more than {tc.max_gap_s:g} s apart; "
               f"a node {tc.low_clock_pct:g} % below its peers' busy SM clock or {tc.low_power_pct:g} % below their "
               f"busy power per GPU is named; a client process wanting {tc.client_busy_pct:g} % of a core is flagged"]
    pp = plan.profile
    if pp is None:
        return out
    for launch in plan.campaign.launches:
        for ps in launch.passes:
            if not ps.profile:
                continue
            bodies = dict(pp.bodies[launch.server])
            out.append(f"profile: pass {ps.key} of launch {launch.index} ({launch.mode}), left out of every statistic: "
                       "POST /start_profile to every head as it starts ("
                       + "; ".join(f"{r}: {b}" for r, b in bodies.items())
                       + f", with output_dir {launch.dir}/{RELATIVE.profile_dir(ps.key)}, profile_id {ps.key}, "
                       "profile_prefix r<G>), /stop_profile when it ends")
    if pp.nsys:
        out.append(f"nsys around every server step: {words(pp.nsys)} -o <launch>/{RELATIVE.nsys_report('<G>', '%q{SLURM_NODEID}')} "
                   "(needs nsys on every node; the local testbed has none, so this runs only on a real site)")
    return out
