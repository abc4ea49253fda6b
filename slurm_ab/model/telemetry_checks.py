"""Checks of [telemetry], [profile] and [history] (issue 34): the sampler source and its commands,
the thresholds of the collector's telemetry rules, what a profile asks SGLang for, the change-point
detector's settings. Called by validate.resolve; each problem names the key, the value and what is
allowed (a pass key of profile.target is checked against the schedule: job.campaign_plan).
"""
from __future__ import annotations

import re

from .campaign import PASS_KEY, PROFILE_EXTRA
from .config import Tree
from .errors import ConfigError
from .experiment import TELEMETRY_SOURCES
from .site_checks import SBATCH_OPTION

FIELD = re.compile(r"[a-z][a-z0-9_.]*")
URL = re.compile(r"https?://[A-Za-z0-9_.:\[\]-]+(/[A-Za-z0-9_./?=&%-]*)?")
# nvidia-smi fields the collector needs to integrate energy and name samples
NEEDED_FIELDS = ("timestamp", "index", "power.draw")
# ProfileReq.activities SGLang 0.5.23 knows (managers/io_struct.py, profiler_manager.py)
ACTIVITIES = ("CPU", "GPU", "MEM", "CUDA_PROFILER", "RPD")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _command(key: str, cmd, errs: list, what: str) -> None:
    if not cmd or not all(isinstance(w, str) and w for w in cmd):
        errs.append(ConfigError(key, cmd, "must be a non-empty list of non-empty strings", what))


def check(tree: Tree) -> list[ConfigError]:
    return _telemetry(tree["telemetry"]) + _profile(tree["profile"]) + _history(tree["history"])


def _telemetry(t: dict) -> list[ConfigError]:
    errs: list[ConfigError] = []
    if t["source"] not in TELEMETRY_SOURCES:
        errs.append(ConfigError("telemetry.source", t["source"], "unknown telemetry source", ", ".join(TELEMETRY_SOURCES)))
        return errs
    if not 100 <= t["host_interval_ms"] <= 60000:
        errs.append(ConfigError("telemetry.host_interval_ms", t["host_interval_ms"], "not a sample interval",
                                "100..60000 (ms)"))
    if not 100 <= t["interval_ms"] <= 60000:
        errs.append(ConfigError("telemetry.interval_ms", t["interval_ms"], "not a sample interval",
                                "100..60000 (ms); at most 1000 for exact energy from nvidia-smi's 1 s power average"))
    if not _number(t["max_gap_s"]) or t["max_gap_s"] * 1000 <= t["interval_ms"]:
        errs.append(ConfigError("telemetry.max_gap_s", t["max_gap_s"], "must be longer than the sample interval",
                                f"seconds > telemetry.interval_ms / 1000 ({t['interval_ms'] / 1000:g}), e.g. 3"))
    for k in ("low_clock_pct", "low_power_pct", "client_busy_pct"):
        v = t[k]
        hi = 1000 if k == "client_busy_pct" else 100
        if not _number(v) or not 0 < v < hi:
            errs.append(ConfigError(f"telemetry.{k}", v, "not a percentage", f"a number in (0, {hi})"))
    for i, opt in enumerate(t["step_args"]):
        if not SBATCH_OPTION.fullmatch(opt):
            errs.append(ConfigError(f"telemetry.step_args[{i}]", opt, "not a single srun option",
                                    "--name or --name=value, no spaces or quotes"))
    if t["source"] == "nvidia-smi":
        n = t["nvidia_smi"]
        _command("telemetry.nvidia_smi.command", n["command"], errs, "e.g. [\"nvidia-smi\"]")
        bad = [f for f in n["fields"] if not FIELD.fullmatch(f)]
        if bad:
            errs.append(ConfigError("telemetry.nvidia_smi.fields", n["fields"], f"{bad[0]!r} is not a --query-gpu field",
                                    "names as nvidia-smi --help-query-gpu lists them, e.g. power.draw"))
        missing = [f for f in NEEDED_FIELDS if f not in n["fields"]]
        if missing or n["fields"][:2] != ["timestamp", "index"]:
            errs.append(ConfigError("telemetry.nvidia_smi.fields", n["fields"],
                                    f"needs {', '.join(missing) or 'timestamp and index'}"
                                    + (" first" if not missing else ""),
                                    "timestamp, index first, then power.draw and any other fields"))
    if t["source"] == "dcgm":
        d = t["dcgm"]
        if not URL.fullmatch(d["url"]):
            errs.append(ConfigError("telemetry.dcgm.url", d["url"], "not an exporter URL",
                                    "http://HOST:PORT/metrics, e.g. http://localhost:9400/metrics"))
        _command("telemetry.dcgm.scrape_command", d["scrape_command"], errs, "a command taking URL INTERVAL_S")
        if d["exporter_command"]:
            _command("telemetry.dcgm.exporter_command", d["exporter_command"], errs, "[] when the site runs one")
    if t["host"]:
        _command("telemetry.host_command", t["host_command"], errs, "a command taking INTERVAL_S, or telemetry.host = false")
    return errs


