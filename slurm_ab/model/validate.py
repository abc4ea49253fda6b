"""Semantic checks of one mode of the merged configuration, before anything is written.

Every check reports the key, the value and what is allowed; all problems of a config are
reported together (ConfigErrors), so a user fixes them in one round.
"""
from __future__ import annotations

import math
import re

from .campaign import MAX_BLOCKS, MIN_BLOCKS, SPENDING_CHOICES, valid_spending
from .config import Tree, lookup, mode_settings, referenced_keys, resolve_refs
from .errors import ConfigError, ConfigErrors
from . import roles, site_checks, telemetry_checks
from .site_checks import SBATCH_OPTION, SBATCH_VALUE
from .experiment import Experiment, build

GPU_REQUESTS = ("gpus-per-node", "gres", "none")
TIME_LIMIT = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+|UNLIMITED|INFINITE")
PATH_SAFE = re.compile(r"[A-Za-z0-9_.+,@:=/-]+")  # run directory: used in #SBATCH --output (no %)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ADDRESS_MODES = ("name", "nodeaddr", "interface")
MEM = re.compile(r"\d+[KMGT]?")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE_KEY", re.IGNORECASE)
CPU_BIND = re.compile(r"[A-Za-z0-9_,:.=]*")
IFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
HTTP_PATH = re.compile(r"/[A-Za-z0-9_./-]*")


def resolve(tree: Tree, mode: str) -> Experiment:
    """Validate ``mode`` of ``tree`` and return the resolved Experiment, or raise ConfigErrors."""
    modes = tree.get("modes", {})
    if mode not in modes:
        raise ConfigErrors([ConfigError("mode", mode, "unknown mode", ", ".join(sorted(modes)))])
    errors: list[ConfigError] = []
    tree = mode_settings(tree, mode)          # the mode's own image, environment, model, client, router
    modes = tree["modes"]
    bench = tree["benchmark"]
    if bench["dataset"] not in tree["datasets"]:
        errors.append(ConfigError("benchmark.dataset", bench["dataset"], "unknown dataset", ", ".join(sorted(tree["datasets"]))))
        raise ConfigErrors(errors)

    # Only the selected mode and dataset are resolved: another mode's missing draft model is no error.
    pruned = dict(tree, modes={mode: modes[mode]}, datasets={bench["dataset"]: tree["datasets"][bench["dataset"]]})
    errors += _required(pruned, mode)
    try:
        resolved = resolve_refs(pruned, pruned, "")
    except ConfigError as e:
        raise ConfigErrors(errors + [e]) from None
    if errors:
        raise ConfigErrors(errors)
    pd = bool(resolved["modes"][mode].get("roles"))       # prefill/decode roles: the site's KV transfer
    errors += roles.check(resolved, mode) + (site_checks.pd_checks(resolved) if pd else [])
    errors += _site_checks(resolved)
    errors += _bench_checks(resolved)
    errors += _port_checks(resolved, pd)
    errors += _router_checks(resolved)
    errors += _client_checks(resolved)
    errors += _preflight_checks(resolved)
    errors += _correctness_checks(resolved)
    errors += site_checks.check(resolved)
    errors += telemetry_checks.check(resolved)
    if errors:
        raise ConfigErrors(errors)
    site_checks.resolve_image(resolved)
    return build(resolved, mode)


def _required(tree: Tree, mode: str) -> list[ConfigError]:
    """Site values that must be set: always, or because the mode or dataset refers to them."""
    needed = {"cluster.partition": "the Slurm partition", "paths.model": "the model directory"}
    refs = referenced_keys({k: tree["modes"][mode].get(k, {}) for k in ("args", "roles")}) | referenced_keys(
        tree["datasets"][tree["benchmark"]["dataset"]]["args"])
    for ref in sorted(refs):
        if ref.startswith(("paths.", "cluster.", "container.")):
            needed.setdefault(ref, f"used by mode {mode!r} or dataset {tree['benchmark']['dataset']!r}")
    out = []
    for key, why in needed.items():
        try:
            value = lookup(tree, key)
        except KeyError:
            continue
        if value in ("", None):
            out.append(ConfigError(key, value, f"missing required site value ({why})", "set it in the site file or with --set"))
    return out


