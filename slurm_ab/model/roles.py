"""The rules of a mode's roles: ONE table applied to every role of every mode (an ordinary mode's
`server` role, a PD mode's prefill and decode), then the rules between a PD mode's roles and its
router's per-role policies. SGLang 0.5.23's own refusals and the rules it checks only at a pair's
first handshake, or never (shared/research/pd-disaggregation.md sections 1.3-1.4).

Each error names the key, the value and the rule; a role's flags are checked as its servers get
them: [server.args] < the mode's args < the role's own (Experiment.role_flags, read from the
validated tree before the model is built). A flag of a table every role shares is reported once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .config import Tree
from .errors import ConfigError
from .experiment import PD_KINDS, merge_flags

SIZE = ("instances", "nodes", "tp", "pp", "ep")
# Flags slurm-ab writes itself from the role, the job's hosts and ports.
RESERVED_FLAGS = {
    "tp-size": "<tp>", "tensor-parallel-size": "<tp>", "tp": "<tp>",
    "pp-size": "<pp>", "pipeline-parallel-size": "<pp>",
    "ep-size": "<ep>", "expert-parallel-size": "<ep>", "ep": "<ep>",
    "nnodes": "<nodes>", "node-rank": "the Slurm node id",
    "dist-init-addr": "the instance's first node and ports.dist_init", "nccl-init-addr": "the instance's first node",
    "host": "0.0.0.0 (servers must be reachable from the router)", "port": "ports.server",
    "model-path": "paths.model", "model": "paths.model",
    # PD flags slurm-ab derives from the role's kind and the site ([pd])
    "disaggregation-mode": "the role's kind ([modes.<mode>.roles.<kind>])",
    "disaggregation-bootstrap-port": "ports.bootstrap (each prefill instance's own port)",
    "disaggregation-transfer-backend": "pd.transfer_backend",
    "disaggregation-ib-device": "pd.ib_device",
    "disaggregation-enable-kv-checksum": "pd.kv_checksum (both roles: its --help says \"Enable on both prefill and "
                                         "decode engines\")",
}
# Spellings SGLang 0.5.23's argparse takes for something else than they seem to mean (parser-checked:
# argparse prefixes; 0.5.23 split the CUDA-graph flags per phase).
TRAPS = {
    "pp": ("ambiguous in SGLang's argparse", "pp-size (set it with <pp>)"),
    "cuda-graph-max-bs": ("ambiguous in SGLang 0.5.23 (could match --cuda-graph-max-bs-decode, "
                          "--cuda-graph-max-bs-prefill): the server exits", "cuda-graph-max-bs-decode"),
    "cuda-graph-bs": ("ambiguous in SGLang 0.5.23 (could match --cuda-graph-bs-decode, "
                      "--cuda-graph-bs-prefill): the server exits", "cuda-graph-bs-decode"),
    "prefill-only": ("SGLang 0.5.23 reads it as --prefill-only-disable-kv-cache (a prefix) and stays "
                     "a non-PD server", "a prefill role ([modes.<mode>.roles.prefill])"),
    "decode-only": ("not a flag of SGLang 0.5.23 (unrecognized arguments)",
                    "a decode role ([modes.<mode>.roles.decode])"),
}
NO_DRAFT_NEEDED = {"NGRAM"}
# Flags whose value must be the same on both roles of a PD mode, and why (SGLang 0.5.23 unless said).
SAME_ON_BOTH = {
    "page-size": 'the decode refuses the prefill at the first handshake: "Page size mismatch" '
                 "(disaggregation/common/conn.py)",
    "kv-cache-dtype": 'the decode refuses the prefill at the first handshake: "KV cache dtype mismatch" '
                      "(disaggregation/common/conn.py)",
    "context-length": "a decode with a longer context accepts prompts its prefill refuses; those requests "
                      "wait for KV that never comes (InferenceX server_sglang.sh)",
    "disaggregation-decode-allocation-policy": 'its --help: "Set the same policy on both roles"',
    "speculative-algorithm": "speculative decoding runs on both roles or neither: the decode receives the "
                             'draft state with the KV ("state component count mismatch", mori/conn.py; '
                             "InferenceX server_sglang.sh)",
    "speculative-draft-model-path": "both roles must run the same draft model",
    "speculative-num-draft-tokens": "both roles must use the same speculative configuration",
    "speculative-num-steps": "both roles must use the same speculative configuration",
    "speculative-eagle-topk": "both roles must use the same speculative configuration",
    "speculative-dflash-block-size": "both roles must use the same speculative configuration",
    "speculative-draft-kv-cache-dtype": "both roles must use the same speculative configuration",
}


@dataclass(frozen=True)
class RoleTables:
    """One role of a mode as the rules read it from the tree: where each key is written."""

    mode: str
    kind: str
    key: str                                    # modes.<M> (an ordinary mode) or modes.<M>.roles.<kind>
    size: tuple[tuple[str, str, Any], ...]      # (name, key, value) of instances, nodes, tp, pp, ep
    layers: tuple[tuple[str, dict], ...]        # (table key, flags): [server.args] first, the role's last

    @property
    def flags(self) -> dict[str, Any]:
        merged: tuple = ()
        for _, flags in self.layers:
            merged = merge_flags(merged, tuple(flags.items()))
        return dict(merged)

    def value(self, name: str) -> Any:
        return next(v for n, _, v in self.size if n == name)

    def size_key(self, name: str) -> str:
        return next(k for n, k, _ in self.size if n == name)

    def fill(self, text: str) -> str:
        """An allowed-values text with <tp>, <nodes>, ... replaced by this role's keys."""
        for name in SIZE:
            text = text.replace(f"<{name}>", self.size_key(name))
        return text.replace("<mode>", self.mode)

    def where(self, flag: str) -> str:
        """The key a flag comes from: the most specific table that sets it."""
        return next((f"{t}.{flag}" for t, flags in reversed(self.layers) if flag in flags), f"server.args.{flag}")

    @property
    def own(self) -> bool:
        """Its size has tables of its own (a PD role) rather than experiment.replicas/nodes_per_replica."""
        return self.kind != "server"


