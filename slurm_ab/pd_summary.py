"""Dry-run lines of a prefill/decode (PD) mode: its roles, bootstrap addresses, each role instance's
command and the steps that prove every prefill/decode pair before the benchmark (render.summary)."""
from __future__ import annotations

from .plan import JobPlan, Replica
from .shell import words


def name(r: Replica) -> str:
    """How a component is shown: "replica 1", or "prefill 0 (het group 0)"."""
    return f"replica {r.index}" if r.role is None else f"{r.role} {r.instance} (het group {r.index})"


def components(plan: JobPlan) -> tuple[str, ...]:
    e = plan.exp
    c = e.cluster
    out = [f"components: {len(plan.replicas)} (one per role instance: "
           + ", ".join(f"{r.role} {r.instance} x {r.nodes} nodes" for r in plan.replicas)
           + f"), {c.gpus_per_node} GPUs per node, partition {c.partition}, time "
           + next((o.split("=", 1)[1] for o in plan.sbatch_component if o.startswith("--time=")), c.time_limit)]
    for role in e.mode.roles:
        out.append(f"role {role.name}: {role.instances} instance(s) x {role.nodes} nodes, TP{role.tp} / PP{role.pp} / "
                   f"EP{role.ep} over {role.nodes * c.gpus_per_node} GPUs, --disaggregation-mode {role.name}")
    out.append(f"KV transfer: --disaggregation-transfer-backend {e.pd.transfer_backend}"
               + (f" --disaggregation-ib-device {e.pd.ib_device}" if e.pd.ib_device else
                  " (IB devices: SGLang's auto discovery)")
               + "; both roles' environment: " + (" ".join(f"{k}={v}" for k, v in e.pd.env) or "(none)"))
    return tuple(out)


def bootstrap(plan: JobPlan) -> list[str]:
    """Where each prefill's bootstrap server listens, and what the router is told."""
    return [f"KV bootstrap of {r.role} {r.instance}: $R{r.index}_ADDR:$R{r.index}_BOOT (its head; the router's "
            f"--prefill URL, the dist-init host and the bootstrap host are one address: the other ranks "
            f"register there)" for r in plan.replicas if r.role == "prefill"]


def role_server(plan: JobPlan, r: Replica) -> str:
    """A role instance's command as the job runs it (its role's environment first)."""
    cmd = dict(plan.campaign.roles[0])[r.role]
    text = words(list(cmd.env) + [w for line in cmd.lines for w in line])
    return text + (f' --disaggregation-bootstrap-port "$R{r.index}_BOOT"' if r.role == "prefill" else "")


def pair_steps(plan: JobPlan) -> list[str]:
    """The roles check, the bootstrap registry, each pair's KV canary and warm-up."""
    e = plan.exp
    out = ["  roles: GET /server_info of every head: its disaggregation_mode is its role, page_size and "
           "kv_cache_dtype the same on all; then each prefill's GET $R<g>_ADDR:$R<g>_BOOT/route (-1 "
           "wildcards) answers 200 (every rank registered)"]
    reps = {r.index: r for r in plan.replicas}
    for p, d in _pairs(plan):
        pr, dr = reps[p], reps[d]
        fields = f"bootstrap_host $R{p}_ADDR, bootstrap_port $R{p}_BOOT, a random bootstrap_room"
        out.append(f"  KV canary {pr.role} {pr.instance} -> {dr.role} {dr.instance}: POST /generate to both at "
                   f"once ({fields}) {{4 tokens, max_new_tokens: 2}}; the decode returns 2 tokens within "
                   f"{e.pd.canary_timeout_s} s")
        out.append(f"  warm-up {pr.role} {pr.instance} -> {dr.role} {dr.instance}: the same with "
                   f"{{input_ids: {e.warmup.input_len} x {e.warmup.token_id}, max_new_tokens: {e.warmup.output_len}}}")
    return out


def _pairs(plan: JobPlan) -> list[tuple[int, int]]:
    reps = plan.replicas
    return [(p.index, d.index) for p in reps if p.role == "prefill" for d in reps if d.role == "decode"]
