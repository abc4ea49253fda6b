"""The run directory: its layout, its manifest, and finding a run again by run id or job id.

Created once and never reused or overwritten (its evidence stays intact). submit/render write
job.sbatch and manifest.json; the job script writes the raw files (events.log, logs/, one
launch<N>-<MODE>/ per server launch with its passes' files, slurm-<JOBID>.out); the collector reads
them and writes only summary.*. The layout is described in docs/design.md; every path to a file of
a run comes from `Layout` (the job script's from the F_* formats generated from it).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .campaign import Campaign, Launch, Pass
from .errors import UsageError
from .experiment import Experiment
from ..parse.events import Event, read_events

# Every file of a run directory, relative to it; a launch's files relative to its launch
# directory (launch<N>-<MODE>/, every job has one per server launch). The one table of their names:
# Layout's methods read it (the job script's F_* formats are those methods' names: job_formats), and tests/test_layout_paths.py fails when a name appears anywhere else in the Python or
# the templates. Placeholders: {g} replica (het group), {rank} node rank, {peer} the other replica
# of a PD pair, {key} pass key, {node} Slurm node name, {target} scrape target (r<G>n<R>, router),
# {stamp} scrape time, {job} job id, {index}/{mode} a launch, {ext} a summary's format.
FILES = {
    # the job
    "job_script": "job.sbatch",                  # the exact script (submit/render)
    "manifest": "manifest.json",                 # Manifest (submit/render; nodes after the run)
    "events": "events.log",                      # one line per job event (parse.events); a launch's own too
    "slurm_out": "slurm-{job}.out",              # the batch script's stdout+stderr (#SBATCH --output)
    "logs": "logs",
    "preflight_log": "logs/preflight-r{g}-n{rank}.log",
    "cleanup_log": "logs/cleanup-r{g}-n{rank}.log",     # the nodes' clean-up step at the job's end
    "sweep_script": "preflight/sweep-node.sh",   # removes ended jobs' leftovers, before the preflight
    "sweep_log": "logs/sweep-r{g}-n{rank}.log",  # what it removed on each node
    "cancel_request": "cancel-requested",        # `slurm-ab cancel` asked the job to tear down (who, when)
    "secrets": "secrets.env",                    # cluster.secret_env values, mode 0600, read and removed by the job
    "preflight": "preflight",
    "preflight_script": "preflight/check.sh",
    "preflight_report": "preflight/{node}.json",      # a mode in its own image: {node} is <node>@<mode>
    "preflight_mode_script": "preflight/check@{mode}.sh",   # the preflight of a mode in its own image
    "preflight_partial": "preflight/{node}.json.tmp",   # being written (renamed to .json)
    "preflight_problems": "preflight/{node}.problems",
    "preflight_address": "preflight/{node}.addr",
    "preflight_host_ip": "preflight/{node}.hostip",      # PD: the node's SGLANG_HOST_IP (pd.host_ip_interface)
    "preflight_tokenizer": "preflight/{node}.tokenizer",   # the client's tokenizer load, on ROUTER_HOST
    "launch_dir": "launch{index}-{mode}",        # one server launch, its files below
    "capacity_spec": "capacity.json",            # a capacity search's spec (ab_stats.capacity reads it)
    "capacity_program": "capacity.py",           # ... and its program, ab_stats/capacity.py verbatim
    "sequential_spec": "sequential.json",        # a sequential campaign's looks: launches, boundaries (render)
    "stop_rule": "stoprule.py",                  # its stop rule (ab_stats/looks.py), run after each block
    "stop_rule_log": "logs/stoprule.log",        # the stop rule's stderr
    "submitit": "submitit",                      # submitit's own files (collector job)
    "submit_error": "submit-error.txt",          # why sbatch refused
    "summary": "summary.{ext}",                  # the collector's files (json, csv, md)
    "report_html": "report.html",                # derived, like the summaries
    "plots": "plots",                            # report.html's PNGs
    # a launch (relative to its directory)
    "server_log": "logs/server-r{g}-n{rank}.log",      # stdout+stderr of one node of a replica
    "router_log": "logs/router.log",
    "warmup_request": "logs/warmup-request.json",     # the 16K -> 1 body sent to every replica
    "warmup_response": "logs/warmup-r{g}.json",       # each replica's answer
    "warmup_http": "logs/warmup-r{g}.json.http",      # its HTTP status and curl's message
    # prefill/decode launches: each pair's KV canary and warm-up, sent to both (r{g} answering, its
    # peer r{peer}), and the canary through the router
    "pd_canary": "logs/canary-r{g}-with-r{peer}.json",
    "pd_canary_http": "logs/canary-r{g}-with-r{peer}.json.http",
    "pd_canary_dp": "logs/canary-r{g}-with-r{peer}-dp{dp}.json",      # the pair's K-th DP canary (K >= 1)
    "pd_canary_dp_http": "logs/canary-r{g}-with-r{peer}-dp{dp}.json.http",
    "pd_warmup": "logs/warmup-r{g}-with-r{peer}.json",
    "pd_warmup_http": "logs/warmup-r{g}-with-r{peer}.json.http",
    "router_canary": "logs/canary-router.json",
    "router_canary_http": "logs/canary-router.json.http",
    # the correctness gate's canary (every launch): prompt {prompt}'s request, and the answer of each
    # target (r{G}: a server's head, directly; router: a prefill/decode launch's router)
    "correctness_request": "logs/correctness-p{prompt}.json",
    "correctness_response": "logs/correctness-{target}-p{prompt}.json",
    "correctness_http": "logs/correctness-{target}-p{prompt}.json.http",
    "metrics": "metrics",
    "scrape": "metrics/{target}-{stamp}.prom",   # raw /metrics text (.err: a failed scrape's evidence)
    "scrape_error": "metrics/{target}-{stamp}.err",
    "scrape_partial": "metrics/{target}-{stamp}.part",   # being written (renamed to .prom/.err)
    "scrape_curl": "metrics/{target}-{stamp}.curl",      # curl's message while it runs
    "capacity_log": "logs/capacity-{key}.log",   # the capacity search's decision before probe {key}
    "client_log": "logs/client-{key}.log",       # bench_serving's stdout+stderr of one pass
    "bench": "bench-{key}.jsonl",                # bench_serving --output-file of one pass
    # telemetry (issue 34): each node's GPU sampler (a header line, then nvidia-smi's CSV or the
    # DCGM scrapes) and ROUTER_HOST's host sampler, from the launch's start to its teardown
    "telemetry": "telemetry",
    "gpu_samples": "telemetry/gpu-r{g}-n{rank}.log",
    "host_samples": "telemetry/host.log",
    # written by the launch's teardown: a GPU sampler whose node lost its slurmd (no step signal
    # reaches it) sees it and ends (telemetry.sh's SAMPLER_NODE)
    "samplers_stop": "telemetry/samplers.stop",
    # profiles: every GPU rank's trace of a profiled pass (SGLang names the files), the heads'
    # answers to /start_profile and /stop_profile, nsys' report per node
    "profiles": "profiles",
    "profile_dir": "profiles/{key}",
    "profile_answer": "profiles/{key}/{what}-r{g}.txt",
    "nsys_report": "profiles/nsys-r{g}-n{rank}",
}
# A script submitted again (plain sbatch of job.sbatch) finds its run directory used and writes
# beside it: <run dir>-job<JOBID> (the job script's prepare_run_dir; find_run_dirs).
RESUBMITTED = "{run_dir}-job{job}"
# The pass files of a run directory written before every job had launch directories (one pass,
# in the run directory itself): read through OldRunLayout, never written.
OLD_PASS_FILES = {"bench": "bench.jsonl", "client_log": "logs/client.log"}
SUMMARY_FORMATS = ("json", "csv", "md")
_FIELD = re.compile(r"\{([a-z_]+)\}")


def _glob(name: str) -> str:
    """FILES[name] as a glob pattern (every placeholder '*')."""
    return _FIELD.sub("*", FILES[name])


_SERVER_LOG = re.compile(re.escape(FILES["server_log"].rsplit("/", 1)[1])
                         .replace(r"\{g\}", r"(\d+)").replace(r"\{rank\}", r"(\d+)") + "$")


def server_log_identity(path: str | Path) -> tuple[int, int] | None:
    """logs/server-r<G>-n<R>.log -> (replica G, node rank R); None for any other file."""
    m = _SERVER_LOG.search(str(path))
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Layout:
    """Where each file of a run (or of one of its launches) lives: one method per file."""

    root: Path

    def _file(self, name: str, **values) -> Path:
        return self.root / FILES[name].format(**values)

    # ---- the job: its script, manifest, output, events, preflight ----------------------------
    job_script = property(lambda self: self._file("job_script"))
    manifest = property(lambda self: self._file("manifest"))
    events = property(lambda self: self._file("events"))
    logs = property(lambda self: self._file("logs"))
    preflight = property(lambda self: self._file("preflight"))
    preflight_script = property(lambda self: self._file("preflight_script"))
    submitit = property(lambda self: self._file("submitit"))
    submit_error = property(lambda self: self._file("submit_error"))
    report_html = property(lambda self: self._file("report_html"))
    plots = property(lambda self: self._file("plots"))
    # a sequential campaign: the spec and program of its stop rule (written by the job at its start)
    sequential_spec = property(lambda self: self._file("sequential_spec"))
    stop_rule = property(lambda self: self._file("stop_rule"))
    stop_rule_log = property(lambda self: self._file("stop_rule_log"))

    def slurm_out(self, job_id: str | int) -> Path:
        """The batch script's stdout+stderr (#SBATCH --output; '%j': Slurm's own placeholder)."""
        return self._file("slurm_out", job=job_id)

    def slurm_outs(self) -> list[Path]:
        return sorted(self.root.glob(_glob("slurm_out")))

    def preflight_report(self, node: str) -> Path:
        return self._file("preflight_report", node=node)

    def preflight_reports(self, mode: str | None = None) -> list[Path]:
        """Every node's preflight report (preflight/<node>.json); with `mode`, those of the preflight
        run again in that mode's own image or environment (<node>@<mode>)."""
        if mode is not None:
            return sorted(self.root.glob(FILES["preflight_report"].format(node=f"*@{mode}")))
        return sorted(p for p in self.root.glob(_glob("preflight_report")) if "@" not in p.name)

    def preflight_mode_script(self, mode: str) -> Path:
        return self._file("preflight_mode_script", mode=mode)

    def preflight_problems(self, node: str) -> Path:
        return self._file("preflight_problems", node=node)

    def preflight_address(self, node: str) -> Path:
        return self._file("preflight_address", node=node)

    def preflight_partial(self, node: str) -> Path:
        return self._file("preflight_partial", node=node)

    def preflight_host_ip(self, node: str) -> Path:
        """PD: the node's SGLANG_HOST_IP, the address of pd.host_ip_interface there."""
        return self._file("preflight_host_ip", node=node)

    def preflight_tokenizer(self, node: str) -> Path:
        return self._file("preflight_tokenizer", node=node)

    def preflight_log(self, replica: int, rank: int) -> Path:
        return self._file("preflight_log", g=replica, rank=rank)

    def cleanup_log(self, replica: int, rank: int) -> Path:
        return self._file("cleanup_log", g=replica, rank=rank)

    sweep_script = property(lambda self: self._file("sweep_script"))
    cancel_request = property(lambda self: self._file("cancel_request"))
    secrets = property(lambda self: self._file("secrets"))

    def sweep_log(self, replica: int, rank: int) -> Path:
        return self._file("sweep_log", g=replica, rank=rank)

    def summary(self, fmt: str) -> Path:
        """summary.<fmt> (SUMMARY_FORMATS), the collector's only output besides the report."""
        return self._file("summary", ext=fmt)

    def plot(self, name: str) -> Path:
        return self.plots / name

    def resubmitted(self, job_id: str | int) -> Path:
        """Where the job script writes when this run directory was already used."""
        return Path(RESUBMITTED.format(run_dir=self.root, job=job_id))

    def resubmission_of(self, job_id: str | int) -> bool:
        """This directory is the one a re-submitted script of job `job_id` wrote to."""
        return self.root.name.endswith(RESUBMITTED.format(run_dir="", job=job_id))

    # ---- a launch: its servers, router, warm-ups, scrapes and passes ---------------------------
    router_log = property(lambda self: self._file("router_log"))
    metrics = property(lambda self: self._file("metrics"))
    warmup_request = property(lambda self: self._file("warmup_request"))

    def launch(self, launch: Launch) -> "Layout":
        """The layout of one server launch of the job: launch<N>-<MODE>/."""
        return Layout(self.root / launch_dirname(launch))

    def server_log(self, replica: int, rank: int) -> Path:
        """stdout+stderr of one node (node rank `rank`) of replica `replica`."""
        return self._file("server_log", g=replica, rank=rank)

    def server_logs(self) -> list[Path]:
        return sorted(self.root.glob(_glob("server_log")))

    def server_log_map(self) -> dict[int, dict[int, Path]]:
        """replica -> node rank -> path of every server log present."""
        out: dict[int, dict[int, Path]] = {}
        for p in self.server_logs():
            ident = server_log_identity(p.name)
            if ident and p.is_file():
                out.setdefault(ident[0], {})[ident[1]] = p
        return out

    def head_logs(self) -> dict[int, Path]:
        """replica -> node rank 0's log (the HTTP server and the scheduler's samples)."""
        return {g: ranks[0] for g, ranks in self.server_log_map().items() if 0 in ranks}

    def warmup_response(self, replica: int) -> Path:
        return self._file("warmup_response", g=replica)

    def warmup_http(self, replica: int) -> Path:
        return self._file("warmup_http", g=replica)

    def pd_canary(self, replica: int, peer: int, dp: int | str = 0) -> Path:
        """The answer of replica to the pair's KV canary with peer; dp > 0: its dp-th canary (one
        per attention-DP rank of the pair's larger DP)."""
        return self._file("pd_canary_dp", g=replica, peer=peer, dp=dp) if dp else \
            self._file("pd_canary", g=replica, peer=peer)

    def pd_canary_http(self, replica: int, peer: int, dp: int | str = 0) -> Path:
        return self._file("pd_canary_dp_http", g=replica, peer=peer, dp=dp) if dp else \
            self._file("pd_canary_http", g=replica, peer=peer)

    def pd_warmup(self, replica: int, peer: int) -> Path:
        return self._file("pd_warmup", g=replica, peer=peer)

    def pd_warmup_http(self, replica: int, peer: int) -> Path:
        return self._file("pd_warmup_http", g=replica, peer=peer)

    router_canary = property(lambda self: self._file("router_canary"))
    router_canary_http = property(lambda self: self._file("router_canary_http"))

    capacity_spec = property(lambda self: self._file("capacity_spec"))
    capacity_program = property(lambda self: self._file("capacity_program"))

    def capacity_log(self, key: str) -> Path:
        return self._file("capacity_log", key=key)

    def correctness_request(self, prompt) -> Path:
        return self._file("correctness_request", prompt=prompt)

    def correctness_response(self, target: str, prompt) -> Path:
        return self._file("correctness_response", target=target, prompt=prompt)

    def correctness_http(self, target: str, prompt) -> Path:
        return self._file("correctness_http", target=target, prompt=prompt)

    def scrape(self, target: str, stamp: str) -> Path:
        return self._file("scrape", target=target, stamp=stamp)

    def scrape_error(self, target: str, stamp: str) -> Path:
        return self._file("scrape_error", target=target, stamp=stamp)

    def scrape_partial(self, target: str, stamp: str) -> Path:
        return self._file("scrape_partial", target=target, stamp=stamp)

    def scrape_curl(self, target: str, stamp: str) -> Path:
        return self._file("scrape_curl", target=target, stamp=stamp)

    def scrapes(self) -> list[Path]:
        """The raw /metrics scrapes that succeeded (metrics/*.prom)."""
        return sorted(self.root.glob(_glob("scrape")))

    def bench(self, key: str) -> Path:
        """The client's --output-file of pass `key`."""
        return self._file("bench", key=key)

    def client_log(self, key: str) -> Path:
        """The client's stdout+stderr of pass `key`."""
        return self._file("client_log", key=key)

    # ---- a launch's telemetry and profiles ------------------------------------------------------
    telemetry = property(lambda self: self._file("telemetry"))
    host_samples = property(lambda self: self._file("host_samples"))
    samplers_stop = property(lambda self: self._file("samplers_stop"))
    profiles = property(lambda self: self._file("profiles"))

    def gpu_samples(self, replica: int, rank: int) -> Path:
        """One node's GPU sampler output (node rank `rank` of het group `replica`)."""
        return self._file("gpu_samples", g=replica, rank=rank)

    def gpu_sample_map(self) -> dict[tuple[int, int], Path]:
        """(het group, node rank) -> its GPU sampler's file, of every file present."""
        pat = re.compile(re.escape(FILES["gpu_samples"].rsplit("/", 1)[1]).replace(r"\{g\}", r"(\d+)")
                         .replace(r"\{rank\}", r"(\d+)") + "$")
        out = {}
        for p in sorted(self.root.glob(_glob("gpu_samples"))):
            m = pat.search(p.name)
            if m:
                out[(int(m.group(1)), int(m.group(2)))] = p
        return out

    def profile_dir(self, key: str) -> Path:
        """The traces of profiled pass `key` (SGLang's output_dir)."""
        return self._file("profile_dir", key=key)

    def profile_answer(self, key: str, what: str, replica: int) -> Path:
        """A head's answer to /start_profile (what="start") or /stop_profile ("stop")."""
        return self._file("profile_answer", key=key, what=what, g=replica)

    def nsys_report(self, replica: int, rank: int) -> Path:
        """nsys' -o of one node (nsys adds .nsys-rep)."""
        return self._file("nsys_report", g=replica, rank=rank)

    def pass_files(self) -> list[Path]:
        """Every pass's client output and log present."""
        return sorted(self.root.glob(_glob("bench"))) + sorted(self.root.glob(_glob("client_log")))

    def raw_files(self) -> list[Path]:
        """The files worth a link on a page (the job's or launch's raw files and the collector's
        summaries), in a stable order; sub-directories' launches are listed on their own."""
        names = ("job_script", "manifest", "slurm_out", "events")
        found = [p for pattern in [_glob(n) for n in names] for p in sorted(self.root.glob(pattern))]
        found += self.pass_files() + sorted(self.logs.glob("*"))
        found += [self.summary(f) for f in SUMMARY_FORMATS]
        seen, out = set(), []
        for p in found:
            if p.is_file() and p not in seen:
                seen.add(p)
                out.append(p)
        return out

    def rel(self, path: Path) -> str:
        """A path of this run relative to its root (how reasons and pages name files)."""
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)