def _profile(p: dict) -> list[ConfigError]:
    errs: list[ConfigError] = []
    if p["target"] not in ("", PROFILE_EXTRA) and not PASS_KEY.fullmatch(p["target"]):
        errs.append(ConfigError("profile.target", p["target"], "not a pass to profile",
                                f"\"\" (none), \"{PROFILE_EXTRA}\" (a dedicated pass after the timed ones), or a "
                                "pass key such as c8-r2 or q4-r1"))
    bad = [a for a in p["activities"] if a not in ACTIVITIES]
    if bad or not p["activities"]:
        errs.append(ConfigError("profile.activities", p["activities"],
                                f"unknown activity {bad[0]!r}" if bad else "must not be empty", ", ".join(ACTIVITIES)))
    if p["nsys"]:
        _command("profile.nsys_command", p["nsys_command"], errs, "e.g. [\"nsys\", \"profile\", ...]")
        if "CUDA_PROFILER" not in p["activities"]:
            errs.append(ConfigError("profile.activities", p["activities"],
                                    "nsys with --capture-range=cudaProfilerApi records only what /start_profile "
                                    "opens with cudaProfilerStart", "include \"CUDA_PROFILER\" (profile.nsys = true)"))
    for role, w in p["roles"].items():
        if not isinstance(w, dict) or set(w) - {"start_step", "num_steps"}:
            errs.append(ConfigError(f"profile.roles.{role}", w, "not a step window", "start_step, num_steps"))
            continue
        for k, lo in (("start_step", 0), ("num_steps", 1)):
            v = w.get(k, 0 if k == "start_step" else 1)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                errs.append(ConfigError(f"profile.roles.{role}.{k}", v, f"must be an integer >= {lo}"))
    return errs


def check_history(tree: Tree) -> list[ConfigError]:
    """[history] alone (`slurm-ab history` validates no mode)."""
    return _history(tree["history"])


def _history(h: dict) -> list[ConfigError]:
    errs: list[ConfigError] = []
    if not _number(h["alpha"]) or not 0 < h["alpha"] <= 0.2:
        errs.append(ConfigError("history.alpha", h["alpha"], "not a significance level", "a number in (0, 0.2], e.g. 0.01"))
    if not 99 <= h["permutations"] <= 9999:
        errs.append(ConfigError("history.permutations", h["permutations"], "not a number of permutations", "99..9999"))
    elif _number(h["alpha"]) and h["alpha"] * (h["permutations"] + 1) < 1:
        errs.append(ConfigError("history.permutations", h["permutations"], f"too few to reach p < {h['alpha']}",
                                f">= {int(1 / h['alpha'])} (1 / history.alpha)"))
    if not 2 <= h["min_segment"] <= 100:
        errs.append(ConfigError("history.min_segment", h["min_segment"], "not a number of runs", "2..100"))
    if not _number(h["min_change_pct"]) or not 0 <= h["min_change_pct"] < 100:
        errs.append(ConfigError("history.min_change_pct", h["min_change_pct"], "not a percentage", "a number in [0, 100)"))
    return errs