def role_tables(tree: Tree, mode: str) -> tuple[RoleTables, ...]:
    """Every role of a mode: a PD mode's [roles.prefill] and [roles.decode], else its one server role."""
    m, key = tree["modes"][mode], f"modes.{mode}"
    shared = (("server.args", tree["server"]["args"]), (f"{key}.args", m.get("args", {})))
    if not m.get("roles"):
        exp = tree["experiment"]
        size = (("instances", "experiment.replicas", exp["replicas"]),
                ("nodes", "experiment.nodes_per_replica", exp["nodes_per_replica"]),
                *((k, f"{key}.{k}", m.get(k)) for k in ("tp", "pp", "ep")))
        return (RoleTables(mode, "server", key, size, shared),)
    out = []
    for kind in PD_KINDS:
        r = m["roles"].get(kind)
        if isinstance(r, dict):
            rk = f"{key}.roles.{kind}"
            out.append(RoleTables(mode, kind, rk, tuple((k, f"{rk}.{k}", r.get(k)) for k in SIZE),
                                  shared + ((f"{rk}.args", r.get("args", {})),)))
    return tuple(out)


# ---- the rule table: every rule applies to every role ---------------------------------------------

def _size(r: RoleTables, tree: Tree) -> list[ConfigError]:
    """Instances, nodes and parallelism are positive integers."""
    errs = []
    for name, key, v in r.size:
        if v is None:
            errs.append(ConfigError(key, None, "missing", "a positive integer"))
        elif v < 1:
            errs.append(ConfigError(key, v, "must be >= 1"))
        elif key == "experiment.replicas" and v < 2:
            # the job is one Slurm heterogeneous job, a component per instance: a job of one
            # component is not heterogeneous (no SLURM_JOB_NODELIST_HET_GROUP_0, no --het-group)
            errs.append(ConfigError(key, v, "must be >= 2: the job runs one het component per replica "
                                             "(a one-replica job is not heterogeneous)", "2 or more"))
    return errs


def _world(r: RoleTables, tree: Tree) -> list[ConfigError]:
    """ServerArgs: TP x PP GPUs = the instance's nodes x GPUs per node; EP divides TP."""
    tp, pp, ep, nodes, gpus = (r.value("tp"), r.value("pp"), r.value("ep"), r.value("nodes"),
                               tree["cluster"]["gpus_per_node"])
    errs = []
    what = "nodes" if r.own else "nodes per replica"
    if tp * pp != nodes * gpus:
        errs.append(ConfigError(r.size_key("tp"), tp, f"TP x PP = {tp} x {pp} = {tp * pp} must equal {what} x GPUs "
                                f"per node = {nodes} x {gpus} = {nodes * gpus}"))
    if tp % ep:
        errs.append(ConfigError(r.size_key("ep"), ep, f"TP ({tp}) must be divisible by EP", f"a divisor of {tp}"))
    return errs