@dataclass(frozen=True)
class OldRunLayout(Layout):
    """A run directory written before every job had launch directories: its one launch is the
    run directory itself and its one pass's files are bench.jsonl and logs/client.log. Read
    only (collect, report, history); nothing writes this layout any more."""

    def launch(self, launch: Launch) -> "Layout":
        return self

    def bench(self, key: str) -> Path:
        return self.root / OLD_PASS_FILES["bench"]

    def client_log(self, key: str) -> Path:
        return self.root / OLD_PASS_FILES["client_log"]

    def pass_files(self) -> list[Path]:
        return [p for p in (self.bench(""), self.client_log("")) if p.is_file()]


# Names of a run's files relative to its directory, for messages that name a kind of file.
RELATIVE = Layout(Path())


def job_formats(pd: bool = True, sequential: bool = True, capacity: bool = True, telemetry: bool = True,
                profile: bool = True) -> tuple[tuple[str, str, str], ...]:
    """(F_<NAME>, printf format, its arguments in words) of every file the job script writes: the
    Layout's own names with '%s' for what only the job knows. The script's only way to name a
    run-directory file (F_RESUBMITTED: where a script submitted again writes). pd=False: without
    the files only prefill/decode launches write (pd.sh's canaries and pair warm-ups, the PD nodes'
    SGLANG_HOST_IP); sequential=False: without a sequential campaign's stop-rule files;
    capacity=False: without a capacity search's; telemetry, profile=False: without the samplers'
    and the profiles' files."""
    f, lay = "%s", RELATIVE
    files = (
        ("JOB_SCRIPT", lay.job_script, ""), ("EVENTS", lay.events, ""), ("SLURM_OUT", lay.slurm_out(f), "job id"),
        ("LOGS", lay.logs, ""), ("PREFLIGHT_LOG", lay.preflight_log(f, f), "replica, node rank"),
        ("CLEANUP_LOG", lay.cleanup_log(f, f), "replica, node rank"), ("PREFLIGHT", lay.preflight, ""),
        ("SWEEP_SCRIPT", lay.sweep_script, ""), ("SWEEP_LOG", lay.sweep_log(f, f), "replica, node rank"),
        ("CANCEL_REQUEST", lay.cancel_request, ""), ("SECRETS", lay.secrets, ""),
        ("PREFLIGHT_SCRIPT", lay.preflight_script, ""), ("PREFLIGHT_REPORT", lay.preflight_report(f), "node"),
        ("PREFLIGHT_MODE_SCRIPT", lay.preflight_mode_script(f), "mode"),
        ("PREFLIGHT_PARTIAL", lay.preflight_partial(f), "node"),
        ("PREFLIGHT_PROBLEMS", lay.preflight_problems(f), "node"),
        ("PREFLIGHT_ADDRESS", lay.preflight_address(f), "node"),
        ("PREFLIGHT_HOST_IP", lay.preflight_host_ip(f), "node"),
        ("PREFLIGHT_TOKENIZER", lay.preflight_tokenizer(f), "node"),
        ("SERVER_LOG", lay.server_log(f, f), "replica, node rank"), ("ROUTER_LOG", lay.router_log, ""),
        ("WARMUP_REQUEST", lay.warmup_request, ""), ("WARMUP_RESPONSE", lay.warmup_response(f), "replica"),
        ("WARMUP_HTTP", lay.warmup_http(f), "replica"),
        ("PD_CANARY", lay.pd_canary(f, f), "replica, peer replica"),
        ("PD_CANARY_HTTP", lay.pd_canary_http(f, f), "replica, peer replica"),
        ("PD_CANARY_DP", lay.pd_canary(f, f, f), "replica, peer replica, DP canary (>= 1)"),
        ("PD_CANARY_DP_HTTP", lay.pd_canary_http(f, f, f), "replica, peer replica, DP canary (>= 1)"),
        ("PD_WARMUP", lay.pd_warmup(f, f), "replica, peer replica"),
        ("PD_WARMUP_HTTP", lay.pd_warmup_http(f, f), "replica, peer replica"),
        ("ROUTER_CANARY", lay.router_canary, ""), ("ROUTER_CANARY_HTTP", lay.router_canary_http, ""),
        ("CORRECTNESS_REQUEST", lay.correctness_request(f), "prompt"),
        ("CORRECTNESS_RESPONSE", lay.correctness_response(f, f), "target, prompt"),
        ("CORRECTNESS_HTTP", lay.correctness_http(f, f), "target, prompt"),
        ("METRICS", lay.metrics, ""), ("SCRAPE", lay.scrape(f, f), "scrape target, time stamp"),
        ("SCRAPE_ERROR", lay.scrape_error(f, f), "scrape target, time stamp"),
        ("SCRAPE_PARTIAL", lay.scrape_partial(f, f), "scrape target, time stamp"),
        ("SCRAPE_CURL", lay.scrape_curl(f, f), "scrape target, time stamp"),
        ("TELEMETRY", lay.telemetry, ""), ("GPU_SAMPLES", lay.gpu_samples(f, f), "replica, node rank"),
        ("HOST_SAMPLES", lay.host_samples, ""), ("SAMPLERS_STOP", lay.samplers_stop, ""), ("PROFILES", lay.profiles, ""),
        ("PROFILE_DIR", lay.profile_dir(f), "pass key"),
        ("PROFILE_ANSWER", lay.profile_answer(f, f, f), "pass key, start|stop, replica"),
        ("NSYS_REPORT", lay.nsys_report(f, f), "replica, node rank"),
        ("RESUBMITTED", Layout(Path(f)).resubmitted(f), "run directory, job id"),
        ("CAPACITY_SPEC", lay.capacity_spec, ""), ("CAPACITY_PROGRAM", lay.capacity_program, ""),
        ("CAPACITY_LOG", lay.capacity_log(f), "pass key"),
        ("SEQ_SPEC", lay.sequential_spec, ""), ("STOP_RULE", lay.stop_rule, ""),
        ("STOP_RULE_LOG", lay.stop_rule_log, ""),
    )
    left_out = set()
    if not pd:
        left_out |= {"PD_CANARY", "PD_CANARY_HTTP", "PD_CANARY_DP", "PD_CANARY_DP_HTTP", "PD_WARMUP", "PD_WARMUP_HTTP",
                     "ROUTER_CANARY", "ROUTER_CANARY_HTTP", "PREFLIGHT_HOST_IP"}
    if not sequential:
        left_out |= {"SEQ_SPEC", "STOP_RULE", "STOP_RULE_LOG"}
    if not capacity:
        left_out |= {"CAPACITY_SPEC", "CAPACITY_PROGRAM", "CAPACITY_LOG"}
    if not telemetry:
        left_out |= {"TELEMETRY", "GPU_SAMPLES", "HOST_SAMPLES", "SAMPLERS_STOP"}
    if not profile:
        left_out |= {"PROFILES", "PROFILE_DIR", "PROFILE_ANSWER", "NSYS_REPORT"}
    return tuple((f"F_{name}", str(path), args) for name, path, args in files if name not in left_out)