def _site_checks(tree: Tree) -> list[ConfigError]:
    c = tree["cluster"]
    errs: list[ConfigError] = []
    if c["gpu_request"] not in GPU_REQUESTS:
        errs.append(ConfigError("cluster.gpu_request", c["gpu_request"], "unknown GPU request style", ", ".join(GPU_REQUESTS)))
    if not TIME_LIMIT.fullmatch(c["time_limit"]) and c["time_limit"] != "auto":
        errs.append(ConfigError("cluster.time_limit", c["time_limit"],
                                "not a Slurm time" + (" (did you mean 'auto'?)" if c["time_limit"].strip().lower() == "auto" else ""),
                                "\"auto\" (the default: what the job's estimate needs, at most the partition's "
                                "MaxTime), or a Slurm time that pins the limit: MM, MM:SS, HH:MM:SS, "
                                "D-HH[:MM[:SS]], UNLIMITED"))
    for k in ("partition", "account"):
        if not SBATCH_VALUE.fullmatch(c[k]):
            errs.append(ConfigError(f"cluster.{k}", c[k], "contains characters that cannot stand on an #SBATCH line",
                                    "letters, digits and _ . , : + = @ / % -"))
    for i, opt in enumerate(c["sbatch_extra"]):
        if not SBATCH_OPTION.fullmatch(opt):
            errs.append(ConfigError(f"cluster.sbatch_extra[{i}]", opt, "not a single sbatch option", "--name or --name=value, no spaces or quotes"))
    for i, opt in enumerate(c["srun_extra"]):
        if not opt.startswith("-"):
            errs.append(ConfigError(f"cluster.srun_extra[{i}]", opt, "not an srun option", "starts with -"))
    if c["mem"] and not MEM.fullmatch(c["mem"]):
        errs.append(ConfigError("cluster.mem", c["mem"], "not an sbatch --mem size", "\"0\" (all of each node), e.g. \"500G\", or \"\" for the site default"))
    for key in ("server_cpu_bind", "side_cpu_bind"):
        if not CPU_BIND.fullmatch(c[key]):
            errs.append(ConfigError(f"cluster.{key}", c[key], "not an srun --cpu-bind value", "e.g. none, cores, or \"\" for the site default"))
    for i, opt in enumerate(c["side_step_args"]):
        if not SBATCH_OPTION.fullmatch(opt):
            errs.append(ConfigError(f"cluster.side_step_args[{i}]", opt, "not a single srun option", "--name or --name=value, no spaces or quotes"))
    if c["address"] not in ADDRESS_MODES:
        errs.append(ConfigError("cluster.address", c["address"], "unknown address mode", ", ".join(ADDRESS_MODES)))
    elif c["address"] == "interface" and not IFACE.fullmatch(c["address_interface"]):
        errs.append(ConfigError("cluster.address_interface", c["address_interface"], "not a network interface name",
                                "the interface of the fast network, e.g. ib0"))
    for k in ("ready_timeout_s", "poll_interval_s", "teardown_grace_s", "signal_before_limit_s"):
        if c[k] < 1:
            errs.append(ConfigError(f"cluster.{k}", c[k], "must be >= 1"))
    for k in ("interval_s", "timeout_s"):
        if tree["metrics"][k] < 1:
            errs.append(ConfigError(f"metrics.{k}", tree["metrics"][k], "must be >= 1 (seconds)"))
    for i, name in enumerate(c["secret_env"]):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            errs.append(ConfigError(f"cluster.secret_env[{i}]", name, "not a valid environment variable name"))
        elif name in tree["env"] or name in tree["server"]["env"]:
            errs.append(ConfigError(f"cluster.secret_env[{i}]", name, "also given a value in [env]; a secret's value must come from the submitter's environment"))
    # A value in [env] is written into the job script and onto every srun command line (sacct
    # SubmitLine from Slurm 23.02): a name that says it holds a secret belongs in secret_env.
    for table, names in (("env", tree["env"]), ("server.env", tree["server"]["env"]), ("pd.env", tree["pd"]["env"])):
        for name in names:
            if SECRET_NAME.search(name):
                errs.append(ConfigError(f"{table}.{name}", "<not shown>", "looks like a secret: its value would be "
                                        "written into the job script and onto every srun command line",
                                        f"cluster.secret_env = [\"{name}\"] and export it before submitting"))
    if not PATH_SAFE.fullmatch(tree["paths"]["results"]):
        errs.append(ConfigError("paths.results", tree["paths"]["results"], "run directories are named on #SBATCH lines",
                                "letters, digits and _ . + , @ : = / - (no spaces, quotes or %)"))
    if tree["container"]["image"]:
        for k in ("model", "draft_model", "dataset"):
            v = tree["paths"][k]
            if v and ("," in v or ":" in v):
                errs.append(ConfigError(f"paths.{k}", v, "cannot be mounted by pyxis (',' and ':' separate mounts)"))
        for i, mnt in enumerate(tree["container"]["mounts"]):
            if "," in mnt or not re.fullmatch(r"[^:]+:[^:]+(:[a-z+]+)?", mnt):
                errs.append(ConfigError(f"container.mounts[{i}]", mnt, "not a pyxis mount", "SRC:DST[:FLAGS], no commas"))
    for name, cmd in tree["commands"].items():
        if not cmd or not all(cmd):
            errs.append(ConfigError(f"commands.{name}", cmd, "must be a non-empty list of non-empty strings"))
    if not NAME.fullmatch(tree["router"]["policy"]):
        errs.append(ConfigError("router.policy", tree["router"]["policy"], "not a policy name", "e.g. round_robin"))
    if tree["router"]["ready_timeout_s"] < 1:
        errs.append(ConfigError("router.ready_timeout_s", tree["router"]["ready_timeout_s"], "must be >= 1"))
    return errs


