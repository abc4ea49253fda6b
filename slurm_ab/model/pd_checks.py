"""Checks of a prefill/decode (PD) mode before anything is written: its roles, the site's KV
transfer ([pd]), the router's per-role policies, and the cross-role rules SGLang checks only at the
first handshake, or never (shared/research/pd-disaggregation.md sections 1.3-1.4; SGLang 0.5.23).

Each error names the key, the value and the rule with where SGLang applies it; the flags are
checked after merging ([server.args] < the mode's args < the role's), as the servers get them.
"""
from __future__ import annotations

import re
from typing import Any

from .config import Tree
from .errors import ConfigError
from .experiment import merge_flags

ROLES = ("prefill", "decode")
# --disaggregation-transfer-backend's choices in SGLang 0.5.23 (arg_groups/choices.py) but "fake",
# which a prefill server refuses ("Prefill server does not support 'fake' as the transfer backend",
# pd_disaggregation_hook.py) and which moves no KV.
TRANSFER_BACKENDS = ("mooncake", "nixl", "mori", "ascend", "mooncake_tcp")
IB_DEVICES = re.compile(r"[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*")
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

# Flags whose value must be the same on both roles, and why (SGLang 0.5.23 unless said).
SAME_ON_BOTH = {
    "page-size": 'the decode refuses the prefill at the first handshake: "Page size mismatch" '
                 "(disaggregation/common/conn.py)",
    "kv-cache-dtype": 'the decode refuses the prefill at the first handshake: "KV cache dtype mismatch" '
                      "(disaggregation/common/conn.py)",
    "context-length": "a decode with a longer context accepts prompts its prefill refuses; those requests "
                      "wait for KV that never comes (InferenceX server_sglang.sh)",
    "disaggregation-decode-allocation-policy": 'its --help: "Set the same policy on both roles"',
    "disaggregation-enable-kv-checksum": 'its --help: "Enable on both prefill and decode engines"',
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
# Flags slurm-ab writes for every role instance.
DERIVED = {
    "disaggregation-mode": "the role ([modes.<mode>.roles.<role>])",
    "disaggregation-bootstrap-port": "ports.bootstrap (each prefill instance's own port)",
    "disaggregation-transfer-backend": "pd.transfer_backend",
    "disaggregation-ib-device": "pd.ib_device",
}
# Spellings SGLang 0.5.23 takes for something else than public PD recipes mean (parser-checked).
TRAPS = {
    "cuda-graph-max-bs": ("ambiguous in SGLang 0.5.23 (could match --cuda-graph-max-bs-decode, "
                          "--cuda-graph-max-bs-prefill): the server exits", "cuda-graph-max-bs-decode"),
    "cuda-graph-bs": ("ambiguous in SGLang 0.5.23 (could match --cuda-graph-bs-decode, "
                      "--cuda-graph-bs-prefill): the server exits", "cuda-graph-bs-decode"),
    "prefill-only": ("SGLang 0.5.23 reads it as --prefill-only-disable-kv-cache (a prefix) and stays "
                     "a non-PD server", "the role's table sets --disaggregation-mode"),
    "decode-only": ("not a flag of SGLang 0.5.23 (unrecognized arguments)",
                    "the role's table sets --disaggregation-mode"),
}


def is_pd(mode_table: dict) -> bool:
    return bool(mode_table.get("roles"))


def role_flags(tree: Tree, mode: str, role: str) -> dict[str, Any]:
    m = tree["modes"][mode]
    base = merge_flags(tuple(tree["server"]["args"].items()), tuple(m.get("args", {}).items()))
    return dict(merge_flags(base, tuple(m["roles"].get(role, {}).get("args", {}).items())))


def _where(tree: Tree, mode: str, role: str, flag: str) -> str:
    """The key a role's flag comes from (the most specific table that sets it)."""
    m = tree["modes"][mode]
    if flag in m["roles"].get(role, {}).get("args", {}):
        return f"modes.{mode}.roles.{role}.args.{flag}"
    if flag in m.get("args", {}):
        return f"modes.{mode}.args.{flag}"
    return f"server.args.{flag}"


def check(tree: Tree, mode: str, reserved: dict, ambiguous: dict) -> list[ConfigError]:
    """Every rule of a PD mode; [] for a mode of identical replicas. reserved / ambiguous: the
    flags slurm-ab writes itself and SGLang's ambiguous prefixes (validate.py's tables)."""
    m = tree["modes"][mode]
    if not is_pd(m):
        return []
    key = f"modes.{mode}"
    errs = [ConfigError(f"{key}.{k}", m[k], "a PD mode's parallelism is per role",
                        f"set it in [{key}.roles.prefill] and [{key}.roles.decode]")
            for k in ("tp", "pp", "ep") if k in m]
    missing = [r for r in ROLES if r not in m["roles"]]
    if missing:
        return errs + [ConfigError(f"{key}.roles.{r}", None, "missing: a PD mode has a prefill and a decode role",
                                   "instances, nodes, tp, pp, ep, args, env") for r in missing]
    shape = _role_shapes(tree, mode)
    errs += shape
    errs += _flag_rules(tree, mode, reserved, ambiguous)
    if not shape:
        errs += _parallel_rules(tree, mode)
    errs += _router_rules(tree, mode)
    errs += _bench_rules(tree, mode)
    return errs


def site_checks(tree: Tree) -> list[ConfigError]:
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
    for k, v in pd["env"].items():
        if k in tree["server"]["env"]:
            errs.append(ConfigError(f"pd.env.{k}", v, "also set in [server.env]", "set it in one place"))
    return errs


def _role_shapes(tree: Tree, mode: str) -> list[ConfigError]:
    """Instances, nodes and parallelism of each role (ServerArgs: world size = nodes x GPUs)."""
    gpus = tree["cluster"]["gpus_per_node"]
    errs = []
    for role in ROLES:
        r, key = tree["modes"][mode]["roles"][role], f"modes.{mode}.roles.{role}"
        bad = False
        for k in ("instances", "nodes", "tp", "pp", "ep"):
            if k not in r:
                errs.append(ConfigError(f"{key}.{k}", None, "missing", "a positive integer"))
                bad = True
            elif r[k] < 1:
                errs.append(ConfigError(f"{key}.{k}", r[k], "must be >= 1"))
                bad = True
        if bad:
            continue
        if r["tp"] * r["pp"] != r["nodes"] * gpus:
            errs.append(ConfigError(f"{key}.tp", r["tp"], f"TP x PP = {r['tp']} x {r['pp']} = {r['tp'] * r['pp']} must "
                                    f"equal nodes x GPUs per node = {r['nodes']} x {gpus} = {r['nodes'] * gpus}"))
        if r["tp"] % r["ep"]:
            errs.append(ConfigError(f"{key}.ep", r["ep"], f"TP ({r['tp']}) must be divisible by EP",
                                    f"a divisor of {r['tp']}"))
    return errs


def _flag_rules(tree: Tree, mode: str, reserved: dict, ambiguous: dict) -> list[ConfigError]:
    """Flags slurm-ab derives, spelling traps, and the values both roles must share."""
    m = tree["modes"][mode]
    errs = []
    tables = [(f"modes.{mode}.roles.{r}.args", m["roles"][r].get("args", {})) for r in ROLES]
    tables += [(f"modes.{mode}.args", m.get("args", {})), ("server.args", tree["server"]["args"])]
    for table, flags in tables:
        for flag, v in flags.items():
            if flag in DERIVED:
                errs.append(ConfigError(f"{table}.{flag}", v, "set by slurm-ab for every role instance",
                                        DERIVED[flag]))
            elif flag in TRAPS:
                errs.append(ConfigError(f"{table}.{flag}", v, TRAPS[flag][0], TRAPS[flag][1]))
            elif table.endswith(".roles.prefill.args") or table.endswith(".roles.decode.args"):
                if flag in ambiguous:
                    errs.append(ConfigError(f"{table}.{flag}", v, "ambiguous in SGLang's argparse",
                                            "pp-size (set it with the role's pp)"))
                elif flag in reserved:
                    errs.append(ConfigError(f"{table}.{flag}", v, "set by slurm-ab, not as a flag",
                                            "the role's tp/pp/ep and nodes, the job's hosts and ports"))
    flags = {r: role_flags(tree, mode, r) for r in ROLES}
    for flag, why in SAME_ON_BOTH.items():
        p, d = flags["prefill"].get(flag), flags["decode"].get(flag)
        if p != d:
            where = _where(tree, mode, "decode" if flag in flags["decode"] else "prefill", flag)
            errs.append(ConfigError(where, d if flag in flags["decode"] else p,
                                    f"{flag} differs between the roles (prefill {_show(p)}, decode {_show(d)}): {why}",
                                    f"the same value on both roles: set it in [modes.{mode}.args]"))
    for role in ROLES:
        f = flags[role]
        algo = str(f.get("speculative-algorithm") or "")
        draft = f.get("speculative-draft-model-path", f.get("speculative-draft-model", ""))
        if algo and algo.upper() != "NGRAM" and not draft:
            errs.append(ConfigError(f"modes.{mode}.args.speculative-draft-model-path", draft,
                                    f"speculative algorithm {algo} needs a draft model",
                                    'a path, e.g. "{paths.draft_model}"'))
            break
    for role in ROLES:
        v = flags[role].get("mem-fraction-static")
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1):
            errs.append(ConfigError(_where(tree, mode, role, "mem-fraction-static"), v,
                                    "must be a number strictly between 0 and 1"))
    policy = flags["decode"].get("disaggregation-decode-allocation-policy")
    if policy == "prefill_complete" and tree["pd"]["transfer_backend"] not in ("mooncake", "mooncake_tcp"):
        errs.append(ConfigError("pd.transfer_backend", tree["pd"]["transfer_backend"],
                                "--disaggregation-decode-allocation-policy prefill_complete does not yet support "
                                "transfer backends other than Mooncake (pd_disaggregation_hook.py)",
                                "mooncake, or the early policy"))
    return errs


