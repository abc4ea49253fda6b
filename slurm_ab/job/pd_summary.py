"""Dry-run lines of a prefill/decode (PD) mode: its roles, bootstrap addresses, each role instance's
command and the steps that prove every prefill/decode pair before the benchmark (render.summary;
campaign_plan.campaign_summary for a PD mode that is not the job's first)."""
from __future__ import annotations

from . import pd_plan
from ..model.experiment import Experiment
from .plan import JobPlan, Replica
from .shell import words


def name(r: Replica) -> str:
    """How a component is shown: "replica 1", or "prefill 0 (het group 0)"."""
    return f"replica {r.index}" if r.role is None else f"{r.role} {r.instance} (het group {r.index})"


def components(plan: JobPlan) -> tuple[str, ...]:
    """The component line of a PD job's summary, then its roles."""
    c = plan.exp.cluster
    return (f"components: {len(plan.replicas)} (one per role instance: "
            + ", ".join(f"{r.role} {r.instance} x {r.nodes} nodes" for r in plan.replicas)
            + f"), {c.gpus_per_node} GPUs per node, partition {c.partition}, time "
            + next((o.split("=", 1)[1] for o in plan.sbatch_component if o.startswith("--time=")), c.time_limit),
            *roles(plan.exp))


def roles(e: Experiment) -> list[str]:
    """Each role's instances and parallelism, and the site's KV transfer."""
    gpus = e.cluster.gpus_per_node
    out = [f"role {r.name}: {r.instances} instance(s) x {r.nodes} nodes, TP{r.tp} / PP{r.pp} / EP{r.ep} over "
           f"{r.nodes * gpus} GPUs, --disaggregation-mode {r.name}" for r in e.mode.roles]
    out.append(f"KV transfer: --disaggregation-transfer-backend {e.pd.transfer_backend}"
               + (f" --disaggregation-ib-device {e.pd.ib_device}" if e.pd.ib_device else
                  " (IB devices: SGLang's auto discovery)")
               + "; both roles' environment: " + (" ".join(f"{k}={v}" for k, v in e.pd.env) or "(none)"))
    return out


def bootstrap(plan: JobPlan, e: Experiment | None = None) -> list[str]:
    """Where each prefill's bootstrap server listens, and what the router is told."""
    e = e or plan.exp
    stride, slot = e.ports.replica_stride, plan.job_slot_size
    return [f"KV bootstrap of prefill {c.instance}: $R{c.group}_ADDR:$R{c.group}_BOOT = its head, port "
            f"{e.ports.bootstrap + c.group * stride} + slot*{slot} (the router's --prefill URL, the dist-init host "
            f"and the bootstrap host are one address: the other ranks register there)"
            for c in e.components if c.role == "prefill"]


def role_server(plan: JobPlan, r: Replica) -> str:
    """A role instance's command as the job runs it (its role's environment first)."""
    cmd = dict(plan.campaign.roles[0])[r.role]
    text = words(list(cmd.env) + [w for line in cmd.lines for w in line])
    return text + (f' --disaggregation-bootstrap-port "$R{r.index}_BOOT"' if r.role == "prefill" else "")


def pair_steps(e: Experiment) -> list[str]:
    """The roles check, the bootstrap registries, each pair's KV canary and warm-up."""
    names = {c.group: f"{c.role} {c.instance}" for c in e.components}
    out = ["  roles: GET /server_info of every head: its disaggregation_mode is its role, page_size and "
           "kv_cache_dtype the same on all; then each prefill's GET $R<g>_ADDR:$R<g>_BOOT/route (-1 "
           "wildcards) answers 200 (every rank registered)"]
    for p, d in pd_plan.pairs(e):
        fields = f"bootstrap_host $R{p}_ADDR, bootstrap_port $R{p}_BOOT, a random bootstrap_room"
        out.append(f"  KV canary {names[p]} -> {names[d]}: POST /generate to both at once ({fields}) "
                   f"{{4 tokens, max_new_tokens: 2}}; the decode returns 2 tokens within {e.pd.canary_timeout_s} s")
        out.append(f"  warm-up {names[p]} -> {names[d]}: the same with {{input_ids: {e.warmup.input_len} x "
                   f"{e.warmup.token_id}, max_new_tokens: {e.warmup.output_len}}}")
    return out


def campaign_lines(plan: JobPlan) -> list[str]:
    """The PD modes of a job after its first mode (whose summary render.summary gives): their
    roles, bootstrap ports, pair steps and router."""
    cp = plan.campaign
    out = []
    for i, e in enumerate(cp.experiments):
        if i == 0 or not e.mode.roles:
            continue
        out.append(f"  {e.mode.name} launches: het groups " + ", ".join(
            f"{c.group} = {c.role} {c.instance}" for c in e.components))
        out += [f"    {x}" for x in roles(e) + bootstrap(plan, e)]
        out += [f"  {x}" for x in pair_steps(e)]
        out.append(f"    router of {e.mode.name}: " + words(w for line in cp.routers[i].lines for w in line))
    return out