def _profile(what: str, key: str, name: str, profiles: dict, required: tuple, example: str
             ) -> tuple[dict | None, list[ConfigError]]:
    """The profile `name` of [<what>_profiles] (selected by `key`) and what every profile must have:
    it exists, has the required keys, a command and a module name. (None, errors) when unusable."""
    if name not in profiles:
        return None, [ConfigError(key, name, f"unknown {what} profile", ", ".join(sorted(profiles)))]
    where, prof = f"{what}_profiles.{name}", profiles[name]
    errs = [ConfigError(f"{where}.{k}", None, f"missing in the {what} profile") for k in required if k not in prof]
    if errs:
        return None, errs
    if not prof["command"] or not all(prof["command"]):
        errs.append(ConfigError(f"{where}.command", prof["command"], "must be a non-empty list of non-empty strings"))
    if not MODULE.fullmatch(prof["module"]):
        errs.append(ConfigError(f"{where}.module", prof["module"], "not a Python module name", f"e.g. {example}"))
    return prof, errs


def _router_checks(tree: Tree) -> list[ConfigError]:
    r = tree["router"]
    prof, errs = _profile("router", "router.profile", r["profile"], tree["router_profiles"],
                          ("command", "module", "ready_path", "ready_field"), "sglang_router")
    if prof is None:
        return errs
    key = f"router_profiles.{r['profile']}"
    if not HTTP_PATH.fullmatch(prof["ready_path"]):
        errs.append(ConfigError(f"{key}.ready_path", prof["ready_path"], "not an HTTP path", "e.g. /readiness"))
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prof["ready_field"]):
        errs.append(ConfigError(f"{key}.ready_field", prof["ready_field"], "not a JSON field name", "e.g. healthy_workers"))
    return errs