def launch_dirname(launch: Launch) -> str:
    """A launch's sub-directory: launch<N>-<MODE>."""
    return FILES["launch_dir"].format(index=launch.index, mode=launch.mode)


# ---- manifest.json -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Manifest:
    """manifest.json: what was submitted. Written by submit/render (job_id and collector_job_id once
    sbatch has answered, nodes once the job has run), read by the collector and the CLI."""

    run_id: str | None = None
    experiment: str | None = None
    mode: str | None = None
    mode_description: str | None = None   # e.g. "2 x TP32/PP1/EP4 + DFlash"
    job_id: str | None = None             # None: prepared by `render`, not submitted by slurm-ab
    collector_job_id: str | None = None
    job_name: str | None = None
    run_dir: str | None = None
    components: tuple = ()                # {"het_group": G, "replica": G, "nodes": N} per component
    submitted_at: str | None = None
    submitted_by: str | None = None
    submit_host: str | None = None
    versions: dict = field(default_factory=dict)
    config: Experiment | None = None      # the resolved experiment of the run (of its first mode)
    nodes: dict | None = None             # "het_group_<G>" -> Slurm node list, after the run
    campaign: Campaign | None = None      # a campaign's schedule (root manifest of a campaign)
    launch: Launch | None = None          # the launch a launch directory's manifest describes
    extra: dict = field(default_factory=dict)    # keys this version does not know, kept on rewrite

    @property
    def replicas(self) -> int | None:
        return self.config.replicas if self.config is not None else None

    @property
    def benchmark(self) -> dict:
        """The [benchmark] settings as recorded (unknown ones left out)."""
        if self.config is None:
            return {}
        return {k: v for k, v in asdict(self.config.benchmark).items() if v is not None}

    @property
    def warmup_input_len(self) -> int | None:
        return self.config.warmup.input_len if self.config is not None else None

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("extra", "campaign", "launch")}
        d["components"] = [dict(c) for c in self.components]
        d["config"] = self.config.to_dict() if self.config is not None else {}
        if d["nodes"] is None:
            del d["nodes"]
        if self.campaign is not None:
            d["campaign"] = self.campaign.to_dict()
        if self.launch is not None:
            d["campaign_launch"] = self.launch.to_dict()
        return {**d, **{k: v for k, v in self.extra.items() if k not in d}}

    @classmethod
    def from_dict(cls, d: dict) -> Manifest:
        """A manifest as submit/render wrote it (the resolved experiment under "config")."""
        known = {f.name for f in fields(cls)} - {"extra", "launch"} | {"campaign_launch"}
        text = {"run_id", "experiment", "mode", "mode_description", "job_id", "collector_job_id",
                "job_name", "run_dir", "submitted_at", "submitted_by", "submit_host"}
        kw: dict = {k: _text(d.get(k)) for k in text}
        kw["components"] = tuple(dict(c) for c in d.get("components") or () if isinstance(c, dict))
        kw["versions"] = dict(d["versions"]) if isinstance(d.get("versions"), dict) else {}
        cfg = d.get("config")
        kw["config"] = Experiment.from_dict(cfg) if isinstance(cfg, dict) and cfg else None
        kw["nodes"] = dict(d["nodes"]) if isinstance(d.get("nodes"), dict) else None
        kw["campaign"] = _typed(Campaign.from_dict, d.get("campaign"))
        kw["launch"] = _typed(Launch.from_dict, d.get("campaign_launch"))
        kw["extra"] = {k: v for k, v in d.items() if k not in known}
        return cls(**kw)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _typed(reader, value):
    """A typed record from a manifest's table; None when absent or unreadable."""
    if not isinstance(value, dict):
        return None
    try:
        return reader(value)
    except (KeyError, TypeError, ValueError):
        return None