def _flag_names(r: RoleTables, tree: Tree) -> list[ConfigError]:
    """Flags slurm-ab writes itself, and spellings SGLang reads as something else."""
    errs = []
    for table, flags in r.layers:
        for flag, v in flags.items():
            if flag in TRAPS:
                why, allowed = TRAPS[flag]
                errs.append(ConfigError(f"{table}.{flag}", v, why, r.fill(allowed)))
            elif flag in RESERVED_FLAGS:
                derived = flag.startswith("disaggregation-")
                errs.append(ConfigError(f"{table}.{flag}", v, "set by slurm-ab for every role instance" if derived
                                        else "set by slurm-ab, not as a flag",
                                        r.fill(RESERVED_FLAGS[flag])))
    return errs


def _speculative(r: RoleTables, tree: Tree) -> list[ConfigError]:
    """A draft model when the algorithm needs one; DFLASH only with PP 1; other speculation with
    PP > 1 only on a prefill (validation_hook.py: "PP + speculative decoding (MTP) is only supported
    on prefill nodes")."""
    f = r.flags
    algo = str(f.get("speculative-algorithm") or "")
    if not algo:
        return []
    errs = []
    draft = f.get("speculative-draft-model-path", f.get("speculative-draft-model", ""))
    if algo.upper() not in NO_DRAFT_NEEDED and not draft:
        errs.append(ConfigError(r.where("speculative-draft-model-path"), draft,
                                f"speculative algorithm {algo} needs a draft model", 'a path, e.g. "{paths.draft_model}"'))
    pp = r.value("pp")
    if algo.upper() == "DFLASH" and pp > 1:
        errs.append(ConfigError(r.size_key("pp"), pp, "DFLASH speculative decoding only supports pp_size == 1 "
                                "(SGLang refuses it)", "1"))
    elif pp > 1 and r.kind != "prefill":
        errs.append(ConfigError(r.size_key("pp"), pp, '"PP + speculative decoding (MTP) is only supported on '
                                'prefill nodes" (validation_hook.py)', "1"))
    return errs


def _memory(r: RoleTables, tree: Tree) -> list[ConfigError]:
    v = r.flags.get("mem-fraction-static")
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1):
        return [ConfigError(r.where("mem-fraction-static"), v, "must be a number strictly between 0 and 1")]
    return []


def _context(r: RoleTables, tree: Tree) -> list[ConfigError]:
    """The benchmark's and the warm-up's requests fit the role's --context-length."""
    ctx = r.flags.get("context-length")
    if not isinstance(ctx, int) or isinstance(ctx, bool):
        return []
    b, w = tree["benchmark"], tree["warmup"]
    return [ConfigError(f"{what}.input_len", tree[what]["input_len"], f"input + output = {total} tokens exceeds "
                        f"the {r.kind} role's context length {ctx}", f"<= {ctx} ({r.where('context-length')})")
            for what, total in (("benchmark", b["input_len"] + b["output_len"]),
                                ("warmup", w["input_len"] + w["output_len"])) if total > ctx]


Rule = Callable[[RoleTables, Tree], list]
# (rule, needs a valid size): the rule table every role of every mode goes through
RULES: tuple[tuple[Rule, bool], ...] = ((_size, False), (_flag_names, False), (_memory, False), (_context, False),
                                        (_world, True), (_speculative, True))


def check(tree: Tree, mode: str) -> list[ConfigError]:
    """Every rule of every role of the mode, then the rules between a PD mode's roles."""
    m, key = tree["modes"][mode], f"modes.{mode}"
    errs: list[ConfigError] = []
    gpus_bad = tree["cluster"]["gpus_per_node"] < 1
    if gpus_bad:
        errs.append(ConfigError("cluster.gpus_per_node", tree["cluster"]["gpus_per_node"], "must be >= 1"))
    if m.get("roles"):
        errs += [ConfigError(f"{key}.{k}", m[k], "a PD mode's parallelism is per role",
                             f"set it in [{key}.roles.prefill] and [{key}.roles.decode]")
                 for k in ("tp", "pp", "ep") if k in m]
        errs += [ConfigError(f"{key}.roles.{k}", None, "missing: a PD mode has a prefill and a decode role",
                             "instances, nodes, tp, pp, ep, args, env") for k in PD_KINDS if k not in m["roles"]]
        if any(k not in m["roles"] for k in PD_KINDS):
            return errs
    roles = role_tables(tree, mode)
    sized = True
    for r in roles:
        bad = bool(_size(r, tree)) or gpus_bad
        sized = sized and not bad
        errs += [e for rule, needs_size in RULES if not (needs_size and bad) for e in rule(r, tree)]
    if m.get("roles"):
        errs += _between(tree, mode, {r.kind: r for r in roles}, sized)
        errs += _router_rules(tree, mode)
    return list({str(e): e for e in errs}.values())       # a shared table's flag once