def _client_checks(tree: Tree) -> list[ConfigError]:
    """The client profile exists and fits: its loader knows the dataset; the SLOs are numbers."""
    b = tree["benchmark"]
    errs = [ConfigError(f"benchmark.slo.{k}", v, "not a latency in ms", "a number > 0, or 0 for no SLO on this metric")
            for k, v in b["slo"].items()
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0]
    m = tree["router"]["max_retry_pct"]
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 100:
        errs.append(ConfigError("router.max_retry_pct", m, "not a percentage of a pass's requests",
                                "a number in [0, 100], e.g. 5 (0: any retry makes the pass invalid)"))
    t = b["slo_target_pct"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 100:
        errs.append(ConfigError("benchmark.slo_target_pct", t, "not a percentage of a pass's requests",
                                "a number in (0, 100], e.g. 90 (a pass meets the SLOs when 90% of its requests do)"))
    r = b["steady_concurrency_ratio"]
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1:
        errs.append(ConfigError("benchmark.steady_concurrency_ratio", r, "not a share of the peak concurrency",
                                "a number in (0, 1], e.g. 0.5 (SGLang's --steady-state-concurrency-ratio)"))
    mg = b["margin_pct"]
    if isinstance(mg, bool) or not isinstance(mg, (int, float)) or not 0 <= mg < 50:
        errs.append(ConfigError("benchmark.margin_pct", mg, "not an equivalence margin in percent",
                                "a number in [0, 50), e.g. 3 (0: no equivalence verdicts)"))
    k = b["max_blocks"]
    if isinstance(k, bool) or not isinstance(k, int) or not MIN_BLOCKS <= k <= MAX_BLOCKS:
        errs.append(ConfigError("benchmark.max_blocks", k, "not a number of counterbalanced blocks",
                                f"an integer in {MIN_BLOCKS}..{MAX_BLOCKS} (a block: two launches per mode)"))
    if not valid_spending(b["spending"]):
        errs.append(ConfigError("benchmark.spending", b["spending"], "not an alpha-spending function", SPENDING_CHOICES))
    prof, perrs = _profile("client", "benchmark.client", b["client"], tree["client_profiles"],
                           ("command", "module"), "sglang.bench_serving")
    errs += perrs
    needs = tree["datasets"][b["dataset"]].get("backends") or []
    if needs and b["backend"] not in needs:
        errs.append(ConfigError("benchmark.backend", b["backend"], f"dataset {b['dataset']} replays its trace's timing "
                                "only with " + ", ".join(needs), ", ".join(needs)))
    known = (prof or {}).get("datasets") or []
    if known and b["dataset"] not in known:
        errs.append(ConfigError("benchmark.dataset", b["dataset"], f"the client of profile {b['client']} has no "
                                "loader for it", ", ".join(known) + " (or another benchmark.client)"))
    return errs


def _correctness_checks(tree: Tree) -> list[ConfigError]:
    """[correctness]: counts and lengths >= 1 (prompts 0 turns the canary off), thresholds in range,
    the prompts' token ids and the reference a mode."""
    c = tree["correctness"]
    errs = []
    for k, lo in (("prompts", 0), ("input_len", 1), ("output_len", 1), ("token_base", 0), ("token_span", 1),
                  ("min_common_prefix", 0), ("timeout_s", 1)):
        if c[k] < lo:
            errs.append(ConfigError(f"correctness.{k}", c[k], f"must be >= {lo}"))
    if c["min_common_prefix"] > c["output_len"]:
        errs.append(ConfigError("correctness.min_common_prefix", c["min_common_prefix"],
                                f"more than the canary's correctness.output_len ({c['output_len']})",
                                f"0..{c['output_len']}"))
    m = c["min_exact_match"]
    if not 0 <= m <= 1:
        errs.append(ConfigError("correctness.min_exact_match", m, "not a share of the canary's answers",
                                "a number in [0, 1], e.g. 0.5"))
    if c["input_len"] + c["output_len"] > tree["model"]["context_length"]:
        errs.append(ConfigError("correctness.input_len", c["input_len"], "input + output exceeds model.context_length"))
    if c["reference"] and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", c["reference"]):
        errs.append(ConfigError("correctness.reference", c["reference"], "not a mode name", "a mode of the campaign, or \"\""))
    return errs


def _preflight_checks(tree: Tree) -> list[ConfigError]:
    pf, c = tree["preflight"], tree["cluster"]
    errs: list[ConfigError] = []
    if pf["timeout_s"] < 1:
        errs.append(ConfigError("preflight.timeout_s", pf["timeout_s"], "must be >= 1"))
    for k in ("server_module",):
        if pf[k] and not MODULE.fullmatch(pf[k]):
            errs.append(ConfigError(f"preflight.{k}", pf[k], "not a Python module name", "e.g. sglang, or \"\" to skip"))
    for k in ("import_command", "gpu_command", "port_command", "address_command"):
        if any(not w for w in pf[k]):
            errs.append(ConfigError(f"preflight.{k}", pf[k], "must not contain empty strings", "a command as a list, or [] to skip"))
    if c["address"] == "interface" and not (pf["enabled"] and pf["address_command"]):
        errs.append(ConfigError("cluster.address", c["address"], "an interface address is read on each node by the preflight",
                                "set preflight.enabled = true and preflight.address_command, or use \"name\" / \"nodeaddr\""))
    return errs


def notices(exp: Experiment) -> list[str]:
    """What a user should know about a valid configuration (dry-run prints these)."""
    out = []
    lines = [ln for ln in exp.cluster.prologue.splitlines() if ln.strip()]
    if lines:
        out.append(f"cluster.prologue: {len(lines)} line(s) of site shell code are written into the job script "
                   "verbatim and unquoted (not checked: the site owner's code, never user input); they run "
                   "before any step, in the batch shell")
    if not exp.preflight.enabled:
        out.append("preflight.enabled = false: nothing checks the nodes before the servers start loading")
    if any(v for _, v in exp.benchmark.slo) and not exp.client.goodput:
        out.append(f"benchmark.slo: client profile {exp.client.profile} has no --goodput; the collector "
                   "computes goodput and SLO attainment from the per-request details alone")
    return out + roles.notices(exp) + site_checks.notices(exp)


def _bench_checks(tree: Tree) -> list[ConfigError]:
    b, w = tree["benchmark"], tree["warmup"]
    errs: list[ConfigError] = []
    for k in ("concurrency", "num_prompts", "input_len", "output_len"):
        if b[k] < 1:
            errs.append(ConfigError(f"benchmark.{k}", b[k], "must be >= 1"))
    if b["warmup_requests"] < 0:
        errs.append(ConfigError("benchmark.warmup_requests", b["warmup_requests"], "must be >= 0"))
    for k in ("input_len", "output_len", "timeout_s"):
        if w[k] < 1:
            errs.append(ConfigError(f"warmup.{k}", w[k], "must be >= 1"))
    if w["token_id"] < 0:
        errs.append(ConfigError("warmup.token_id", w["token_id"], "must be >= 0"))
    if not NAME.fullmatch(b["backend"]):
        errs.append(ConfigError("benchmark.backend", b["backend"], "not a backend name", "e.g. sglang"))
    g = b["saturation_growth"]            # a mode may set its own: checked with every mode
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 < g < 1:
        errs.append(ConfigError("benchmark.saturation_growth", g, "not a share of the arrival rate",
                                "a number in (0, 1), e.g. 0.1"))
    ctx = tree["model"]["context_length"]         # a role's --context-length: roles.py
    for what, total in (("benchmark", b["input_len"] + b["output_len"]), ("warmup", w["input_len"] + w["output_len"])):
        if total > ctx:
            errs.append(ConfigError(f"{what}.input_len", tree[what]["input_len"],
                                    f"input + output = {total} tokens exceeds the context length {ctx}",
                                    f"input_len + output_len <= {ctx} (model.context_length)"))
    return errs


def port_ranges(tree_ports: dict, replicas: int, pd: bool = False) -> dict[str, tuple[int, int]]:
    """Half-open port ranges each role may use over all job slots (with a PD mode's bootstrap
    servers)."""
    p = tree_ports
    span = p["job_slots"] * replicas * p["replica_stride"]
    out = {
        "server": (p["server"], p["server"] + span),
        "dist_init": (p["dist_init"], p["dist_init"] + span),
        "router": (p["router"], p["router"] + p["job_slots"]),
        "router_metrics": (p["router_metrics"], p["router_metrics"] + p["job_slots"]),
    }
    if pd:
        out["bootstrap"] = (p["bootstrap"], p["bootstrap"] + span)
    return out


def _port_checks(tree: Tree, pd: bool = False) -> list[ConfigError]:
    p = tree["ports"]
    errs: list[ConfigError] = []
    for k in ("replica_stride", "job_slots"):
        if p[k] < 1:
            errs.append(ConfigError(f"ports.{k}", p[k], "must be >= 1"))
    for k in ("server", "dist_init", "router", "router_metrics") + (("bootstrap",) if pd else ()):
        if not 1024 <= p[k] <= 65535:
            errs.append(ConfigError(f"ports.{k}", p[k], "not an unprivileged port", "1024..65535"))
    if errs:
        return errs
    replicas = tree["experiment"]["replicas"]
    if pd:
        # a PD launch's groups are its role instances (the job slot spans them all)
        replicas = max(replicas, sum(r.get("instances", 1) for m in tree["modes"].values()
                                     for r in m.get("roles", {}).values()))
    ranges = port_ranges(p, replicas, pd)
    names = list(ranges)
    for i, a in enumerate(names):
        lo, hi = ranges[a]
        if hi > 65536:
            errs.append(ConfigError(f"ports.{a}", p[a], f"its range {lo}..{hi - 1} (all job slots) passes 65535",
                                    "a lower base, or fewer ports.job_slots"))
        for b in names[i + 1:]:
            lo2, hi2 = ranges[b]
            if lo < hi2 and lo2 < hi:
                errs.append(ConfigError(f"ports.{b}", p[b], f"its range {lo2}..{hi2 - 1} overlaps ports.{a} ({lo}..{hi - 1})"))
    return errs