def _parallel_rules(tree: Tree, mode: str) -> list[ConfigError]:
    """Decode PP = prefill PP or 1 (checked at the handshake, common/conn.py); speculative decoding
    with PP > 1 only on a prefill (validation_hook.py); DFLASH never with PP > 1."""
    roles = tree["modes"][mode]["roles"]
    p_pp, d_pp = roles["prefill"]["pp"], roles["decode"]["pp"]
    errs = []
    if d_pp not in (1, p_pp):
        errs.append(ConfigError(f"modes.{mode}.roles.decode.pp", d_pp,
                                f'"Decode pp size ({d_pp}) should be equal to prefill pp size ({p_pp}) or 1": the '
                                "decode refuses the prefill at the first handshake (disaggregation/common/conn.py)",
                                f"1 or {p_pp}"))
    for role in ROLES:
        f = role_flags(tree, mode, role)
        algo = str(f.get("speculative-algorithm") or "").upper()
        pp = roles[role]["pp"]
        if not algo or pp == 1:
            continue
        if algo == "DFLASH":
            errs.append(ConfigError(f"modes.{mode}.roles.{role}.pp", pp, "DFLASH speculative decoding only "
                                    "supports pp_size == 1 (SGLang refuses it)", "1"))
        elif role == "decode":
            errs.append(ConfigError(f"modes.{mode}.roles.decode.pp", pp, '"PP + speculative decoding (MTP) is only '
                                    'supported on prefill nodes" (validation_hook.py)', "1"))
    f = role_flags(tree, mode, "decode")
    if f.get("disaggregation-decode-allocation-policy") == "prefill_complete":
        for role in ROLES:
            rf = role_flags(tree, mode, role)
            dp = rf.get("attn-dp-size") or (rf.get("dp-size") if rf.get("enable-dp-attention") else 1) or 1
            tp = roles[role]["tp"]
            if isinstance(dp, int) and tp // max(dp, 1) > 1:
                errs.append(ConfigError(f"modes.{mode}.roles.{role}.tp", tp, "--disaggregation-decode-allocation-"
                                        "policy prefill_complete does not yet support attention tensor parallelism "
                                        "greater than one (pd_disaggregation_hook.py)",
                                        "attention DP = TP, or the early policy"))
    return errs


