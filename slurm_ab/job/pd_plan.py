"""The commands of a prefill/decode (PD) mode: each role's SGLang command and the router in PD mode.

Pure, like plan.py. What SGLang 0.5.23 and the routers take (shared/research/pd-disaggregation.md):
- a server of role R: --disaggregation-mode R, the site's --disaggregation-transfer-backend (and
  --disaggregation-ib-device), the role's own --tp-size/--pp-size/--ep-size and --nnodes; a prefill
  instance also --disaggregation-bootstrap-port (its own, from ports.bootstrap: the job adds it);
  the other ranks of an instance register with <dist-init host>:<bootstrap port>
  (disaggregation/common/conn.py), so the router's prefill URL, the dist-init address and the
  bootstrap host are one address, the instance's head (R<G>_ADDR);
- the router: --pd-disaggregation, one `--prefill URL BOOTSTRAP_PORT` per prefill instance (always
  with its port: without one the router sends bootstrap_port null and each server substitutes its
  own setting, scheduler.py), one `--decode URL` per decode instance (nargs=1 in sglang-router
  0.3.2: two URLs after one flag are "unrecognized arguments"), --prefill-policy and
  --decode-policy (sglang-router 0.3.2 and smg 1.13 take the same flags).
"""
from __future__ import annotations

from ..model.experiment import Experiment
from .shell import Var, flag_words


def role_lines(exp: Experiment, role: str) -> tuple[tuple, ...]:
    """SGLang's command line of every node of one role's instances (the job adds --dist-init-addr,
    --port, --node-rank and, on a prefill, --disaggregation-bootstrap-port)."""
    r = exp.mode.role(role)
    pd = exp.pd
    lines = [
        tuple(exp.commands.server),
        ("--model-path", exp.paths.model),
        ("--tp-size", str(r.tp)), ("--pp-size", str(r.pp)), ("--ep-size", str(r.ep)),
        ("--nnodes", str(r.nodes)),
        ("--host", "0.0.0.0"),
        ("--disaggregation-mode", role),
        ("--disaggregation-transfer-backend", pd.transfer_backend),
    ]
    if pd.ib_device:
        lines.append(("--disaggregation-ib-device", pd.ib_device))
    lines += [tuple(w) for w in flag_words(exp.role_flags(role))]
    return tuple(lines)


def role_env(exp: Experiment, role: str) -> tuple[str, ...]:
    """NAME=VALUE words of one role's servers on top of the job's server environment: [pd.env],
    then the role's env (which wins)."""
    r = exp.mode.role(role)
    return tuple(f"{k}={v}" for k, v in exp.pd.env + (r.env if r else ()))


def router_lines(exp: Experiment) -> tuple[tuple, ...]:
    """The router in PD mode: every prefill with its bootstrap port, every decode, the policies."""
    lines: list[tuple] = [tuple(exp.router.command), ("--pd-disaggregation",)]
    for c in exp.components:
        url = Var(f"http://${{R{c.group}_ADDR}}:${{R{c.group}_PORT}}")
        if c.role == "prefill":
            lines.append(("--prefill", url, Var(f"${{R{c.group}_BOOT}}")))
        else:
            lines.append(("--decode", url))
    policies = dict(exp.mode.router)
    for role in ("prefill", "decode"):
        lines.append((f"--{role}-policy", policies.get(f"{role}_policy", "round_robin")))
    return tuple(lines)


def pairs(exp: Experiment) -> tuple[tuple[int, int], ...]:
    """(prefill group, decode group) of every pair the job proves and warms up."""
    comps = exp.components
    return tuple((p.group, d.group) for p in comps if p.role == "prefill" for d in comps if d.role == "decode")