# ---- the rules between a PD mode's roles ----------------------------------------------------------

def _between(tree: Tree, mode: str, roles: dict[str, RoleTables], sized: bool) -> list[ConfigError]:
    """Values both roles must share; the decode's PP; the prefill_complete policy's limits."""
    p, d = roles["prefill"], roles["decode"]
    errs = []
    for flag, why in SAME_ON_BOTH.items():
        pv, dv = p.flags.get(flag), d.flags.get(flag)
        if pv != dv:
            where, v = (d.where(flag), dv) if flag in d.flags else (p.where(flag), pv)
            errs.append(ConfigError(where, v, f"{flag} differs between the roles (prefill {_show(pv)}, decode "
                                    f"{_show(dv)}): {why}", f"the same value on both roles: set it in [modes.{mode}.args]"))
    policy = d.flags.get("disaggregation-decode-allocation-policy")
    if policy == "prefill_complete" and tree["pd"]["transfer_backend"] not in ("mooncake", "mooncake_tcp"):
        errs.append(ConfigError("pd.transfer_backend", tree["pd"]["transfer_backend"],
                                "--disaggregation-decode-allocation-policy prefill_complete does not yet support "
                                "transfer backends other than Mooncake (pd_disaggregation_hook.py)",
                                "mooncake, or the early policy"))
    if not sized:
        return errs
    p_pp, d_pp = p.value("pp"), d.value("pp")
    if d_pp not in (1, p_pp):
        errs.append(ConfigError(d.size_key("pp"), d_pp,
                                f'"Decode pp size ({d_pp}) should be equal to prefill pp size ({p_pp}) or 1": the '
                                "decode refuses the prefill at the first handshake (disaggregation/common/conn.py)",
                                f"1 or {p_pp}"))
    if policy == "prefill_complete":
        for r in (p, d):
            f = r.flags
            dp = f.get("attn-dp-size") or (f.get("dp-size") if f.get("enable-dp-attention") else 1) or 1
            tp = r.value("tp")
            if isinstance(dp, int) and tp // max(dp, 1) > 1:
                errs.append(ConfigError(r.size_key("tp"), tp, "--disaggregation-decode-allocation-policy "
                                        "prefill_complete does not yet support attention tensor parallelism greater "
                                        "than one (pd_disaggregation_hook.py)", "attention DP = TP, or the early policy"))
    return errs


def _router_rules(tree: Tree, mode: str) -> list[ConfigError]:
    """The per-role policies exist in the router profile's parser; power_of_two needs two workers."""
    prof_name = tree["router"]["profile"]
    prof = tree["router_profiles"].get(prof_name, {})
    r = tree["modes"][mode].get("router", {})
    roles = tree["modes"][mode]["roles"]
    errs = []
    for role in PD_KINDS:
        k = f"{role}_policy"
        policy = r.get(k, "round_robin")
        known = prof.get(f"{role}_policies") or []
        if not known:
            errs.append(ConfigError(f"router_profiles.{prof_name}.{role}_policies", known,
                                    f"router profile {prof_name} lists no {role} policies: it cannot run a PD mode",
                                    "the policies its --" + role + "-policy accepts"))
        elif policy not in known:
            errs.append(ConfigError(f"modes.{mode}.router.{k}", policy, f"not a {role} policy of router profile "
                                    f"{prof_name}", ", ".join(known)))
        elif policy == "power_of_two" and (roles[role].get("instances") or 0) < 2:
            errs.append(ConfigError(f"modes.{mode}.router.{k}", policy, f'"Power-of-two policy for {role} requires at '
                                    f'least 2 {role} workers" (the router refuses it)',
                                    f"round_robin, or {role} instances >= 2"))
    return errs


def notices(exp) -> list[str]:
    """What a user of a valid mode should know about its roles (dry-run prints these)."""
    out = []
    for r in exp.mode.roles:
        if not r.kind.disaggregation:
            continue
        mrr = exp.flag(r.name, "max-running-requests")
        if r.name == "decode" and isinstance(mrr, int) and mrr < exp.benchmark.concurrency:
            out.append(f"decode max-running-requests {mrr} < benchmark.concurrency {exp.benchmark.concurrency}: "
                       "requests queue in the decode's prealloc queue, TTFT includes that wait")
        if exp.flag(r.name, "max-queued-requests") is not None:
            out.append(f"{r.name}: --max-queued-requests is ignored by SGLang with --disaggregation-mode (its --help)")
    return out


def _show(v) -> str:
    return "unset" if v is None else repr(v)


__all__ = ["RULES", "RoleTables", "check", "notices", "role_tables"]