def _count(v) -> int:
    """A recorded number (a dedicated profiled pass's repeat is -1: campaign.PROFILE_REPEAT)."""
    return int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else 0


def _text(v) -> str | None:
    return None if v is None or v == "" else str(v)


def read_manifest(run_dir: Path) -> Manifest | None:
    """The run's manifest; None when missing, unreadable or not a JSON object."""
    try:
        data = json.loads(Layout(Path(run_dir)).manifest.read_text(errors="replace"))
    except (OSError, ValueError):
        return None
    return Manifest.from_dict(data) if isinstance(data, dict) else None


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    write_atomic(Layout(Path(run_dir)).manifest, manifest.to_json())


def record_nodes(run_dir: Path, node_lists: dict) -> None:
    """Add the components' node lists to the manifest once the job has run (submit cannot know
    them); written once, never changed afterwards."""
    m = read_manifest(run_dir)
    if m is not None and node_lists and m.nodes is None:
        write_manifest(run_dir, replace(m, nodes={f"het_group_{k}": v for k, v in node_lists.items()}))


# ---- a run directory as every job lays it out ----------------------------------------------------

@dataclass(frozen=True)
class RunDir:
    """A job's directory: its layout and its manifest, whose campaign says every launch and pass
    (a run of one mode is the campaign of one launch and one pass)."""

    layout: Layout
    manifest: Manifest

    @property
    def campaign(self) -> Campaign:
        return self.manifest.campaign

    def launch(self, index: int) -> Launch | None:
        return next((la for la in self.campaign.launches if la.index == index), None)

    def launch_layout(self, launch: Launch) -> Layout:
        return self.layout.launch(launch)