def _router_rules(tree: Tree, mode: str) -> list[ConfigError]:
    """The per-role policies exist in the router profile's parser; power_of_two needs two workers."""
    prof_name = tree["router"]["profile"]
    prof = tree["router_profiles"].get(prof_name, {})
    r = tree["modes"][mode].get("router", {})
    roles = tree["modes"][mode]["roles"]
    errs = []
    for role in ROLES:
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
        elif policy == "power_of_two" and roles[role].get("instances", 0) < 2:
            errs.append(ConfigError(f"modes.{mode}.router.{k}", policy, f'"Power-of-two policy for {role} requires at '
                                    f'least 2 {role} workers" (the router refuses it)',
                                    f"round_robin, or {role} instances >= 2"))
    return errs


def _bench_rules(tree: Tree, mode: str) -> list[ConfigError]:
    """The benchmark's and the warm-up's requests fit both roles' context length."""
    b, w = tree["benchmark"], tree["warmup"]
    errs = []
    for role in ROLES:
        ctx = role_flags(tree, mode, role).get("context-length")
        if not isinstance(ctx, int) or isinstance(ctx, bool):
            continue
        for what, total in (("benchmark", b["input_len"] + b["output_len"]),
                            ("warmup", w["input_len"] + w["output_len"])):
            if total > ctx:
                errs.append(ConfigError(f"{what}.input_len", tree[what]["input_len"],
                                        f"input + output = {total} tokens exceeds the {role} role's context "
                                        f"length {ctx}", f"<= {ctx} ({_where(tree, mode, role, 'context-length')})"))
    return errs


def notices(exp) -> list[str]:
    """What a user of a valid PD mode should know (dry-run prints these)."""
    if not exp.mode.roles:
        return []
    out = []
    decode = dict(exp.role_flags("decode"))
    mrr = decode.get("max-running-requests")
    if isinstance(mrr, int) and mrr < exp.benchmark.concurrency:
        out.append(f"decode max-running-requests {mrr} < benchmark.concurrency {exp.benchmark.concurrency}: "
                   "requests queue in the decode's prealloc queue, TTFT includes that wait")
    for role in ROLES:
        if "max-queued-requests" in dict(exp.role_flags(role)):
            out.append(f"{role}: --max-queued-requests is ignored by SGLang with --disaggregation-mode "
                       "(its --help)")
    return out


def _show(v) -> str:
    return "unset" if v is None else repr(v)
