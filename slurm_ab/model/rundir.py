"""The run directory: its layout, its manifest, and finding a run again by run id or job id.

Created once and never reused or overwritten (its evidence stays intact). submit/render write
job.sbatch and manifest.json; the job script writes the raw files (events.log, logs/, bench.jsonl,
slurm-<JOBID>.out); the collector reads them and writes only summary.*. The layout is described in
docs/design.md; every path to a file of a run comes from `Layout`.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .campaign import Campaign, Launch
from .errors import UsageError
from .experiment import Experiment
from ..parse.events import Event, read_events

SUMMARY_FILES = ("summary.json", "summary.csv", "summary.md")

# Every path of a run directory, relative to it (a campaign's launch directory is laid out like a
# run). The job script writes them (tests/test_layout_paths.py fails when the templates write a
# $RUN_DIR path not named here); everything in Python takes them from Layout. Placeholders:
# {g} replica (het group), {rank} node rank, {key} pass key, {node} Slurm node name, {target}
# scrape target (r<G>, router, ...), {stamp} scrape time, {job} job id, {index}/{mode} a launch.
PATHS = {
    "job_script": "job.sbatch",                  # the exact script (submit/render)
    "manifest": "manifest.json",                 # Manifest (submit/render; nodes after the run)
    "events": "events.log",                      # one line per job event (parse.events)
    "slurm_out": "slurm-{job}.out",              # the batch script's stdout+stderr (#SBATCH --output)
    "logs": "logs",
    "server_log": "logs/server-r{g}-n{rank}.log",      # stdout+stderr of one node of a replica
    "router_log": "logs/router.log",
    "client_log": "logs/client.log",             # bench_serving's stdout+stderr: a single run
    "client_log_pass": "logs/client-{key}.log",  # ... one pass of a campaign launch
    "bench": "bench.jsonl",                      # bench_serving --output-file: a single run
    "bench_pass": "bench-{key}.jsonl",           # ... one pass of a campaign launch
    "warmup_request": "logs/warmup-request.json",     # the 16K -> 1 body sent to every replica
    "warmup_response": "logs/warmup-r{g}.json",       # each replica's answer
    "warmup_http": "logs/warmup-r{g}.json.http",      # its HTTP status and curl's message
    # prefill/decode launches: each pair's KV canary and warm-up, sent to both (r{g} answering, its
    # peer r{peer}), and the canary through the router
    "pd_canary": "logs/canary-r{g}-with-r{peer}.json",
    "pd_canary_http": "logs/canary-r{g}-with-r{peer}.json.http",
    "pd_warmup": "logs/warmup-r{g}-with-r{peer}.json",
    "pd_warmup_http": "logs/warmup-r{g}-with-r{peer}.json.http",
    "router_canary": "logs/canary-router.json",
    "router_canary_http": "logs/canary-router.json.http",
    "preflight_log": "logs/preflight-r{g}-n{rank}.log",
    "preflight": "preflight",
    "preflight_script": "preflight/check.sh",
    "preflight_report": "preflight/{node}.json",
    "preflight_problems": "preflight/{node}.problems",
    "preflight_address": "preflight/{node}.addr",
    "preflight_tokenizer": "preflight/{node}.tokenizer",   # the client's tokenizer load, on ROUTER_HOST
    "cleanup_log": "logs/cleanup-r{g}-n{rank}.log",      # the nodes' clean-up step at the job's end
    "sweep_script": "preflight/sweep.sh",        # removes ended jobs' leftovers, before the preflight
    "sweep_log": "logs/sweep-r{g}-n{rank}.log",  # what it removed on each node
    "cancel_request": "cancel-requested",        # `slurm-ab cancel` asked the job to tear down (who, when)
    "secrets": "secrets.env",                    # cluster.secret_env values, mode 0600, read and removed by the job
    "metrics": "metrics",
    "scrape": "metrics/{target}-{stamp}.prom",   # raw /metrics text (.err: a failed scrape's evidence)
    "scrape_error": "metrics/{target}-{stamp}.err",
    "scrape_partial": "metrics/{target}-{stamp}.part",   # being written (renamed to .prom/.err)
    "scrape_curl": "metrics/{target}-{stamp}.curl",      # curl's message while it runs
    "launch_dir": "launch{index}-{mode}",        # a campaign's server launch, laid out like a run
    "submitit": "submitit",                      # submitit's own files (collector job)
    "submit_error": "submit-error.txt",          # why sbatch refused
    "summary": "summary.{ext}",                  # the collector's files (json, csv, md)
    "report_html": "report.html",                # derived, like the summaries
    "plots": "plots",                            # report.html's PNGs
}
_SERVER_LOG = re.compile(r"server-r(\d+)-n(\d+)\.log$")


def server_log_identity(path: str | Path) -> tuple[int, int] | None:
    """logs/server-r<G>-n<R>.log -> (replica G, node rank R); None for any other file."""
    m = _SERVER_LOG.search(str(path))
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Layout:
    """Where each file of one run (or of one launch of a campaign) lives."""

    root: Path

    def path(self, name: str, **values) -> Path:
        return self.root / PATHS[name].format(**values)

    job_script = property(lambda self: self.path("job_script"))
    manifest = property(lambda self: self.path("manifest"))
    events = property(lambda self: self.path("events"))
    bench_jsonl = property(lambda self: self.path("bench"))
    logs = property(lambda self: self.path("logs"))
    client_log = property(lambda self: self.path("client_log"))
    router_log = property(lambda self: self.path("router_log"))
    submitit = property(lambda self: self.path("submitit"))
    metrics = property(lambda self: self.path("metrics"))
    preflight = property(lambda self: self.path("preflight"))
    submit_error = property(lambda self: self.path("submit_error"))
    report_html = property(lambda self: self.path("report_html"))
    plots = property(lambda self: self.path("plots"))

    def server_log(self, replica: int, rank: int) -> Path:
        """stdout+stderr of one node (node rank `rank`) of replica `replica`."""
        return self.path("server_log", g=replica, rank=rank)

    def server_logs(self) -> list[Path]:
        return sorted(self.logs.glob("server-r*-n*.log")) if self.logs.is_dir() else []

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
        return self.path("warmup_response", g=replica)

    def slurm_out(self, job_id: str | int) -> Path:
        """The batch script's stdout+stderr (#SBATCH --output)."""
        return self.path("slurm_out", job=job_id)

    def slurm_outs(self) -> list[Path]:
        return sorted(self.root.glob("slurm-*.out"))

    def summary(self, name: str) -> Path:
        """One of SUMMARY_FILES, the collector's only output."""
        return self.root / name

    # ---- campaigns: launches and passes ----------------------------------------------------------
    def launch(self, launch: Launch, single: bool = False) -> "Layout":
        """The layout of a launch: its own directory, or the run's for a single run."""
        return self if single else Layout(self.root / launch_dirname(launch))

    def pass_bench(self, key: str, single: bool = False) -> Path:
        return self.bench_jsonl if single else self.path("bench_pass", key=key)

    def pass_client_log(self, key: str, single: bool = False) -> Path:
        return self.client_log if single else self.path("client_log_pass", key=key)

    def rel(self, path: Path) -> str:
        """A path of this run relative to its root (how reasons and pages name files)."""
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)


def launch_dirname(launch: Launch) -> str:
    """A campaign launch's sub-directory: launch<N>-<MODE>."""
    return PATHS["launch_dir"].format(index=launch.index, mode=launch.mode)


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
        """Read either layout slurm-ab has written: the current one (the resolved experiment under
        "config"), or the flat one of the collector's test fixtures (no "config"; "description",
        "replicas", "benchmark" and "warmup" at the top level)."""
        d = dict(d)
        if "config" not in d:
            d["mode_description"] = d.pop("mode_description", None) or d.pop("description", None)
            d["config"] = {k: d.pop(k) for k in ("replicas", "benchmark", "warmup") if k in d}
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
    submitted again writes to '<run dir>-job<JOBID>' (see the job script). A directory that
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
        if run.name.endswith(f"-job{job_id}") or (m and m.job_id == job_id) or \
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


__all__ = ["Layout", "Manifest", "Identity", "SUMMARY_FILES", "read_manifest", "write_manifest",
           "record_nodes", "job_start", "identify", "job_id_of", "submitted", "find",
           "find_run_dirs", "all_runs", "create", "write_new", "write_atomic"]