def open_run(run_dir: str | Path) -> RunDir:
    """A run directory with its campaign: the manifest's, else the launches and passes its job
    recorded (a script submitted again writes a directory without manifest: Layout.resubmitted).
    The one adapter for directories written before every job had launch directories (no
    campaign, no launch_start: they ran one pass, in the run directory itself): OldRunLayout and
    the campaign of that pass, from the manifest's [benchmark] and the run's mode."""
    run_dir = Path(run_dir)
    m = read_manifest(run_dir) or Manifest()
    if m.campaign is not None:
        return RunDir(Layout(run_dir), m)
    recorded = _recorded_campaign(Layout(run_dir))
    if recorded is not None:
        return RunDir(Layout(run_dir), replace(m, campaign=recorded))
    b = m.config.benchmark if m.config is not None else None
    c, n = (b.concurrency or 0, b.num_prompts or 0) if b is not None else (0, 0)
    mode = identify(run_dir, m).mode or "?"
    one = Campaign((mode,), 1, (c,), "blocked", False, (Launch(1, mode, (Pass(1, mode, c, 1, n),)),))
    return RunDir(OldRunLayout(run_dir), replace(m, campaign=one))


def recorded_rate(text) -> float | None:
    """A recorded pass's request rate (a launch plan's, a bench_start event's rate=): None for a
    closed-loop pass ("inf", absent, not a number)."""
    try:
        q = float(text)
    except (TypeError, ValueError):
        return None
    return q if 0 < q < float("inf") else None


def _recorded_campaign(lay: Layout) -> Campaign | None:
    """The launches and passes a job recorded in its events: its schedule (launch_plan lines,
    passes=C:REPEAT:PROMPTS,...), else the launches it started (launch_start) with the passes
    that started (bench_start); None for a job that recorded no launch."""
    job = read_events(lay.events)
    launches = []
    for e in job.named("launch_plan") or job.named("launch_start"):
        index, mode = e.get_int("launch"), e.fields.get("mode")
        if index is None or not mode:
            continue
        if "passes" in e.fields:      # C:REPEAT:PROMPTS[:RATE][:profile]
            specs = [x.split(":") for x in e.fields["passes"].split(",") if x.count(":") in (2, 3, 4)]
        else:
            specs = [(b.fields.get("concurrency"), b.fields.get("repeat"), b.fields.get("prompts"),
                      b.fields.get("rate", "inf"))
                     for b in read_events(lay.launch(Launch(index, mode, ())).events).named("bench_start")]
        launches.append(Launch(index, mode, tuple(Pass(index, mode, *(_count(x) for x in spec[:3]),
                                                       recorded_rate(spec[3] if len(spec) > 3 and spec[3] != "profile" else None),
                                                       len(spec) > 3 and spec[3] == "search",
                                                       profile="profile" in spec[3:])
                                                  for spec in specs)))
    if not launches:
        return None
    passes = [p for la in launches for p in la.passes]
    modes = tuple(dict.fromkeys(la.mode for la in launches))
    concs = tuple(dict.fromkeys(p.concurrency for p in passes)) or (0,)
    repeats = max((sum(1 for p in la.passes if p.concurrency == c and not p.discarded)
                   for la in launches for c in concs), default=1)
    return Campaign(modes, max(repeats, 1), concs, "recorded", any(p.burn_in for p in passes),
                    tuple(launches), max(sum(1 for la in launches if la.mode == x) for x in modes))


# ---- who a run is --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    run_id: str
    job_id: str | None
    mode: str | None


def job_start(run_dir: Path) -> Event | None:
    """The job's own record of itself: the first 'job_start job_id=.. run_id=.. mode=..' line of
    events.log (the only reader of these fields)."""
    return read_events(Layout(Path(run_dir)).events).first.get("job_start")


def identify(run_dir: Path, manifest: Manifest | None = None) -> Identity:
    """Run id, job id and mode: what submit/render recorded in the manifest, else what the job
    recorded in events.log (a plain `sbatch` of a script); the run id is else the directory's
    name. Nothing is guessed from names: a run that recorded no mode has none."""
    run_dir = Path(run_dir)
    m = manifest if manifest is not None else (read_manifest(run_dir) or Manifest())
    start = job_start(run_dir)
    own = start.fields if start else {}
    return Identity(run_id=m.run_id or own.get("run_id") or run_dir.name,
                    job_id=m.job_id or own.get("job_id") or None,
                    mode=m.mode or own.get("mode") or None)


def job_id_of(run_dir: Path) -> str | None:
    """The Slurm job id of a run: from the manifest (submit) or events.log (plain sbatch)."""
    return identify(run_dir).job_id


def submitted(run_dir: Path) -> bool:
    """A job ran (or was submitted) for this directory; `render` alone prepares one without."""
    m = read_manifest(run_dir)
    return Layout(Path(run_dir)).events.exists() or bool(m and m.job_id)


# ---- finding runs --------------------------------------------------------------------------------

def find(ref: str, results: Path) -> Path:
    """A run directory from a path, a run id (directory name) or a Slurm job id."""
    p = Path(ref)
    lay = Layout(p)
    if p.is_dir() and (lay.manifest.exists() or lay.events.exists() or lay.job_script.exists()):
        return p
    if "/" not in ref and (results / ref).is_dir():
        return results / ref
    job = ref.split("+")[0]
    if job.isdigit():
        found = find_run_dirs(results, job)
        if found:
            return found[0]
    raise UsageError(f"no run {ref!r}: not a run directory, a run id under {results}, or the job id of one")


def find_run_dirs(results: str | Path, job_id: str | int) -> list[Path]:
    """Run directories of job_id under results (usually one), sorted by name.

    The job writes slurm-<JOBID>.out into its run directory (#SBATCH --output) and records
    'job_start job_id=<JOBID>' in events.log; submit records the id in manifest.json; a script
    submitted again writes to Layout.resubmitted (see the job script). A directory that
    records the job (name suffix, manifest, events.log) wins over one that only holds its
    slurm-<JOBID>.out: a re-submitted script leaves a one-line pointer in the old run.
    """
    results, job_id = Path(results), str(job_id)
    if not results.is_dir():
        return []
    recorded, output_only = [], []
    for run in sorted(p for p in results.iterdir() if p.is_dir()):
        m = read_manifest(run)
        start = job_start(run)
        if Layout(run).resubmission_of(job_id) or (m and m.job_id == job_id) or \
                (start is not None and start.fields.get("job_id") == job_id):
            recorded.append(run)
        elif Layout(run).slurm_out(job_id).exists():
            output_only.append(run)
    return recorded or output_only


def all_runs(results: Path) -> list[Path]:
    """Run directories under results/ that a job ran or was submitted for."""
    if not results.is_dir():
        return []
    return sorted(d for d in results.iterdir() if d.is_dir() and submitted(d))


# ---- writing -------------------------------------------------------------------------------------

def create(run_dir: Path) -> Path:
    """Create the run directory; an existing one is never reused (its evidence stays intact)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise UsageError(f"run directory {run_dir} already exists; slurm-ab never reuses one "
                         f"(choose another --run-id or RUN_ID)") from None
    return run_dir


def write_new(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file that must not exist yet (O_EXCL)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def write_atomic(path: Path, content: str | bytes) -> bool:
    """Replace a derived file (manifest, summaries, report, plots) in one step, so readers never
    see half of it; a file whose content would not change is left alone. True when written.
    Mode 0644: teammates on a shared cluster read each other's results (mkstemp makes 0600)."""
    data = content.encode() if isinstance(content, str) else content
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


__all__ = ["Layout", "OldRunLayout", "RunDir", "open_run", "Manifest", "Identity", "FILES",
           "SUMMARY_FORMATS", "job_formats", "read_manifest", "write_manifest",
           "record_nodes", "job_start", "identify", "job_id_of", "submitted", "find",
           "find_run_dirs", "all_runs", "create", "write_new", "write_atomic"]
